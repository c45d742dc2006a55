//! The public entry point: [`Runtime`] and its builder.

use crate::bridge::CellTools;
use crate::cell::{self, CellEnv};
use crate::config::{HostLimits, Limits};
use crate::engine::{self, SharedEngine};
use crate::error::Error;
use crate::input::{ExecInput, WaitInput};
use crate::mcp::{McpClients, McpServerConfig};
use crate::registry::ToolRegistry;
use crate::result::{CellResult, McpOutage, Telemetry};
use crate::runs::RunRegistry;
pub use crate::serve::{HttpOptions, ServeMode};
use crate::state::{MemoryStateStore, SqliteStateStore, StateStore};
use quickcell_catalog::Catalog;
use std::path::PathBuf;
use std::sync::Arc;

/// Runs `call` to its end, or `None` if it panicked: a panic in one cell's
/// host code ends that cell (the caller turns it into its
/// `internal_error`), never the process or other cells. The cell's store,
/// bridge and slot are dropped as the panic unwinds.
async fn caught<T, F: std::future::Future<Output = T>>(call: F) -> Option<T> {
    let mut call = std::pin::pin!(call);
    std::future::poll_fn(|cx| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call.as_mut().poll(cx))) {
            Ok(std::task::Poll::Ready(result)) => std::task::Poll::Ready(Some(result)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(_) => std::task::Poll::Ready(None),
        }
    })
    .await
}

/// Builds a [`Runtime`].
///
/// Secure defaults: a cell gets no filesystem (no preopens), no
/// environment, no arguments, no network, a closed stdin, and discarded
/// stdout/stderr; its only way out is the bridge. Limits default to the
/// contract's values ([`Limits::default`]).
#[derive(Debug, Clone, Default)]
pub struct RuntimeBuilder {
    limits: Limits,
    host_limits: HostLimits,
    tools: ToolRegistry,
    mcp_servers: Vec<McpServerConfig>,
    state_dir: Option<PathBuf>,
}

impl RuntimeBuilder {
    /// Uses these limits for every call.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Uses these process-wide caps and per-session shares (suspended-run
    /// slots, running cells; see [`HostLimits`]).
    pub fn host_limits(mut self, limits: HostLimits) -> Self {
        self.host_limits = limits;
        self
    }

    /// Offers these tools to cells (see [`ToolRegistry`]).
    pub fn tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
        self
    }

    /// Offers the tools of these downstream MCP servers to cells, as
    /// `MCP.<server>.<tool>` (see [`crate::mcp`]). [`build`](Self::build)
    /// connects to them; a server it cannot reach is reported on every
    /// result instead of failing the build.
    pub fn mcp_servers(mut self, servers: Vec<McpServerConfig>) -> Self {
        self.mcp_servers = servers;
        self
    }

    /// Keeps parked runs in the SQLite state store in `dir` (created if
    /// missing), so they survive this process and can be resumed by any
    /// process that uses the same directory. Without it, parked runs live
    /// in this runtime's memory and end with it.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Creates the runtime. The first runtime of a process creates the
    /// shared Wasmtime engine and loads the pre-initialized guest from the
    /// module cache (or builds and caches it, which takes about a second).
    ///
    /// Fails with [`Error::Config`] when two MCP servers would share a
    /// catalog name (names that differ only in characters outside
    /// `[A-Za-z0-9_-]`).
    pub async fn build(mut self) -> Result<Runtime, Error> {
        let mut seen = std::collections::HashMap::new();
        for server in &self.mcp_servers {
            let key = quickcell_catalog::sanitize_source_name(&server.name);
            if let Some(other) = seen.insert(key, server.name.clone()) {
                return Err(Error::Config(format!(
                    "MCP servers `{other}` and `{}` have the same catalog name; rename one",
                    server.name
                )));
            }
        }
        let shared = engine::shared()
            .await
            .map_err(|e| Error::RuntimeUnavailable(format!("{e:#}")))?;
        let store: Arc<dyn StateStore> = match &self.state_dir {
            Some(dir) => Arc::new(
                SqliteStateStore::open(Some(dir))
                    .map_err(|e| Error::StateStore(format!("{e:#}")))?,
            ),
            None => Arc::new(MemoryStateStore::default()),
        };
        let runs = Arc::new(RunRegistry::new(store, self.host_limits));
        let (mcp, connected) = McpClients::start(std::mem::take(&mut self.mcp_servers)).await;
        for server in connected {
            for tool in server.tools {
                self.tools.add_mcp(server.connection.name(), tool);
            }
        }
        let cell_tools = Arc::new(CellTools::new(self.tools.catalog(), &self.tools));
        Ok(Runtime {
            shared,
            limits: self.limits,
            tools: self.tools,
            cell_tools,
            runs,
            mcp,
        })
    }
}

/// A quickcell runtime: runs cells under one set of limits.
///
/// Cheap to share (`&Runtime` is all `exec` needs) and safe to use from
/// many tasks at once: every call gets a fresh instance in its own store.
pub struct Runtime {
    shared: Arc<SharedEngine>,
    limits: Limits,
    tools: ToolRegistry,
    cell_tools: Arc<CellTools>,
    runs: Arc<RunRegistry>,
    mcp: McpClients,
}

impl Runtime {
    /// A builder with the default limits.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether the pre-initialized guest came from the on-disk module cache.
    pub fn module_from_cache(&self) -> bool {
        self.shared.from_cache
    }

    /// The tools offered to cells.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The tool catalog built from [`Runtime::tools`].
    pub fn catalog(&self) -> &Catalog {
        &self.cell_tools.catalog
    }

    fn telemetry(&self) -> Telemetry {
        Telemetry {
            catalog: self.cell_tools.catalog.telemetry(&["exec", "wait"]),
            fuel_used: 0,
        }
    }

    /// The description of the `exec` tool a model sees: how cells work,
    /// then the bounded quick index of tool globals (contract §8.2).
    pub fn exec_description(&self) -> String {
        let index = self
            .cell_tools
            .catalog
            .quick_index(&self.cell_tools.projection);
        // Only the fact that MCP tools exist: their names are untrusted and
        // never enter the prompt.
        let mcp = if self.cell_tools.mcp_layout.is_empty() {
            ""
        } else {
            " Tools of MCP servers live under MCP.<server>.<tool>(args) (one object argument; the result is {content, structuredContent?, isError?}); find them with catalog.search."
        };
        format!(
            "Run JavaScript (the body of an async function: top-level await and return work) in a sandbox whose tools are async globals, e.g. `const r = await read({{path: \"README.md\"}}); return r;`. \
Use text(v) / json(v) / console.log to emit output, catalog.search(query) to find more tools (results are callable), store/load for session values, results.save/load for large data. \
The result is {{status: completed | waiting | failed}}; a waiting cell is resumed with wait({{runId}}). \
In the index, `-> ?` means the output shape is unknown: return it raw (or await results.save(value)) and inspect it in a later cell before relying on guessed fields.{mcp}\n\n{index}"
        )
    }

    /// Adds `unavailableMcpServers` and `note` when an MCP server is down.
    fn with_outage(&self, mut result: CellResult) -> CellResult {
        if let Some((servers, note)) = self.mcp.outage() {
            result.set_mcp_outage(McpOutage {
                unavailable_mcp_servers: servers,
                note: Some(note),
            });
            // The note quotes server errors and stderr.
            result.set_untrusted_source(Some("mcp"));
        }
        result
    }

    fn env<'a>(&'a self, telemetry: &'a (dyn Fn() -> Telemetry + Sync)) -> CellEnv<'a> {
        CellEnv {
            shared: &self.shared,
            limits: &self.limits,
            tools: &self.cell_tools,
            runs: &self.runs,
            telemetry,
        }
    }

    /// Runs a cell (`exec`). Never panics and never returns a Rust error:
    /// every outcome, including rejected input, is a [`CellResult`]. A cell
    /// still waiting on host work when its budget runs out, or that calls
    /// `yield_control`, parks and comes back as
    /// [`CellResult::Waiting`]; resume it with [`Runtime::wait`].
    ///
    /// Must be awaited inside a Tokio runtime (tool calls and timers run as
    /// Tokio tasks); current-thread and multi-thread runtimes both work.
    pub async fn exec(&self, input: ExecInput) -> CellResult {
        let telemetry = || self.telemetry();
        let env = self.env(&telemetry);
        self.admitted(&input.owner.session, cell::exec(&env, &input))
            .await
    }

    /// Runs `call` (a cell of `session`) if the session is within its
    /// share of running cells, with a panic in its host code turned into
    /// that cell's `internal_error`.
    async fn admitted(
        &self,
        session: &str,
        call: impl std::future::Future<Output = CellResult>,
    ) -> CellResult {
        let Some(_active) = self.runs.start_cell(session) else {
            let error = format!(
                "too many running code mode cells for this session (at most {} at once). Wait for a running cell to finish, then try again.",
                self.runs.limits.max_running_cells_per_session()
            );
            return self.with_outage(cell::input_failure(error, self.telemetry()));
        };
        let result = caught(call).await;
        self.with_outage(result.unwrap_or_else(|| cell::host_panic(self.telemetry())))
    }

    /// Resumes a parked cell (`wait`): restores its snapshot into a fresh
    /// instance, delivers what settled meanwhile and runs it until it
    /// completes, fails or parks again. The run may have been parked by
    /// this runtime or by any other that shares its state directory.
    pub async fn wait(&self, input: WaitInput) -> CellResult {
        let telemetry = || self.telemetry();
        let env = self.env(&telemetry);
        self.admitted(&input.owner.session, cell::wait(&env, &input))
            .await
    }

    /// Resumes a parked cell from raw `wait` arguments (`{"runId":..}`).
    pub async fn wait_json(&self, args: &serde_json::Value) -> CellResult {
        match WaitInput::from_json(args) {
            Ok(input) => self.wait(input).await,
            Err(message) => self.with_outage(cell::input_failure(message, self.telemetry())),
        }
    }

    /// Waits until the tool calls of the runs this runtime parked have
    /// settled and been recorded in the state store (timers are not waited
    /// for: they are re-armed from their due time wherever a run resumes).
    /// A process that parks runs and then exits calls this first, so that
    /// the calls it started are not reported as having an unknown effect.
    pub async fn settle_parked_tool_calls(&self) {
        self.runs.settle_tool_calls().await;
    }

    /// Runs a cell from raw `exec` arguments (`{"title":..,"code":..}` as a
    /// model or MCP client sends them), applying the contract's argument
    /// rules first.
    pub async fn exec_json(&self, args: &serde_json::Value) -> CellResult {
        match ExecInput::from_json(args) {
            Ok(input) => self.exec(input).await,
            Err(message) => self.with_outage(cell::input_failure(message, self.telemetry())),
        }
    }
}

/// What a structured Tool Search operation returns to an MCP client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CatalogReply {
    /// The structured value (`structuredContent`).
    pub value: serde_json::Value,
    /// Model-facing text; wrapped as untrusted when it carries MCP or client
    /// content.
    pub text: String,
    /// Whether the operation failed.
    pub is_error: bool,
}

impl CatalogReply {
    fn error(message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            value: serde_json::json!({ "error": message }),
            text: message,
            is_error: true,
        }
    }

    fn ok(value: serde_json::Value, untrusted: Option<&str>) -> Self {
        let text = value.to_string();
        Self {
            text: match untrusted {
                Some(source) => quickcell_catalog::wrap_untrusted(source, &text),
                None => text,
            },
            value,
            is_error: false,
        }
    }
}

impl Runtime {
    /// `tool_search` (tool-search.md §10) over this runtime's catalog.
    pub(crate) fn tool_search(&self, args: &serde_json::Value) -> CatalogReply {
        let catalog = &self.cell_tools.catalog;
        match catalog.tool_search(args) {
            Ok(hits) => {
                // Hits of MCP or client tools carry their untrusted descriptions.
                let untrusted = hits["results"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|g| g["hits"].as_array().into_iter().flatten())
                    .filter_map(|h| match h["source"].as_str() {
                        Some("host") | None => None,
                        Some(other) => Some(other.to_owned()),
                    })
                    .max_by_key(|source| source == "mcp");
                CatalogReply::ok(hits, untrusted.as_deref())
            }
            Err(e) => CatalogReply::error(e.to_string()),
        }
    }

    /// `tool_describe` (tool-search.md §9.1) over this runtime's catalog.
    pub(crate) fn tool_describe(&self, args: &serde_json::Value) -> CatalogReply {
        let catalog = &self.cell_tools.catalog;
        match catalog.tool_describe(args) {
            Ok(description) => {
                let source = description["source"]
                    .as_str()
                    .unwrap_or("mcp") // an MCP description has no `source`
                    .to_owned();
                let untrusted = (source != "host").then_some(source.as_str());
                CatalogReply::ok(description.clone(), untrusted)
            }
            Err(e) => CatalogReply::error(e.to_string()),
        }
    }

    /// `tool_call` (tool-search.md §9): resolves, repairs and validates the
    /// call, then runs the tool through the same implementations cells
    /// reach. Bounded by the tool's own caps (a command tool's or MCP
    /// server's `timeout_ms`), not by `timeoutMs`: there is no cell to park.
    pub(crate) async fn tool_call(&self, args: &serde_json::Value) -> CatalogReply {
        let tools = &self.cell_tools;
        let prepared = match tools.catalog.tool_call_prepare(args) {
            Ok(p) => p,
            Err(e) => return CatalogReply::error(e.to_string()),
        };
        let Some(tool) = tools.implementation(&prepared) else {
            return CatalogReply::error(format!(
                "Unknown tool: {}. Use tool_search to find tools.",
                prepared.tool_name
            ));
        };
        let untrusted = match prepared.source {
            quickcell_catalog::SourceKind::Host => None,
            other => Some(other.as_str()),
        };
        // Its own task, so that a panicking tool fails this call alone.
        let arguments = prepared.arguments.clone();
        let call = tokio::spawn(async move {
            tool.call(arguments, crate::tools::CancelSignal::new())
                .await
        });
        match call.await {
            Ok(Ok(value)) => {
                match tools
                    .catalog
                    .check_output(&prepared.id, &prepared.display_name, &value)
                {
                    Ok(()) => CatalogReply::ok(value, untrusted),
                    Err(e) => CatalogReply::error(e.to_string()),
                }
            }
            Ok(Err(e)) => {
                let text = match untrusted {
                    Some(source) => quickcell_catalog::wrap_untrusted(source, &e.message),
                    None => e.message.clone(),
                };
                CatalogReply {
                    value: serde_json::json!({"error": e.message, "code": e.code.as_str()}),
                    text,
                    is_error: true,
                }
            }
            Err(_) => CatalogReply::error("the tool failed unexpectedly (it panicked)"),
        }
    }
}

#[async_trait::async_trait]
impl crate::serve::CellService for Runtime {
    /// An MCP session is both the agent run and the session of its cells.
    async fn exec(&self, session: &str, args: serde_json::Value) -> CellResult {
        let owner = crate::state::Owner {
            agent_run: session.to_string(),
            session: session.to_string(),
        };
        match ExecInput::from_json(&args) {
            Ok(input) => self.exec(input.with_owner(owner)).await,
            Err(message) => self.with_outage(cell::input_failure(message, self.telemetry())),
        }
    }

    async fn wait(&self, session: &str, args: serde_json::Value) -> CellResult {
        let owner = crate::state::Owner {
            agent_run: session.to_string(),
            session: session.to_string(),
        };
        match WaitInput::from_json(&args) {
            Ok(input) => self.wait(input.with_owner(owner)).await,
            Err(message) => self.with_outage(cell::input_failure(message, self.telemetry())),
        }
    }

    fn exec_description(&self) -> String {
        Runtime::exec_description(self)
    }

    async fn catalog_operation(
        &self,
        operation: crate::serve::CatalogOperation,
        args: serde_json::Value,
    ) -> CatalogReply {
        use crate::serve::CatalogOperation as Op;
        match operation {
            Op::Search => self.tool_search(&args),
            Op::Describe => self.tool_describe(&args),
            Op::Call => self.tool_call(&args).await,
        }
    }
}

impl Runtime {
    /// Serves MCP over stdin/stdout (the tools `mode` names) until the
    /// client closes stdin. Each connection is one MCP session: its parked
    /// runs and session values are its own.
    pub async fn serve_mcp_stdio(self: Arc<Self>, mode: ServeMode) -> Result<(), Error> {
        crate::serve::serve_stdio(self, mode)
            .await
            .map_err(|e| Error::RuntimeUnavailable(format!("MCP over stdio: {e:#}")))
    }

    /// Serves MCP (the tools `mode` names) over streamable HTTP at
    /// `http://ADDR/mcp` until the process ends. Each MCP session is its
    /// own scope. `options` sets the bearer token and the body, session and
    /// idle caps (operations.md §2); a non-loopback `addr` needs a token.
    pub async fn serve_mcp_http(
        self: Arc<Self>,
        addr: std::net::SocketAddr,
        mode: ServeMode,
        options: crate::serve::HttpOptions,
    ) -> Result<(), Error> {
        crate::serve::serve_http(self, addr, mode, options)
            .await
            .map_err(|e| Error::RuntimeUnavailable(format!("MCP over HTTP: {e:#}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_cell_future_is_caught() {
        let panicking = async {
            tokio::task::yield_now().await;
            panic!("host bug");
        };
        assert!(caught::<(), _>(panicking).await.is_none());
        assert_eq!(caught(async { 7 }).await, Some(7));
    }
}
