//! Catalog entries, ids, order, shadowing, policy, the cached index and the
//! counters (tool-search.md §1, contract.md §4 telemetry).
//!
//! [`Catalog`] and its builder are here; the parts it is made of are
//! submodules: tool definitions (`spec`), sources and catalog ids
//! (`source`), the allow/deny policy (`policy`), search limits (`limits`)
//! and the effective entries (`entry`).

mod entry;
mod limits;
mod policy;
mod source;
mod spec;

pub use entry::{param_text, Entry, MCP_DESCRIPTION_UNITS};
pub use limits::{SearchLimits, SearchOptions, MAX_SEARCH_LIMIT};
pub use policy::{glob_match, Policy, MAX_POLICY_PATTERNS, MAX_POLICY_PATTERN_BYTES};
pub use source::{sanitize_source_name, Source, SourceKind};
pub use spec::{CatalogMode, ToolSpec};

use crate::error::{CatalogError, ErrorKind};
use crate::hashing::{FastState, HashSlots};
use crate::names::assign_mcp_identifiers;
use crate::search::{SearchFilter, SearchIndex, SearchIndexBuilder};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
    narrowing: Vec<Policy>,
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
    /// Add a further policy a tool must also pass to be visible (say, a
    /// tenant's within the host's); its `approve` patterns apply too. It
    /// can only narrow: a tool outside the effective policy stays out.
    pub fn narrowed_by(mut self, policy: Policy) -> Self {
        self.narrowing.push(policy);
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
            narrowing: self.narrowing,
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
    /// Further policies every tool must also pass ([`CatalogBuilder::narrowed_by`]).
    narrowing: Vec<Policy>,
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
            if !self.policy.allows_tool(source, &spec.name, &id)
                || !self
                    .narrowing
                    .iter()
                    .all(|p| p.allows_tool(source, &spec.name, &id))
            {
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

    /// The effective policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The `approve` pattern (of the effective policy, else of a narrowing
    /// one) the tool `name` of `source` (catalog id `id`) matches, if any:
    /// each of its calls needs an approval.
    pub fn needs_approval(&self, source: &Source, name: &str, id: &str) -> Option<&str> {
        std::iter::once(&self.policy)
            .chain(&self.narrowing)
            .find_map(|p| p.needs_approval(source, name, id))
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
