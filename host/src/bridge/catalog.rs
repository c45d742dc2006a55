//! The cell's view of the catalog: [`CellTools`] (catalog, callable
//! projection, implementations and the guest's start options, built once
//! per runtime) and the catalog requests (`search`, `describe`, `apiRead`,
//! `mcpApi`), which settle at once.

use super::settlement::{catalog_err, err, ok, ok_raw, Settlement};
use crate::tools::{Tool, ToolSet};
use quickcell_catalog::{Catalog, Projection, SearchLimits, SourceKind};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// What the cell's tools are: the catalog, the callable projection and the
/// implementations.
pub(crate) struct CellTools {
    pub catalog: Arc<Catalog>,
    pub projection: Arc<Projection>,
    /// Host tools by name (the catalog decides whether a call reaches one:
    /// a client tool may shadow it, the policy may deny it).
    pub host_tools: ToolSet,
    /// Client tools by name (the winner of each name).
    pub client_tools: HashMap<String, Arc<dyn Tool>>,
    /// MCP tools by catalog id.
    pub mcp_tools: HashMap<String, Arc<dyn Tool>>,
    /// The `MCP` namespace for the guest: per server, its identifier and
    /// its tools' identifiers joined by newlines (identifiers are
    /// alphanumeric), in catalog order. One string per server keeps the
    /// per-cell cost independent of the number of tools.
    pub mcp_layout: Vec<Vec<String>>,
    /// The untrusted source every cell may see (see [`untrusted_in_catalog`]).
    pub untrusted_source: Option<&'static str>,
    /// The catalog's members of the guest's start options, as JSON text
    /// built once: `"toolNames"` (the callable names of the tool globals,
    /// sorted as `catalog.all()` lists them, joined by newlines) and
    /// `"mcpLayout"`.
    pub start_options: String,
    /// JSON array of the handles' metadata, in `toolNames` order.
    pub metas_json: String,
    /// Default and cap of `catalog.search` in cells (`[limits]
    /// search_default_limit` / `max_search_limit`).
    pub search_limits: SearchLimits,
    /// Whether the catalog has a tool named `process` (a shell's
    /// background sessions): the unknown-run error then says how to poll
    /// those, since models confuse their ids with run ids.
    pub has_process_tool: bool,
    /// The client tools declared for this cell (`clientTools`): a call to
    /// one waits for the caller. Empty for the runtime's shared tools.
    pub declared_client_tools: Vec<crate::ClientToolSpec>,
    /// SHA-256 (hex, first 16 bytes) of the callable names (what the
    /// policies let the cell see): a parked cell resumed under other names
    /// knows that the tools it may call changed.
    pub digest: String,
}

/// What building a cell's own [`CellTools`] needs: the runtime's tools and
/// policy.
pub(crate) struct ToolsForCells {
    pub registry: crate::registry::ToolRegistry,
    pub policy: quickcell_catalog::Policy,
    pub search_limits: SearchLimits,
    /// The latest cells' tools by what they were built from (SHA-256 of
    /// the declarations and the caller's policy), newest last: a run's
    /// every `wait`, and callers that send the same declarations, reuse
    /// them.
    pub cache: std::sync::Mutex<std::collections::VecDeque<([u8; 32], Arc<CellTools>)>>,
}

/// Cells' tools [`ToolsForCells`] keeps.
const CELL_TOOLS_CACHED: usize = 32;

/// Cells' catalogs built at once, process-wide (each on a blocking thread:
/// a large catalog takes a while to index).
const CELL_CATALOG_BUILDS: usize = 2;

impl ToolsForCells {
    /// The tools of a cell that declares `declared` client tools: the
    /// runtime's `shared` ones when it declares none, else a catalog of
    /// the runtime's tools and the declared ones (indexed for this cell,
    /// under the runtime's policy; a declared tool shadows a host tool of
    /// the same name). Linear in the catalog's size.
    ///
    /// With `policy` (the caller's), a tool must pass it as well as the
    /// runtime's, and its `approve` patterns apply too.
    ///
    /// Built on a blocking thread, at most [`CELL_CATALOG_BUILDS`] at once
    /// process-wide, and kept for the next cells with the same inputs.
    pub(crate) async fn for_cell(
        &self,
        shared: &Arc<CellTools>,
        declared: &[crate::ClientToolSpec],
        policy: Option<&quickcell_catalog::Policy>,
    ) -> Arc<CellTools> {
        if declared.is_empty() && policy.is_none() {
            return shared.clone();
        }
        let key: [u8; 32] = {
            use sha2::Digest as _;
            let mut hash = sha2::Sha256::new();
            hash.update(serde_json::to_vec(declared).unwrap_or_default());
            hash.update(format!("{policy:?}").as_bytes());
            hash.finalize().into()
        };
        let cache = || self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, tools)) = cache().iter().find(|(k, _)| *k == key) {
            return tools.clone();
        }
        static BUILDS: tokio::sync::Semaphore =
            tokio::sync::Semaphore::const_new(CELL_CATALOG_BUILDS);
        let _permit = BUILDS.acquire().await.ok();
        let (mut registry, runtime_policy, limits) = (
            self.registry.clone(),
            self.policy.clone(),
            self.search_limits,
        );
        let (declared, policy) = (declared.to_vec(), policy.cloned());
        let built = tokio::task::spawn_blocking(move || {
            for spec in &declared {
                // Names were checked with the input; an empty one cannot occur.
                let _ = registry.add_client(Arc::new(crate::client_tools::DeclaredClientTool(
                    spec.clone(),
                )));
            }
            let catalog = registry.catalog_within(runtime_policy, policy, None);
            let mut tools = CellTools::new(catalog, &registry, limits);
            tools.declared_client_tools = declared;
            Arc::new(tools)
        })
        .await;
        let tools = match built {
            Ok(tools) => tools,
            // The build panicked: the runtime's tools, without the
            // declarations (a call to one is then an unknown function).
            Err(e) => {
                tracing::error!(error = %e, "building a cell's catalog failed");
                return shared.clone();
            }
        };
        let mut cache = cache();
        if cache.len() >= CELL_TOOLS_CACHED {
            cache.pop_front();
        }
        cache.push_back((key, tools.clone()));
        tools
    }
}

impl CellTools {
    /// The implementation a prepared call reaches: MCP tools by catalog id
    /// (their names may repeat across servers and with host tools), the
    /// others by name.
    pub(crate) fn implementation(
        &self,
        prepared: &quickcell_catalog::PreparedCall,
    ) -> Option<Arc<dyn Tool>> {
        match prepared.source {
            SourceKind::Mcp => self.mcp_tools.get(&prepared.id).cloned(),
            SourceKind::Client => self.client_tools.get(&prepared.tool_name).cloned(),
            _ => self.host_tools.get(&prepared.tool_name).cloned(),
        }
    }

    /// The policy's `approve` pattern the catalog entry `id` matches, if
    /// any (its calls need an approval).
    pub(crate) fn approval_pattern(&self, id: &str) -> Option<&str> {
        let entry = self.catalog.get(id)?;
        self.catalog
            .needs_approval(entry.source(), entry.name(), entry.id())
    }

    pub(crate) fn new(
        catalog: Catalog,
        registry: &crate::registry::ToolRegistry,
        search_limits: SearchLimits,
    ) -> Self {
        let projection = catalog.callable_projection();
        let mcp_layout = catalog
            .mcp_servers()
            .iter()
            .map(|server| {
                let tools: Vec<&str> = catalog
                    .mcp_server_entries(server)
                    .filter_map(|e| e.mcp_identifiers().map(|(_, t)| t))
                    .collect();
                vec![server.identifier.clone(), tools.join("\n")]
            })
            .collect();
        let metas = catalog.guest_all(&projection);
        let callable_names: Vec<&str> = metas.iter().map(|m| m.callable_name.as_str()).collect();
        let start_options = format!(
            r#""toolNames":{},"mcpLayout":{}"#,
            serde_json::Value::from(callable_names.join("\n")),
            serde_json::to_string(&mcp_layout).expect("the layout serializes"),
        );
        let metas_json = serde_json::to_string(&metas).expect("metadata serializes");
        let digest = {
            use sha2::Digest as _;
            let mut hash = sha2::Sha256::new();
            hash.update(start_options.as_bytes());
            hash.finalize()[..16]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        let untrusted_source = untrusted_in_catalog(&catalog);
        let has_process_tool = catalog.entries().iter().any(|e| e.name() == "process");
        Self {
            catalog: Arc::new(catalog),
            projection: Arc::new(projection),
            host_tools: registry.host_tools().clone(),
            client_tools: registry.client_tools(),
            mcp_tools: registry.mcp_tools(),
            mcp_layout,
            untrusted_source,
            start_options,
            metas_json,
            search_limits,
            has_process_tool,
            declared_client_tools: Vec::new(),
            digest,
        }
    }

    /// Whether a prepared call reaches a client tool declared for this
    /// cell (the caller runs it).
    pub(crate) fn is_declared_client_tool(
        &self,
        prepared: &quickcell_catalog::PreparedCall,
    ) -> bool {
        prepared.source == SourceKind::Client
            && self
                .declared_client_tools
                .iter()
                .any(|spec| spec.name == prepared.tool_name)
    }
}

/// The untrusted source any cell of this catalog may see: `"mcp"` when it
/// has MCP tools, else `"client"` when it has client tools.
fn untrusted_in_catalog(catalog: &Catalog) -> Option<&'static str> {
    let kinds = || catalog.entries().iter().map(|e| e.kind());
    if kinds().any(|k| k == SourceKind::Mcp) {
        Some("mcp")
    } else if kinds().any(|k| k == SourceKind::Client) {
        Some("client")
    } else {
        None
    }
}

/// Whether `method` is a catalog request ([`request`] answers it).
pub(crate) fn is_catalog_request(method: &str) -> bool {
    matches!(method, "search" | "describe" | "apiRead" | "mcpApi")
}

/// Answers a catalog request (`search {query, limit}`, `describe
/// {callable}`, `apiRead {path}`, `mcpApi {server, method, schema}`) at
/// once.
pub(crate) fn request(tools: &CellTools, id: u64, method: &str, args: &Value) -> Settlement {
    match method {
        "search" => {
            let query = args["query"].as_str().unwrap_or("");
            let limit = args.get("limit").filter(|v| !v.is_null());
            let metas = tools.catalog.guest_search_within(
                &tools.projection,
                query,
                limit,
                tools.search_limits,
            );
            match serde_json::value::to_raw_value(&metas) {
                Ok(raw) => ok_raw(id, raw),
                Err(e) => err(
                    id,
                    format!("search results are not JSON: {e}"),
                    "tool_error",
                ),
            }
        }
        "apiRead" => {
            let path = args["path"].as_str().unwrap_or("");
            match tools.catalog.api_read(&tools.projection, path) {
                Ok(text) => ok(id, Value::String(text)),
                Err(e) => catalog_err(id, e),
            }
        }
        "mcpApi" => {
            let server = args["server"].as_str().unwrap_or("");
            let method = args["method"].as_str();
            let schema = args["schema"].as_bool().unwrap_or(false);
            match tools.catalog.mcp_api(server, method, schema) {
                Ok(v) => ok(id, v),
                Err(e) => catalog_err(id, e),
            }
        }
        _ => {
            let callable = args["callable"].as_str().unwrap_or("");
            match tools.catalog.guest_describe(&tools.projection, callable) {
                Ok(v) => ok(id, v),
                Err(e) => catalog_err(id, e),
            }
        }
    }
}
