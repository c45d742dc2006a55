//! The structured Tool Search tools (tool-search.md §9, §10): `tool_search`,
//! `tool_describe`, `tool_call` and describe by id or name.

use super::{parameters, wrap_untrusted, PreparedCall};
use crate::catalog::{Catalog, Entry, SourceKind};
use crate::error::{CatalogError, ErrorKind};
use crate::text::utf16_len;
use serde_json::{json, Map, Value};
use unicode_segmentation::UnicodeSegmentation;

/// `tool_search`: maximum entries per batch (scalar `query` included).
pub const BATCH_MAX_ENTRIES: usize = 16;
/// `tool_search`: maximum graphemes per query.
pub const BATCH_MAX_GRAPHEMES: usize = 512;
/// `tool_search`: maximum UTF-8 bytes of the JSON array of all query strings.
pub const BATCH_MAX_QUERY_BYTES: usize = 512;
/// `tool_search`: maximum sum of resolved limits.
pub const BATCH_MAX_RESULTS: usize = 50;
/// `tool_search`: maximum serialized response length (UTF-16 code units).
pub const SEARCH_RESPONSE_CHARS: usize = 4_000;

impl Catalog {
    /// Structured describe by id or name (tool-search.md §9.1). Counts one
    /// describe.
    pub fn describe(&self, key: &str) -> Result<Value, CatalogError> {
        let e = self.resolve(key)?;
        self.count_describe();
        if e.kind() == SourceKind::Mcp {
            return Ok(self.mcp_description(e));
        }
        let mut m = Map::new();
        m.insert("id".into(), json!(e.id()));
        m.insert("name".into(), json!(e.name()));
        m.insert("label".into(), json!(e.label()));
        m.insert("description".into(), json!(e.description()));
        m.insert("source".into(), json!(e.kind().as_str()));
        m.insert("parameters".into(), parameters(e));
        if let Some(o) = &e.spec().output_schema {
            m.insert("outputSchema".into(), o.clone());
        }
        if let Some(i) = e.input_hint() {
            m.insert("input".into(), json!(i));
        }
        if let Some(o) = e.output_hint() {
            m.insert("output".into(), json!(o));
        }
        Ok(Value::Object(m))
    }

    /// Model-facing describe text: compact JSON, wrapped as untrusted for
    /// MCP and client tools.
    pub fn describe_text(&self, key: &str) -> Result<String, CatalogError> {
        let v = self.describe(key)?;
        let text = serde_json::to_string(&v).unwrap_or_default();
        let e = self.resolve(key)?;
        Ok(if e.is_trusted() {
            text
        } else {
            wrap_untrusted(e.kind().as_str(), &text)
        })
    }

    /// Structured `tool_search` (tool-search.md §10). Validates the whole
    /// batch before running any query; each executed query counts one search.
    pub fn tool_search(&self, input: &Value) -> Result<Value, CatalogError> {
        let bad = |m: String| CatalogError::new(ErrorKind::InvalidRequest, m);
        let limit_err = |m: String| CatalogError::new(ErrorKind::BatchLimit, m);
        let obj = input
            .as_object()
            .ok_or_else(|| bad("tool_search input must be an object.".into()))?;
        let top_limit = obj.get("limit").filter(|v| !v.is_null());
        // (label for errors, query, limit)
        let mut entries: Vec<(String, String, Option<&Value>)> = Vec::new();
        match obj.get("query") {
            None | Some(Value::Null) => {}
            Some(Value::String(q)) => entries.push(("query".into(), q.clone(), top_limit)),
            Some(_) => return Err(bad("query must be a non-empty string.".into())),
        }
        let queries: &[Value] = match obj.get("queries") {
            None | Some(Value::Null) => &[],
            Some(Value::Array(a)) => a,
            Some(_) => {
                return Err(bad(
                    "queries must be an array of { query, limit? } objects.".into(),
                ))
            }
        };
        if entries.len() + queries.len() > BATCH_MAX_ENTRIES {
            return Err(limit_err(format!(
                "tool_search accepts at most {BATCH_MAX_ENTRIES} entries per call (query plus queries); got {}.",
                entries.len() + queries.len()
            )));
        }
        for (i, q) in queries.iter().enumerate() {
            let label = format!("queries[{i}].query");
            let (text, limit) = match q {
                Value::Object(m) => (m.get("query"), m.get("limit").filter(|v| !v.is_null())),
                Value::String(_) => (Some(q), None),
                _ => (None, None),
            };
            match text {
                Some(Value::String(s)) => entries.push((label, s.clone(), limit.or(top_limit))),
                _ => return Err(bad(format!("{label} must be a non-empty string."))),
            }
        }
        if entries.is_empty() {
            return Err(bad("tool_search needs query or queries.".into()));
        }
        for (label, q, _) in &entries {
            if q.trim().is_empty() {
                return Err(bad(format!("{label} must be a non-empty string.")));
            }
            if q.graphemes(true).count() > BATCH_MAX_GRAPHEMES {
                return Err(limit_err(format!(
                    "{label} must be at most {BATCH_MAX_GRAPHEMES} characters."
                )));
            }
        }
        let strings: Vec<&str> = entries.iter().map(|e| e.1.as_str()).collect();
        let bytes = serde_json::to_string(&strings).unwrap_or_default().len();
        if bytes > BATCH_MAX_QUERY_BYTES {
            return Err(limit_err(format!(
                "tool_search queries must total at most {BATCH_MAX_QUERY_BYTES} UTF-8 bytes as a JSON array; got {bytes}."
            )));
        }
        let limits: Vec<usize> = entries.iter().map(|e| self.limits().resolve(e.2)).collect();
        let sum: usize = limits.iter().sum();
        if sum > BATCH_MAX_RESULTS {
            return Err(limit_err(format!(
                "tool_search entries resolve to {sum} results; the total limit is {BATCH_MAX_RESULTS}. Lower limit or split the batch."
            )));
        }
        let mut groups: Vec<(String, Vec<Value>)> = Vec::new();
        for ((_, q, _), limit) in entries.iter().zip(limits) {
            self.count_search();
            let hits = self
                .search_uncounted(q, limit, true, None)
                .into_iter()
                .map(search_hit)
                .collect();
            groups.push((q.clone(), hits));
        }
        Ok(bounded_search_response(groups, SEARCH_RESPONSE_CHARS))
    }

    /// Structured `tool_describe`: `{ id }` (also `name` or `tool`).
    pub fn tool_describe(&self, input: &Value) -> Result<Value, CatalogError> {
        let key = ["id", "name", "tool"]
            .iter()
            .find_map(|k| input.get(*k).and_then(Value::as_str).filter(|s| !s.trim().is_empty()))
            .ok_or_else(|| {
                CatalogError::new(
                    ErrorKind::InvalidRequest,
                    "tool_describe needs an id. Use tool_search to find tools and pass the id it returns.",
                )
            })?;
        self.describe(key.trim())
    }

    /// Structured `tool_call`: resolve the selector, repair flattened
    /// arguments, validate trusted input and count the call.
    ///
    /// Input: `{ id, arguments? }` (`name` / `tool` accepted as selectors).
    /// Repair rules: when `arguments` is absent, every key other than the
    /// selectors is taken as an argument (arguments flattened beside `id`);
    /// `arguments` given as a JSON-object string is parsed. Rejected as
    /// ambiguous rather than guessed: selectors naming different tools, a
    /// selector matching several tools, or extra top-level keys beside an
    /// explicit `arguments` object.
    pub fn tool_call_prepare(&self, input: &Value) -> Result<PreparedCall, CatalogError> {
        let bad = |m: &str| CatalogError::new(ErrorKind::InvalidRequest, m.to_string());
        let obj = input
            .as_object()
            .ok_or_else(|| bad("tool_call input must be an object with id and arguments."))?;
        let mut target: Option<&Entry> = None;
        let mut used_selectors: Vec<&str> = Vec::new();
        for key in ["id", "name", "tool"] {
            let Some(Value::String(s)) = obj.get(key) else {
                continue;
            };
            let s = s.trim();
            if s.is_empty() {
                continue;
            }
            let is_primary = target.is_none();
            match self.resolve(s) {
                Ok(e) => match target {
                    None => {
                        target = Some(e);
                        used_selectors.push(key);
                    }
                    Some(t) if t.id() == e.id() => used_selectors.push(key),
                    Some(t) => {
                        return Err(CatalogError::new(
                            ErrorKind::AmbiguousTool,
                            format!(
                                "tool_call selectors disagree: \"{}\" and \"{}\" name different tools. Use tool_search and pass one id.",
                                t.name(),
                                e.name()
                            ),
                        ))
                    }
                },
                Err(err) if is_primary => return Err(err),
                Err(_) => {} // not a tool: treat as an ordinary argument key
            }
        }
        let Some(entry) = target else {
            return Err(CatalogError::new(
                ErrorKind::UnknownTool,
                "tool_call needs the id of a tool. Use tool_search to find tools and pass the id it returns.",
            ));
        };
        let extras: Map<String, Value> = obj
            .iter()
            .filter(|(k, _)| k.as_str() != "arguments" && !used_selectors.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let arguments = match obj.get("arguments") {
            None | Some(Value::Null) => Value::Object(extras),
            Some(args) => {
                if !extras.is_empty() {
                    let keys: Vec<&String> = extras.keys().collect();
                    return Err(CatalogError::new(
                        ErrorKind::AmbiguousTool,
                        format!(
                            "tool_call got arguments and also top-level keys {keys:?}; put every tool argument inside arguments."
                        ),
                    ));
                }
                match args {
                    Value::Object(_) => args.clone(),
                    Value::String(s) => match serde_json::from_str::<Value>(s) {
                        Ok(v @ Value::Object(_)) => v,
                        _ => return Err(bad("tool_call arguments must be an object.")),
                    },
                    _ => return Err(bad("tool_call arguments must be an object.")),
                }
            }
        };
        entry.validate_input(&arguments, entry.name())?;
        self.count_call();
        Ok(PreparedCall {
            id: entry.id().to_string(),
            tool_name: entry.name().to_string(),
            display_name: entry.name().to_string(),
            source: entry.kind(),
            arguments,
            replay_safe: entry.replay_safe(),
        })
    }
}

fn search_hit(e: &Entry) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(e.id()));
    m.insert("name".into(), json!(e.name()));
    m.insert("description".into(), json!(e.display_description()));
    m.insert("source".into(), json!(e.kind().as_str()));
    if let Some(i) = e.input_hint() {
        m.insert("input".into(), json!(i));
    }
    if let Some(o) = e.output_hint() {
        m.insert("output".into(), json!(o));
    }
    Value::Object(m)
}

/// Shape `{ results: [{ query, hits }], truncated?: true }`, dropping hits
/// from the end of the last non-empty group until the compact JSON is at most
/// `max_chars` code units.
fn bounded_search_response(mut groups: Vec<(String, Vec<Value>)>, max_chars: usize) -> Value {
    let render = |groups: &[(String, Vec<Value>)], truncated: bool| -> Value {
        let results: Vec<Value> = groups
            .iter()
            .map(|(q, hits)| json!({"query": q, "hits": hits}))
            .collect();
        if truncated {
            json!({"results": results, "truncated": true})
        } else {
            json!({"results": results})
        }
    };
    let size = |v: &Value| utf16_len(&serde_json::to_string(v).unwrap_or_default());
    let full = render(&groups, false);
    if size(&full) <= max_chars {
        return full;
    }
    loop {
        let Some(g) = groups.iter_mut().rev().find(|g| !g.1.is_empty()) else {
            return render(&groups, true);
        };
        g.1.pop();
        let v = render(&groups, true);
        if size(&v) <= max_chars {
            return v;
        }
    }
}
