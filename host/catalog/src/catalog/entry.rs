//! One effective catalog entry: its id, definition and source, its hints and
//! validators (computed on first use), its MCP path and its search document
//! text (`paramText`).

use super::{Source, SourceKind, ToolSpec};
use crate::error::CatalogError;
use crate::hints::{input_hint, output_hint};
use crate::text::safe_cut_utf16;
use crate::validate;
use serde_json::Value;
use std::sync::{Arc, OnceLock};

/// MCP descriptions shown in search results and metadata are safe-cut to this
/// many UTF-16 code units.
pub const MCP_DESCRIPTION_UNITS: usize = 512;

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
    pub(super) fn new(source: Source, spec: Arc<ToolSpec>, id: String) -> Self {
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
    pub(super) fn doc_text(&self, sink: &mut dyn FnMut(&str)) {
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
