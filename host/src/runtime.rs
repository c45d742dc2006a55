//! The public entry point: [`Runtime`] and its builder.

use crate::bridge::CellTools;
use crate::cell::{self, CellEnv};
use crate::config::Limits;
use crate::engine::{self, SharedEngine};
use crate::error::Error;
use crate::input::{ExecInput, WaitInput};
use crate::mcp::{McpClients, McpServerConfig};
use crate::registry::ToolRegistry;
use crate::result::{CellResult, McpOutage, Telemetry};
use crate::runs::RunRegistry;
use crate::state::{MemoryStateStore, SqliteStateStore, StateStore};
use quickcell_catalog::Catalog;
use std::path::PathBuf;
use std::sync::Arc;

/// Builds a [`Runtime`].
///
/// Secure defaults: a cell gets no filesystem (no preopens), no
/// environment, no arguments, no network, a closed stdin, and discarded
/// stdout/stderr; its only way out is the bridge. Limits default to the
/// contract's values ([`Limits::default`]).
#[derive(Debug, Clone, Default)]
pub struct RuntimeBuilder {
    limits: Limits,
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
        let runs = Arc::new(RunRegistry::new(store));
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
        format!(
            "Run JavaScript (the body of an async function: top-level await and return work) in a sandbox whose tools are async globals, e.g. `const r = await read({{path: \"README.md\"}}); return r;`. \
Use text(v) / json(v) / console.log to emit output, catalog.search(query) to find more tools (results are callable), store/load for session values, results.save/load for large data. \
The result is {{status: completed | waiting | failed}}; a waiting cell is resumed with wait({{runId}}). \
In the index, `-> ?` means the output shape is unknown: return it raw (or await results.save(value)) and inspect it in a later cell before relying on guessed fields.\n\n{index}"
        )
    }

    /// Adds `unavailableMcpServers` and `note` when an MCP server is down.
    fn with_outage(&self, mut result: CellResult) -> CellResult {
        if let Some((servers, note)) = self.mcp.outage() {
            result.set_mcp_outage(McpOutage {
                unavailable_mcp_servers: servers,
                note: Some(note),
            });
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
        self.with_outage(cell::exec(&self.env(&telemetry), &input).await)
    }

    /// Resumes a parked cell (`wait`): restores its snapshot into a fresh
    /// instance, delivers what settled meanwhile and runs it until it
    /// completes, fails or parks again. The run may have been parked by
    /// this runtime or by any other that shares its state directory.
    pub async fn wait(&self, input: WaitInput) -> CellResult {
        let telemetry = || self.telemetry();
        self.with_outage(cell::wait(&self.env(&telemetry), &input).await)
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

#[async_trait::async_trait]
impl crate::serve::CellService for Runtime {
    /// An MCP session is both the agent run and the session of its cells.
    async fn exec(&self, session: &str, args: serde_json::Value) -> serde_json::Value {
        let owner = crate::state::Owner {
            agent_run: session.to_string(),
            session: session.to_string(),
        };
        let result = match ExecInput::from_json(&args) {
            Ok(input) => self.exec(input.with_owner(owner)).await,
            Err(message) => self.with_outage(cell::input_failure(message, self.telemetry())),
        };
        serde_json::to_value(&result).unwrap_or(serde_json::Value::Null)
    }

    async fn wait(&self, session: &str, args: serde_json::Value) -> serde_json::Value {
        let owner = crate::state::Owner {
            agent_run: session.to_string(),
            session: session.to_string(),
        };
        let result = match WaitInput::from_json(&args) {
            Ok(input) => self.wait(input.with_owner(owner)).await,
            Err(message) => self.with_outage(cell::input_failure(message, self.telemetry())),
        };
        serde_json::to_value(&result).unwrap_or(serde_json::Value::Null)
    }

    fn exec_description(&self) -> String {
        Runtime::exec_description(self)
    }
}

impl Runtime {
    /// Serves `exec` and `wait` as MCP tools over stdin/stdout until the
    /// client closes stdin. Each connection is one MCP session: its parked
    /// runs and session values are its own.
    pub async fn serve_mcp_stdio(self: Arc<Self>) -> Result<(), Error> {
        crate::serve::serve_stdio(self)
            .await
            .map_err(|e| Error::RuntimeUnavailable(format!("MCP over stdio: {e:#}")))
    }

    /// Serves `exec` and `wait` as MCP tools over streamable HTTP at
    /// `http://ADDR/mcp` until the process ends. Each MCP session is its
    /// own scope.
    pub async fn serve_mcp_http(self: Arc<Self>, addr: std::net::SocketAddr) -> Result<(), Error> {
        crate::serve::serve_http(self, addr)
            .await
            .map_err(|e| Error::RuntimeUnavailable(format!("MCP over HTTP: {e:#}")))
    }
}
