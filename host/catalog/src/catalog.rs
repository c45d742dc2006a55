//! Catalog entries, ids, order, shadowing, policy, the cached index and the
//! counters (tool-search.md §1, contract.md §4 telemetry).

use crate::error::{CatalogError, ErrorKind};
use crate::hashing::{FastState, HashSlots};
use crate::hints::{input_hint, output_hint};
use crate::names::assign_mcp_identifiers;
use crate::search::{SearchFilter, SearchIndex, SearchIndexBuilder};
use crate::text::{safe_cut_utf16, utf16_len};
use crate::validate;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// MCP descriptions shown in search results and metadata are safe-cut to this
/// many UTF-16 code units.
pub const MCP_DESCRIPTION_UNITS: usize = 512;

/// Whether a tool goes through the catalog or is called by the model itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatalogMode {
    /// Cataloged (hidden behind search / globals).
    #[default]
    Normal,
    /// `catalogMode: "direct-only"`: never cataloged; the model calls it.
    DirectOnly,
}

/// A tool definition as supplied by its provider.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolSpec {
    /// Exact tool name.
    pub name: String,
    /// Description (indexed; shown per the trust rules).
    pub description: String,
    /// Display label; defaults to the name where one is shown.
    pub label: Option<String>,
    /// JSON Schema of the input object.
    pub input_schema: Option<Value>,
    /// JSON Schema of the result details (trusted host tools only use it).
    pub output_schema: Option<Value>,
    /// Audited replay-safe (may run in `restartSafe` cells).
    pub replay_safe: bool,
    /// Normal or direct-only.
    pub catalog_mode: CatalogMode,
    /// A host-designated core primitive that stays model-visible in Tool
    /// Search modes: still cataloged, but not listed in the directory.
    pub always_visible: bool,
}

impl ToolSpec {
    /// A normal tool with a name and description.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            ..ToolSpec::default()
        }
    }

    /// Set the input schema.
    pub fn with_input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// Set the output schema.
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Set the label.
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Mark replay-safe.
    pub fn replay_safe(mut self) -> Self {
        self.replay_safe = true;
        self
    }

    /// Mark direct-only.
    pub fn direct_only(mut self) -> Self {
        self.catalog_mode = CatalogMode::DirectOnly;
        self
    }

    /// Mark as an always-visible core primitive.
    pub fn always_visible(mut self) -> Self {
        self.always_visible = true;
        self
    }
}

/// Where a tool comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// The host's built-in tools (`sourceName` = `core`). Trusted.
    Core,
    /// A host plugin (`sourceName` = plugin id). Trusted. Bundled plugins
    /// come before external ones in catalog order.
    Plugin {
        /// Plugin id.
        id: String,
        /// Bundled with the host (vs. external).
        bundled: bool,
    },
    /// An MCP server (`sourceName` = sanitized server name). Untrusted.
    Mcp {
        /// Server name as configured.
        server: String,
    },
    /// A tool supplied by the caller for the current run (`sourceName` =
    /// `client`). Untrusted.
    Client,
}

/// The three source kinds visible in metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// Host built-ins and plugins (trusted).
    Host,
    /// MCP servers (untrusted).
    Mcp,
    /// Caller-supplied tools (untrusted).
    Client,
}

impl SourceKind {
    /// `"host"`, `"mcp"` or `"client"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Host => "host",
            SourceKind::Mcp => "mcp",
            SourceKind::Client => "client",
        }
    }
}

/// Sanitize a source name for use inside a catalog id: every character
/// outside `[A-Za-z0-9_.-]` becomes `_`.
pub fn sanitize_source_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "_".to_string()
    } else {
        s
    }
}

impl Source {
    /// The source kind.
    pub fn kind(&self) -> SourceKind {
        match self {
            Source::Core | Source::Plugin { .. } => SourceKind::Host,
            Source::Mcp { .. } => SourceKind::Mcp,
            Source::Client => SourceKind::Client,
        }
    }

    /// The id's `sourceName` part.
    pub fn source_name(&self) -> String {
        match self {
            Source::Core => "core".to_string(),
            Source::Plugin { id, .. } => sanitize_source_name(id),
            Source::Mcp { server } => sanitize_source_name(server),
            Source::Client => "client".to_string(),
        }
    }

    /// Catalog id `<source>:<sourceName>:<toolName>`.
    pub fn catalog_id(&self, tool_name: &str) -> String {
        let (kind, name): (&str, std::borrow::Cow<'_, str>) = match self {
            Source::Core => ("host", "core".into()),
            Source::Client => ("client", "client".into()),
            _ => (self.kind().as_str(), self.source_name().into()),
        };
        let mut id = String::with_capacity(kind.len() + name.len() + tool_name.len() + 2);
        id.push_str(kind);
        id.push(':');
        id.push_str(&name);
        id.push(':');
        id.push_str(tool_name);
        id
    }

    fn group(&self) -> u8 {
        match self {
            Source::Core => 0,
            Source::Plugin { bundled: true, .. } => 1,
            Source::Plugin { bundled: false, .. } => 2,
            Source::Mcp { .. } => 3,
            Source::Client => 4,
        }
    }
}

/// Allow/deny policy, resolved before indexing (fail closed).
///
/// Patterns are globs where `*` matches any run of characters; each pattern is
/// matched against the tool name and the catalog id. Deny wins; when `allow`
/// is `Some`, a tool must match one of its patterns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// When present, only matching tools are visible.
    pub allow: Option<Vec<String>>,
    /// Matching tools are never visible.
    pub deny: Vec<String>,
}

impl Policy {
    /// Allow everything.
    pub fn allow_all() -> Self {
        Policy::default()
    }

    /// Whether a tool with `name` and catalog id `id` is inside the policy.
    pub fn allows(&self, name: &str, id: &str) -> bool {
        let hit = |p: &String| glob_match(p, name) || glob_match(p, id);
        if self.deny.iter().any(hit) {
            return false;
        }
        match &self.allow {
            Some(list) => list.iter().any(hit),
            None => true,
        }
    }
}

/// Glob match with `*` as the only wildcard.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let mut rest = text;
    let first = parts[0];
    let last = parts[parts.len() - 1];
    if !rest.starts_with(first) {
        return false;
    }
    rest = &rest[first.len()..];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Largest number of results one search returns (results), whatever the
/// configuration: [`SearchLimits::from_config`] clamps `maxLimit` to it and
/// [`SearchLimits::resolve`] clamps every requested limit to it, so a guest's
/// `limit` never sizes host work beyond it (a larger limit is clamped, not
/// rejected).
pub const MAX_SEARCH_LIMIT: usize = 50;

/// Search limit configuration: default and maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchLimits {
    /// Limit used when none is given (capped by `max_limit`).
    pub default_limit: usize,
    /// Cap for any limit.
    pub max_limit: usize,
}

impl SearchLimits {
    /// Tool Search defaults: default 8, max 20.
    pub const TOOL_SEARCH: SearchLimits = SearchLimits {
        default_limit: 8,
        max_limit: 20,
    };
    /// Lean profile for local-inference models: default 5, max 10.
    pub const LEAN: SearchLimits = SearchLimits {
        default_limit: 5,
        max_limit: 10,
    };

    /// Resolve configuration values (`searchDefaultLimit`, `maxSearchLimit`):
    /// non-integer or non-positive values fall back to `defaults`; integers
    /// are clamped (`maxSearchLimit` to `1..=50`, the default to
    /// `1..=maxSearchLimit`).
    pub fn from_config(
        default: Option<&Value>,
        max: Option<&Value>,
        defaults: SearchLimits,
    ) -> Self {
        let max_limit =
            positive_int(max).map_or(defaults.max_limit, |v| v.clamp(1, MAX_SEARCH_LIMIT));
        let default_limit = positive_int(default).unwrap_or(defaults.default_limit);
        SearchLimits {
            default_limit: default_limit.clamp(1, max_limit),
            max_limit,
        }
    }

    /// Resolve a per-search limit: absent → default (capped by the max); an
    /// integer → clamped to `[1, max]`; anything else (non-integer number,
    /// string, ...) → default. The max itself is clamped to
    /// `[1, MAX_SEARCH_LIMIT]`.
    pub fn resolve(&self, limit: Option<&Value>) -> usize {
        let max = self.max_limit.clamp(1, MAX_SEARCH_LIMIT);
        let default = self.default_limit.clamp(1, max);
        match limit.and_then(int_value) {
            Some(n) => n.clamp(1, max as i64) as usize,
            None => default,
        }
    }

    /// [`SearchLimits::resolve`] for an integer.
    pub fn resolve_int(&self, limit: Option<i64>) -> usize {
        self.resolve(limit.map(Value::from).as_ref())
    }
}

fn int_value(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| u.min(i64::MAX as u64) as i64))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.is_finite())
                    .map(|f| f as i64)
            }),
        _ => None,
    }
}

fn positive_int(v: Option<&Value>) -> Option<usize> {
    v.and_then(int_value).filter(|&n| n > 0).map(|n| n as usize)
}

/// One effective catalog entry (visible under the policy, not shadowed, not
/// direct-only).
#[derive(Debug)]
pub struct Entry {
    pub(crate) id: String,
    pub(crate) spec: Arc<ToolSpec>,
    pub(crate) source: Source,
    input_hint: OnceLock<Option<String>>,
    output_hint: OnceLock<Option<String>>,
    pub(crate) mcp_path: Option<(String, String)>,
    input_validator: OnceLock<Option<Arc<jsonschema::Validator>>>,
    output_validator: OnceLock<Option<Arc<jsonschema::Validator>>>,
}

impl Entry {
    fn new(source: Source, spec: Arc<ToolSpec>, id: String) -> Self {
        Entry {
            id,
            spec,
            source,
            input_hint: OnceLock::new(),
            output_hint: OnceLock::new(),
            mcp_path: None,
            input_validator: OnceLock::new(),
            output_validator: OnceLock::new(),
        }
    }

    /// Catalog id (host routing only; never shown under Code Mode).
    pub fn id(&self) -> &str {
        &self.id
    }
    /// Exact tool name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }
    /// Label, defaulting to the tool name.
    pub fn label(&self) -> &str {
        self.spec.label.as_deref().unwrap_or(&self.spec.name)
    }
    /// Full description.
    pub fn description(&self) -> &str {
        &self.spec.description
    }
    /// Description as shown in search results and metadata: MCP descriptions
    /// are safe-cut to 512 code units.
    pub fn display_description(&self) -> &str {
        match self.kind() {
            SourceKind::Mcp => safe_cut_utf16(&self.spec.description, MCP_DESCRIPTION_UNITS),
            _ => &self.spec.description,
        }
    }
    /// The source.
    pub fn source(&self) -> &Source {
        &self.source
    }
    /// The source kind.
    pub fn kind(&self) -> SourceKind {
        self.source.kind()
    }
    /// Trusted (host) entry.
    pub fn is_trusted(&self) -> bool {
        self.kind() == SourceKind::Host
    }
    /// The tool definition.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    /// Replay-safe mark.
    pub fn replay_safe(&self) -> bool {
        self.spec.replay_safe
    }
    /// Input hint: host → hint or `"unknown"`, client → `"unknown"`, MCP → none.
    /// Rendered on first use and cached.
    pub fn input_hint(&self) -> Option<&str> {
        self.input_hint
            .get_or_init(|| match self.kind() {
                SourceKind::Host => Some(
                    self.spec
                        .input_schema
                        .as_ref()
                        .map_or_else(|| "unknown".into(), input_hint),
                ),
                SourceKind::Client => Some("unknown".to_string()),
                SourceKind::Mcp => None,
            })
            .as_deref()
    }
    /// Output hint: only a complete hint from a trusted host `outputSchema`.
    /// Rendered on first use and cached.
    pub fn output_hint(&self) -> Option<&str> {
        self.output_hint
            .get_or_init(|| match self.kind() {
                SourceKind::Host => self.spec.output_schema.as_ref().and_then(output_hint),
                _ => None,
            })
            .as_deref()
    }
    /// For MCP entries: `(server identifier, tool identifier)`.
    pub fn mcp_identifiers(&self) -> Option<(&str, &str)> {
        self.mcp_path
            .as_ref()
            .map(|(s, t)| (s.as_str(), t.as_str()))
    }
    /// For MCP entries: `MCP.<server>.<tool>`.
    pub fn mcp_callable_name(&self) -> Option<String> {
        self.mcp_path.as_ref().map(|(s, t)| format!("MCP.{s}.{t}"))
    }

    /// The document text `[name, id, label, description, paramText]`, piece
    /// by piece (pieces behave as if joined by spaces). `paramText` only for
    /// trusted host tools: untrusted schemas are never walked.
    fn doc_text(&self, sink: &mut dyn FnMut(&str)) {
        sink(&self.spec.name);
        sink(&self.id);
        if let Some(l) = &self.spec.label {
            sink(l);
        }
        sink(&self.spec.description);
        if let (Some(schema), SourceKind::Host) = (&self.spec.input_schema, self.kind()) {
            walk_params(schema, 0, &mut |s: &str| sink(s));
        }
    }

    /// Validate call arguments (trusted host tools with a declared input
    /// schema only; others are validated by their owner). `display_name` is
    /// the tool name (Tool Search) or callable name (Code Mode).
    pub fn validate_input(&self, args: &Value, display_name: &str) -> Result<(), CatalogError> {
        if !self.is_trusted() {
            return Ok(());
        }
        let Some(schema) = &self.spec.input_schema else {
            return Ok(());
        };
        let v = self
            .input_validator
            .get_or_init(|| validate::compile_shared(schema));
        match v {
            Some(v) => {
                validate::validate_input_with(v, schema, args, display_name, self.input_hint())
            }
            None => Ok(()),
        }
    }

    /// Validate result details against a trusted tool's declared
    /// `outputSchema` (no-op otherwise).
    pub fn validate_output(&self, details: &Value, display_name: &str) -> Result<(), CatalogError> {
        if !self.is_trusted() {
            return Ok(());
        }
        let Some(schema) = &self.spec.output_schema else {
            return Ok(());
        };
        let v = self
            .output_validator
            .get_or_init(|| validate::compile_shared(schema));
        match v {
            Some(v) => validate::validate_output_with(v, details, display_name),
            None => Ok(()),
        }
    }
}

/// `paramText` (tool-search.md §6.2): collect each schema's `description`
/// and each property name, recursing into `properties` values, `items`
/// (schema or tuple), `anyOf`, `oneOf`, `allOf`; depth 0 is the root and
/// schemas deeper than 4 are not visited. Other keywords, boolean subschemas
/// and non-object values are ignored.
///
/// ```
/// use quickcell_catalog::param_text;
/// use serde_json::json;
/// let s = json!({"description":"visible","const":{"description":"no"},
///     "enum":[{"description":"no"}],"anyOf":[true,false,{"description":"branch"}]});
/// assert_eq!(param_text(&s), "visible branch");
/// ```
pub fn param_text(schema: &Value) -> String {
    let mut out: Vec<String> = Vec::new();
    walk_params(schema, 0, &mut |s: &str| out.push(s.to_string()));
    out.join(" ")
}

fn walk_params(schema: &Value, depth: usize, out: &mut dyn FnMut(&str)) {
    if depth > 4 {
        return;
    }
    let Some(m) = schema.as_object() else {
        return;
    };
    // One pass over the keys (cheaper than six hashed lookups), then visit in
    // the specified order.
    let (mut description, mut properties, mut items) = (None, None, None);
    let mut branches: [Option<&Value>; 3] = [None; 3];
    for (k, v) in m {
        match k.as_str() {
            "description" => description = Some(v),
            "properties" => properties = Some(v),
            "items" => items = Some(v),
            "anyOf" => branches[0] = Some(v),
            "oneOf" => branches[1] = Some(v),
            "allOf" => branches[2] = Some(v),
            _ => {}
        }
    }
    if let Some(Value::String(d)) = description {
        out(d);
    }
    if let Some(Value::Object(props)) = properties {
        for (k, v) in props {
            out(k);
            walk_params(v, depth + 1, out);
        }
    }
    match items {
        Some(Value::Array(items)) => items.iter().for_each(|i| walk_params(i, depth + 1, out)),
        Some(items) => walk_params(items, depth + 1, out),
        None => {}
    }
    for list in branches.into_iter().flatten() {
        if let Value::Array(list) = list {
            list.iter().for_each(|v| walk_params(v, depth + 1, out));
        }
    }
}

/// One MCP server as exposed under `MCP`.
#[derive(Debug, Clone)]
pub struct McpServer {
    /// Identifier under `MCP` (camel-cased, unique).
    pub identifier: String,
    /// Server name as configured.
    pub server_name: String,
    /// Entry positions (catalog order) of its tools.
    pub(crate) entries: Vec<usize>,
}

/// Per-source entry counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SourceCounts {
    /// Host entries.
    pub host: usize,
    /// MCP entries.
    pub mcp: usize,
    /// Client entries.
    pub client: usize,
}

/// Catalog telemetry (contract.md §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Telemetry {
    /// Effective entries.
    pub catalog_size: usize,
    /// Effective entries per source.
    pub sources: SourceCounts,
    /// 24 lowercase hex characters naming the catalog instance.
    pub counter_scope: String,
    /// Executed queries (each batch entry counts one).
    pub search_count: u64,
    /// Describe requests.
    pub describe_count: u64,
    /// Calls dispatched through the catalog.
    pub call_count: u64,
    /// Model-visible tools (filled by the runtime, e.g. `["exec","wait"]`).
    pub visible_tools: Vec<String>,
}

/// Builder for [`Catalog`].
#[derive(Debug, Default)]
pub struct CatalogBuilder {
    tools: Vec<(Source, Arc<ToolSpec>)>,
    policy: Policy,
    limits: Option<SearchLimits>,
}

impl CatalogBuilder {
    /// Add a tool from any source. Catalog order groups sources (core,
    /// bundled plugins, external plugins, MCP, client), each in the order
    /// added.
    pub fn tool(mut self, source: Source, spec: ToolSpec) -> Self {
        self.tools.push((source, Arc::new(spec)));
        self
    }
    /// Add a host built-in tool.
    pub fn core(self, spec: ToolSpec) -> Self {
        self.tool(Source::Core, spec)
    }
    /// Add a host plugin tool.
    pub fn plugin(self, plugin_id: &str, bundled: bool, spec: ToolSpec) -> Self {
        self.tool(
            Source::Plugin {
                id: plugin_id.to_string(),
                bundled,
            },
            spec,
        )
    }
    /// Add an MCP tool.
    pub fn mcp(self, server: &str, spec: ToolSpec) -> Self {
        self.tool(
            Source::Mcp {
                server: server.to_string(),
            },
            spec,
        )
    }
    /// Add a client tool.
    pub fn client(self, spec: ToolSpec) -> Self {
        self.tool(Source::Client, spec)
    }
    /// Set the effective policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }
    /// Set search limits (default [`SearchLimits::TOOL_SEARCH`]).
    pub fn limits(mut self, limits: SearchLimits) -> Self {
        self.limits = Some(limits);
        self
    }
    /// Build the catalog: resolve policy, shadowing and order, then index.
    /// Every built catalog gets a fresh `counterScope`.
    pub fn build(self) -> Catalog {
        let mut c = Catalog {
            assembly: self.tools,
            policy: self.policy,
            limits: self.limits.unwrap_or(SearchLimits::TOOL_SEARCH),
            entries: Vec::new(),
            direct_only: Vec::new(),
            by_id: HashSlots::default(),
            mcp_servers: Vec::new(),
            index: SearchIndex::default(),
            counter_scope: new_counter_scope(),
            search_count: AtomicU64::new(0),
            describe_count: AtomicU64::new(0),
            call_count: AtomicU64::new(0),
        };
        c.rebuild();
        c
    }
}

fn new_counter_scope() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let local = 0u8;
    let mut h = Sha256::new();
    h.update(std::process::id().to_le_bytes());
    h.update(seq.to_le_bytes());
    h.update(nanos.to_le_bytes());
    h.update((&local as *const u8 as usize).to_le_bytes());
    crate::names::sha256_hex_bytes(&h.finalize())[..24].to_string()
}

/// The hidden tool catalog of one run.
///
/// Mutations (`add_tool`, `remove_tool`, `set_policy`, ...) rebuild the
/// effective entries and the search index immediately; counters and
/// `counterScope` are kept.
#[derive(Debug)]
pub struct Catalog {
    assembly: Vec<(Source, Arc<ToolSpec>)>,
    policy: Policy,
    limits: SearchLimits,
    pub(crate) entries: Vec<Entry>,
    pub(crate) direct_only: Vec<(String, String)>,
    /// Entry positions keyed by `entries[slot].id`.
    by_id: HashSlots,
    pub(crate) mcp_servers: Vec<McpServer>,
    index: SearchIndex,
    counter_scope: String,
    search_count: AtomicU64,
    describe_count: AtomicU64,
    call_count: AtomicU64,
}

/// Options of [`Catalog::search`].
#[derive(Debug, Clone, Copy)]
pub struct SearchOptions<'a> {
    /// Requested limit (clamped to `[1, max]`; `None` → default).
    pub limit: Option<i64>,
    /// Include MCP entries (default `true`).
    pub include_mcp: bool,
    /// Restrict to these catalog ids.
    pub allowed_ids: Option<&'a HashSet<String>>,
}

impl Default for SearchOptions<'_> {
    fn default() -> Self {
        SearchOptions {
            limit: None,
            include_mcp: true,
            allowed_ids: None,
        }
    }
}

/// How a lookup key resolved.
pub(crate) enum Lookup<'a> {
    Found(&'a Entry),
    DirectOnly(String),
    Ambiguous,
    Unknown,
}

impl Catalog {
    /// Start building a catalog.
    pub fn builder() -> CatalogBuilder {
        CatalogBuilder::default()
    }

    fn rebuild(&mut self) {
        let mut order: Vec<usize> = (0..self.assembly.len()).collect();
        order.sort_by_key(|&i| self.assembly[i].0.group());
        // Winners as (assembly index, id); entries are built once at the end.
        let mut winners: Vec<Option<(usize, String)>> = Vec::with_capacity(self.assembly.len());
        let mut by_name: HashMap<&str, usize, FastState> = HashMap::default();
        by_name.reserve(self.assembly.len());
        // MCP entries are never shadowed by name; two MCP entries with the
        // same id (same sanitized server, same tool name) keep the first.
        let mut mcp_ids: HashSet<String, FastState> = HashSet::default();
        let mut direct = Vec::new();
        for i in order {
            let (source, spec) = &self.assembly[i];
            let id = source.catalog_id(&spec.name);
            if !self.policy.allows(&spec.name, &id) {
                continue;
            }
            if spec.catalog_mode == CatalogMode::DirectOnly {
                direct.push((spec.name.clone(), id));
                continue;
            }
            let kind = source.kind();
            if kind == SourceKind::Mcp {
                if !mcp_ids.insert(id.clone()) {
                    continue;
                }
            } else if let Some(&pos) = by_name.get(spec.name.as_str()) {
                // A client entry beats any non-client entry and an earlier
                // client entry (same name implies the same id for clients);
                // among non-client entries the first wins.
                if kind == SourceKind::Client {
                    winners[pos] = None;
                } else {
                    continue;
                }
            }
            let pos = winners.len();
            winners.push(Some((i, id)));
            if kind != SourceKind::Mcp {
                by_name.insert(spec.name.as_str(), pos);
            }
        }
        let mut entries = Vec::with_capacity(winners.len());
        for (i, id) in winners.into_iter().flatten() {
            let (source, spec) = &self.assembly[i];
            entries.push(Entry::new(source.clone(), Arc::clone(spec), id));
        }
        self.entries = entries;
        self.direct_only = direct;
        // MCP identifiers.
        let mut servers: Vec<(String, Vec<usize>)> = Vec::new();
        for (pos, e) in self.entries.iter().enumerate() {
            if let Source::Mcp { server } = &e.source {
                match servers.iter_mut().find(|(s, _)| s == server) {
                    Some((_, v)) => v.push(pos),
                    None => servers.push((server.clone(), vec![pos])),
                }
            }
        }
        let server_names: Vec<&str> = servers.iter().map(|(s, _)| s.as_str()).collect();
        let server_idents = assign_mcp_identifiers(&server_names, false, "server");
        let mut mcp_servers = Vec::new();
        for ((server, positions), ident) in servers.iter().zip(server_idents) {
            let tool_names: Vec<&str> = positions.iter().map(|&p| self.entries[p].name()).collect();
            let tool_idents = assign_mcp_identifiers(&tool_names, true, "tool");
            for (&p, t) in positions.iter().zip(tool_idents) {
                self.entries[p].mcp_path = Some((ident.clone(), t));
            }
            mcp_servers.push(McpServer {
                identifier: ident,
                server_name: server.clone(),
                entries: positions.clone(),
            });
        }
        self.mcp_servers = mcp_servers;
        let mut by_id = HashSlots::default();
        by_id.reserve(self.entries.len());
        for e in &self.entries {
            by_id.push(by_id.hash(&e.id));
        }
        self.by_id = by_id;
        let mut builder = SearchIndexBuilder::with_capacity(self.entries.len());
        for e in &self.entries {
            builder.add_text(
                e.id.clone(),
                &e.spec.name,
                e.kind() == SourceKind::Mcp,
                |sink| e.doc_text(sink),
            );
        }
        self.index = builder.finish();
    }

    /// Add a tool (e.g. a client tool for this run). Keeps `counterScope`.
    pub fn add_tool(&mut self, source: Source, spec: ToolSpec) {
        self.assembly.push((source, Arc::new(spec)));
        self.rebuild();
    }

    /// Replace the definition of every supplied tool with this source and
    /// name (description or schema changes re-index). Returns whether one
    /// was found.
    pub fn update_tool(&mut self, source: &Source, spec: ToolSpec) -> bool {
        let mut found = false;
        let spec = Arc::new(spec);
        for (s, t) in self.assembly.iter_mut() {
            if s == source && t.name == spec.name {
                *t = Arc::clone(&spec);
                found = true;
            }
        }
        if found {
            self.rebuild();
        }
        found
    }

    /// Remove every supplied tool whose catalog id is `id`. Keeps
    /// `counterScope`.
    pub fn remove_tool(&mut self, id: &str) -> bool {
        let before = self.assembly.len();
        self.assembly.retain(|(s, t)| s.catalog_id(&t.name) != id);
        let removed = self.assembly.len() != before;
        if removed {
            self.rebuild();
        }
        removed
    }

    /// Replace the effective policy. Keeps `counterScope`.
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
        self.rebuild();
    }

    /// The search limits.
    pub fn limits(&self) -> SearchLimits {
        self.limits
    }

    /// Effective entries in catalog order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Entry by catalog id.
    pub fn get(&self, id: &str) -> Option<&Entry> {
        // Ids are unique; like a map built in entry order, the last wins.
        let h = self.by_id.hash(id);
        self.by_id
            .candidates(h)
            .filter(|&i| self.entries[i as usize].id == id)
            .last()
            .map(|i| &self.entries[i as usize])
    }

    /// MCP servers in catalog order.
    pub fn mcp_servers(&self) -> &[McpServer] {
        &self.mcp_servers
    }

    /// Entries of one MCP server.
    pub fn mcp_server_entries<'a>(
        &'a self,
        server: &'a McpServer,
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        server.entries.iter().map(move |&i| &self.entries[i])
    }

    /// Names of policy-allowed direct-only tools.
    pub fn direct_only_names(&self) -> impl Iterator<Item = &str> {
        self.direct_only.iter().map(|(n, _)| n.as_str())
    }

    /// The cached search index (documents in catalog order).
    pub fn index(&self) -> &SearchIndex {
        &self.index
    }

    /// Resolve an id or exact tool name (structured modes).
    pub(crate) fn lookup(&self, key: &str) -> Lookup<'_> {
        if let Some(e) = self.get(key) {
            return Lookup::Found(e);
        }
        let matches: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| e.name() == key || e.mcp_callable_name().as_deref() == Some(key))
            .collect();
        match matches.len() {
            1 => return Lookup::Found(matches[0]),
            0 => {}
            _ => return Lookup::Ambiguous,
        }
        if let Some((n, _)) = self
            .direct_only
            .iter()
            .find(|(n, id)| n == key || id == key)
        {
            return Lookup::DirectOnly(n.clone());
        }
        Lookup::Unknown
    }

    /// Resolve an id or name for a structured call/describe, with the
    /// spec's lookup error texts.
    pub fn resolve(&self, key: &str) -> Result<&Entry, CatalogError> {
        match self.lookup(key) {
            Lookup::Found(e) => Ok(e),
            Lookup::DirectOnly(name) => Err(CatalogError::new(
                ErrorKind::DirectOnly,
                format!(
                    "Tool \"{name}\" is not available through the tool catalog. Call it directly by its declared name."
                ),
            )),
            Lookup::Ambiguous => Err(CatalogError::new(
                ErrorKind::AmbiguousTool,
                format!("Tool \"{key}\" matches more than one tool. Use tool_search and pass the exact id it returns."),
            )),
            Lookup::Unknown => Err(CatalogError::new(
                ErrorKind::UnknownTool,
                format!("Unknown tool \"{key}\". Use tool_search to find available tools and pass the id it returns."),
            )),
        }
    }

    /// Run one search (tool-search.md §7.2) and count it. Returns entries in
    /// rank order.
    pub fn search(&self, query: &str, options: SearchOptions<'_>) -> Vec<&Entry> {
        self.search_count.fetch_add(1, Ordering::Relaxed);
        let limit = self.limits.resolve_int(options.limit);
        self.search_uncounted(query, limit, options.include_mcp, options.allowed_ids)
    }

    pub(crate) fn search_uncounted(
        &self,
        query: &str,
        limit: usize,
        include_mcp: bool,
        allowed_ids: Option<&HashSet<String>>,
    ) -> Vec<&Entry> {
        self.index
            .search(
                query,
                limit,
                SearchFilter {
                    include_mcp,
                    allowed_ids,
                },
            )
            .into_iter()
            .map(|h| &self.entries[h.doc])
            .collect()
    }

    pub(crate) fn count_search(&self) {
        self.search_count.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_describe(&self) {
        self.describe_count.fetch_add(1, Ordering::Relaxed);
    }

    /// Count one dispatched call (the structured and guest call paths do this
    /// themselves).
    pub fn count_call(&self) {
        self.call_count.fetch_add(1, Ordering::Relaxed);
    }

    /// The catalog instance's `counterScope` (24 lowercase hex characters).
    pub fn counter_scope(&self) -> &str {
        &self.counter_scope
    }

    /// Telemetry snapshot; `visible_tools` is supplied by the runtime.
    pub fn telemetry(&self, visible_tools: &[&str]) -> Telemetry {
        let mut sources = SourceCounts::default();
        for e in &self.entries {
            match e.kind() {
                SourceKind::Host => sources.host += 1,
                SourceKind::Mcp => sources.mcp += 1,
                SourceKind::Client => sources.client += 1,
            }
        }
        Telemetry {
            catalog_size: self.entries.len(),
            sources,
            counter_scope: self.counter_scope.clone(),
            search_count: self.search_count.load(Ordering::Relaxed),
            describe_count: self.describe_count.load(Ordering::Relaxed),
            call_count: self.call_count.load(Ordering::Relaxed),
            visible_tools: visible_tools.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// Length helper re-exported for surfaces.
pub(crate) fn units(s: &str) -> usize {
    utf16_len(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_from_config_clamp_and_fall_back() {
        let c = |default: Value, max: Value| {
            SearchLimits::from_config(Some(&default), Some(&max), SearchLimits::TOOL_SEARCH)
        };
        let l = c(json!(30), json!(99));
        assert_eq!(l.max_limit, 50);
        assert_eq!(l.default_limit, 30);
        assert_eq!(c(json!(2.5), json!(-3)), SearchLimits::TOOL_SEARCH);
        let l = SearchLimits::from_config(None, Some(&json!(3)), SearchLimits::TOOL_SEARCH);
        assert_eq!(l.default_limit, 3, "default is capped by the max");
        assert_eq!(
            SearchLimits::from_config(None, None, SearchLimits::LEAN),
            SearchLimits::LEAN
        );
    }

    #[test]
    fn per_search_limit_resolution() {
        let l = SearchLimits::TOOL_SEARCH;
        assert_eq!(l.resolve(None), 8);
        assert_eq!(l.resolve(Some(&json!(0))), 1);
        assert_eq!(l.resolve(Some(&json!(-4))), 1);
        assert_eq!(l.resolve(Some(&json!(100))), 20);
        assert_eq!(l.resolve(Some(&json!(3))), 3);
        assert_eq!(l.resolve(Some(&json!(3.0))), 3);
        assert_eq!(l.resolve(Some(&json!(2.5))), 8);
        assert_eq!(l.resolve(Some(&json!("5"))), 8);
        let odd = SearchLimits {
            default_limit: 9,
            max_limit: 4,
        };
        assert_eq!(odd.resolve(None), 4);
    }
}
