//! Code Mode handles (contract.md §8.3): handle metadata, `catalog.all()`,
//! `catalog.search`, a handle's `describe()`, guest calls and
//! `MCP.<server>.$api`.

use super::{mcp_tool_json, parameters, PreparedCall};
use crate::api_files;
use crate::catalog::{Catalog, Entry, SearchLimits, SourceKind};
use crate::error::{CatalogError, ErrorKind};
use crate::expand::cut_query;
use crate::projection::{check_name_len, Projection};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// Handle metadata (contract.md §8.3). Absent fields are omitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// Global name, or `MCP.<server>.<tool>`.
    pub callable_name: String,
    /// Original tool name.
    pub tool_name: String,
    /// Label (defaults to the tool name).
    pub label: String,
    /// Description (MCP: safe-cut to 512 code units).
    pub description: String,
    /// `host`, `client` or `mcp`.
    pub source: SourceKind,
    /// `API.read` path of the declaration file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_path: Option<String>,
    /// Input hint (host: hint or `unknown`; client: `unknown`; MCP: absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Output hint (complete trusted host hints only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl Catalog {
    /// Handle metadata of `entry` under `projection`; `None` when the entry
    /// is not part of the projection.
    pub fn meta(&self, projection: &Projection, entry: &Entry) -> Option<Meta> {
        let (callable_name, api_path) = match entry.mcp_identifiers() {
            Some((server, _)) => (entry.mcp_callable_name()?, format!("mcp/{server}.d.ts")),
            None => {
                let c = projection.callable_name_of(entry.id())?.to_string();
                let p = format!("tools/{c}.d.ts");
                (c, p)
            }
        };
        Some(Meta {
            callable_name,
            tool_name: entry.name().to_string(),
            label: entry.label().to_string(),
            description: entry.display_description().to_string(),
            source: entry.kind(),
            api_path: Some(api_path),
            input: entry.input_hint().map(str::to_string),
            output: entry.output_hint().map(str::to_string),
        })
    }

    /// `catalog.all()`: native and client handles in callable-name order.
    pub fn guest_all(&self, projection: &Projection) -> Vec<Meta> {
        projection
            .bindings()
            .iter()
            .filter_map(|b| self.get(&b.id).and_then(|e| self.meta(projection, e)))
            .collect()
    }

    /// `catalog.search(query, {limit})` (contract.md §8.3): the exact-name
    /// shortcut, then BM25 over the projection's searchable entries. Counts
    /// one search. An invalid `limit` falls back to the default. Only the
    /// first [`crate::MAX_QUERY_BYTES`] bytes of the trimmed query are used
    /// ([`crate::cut_query`]), for the shortcut too.
    /// The limit is resolved with the catalog's [`SearchLimits`]
    /// ([`Catalog::guest_search_within`] takes others).
    pub fn guest_search(
        &self,
        projection: &Projection,
        query: &str,
        limit: Option<&Value>,
    ) -> Vec<Meta> {
        self.guest_search_within(projection, query, limit, self.limits())
    }

    /// [`Catalog::guest_search`] with the limit resolved by `limits`: a
    /// runtime's own default and cap for `catalog.search` in cells (default
    /// 8, cap 50), which differ from Tool Search's (8 and 20).
    pub fn guest_search_within(
        &self,
        projection: &Projection,
        query: &str,
        limit: Option<&Value>,
        limits: SearchLimits,
    ) -> Vec<Meta> {
        self.count_search();
        let q = cut_query(query.trim()).trim_end();
        if let Some(e) = self.guest_exact(projection, q) {
            return self.meta(projection, e).into_iter().collect();
        }
        let limit = limits.resolve(limit);
        self.search_uncounted(q, limit, true, Some(projection.searchable_ids()))
            .into_iter()
            .filter_map(|e| self.meta(projection, e))
            .collect()
    }

    fn guest_exact(&self, projection: &Projection, q: &str) -> Option<&Entry> {
        if q.is_empty() {
            return None;
        }
        let unique = |v: Vec<&str>| -> Option<&Entry> {
            let mut ids: Vec<&str> = v;
            ids.sort_unstable();
            ids.dedup();
            (ids.len() == 1).then(|| self.get(ids[0])).flatten()
        };
        let lq = q.to_lowercase();
        for ci in [false, true] {
            let eq = |a: &str| if ci { a.to_lowercase() == lq } else { a == q };
            let mcp: Vec<&str> = projection
                .mcp_bindings()
                .iter()
                .filter(|b| eq(&b.callable_name))
                .map(|b| b.id.as_str())
                .collect();
            if let Some(e) = unique(mcp) {
                return Some(e);
            }
            let native: Vec<&str> = projection
                .bindings()
                .iter()
                .filter(|b| eq(&b.callable_name) || self.get(&b.id).is_some_and(|e| eq(e.name())))
                .map(|b| b.id.as_str())
                .collect();
            if let Some(e) = unique(native) {
                return Some(e);
            }
        }
        None
    }

    fn guest_entry(
        &self,
        projection: &Projection,
        callable_name: &str,
    ) -> Result<&Entry, CatalogError> {
        check_name_len(
            callable_name,
            ErrorKind::UnknownCallable,
            "Unknown catalog function",
        )?;
        let id = projection
            .resolve(callable_name)
            .or_else(|| {
                projection
                    .mcp_bindings()
                    .iter()
                    .find(|b| b.callable_name == callable_name)
            })
            .map(|b| b.id.as_str());
        id.and_then(|id| self.get(id)).ok_or_else(|| {
            CatalogError::new(
                ErrorKind::UnknownCallable,
                format!("Unknown catalog function: {callable_name}."),
            )
        })
    }

    /// A handle's `describe()` (Code Mode). Counts one describe.
    pub fn guest_describe(
        &self,
        projection: &Projection,
        callable_name: &str,
    ) -> Result<Value, CatalogError> {
        let e = self.guest_entry(projection, callable_name)?;
        self.count_describe();
        if e.kind() == SourceKind::Mcp {
            return Ok(self.mcp_description(e));
        }
        let meta = self.meta(projection, e).ok_or_else(|| {
            CatalogError::new(
                ErrorKind::UnknownCallable,
                format!("Unknown catalog function: {callable_name}."),
            )
        })?;
        let mut v = serde_json::to_value(&meta).unwrap_or(Value::Null);
        let m = v.as_object_mut().expect("meta is an object");
        m.remove("toolName");
        m.insert("name".into(), json!(e.name()));
        m.insert("parameters".into(), parameters(e));
        if let Some(o) = &e.spec().output_schema {
            m.insert("outputSchema".into(), o.clone());
        }
        Ok(v)
    }

    /// Resolve, validate and count a guest call of `callable_name` (tool
    /// global, handle, or `MCP.<server>.<tool>`). Validation errors name the
    /// callable name.
    pub fn guest_prepare_call(
        &self,
        projection: &Projection,
        callable_name: &str,
        input: Option<Value>,
    ) -> Result<PreparedCall, CatalogError> {
        let e = self.guest_entry(projection, callable_name)?;
        let args = match input {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(v) => v,
        };
        e.validate_input(&args, callable_name)?;
        self.count_call();
        Ok(PreparedCall {
            id: e.id().to_string(),
            tool_name: e.name().to_string(),
            display_name: callable_name.to_string(),
            source: e.kind(),
            arguments: args,
            replay_safe: e.replay_safe(),
        })
    }

    /// `MCP.<server>.$api(method?, { schema })`: the declaration header for
    /// the whole server or one method, plus input schemas when `schema` is
    /// true. A normalized method identifier beats a colliding original tool
    /// name.
    pub fn mcp_api(
        &self,
        server_ident: &str,
        method: Option<&str>,
        schema: bool,
    ) -> Result<Value, CatalogError> {
        check_name_len(server_ident, ErrorKind::UnknownTool, "Unknown MCP server")?;
        if let Some(m) = method {
            check_name_len(m, ErrorKind::UnknownTool, "Unknown MCP method")?;
        }
        let server = self
            .mcp_servers()
            .iter()
            .find(|s| s.identifier == server_ident)
            .ok_or_else(|| {
                CatalogError::new(
                    ErrorKind::UnknownTool,
                    format!("Unknown MCP server: {server_ident}."),
                )
            })?;
        let all: Vec<&Entry> = self.mcp_server_entries(server).collect();
        let selected: Vec<&Entry> = match method {
            None => all,
            Some(m) => {
                let by_ident = all
                    .iter()
                    .find(|e| e.mcp_identifiers().map(|x| x.1) == Some(m));
                let by_name = all.iter().find(|e| e.name() == m);
                match by_ident.or(by_name) {
                    Some(e) => vec![*e],
                    None => {
                        return Err(CatalogError::new(
                            ErrorKind::UnknownTool,
                            format!("Unknown MCP method: MCP.{server_ident}.{m}."),
                        ))
                    }
                }
            }
        };
        let mut out = Map::new();
        out.insert(
            "header".into(),
            json!(api_files::mcp_declaration(
                &server.identifier,
                &server.server_name,
                selected.iter().copied()
            )),
        );
        out.insert(
            "tools".into(),
            Value::Array(selected.iter().map(|e| mcp_tool_json(e)).collect()),
        );
        if schema {
            let schemas: Map<String, Value> = selected
                .iter()
                .map(|e| {
                    (
                        e.mcp_identifiers().unwrap_or(("", "")).1.to_string(),
                        parameters(e),
                    )
                })
                .collect();
            out.insert("schemas".into(), Value::Object(schemas));
        }
        Ok(Value::Object(out))
    }
}
