//! The public entry point: [`Runtime`] and its builder.

use crate::approval::Approver;
use crate::bridge::{CellTools, ToolsForCells};
use crate::cell::runs::RunRegistry;
use crate::cell::{self, CallStats, CellEnv};
use crate::config::{HostLimits, Limits, Quotas};
use crate::engine::{self, GuestOrigin, SharedEngine};
use crate::error::Error;
use crate::input::{ExecInput, WaitInput};
use crate::registry::ToolRegistry;
use crate::result::{CellResult, ErrorCode, McpOutage, Telemetry};
use crate::store::{MemoryStateStore, Owner, StateStore, UsageFilter, UsageRecord, UsageTotals};
use crate::tools::mcp::{McpClients, McpServerConfig};
use quickcell_catalog::{Catalog, Policy};
use std::path::PathBuf;
use std::sync::Arc;
use tracing::Instrument as _;

mod sessions;
mod shutdown;
pub use shutdown::Shutdown;

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
#[derive(Clone, Default)]
pub struct RuntimeBuilder {
    limits: Limits,
    host_limits: HostLimits,
    tools: ToolRegistry,
    mcp_servers: Vec<McpServerConfig>,
    state_dir: Option<PathBuf>,
    state_url: Option<String>,
    state_key: Option<crate::state_key::StateKey>,
    state_store: Option<Arc<dyn StateStore>>,
    policy: Policy,
    approver: Option<Arc<dyn Approver>>,
    tool_search_limits: Option<quickcell_catalog::SearchLimits>,
    quotas: Quotas,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("limits", &self.limits)
            .field("host_limits", &self.host_limits)
            .field("tools", &self.tools)
            .field("mcp_servers", &self.mcp_servers)
            .field("state_dir", &self.state_dir)
            .field("state_url", &self.state_url.as_ref().map(|_| ".."))
            .field("state_key", &self.state_key)
            .field("state_store", &self.state_store.as_ref().map(|_| ".."))
            .field("policy", &self.policy)
            .field("approver", &self.approver.as_ref().map(|_| ".."))
            .field("tool_search_limits", &self.tool_search_limits)
            .field("quotas", &self.quotas)
            .finish()
    }
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

    /// Limits the tools cells may see and call (operations.md §3.3, fail
    /// closed): a tool outside `allow` (when given) or inside `deny` is
    /// never indexed, listed, hinted, installed as a global, found,
    /// described or called; a call to a tool inside `approve` needs an
    /// approval, and a runtime with no way to ask denies it with a
    /// catchable `tool_error` naming the pattern. Patterns are globs (`*`)
    /// over a host or client tool's name, or `<server>.<tool>` for an MCP
    /// tool. A list longer than [`crate::catalog::MAX_POLICY_PATTERNS`], or
    /// a pattern longer than [`crate::catalog::MAX_POLICY_PATTERN_BYTES`],
    /// fails [`build`](Self::build) with [`Error::Config`].
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Asks `approver` about calls to tools the policy's `approve` list
    /// matches (operations.md §3.4), unless a call brings its own
    /// ([`ExecInput::with_approver`]). Without one such calls are denied.
    /// A decision not made within [`HostLimits::approval_timeout_ms`]
    /// counts as a decline; the cell's clock is paused while it waits.
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Enforces these per-session quotas (operations.md §4.3; see
    /// [`Quotas`]): none by default.
    pub fn quotas(mut self, quotas: Quotas) -> Self {
        self.quotas = quotas;
        self
    }

    /// Uses these search limits for Tool Search (`tool_search`, default
    /// 8/20; tool-search.md §2.1). Cells' `catalog.search` has its own,
    /// [`Limits::search_default_limit`] and [`Limits::max_search_limit`].
    pub fn tool_search_limits(mut self, limits: quickcell_catalog::SearchLimits) -> Self {
        self.tool_search_limits = Some(limits);
        self
    }

    /// Offers the tools of these downstream MCP servers to cells, as
    /// `MCP.<server>.<tool>` (see [`crate::tools::mcp`]). [`build`](Self::build)
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
    ///
    /// Needs the `sqlite` feature (on by default); without it
    /// [`RuntimeBuilder::build`] fails with [`Error::Config`].
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Keeps parked runs, session values, saved results and the usage
    /// ledger in the PostgreSQL database at `url`
    /// (`postgres://user:password@host:port/db`), which any number of
    /// runtimes on any machines may share: a run parked by one is resumed
    /// by any other. The schema is created or migrated when the runtime is
    /// built. Takes precedence over [`RuntimeBuilder::state_dir`].
    ///
    /// Needs the `postgres` feature (on by default); without it
    /// [`RuntimeBuilder::build`] fails with [`Error::Config`].
    pub fn state_url(mut self, url: impl Into<String>) -> Self {
        self.state_url = Some(url.into());
        self
    }

    /// Seals every stored snapshot under `key` (XChaCha20-Poly1305: it is
    /// encrypted and authenticated), bound to its run, owner and
    /// generation; a snapshot that does not open fails its run alone with
    /// `internal_error`. Required with
    /// [`RuntimeBuilder::state_url`]; a state directory without one uses
    /// (and first generates) its [`crate::STATE_KEY_FILE`]; a store given
    /// with [`RuntimeBuilder::state_store`] keeps snapshots unsealed unless
    /// a key is given, and the in-memory store (no state directory) needs
    /// none. Every runtime sharing a store needs the same key.
    pub fn state_key(mut self, key: crate::state_key::StateKey) -> Self {
        self.state_key = Some(key);
        self
    }

    /// Keeps parked runs, session values and saved results in `store`
    /// (another backend of [`StateStore`]); it takes precedence over
    /// [`RuntimeBuilder::state_url`] and [`RuntimeBuilder::state_dir`]. Every runtime that shares the store's
    /// data can resume the runs of the others.
    pub fn state_store(mut self, store: Arc<dyn StateStore>) -> Self {
        self.state_store = Some(store);
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
        #[cfg(not(feature = "mcp-client"))]
        if let Some(server) = self.mcp_servers.first() {
            return Err(Error::Config(format!(
                "MCP server `{}` needs quickcell's `mcp-client` feature, which this build lacks",
                server.name
            )));
        }
        self.policy.check().map_err(Error::Config)?;
        let shared = engine::shared()
            .await
            .map_err(|e| Error::runtime_unavailable("cannot start the engine", e))?;
        let mut state_key = self.state_key.take();
        let store: Arc<dyn StateStore> = match (self.state_store.take(), &self.state_dir) {
            (Some(store), _) => store,
            (None, _) if self.state_url.is_some() => {
                if state_key.is_none() {
                    return Err(Error::Config(
                        "a PostgreSQL state store needs a state key: give --state-key-file FILE ([state] key_file) with at least 32 random bytes, the same on every host".into(),
                    ));
                }
                open_state_url(self.state_url.as_deref().unwrap_or_default()).await?
            }
            (None, Some(dir)) => {
                let store = open_state_dir(dir)?;
                if state_key.is_none() {
                    state_key = Some(crate::state_key::StateKey::of_state_dir(dir)?);
                }
                store
            }
            (None, None) => Arc::new(MemoryStateStore::default()),
        };
        let runs = Arc::new(RunRegistry::new(
            store.clone(),
            self.host_limits,
            state_key.clone(),
        ));
        let (mcp, connected) = McpClients::start(std::mem::take(&mut self.mcp_servers)).await;
        for server in connected {
            for tool in server.tools {
                self.tools.add_mcp(server.connection.name(), tool);
            }
        }
        let policy = std::mem::take(&mut self.policy);
        let catalog = self
            .tools
            .catalog_within(policy.clone(), None, self.tool_search_limits);
        let cell_tools = Arc::new(CellTools::new(
            catalog,
            &self.tools,
            self.limits.guest_search_limits(),
        ));
        let tools_for_cells = ToolsForCells {
            registry: self.tools.clone(),
            policy,
            search_limits: self.limits.guest_search_limits(),
            cache: Default::default(),
        };
        Ok(Runtime {
            shared,
            limits: self.limits,
            tools: self.tools,
            cell_tools,
            tools_for_cells,
            approver: self.approver,
            ledger: crate::ledger::Ledger::start(store.clone()),
            quotas: crate::quota::QuotaGate::new(self.quotas),
            runs,
            store,
            state_key,
            mcp,
        })
    }
}

/// The SQLite state store in `dir`.
#[cfg(feature = "sqlite")]
fn open_state_dir(dir: &std::path::Path) -> Result<Arc<dyn StateStore>, Error> {
    match crate::store::SqliteStateStore::open(Some(dir)) {
        Ok(store) => Ok(Arc::new(store)),
        Err(e) => Err(Error::state_store(
            format!("cannot open the state store in {}", dir.display()),
            e,
        )),
    }
}

/// The PostgreSQL state store at `url`.
#[cfg(feature = "postgres")]
async fn open_state_url(url: &str) -> Result<Arc<dyn StateStore>, Error> {
    match crate::store::PostgresStateStore::connect(url).await {
        Ok(store) => Ok(Arc::new(store)),
        Err(e) => Err(Error::state_store(
            "cannot open the PostgreSQL state store",
            e,
        )),
    }
}

/// Without the `postgres` feature there is no state URL.
#[cfg(not(feature = "postgres"))]
async fn open_state_url(_url: &str) -> Result<Arc<dyn StateStore>, Error> {
    Err(Error::Config(
        "a state URL needs quickcell's `postgres` feature, which this build lacks".into(),
    ))
}

/// Without SQLite there is no state directory.
#[cfg(not(feature = "sqlite"))]
fn open_state_dir(dir: &std::path::Path) -> Result<Arc<dyn StateStore>, Error> {
    Err(Error::Config(format!(
        "a state directory ({}) needs quickcell's `sqlite` feature, which this build lacks; give the runtime a state store with RuntimeBuilder::state_store instead",
        dir.display()
    )))
}

/// The span of one `exec` or `wait` call (operations.md §4.4): its fields
/// are filled in when the call ends ([`record_call`]). The outer `exec`
/// span carries `toolKind` and `toolInputKind` (contract §1).
/// Makes `span` a child of the caller's trace context, when it gave one
/// (and the OTLP export is built in).
fn parent_on_caller(span: &tracing::Span, controls: &crate::input::CallControls) {
    #[cfg(feature = "otlp")]
    if let Some((traceparent, tracestate)) = &controls.trace_context {
        crate::otlp::set_remote_parent(span, traceparent, tracestate.as_deref());
    }
    #[cfg(not(feature = "otlp"))]
    let _ = (span, controls);
}

fn call_span(kind: &'static str, session: &str) -> tracing::Span {
    use tracing::field::Empty;
    match kind {
        "exec" => tracing::info_span!(
            "exec",
            toolKind = "code_mode_exec",
            toolInputKind = "javascript",
            session = %session,
            run_id = Empty,
            fuel = Empty,
            tool_calls = Empty,
            output_bytes = Empty,
            snapshot_bytes = Empty,
            outcome = Empty,
        ),
        _ => tracing::info_span!(
            "wait",
            session = %session,
            run_id = Empty,
            fuel = Empty,
            tool_calls = Empty,
            output_bytes = Empty,
            snapshot_bytes = Empty,
            outcome = Empty,
        ),
    }
}

/// Fills in a call span's fields from its result and statistics.
fn record_call(span: &tracing::Span, result: &CellResult, stats: &CallStats) {
    use std::sync::atomic::Ordering::Relaxed;
    if let Some(run_id) = result.run_id() {
        span.record("run_id", run_id);
    }
    span.record("fuel", result.telemetry().fuel_used);
    span.record("tool_calls", stats.tool_calls.load(Relaxed));
    span.record("output_bytes", result.output_bytes() as u64);
    span.record("snapshot_bytes", stats.snapshot_bytes.load(Relaxed));
    let outcome = match result {
        CellResult::Failed(f) => f.code.as_str(),
        other => other.status(),
    };
    span.record("outcome", outcome);
}

/// How long [`Runtime::close_session`] waits for the session's cancelled
/// cells to end before it releases what the session holds.
const CLOSE_SESSION_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// What [`Runtime::close_session`] released.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionClosed {
    /// Cells of the session that were running and were cancelled.
    pub cancelled_cells: usize,
    /// Parked runs removed.
    pub removed_runs: usize,
    /// Session values deleted.
    pub removed_values: usize,
    /// Saved results deleted.
    pub removed_results: usize,
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
    tools_for_cells: ToolsForCells,
    approver: Option<Arc<dyn Approver>>,
    ledger: crate::ledger::Ledger,
    quotas: crate::quota::QuotaGate,
    runs: Arc<RunRegistry>,
    store: Arc<dyn StateStore>,
    /// Seals the snapshots the store keeps ([`RuntimeBuilder::state_key`]).
    state_key: Option<crate::state_key::StateKey>,
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

    /// The process-wide caps and shares this runtime enforces.
    pub fn host_limits(&self) -> &HostLimits {
        &self.runs.limits
    }

    /// Where the process's pre-initialized guest came from: embedded in the
    /// binary (nothing compiled), the on-disk module cache, or compiled by
    /// this process.
    pub fn guest_origin(&self) -> GuestOrigin {
        self.shared.origin
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

    fn env<'a>(
        &'a self,
        telemetry: &'a (dyn Fn() -> Telemetry + Sync),
        stats: &'a CallStats,
        fuel_allowance: Option<u64>,
    ) -> CellEnv<'a> {
        CellEnv {
            fuel_allowance,
            shared: &self.shared,
            limits: &self.limits,
            tools: &self.cell_tools,
            tools_for_cells: &self.tools_for_cells,
            approver: self.approver.as_ref(),
            runs: &self.runs,
            store: &self.store,
            state_key: self.state_key.as_ref(),
            telemetry,
            stats,
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
        if let Some(refused) = self.refuse_when_shutting_down() {
            return refused;
        }
        let admission = match self.admit(&input.owner.session, true).await {
            Ok(admission) => admission,
            Err(refused) => return refused,
        };
        let started = std::time::Instant::now();
        let stats = CallStats::default();
        let telemetry = || self.telemetry();
        let env = self.env(&telemetry, &stats, admission.allowance);
        let span = call_span("exec", &input.owner.session);
        parent_on_caller(&span, input.controls());
        let result = self
            .admitted(&input.owner.session, |session| {
                cell::exec(&env, &input, session)
            })
            .instrument(span.clone())
            .await;
        let result = self.quota_cut(result, &admission);
        record_call(&span, &result, &stats);
        crate::instruments::call_finished("exec", &result);
        self.ledger
            .record("exec", &input.owner, None, &result, started, &stats)
            .await;
        result
    }

    /// Runs `call` (a cell of `session`) if the session is within its
    /// share of running cells, with a panic in its host code turned into
    /// that cell's `internal_error`.
    /// `call` gets the session's cancel token ([`Runtime::close_session`]).
    async fn admitted<F: std::future::Future<Output = CellResult>>(
        &self,
        session: &str,
        call: impl FnOnce(tokio_util::sync::CancellationToken) -> F,
    ) -> CellResult {
        let Some(active) = self.runs.start_cell(session) else {
            let error = format!(
                "too many running code mode cells for this session (at most {} at once). Wait for a running cell to finish, then try again.",
                self.runs.limits.max_running_cells_per_session()
            );
            return self.with_outage(cell::input_failure(error, self.telemetry()));
        };
        let running = crate::instruments::Running::start();
        let result = caught(call(active.cancel.clone())).await;
        drop(running);
        drop(active);
        self.with_outage(result.unwrap_or_else(|| cell::host_panic(self.telemetry())))
    }

    /// Resumes a parked cell (`wait`): restores its snapshot into a fresh
    /// instance, delivers what settled meanwhile and runs it until it
    /// completes, fails or parks again. The run may have been parked by
    /// this runtime or by any other that shares its state directory.
    pub async fn wait(&self, input: WaitInput) -> CellResult {
        if let Some(refused) = self.refuse_when_shutting_down() {
            return refused;
        }
        // A cancel frees; only a resume is refused over the fuel quota.
        let admission = if input.cancel {
            None
        } else {
            match self.admit(&input.owner.session, false).await {
                Ok(admission) => Some(admission),
                Err(refused) => return refused,
            }
        };
        let allowance = admission.as_ref().and_then(|a| a.allowance);
        let started = std::time::Instant::now();
        let stats = CallStats::default();
        let telemetry = || self.telemetry();
        let env = self.env(&telemetry, &stats, allowance);
        let span = call_span("wait", &input.owner.session);
        parent_on_caller(&span, input.controls());
        span.record("run_id", input.run_id.as_str());
        let result = self
            .admitted(&input.owner.session, |session| {
                cell::wait(&env, &input, session)
            })
            .instrument(span.clone())
            .await;
        let result = match &admission {
            Some(admission) => self.quota_cut(result, admission),
            None => result,
        };
        record_call(&span, &result, &stats);
        crate::instruments::call_finished("wait", &result);
        let run_id = Some(input.run_id.as_str()).filter(|id| !id.is_empty());
        self.ledger
            .record("wait", &input.owner, run_id, &result, started, &stats)
            .await;
        result
    }

    /// The failure of a call made once [`Runtime::shutdown`] has begun.
    fn refuse_when_shutting_down(&self) -> Option<CellResult> {
        self.is_shutting_down().then(|| {
            cell::unavailable(
                "this quickcell host is shutting down: nothing ran. Call again (another host sharing the state store, or this one once it has restarted).".to_string(),
                self.telemetry(),
            )
        })
    }

    /// Admits a call of `session` under the quotas (see the `quota`
    /// module: a fuel quota reserves the call's fuel), or the
    /// `quota_exceeded` failure of a call over one. Nothing runs and
    /// nothing is recorded for a refused call. A ledger that cannot be
    /// read refuses too (fail closed). Keep the admission until the call's
    /// usage record is written.
    async fn admit(
        &self,
        session: &str,
        exec: bool,
    ) -> Result<crate::quota::Admission, CellResult> {
        use crate::quota::Refusal;
        self.quotas
            .admit(
                &*self.store,
                &self.ledger,
                session,
                exec,
                self.limits.fuel(),
            )
            .await
            .map_err(|refusal| {
                self.with_outage(match refusal {
                    Refusal::Quota(message) => cell::quota_failure(message, self.telemetry()),
                    Refusal::Unreadable(message) => cell::host_failure(message, self.telemetry()),
                })
            })
    }

    /// A call that ran out of the fuel its admission cut to what was left
    /// of the session's fuel quota failed on the quota, not on its own
    /// `fuel` limit: `quota_exceeded`.
    fn quota_cut(&self, mut result: CellResult, admission: &crate::quota::Admission) -> CellResult {
        if let (Some(allowance), CellResult::Failed(failed)) = (admission.allowance, &mut result) {
            if failed.code == ErrorCode::FuelExhausted {
                failed.code = ErrorCode::QuotaExceeded;
                failed.error = self.quotas.cut_short(allowance);
            }
        }
        result
    }

    /// Sums the usage ledger (operations.md §4.2): one record per `exec` /
    /// `wait` call of every runtime sharing the state store, those
    /// `filter` selects. Records of this runtime's finished calls are
    /// written first, so the sum includes them.
    ///
    /// # Errors
    ///
    /// [`Error::StateStore`] when the store cannot be read.
    pub async fn usage(&self, filter: &UsageFilter) -> Result<UsageTotals, Error> {
        self.ledger.flush().await;
        self.store
            .usage_totals(filter)
            .await
            .map_err(|e| Error::state_store("cannot read the usage ledger", e.into()))
    }

    /// The latest `limit` usage records `filter` selects (at most
    /// [`crate::store::MAX_USAGE_RECORDS_LISTED`]), oldest first.
    ///
    /// # Errors
    ///
    /// [`Error::StateStore`] when the store cannot be read.
    pub async fn usage_records(
        &self,
        filter: &UsageFilter,
        limit: usize,
    ) -> Result<Vec<UsageRecord>, Error> {
        self.ledger.flush().await;
        self.store
            .usage_list(filter, limit)
            .await
            .map_err(|e| Error::state_store("cannot read the usage ledger", e.into()))
    }

    /// How many runs are parked in the state store, by every runtime that
    /// shares it; also sets the [`crate::instruments::CELLS_PARKED`] gauge.
    ///
    /// # Errors
    ///
    /// [`Error::StateStore`] when the store cannot be read.
    pub async fn parked_runs(&self) -> Result<usize, Error> {
        let runs = self
            .store
            .count_runs()
            .await
            .map_err(|e| Error::state_store("cannot count the parked runs", e.into()))?;
        crate::instruments::set_parked(runs);
        Ok(runs)
    }

    /// Waits until the usage records of this runtime's finished calls are
    /// in the state store. A process that exits after its calls calls this
    /// first (the CLI does).
    pub async fn flush_usage(&self) {
        self.ledger.flush().await;
    }

    /// Cancels a parked run of `owner` (operations.md §3.1): the run is
    /// removed from the state store, which frees its slot and discards what
    /// it buffered; the tool calls it still has running in this process get
    /// their cancel signal (command tools: the process group is killed).
    /// Returns the `aborted` result (`code mode execution aborted`) once; a
    /// later `wait` or `cancel` gets the unknown-run error. The owner checks
    /// are `wait`'s. The same as `wait` with [`WaitInput::cancelling`].
    ///
    /// A run that a `wait` of this runtime is resuming is cancelled through
    /// that `wait` (which ends `aborted` and removes the run); this call
    /// then returns `aborted` too. A `wait` in another process that holds
    /// the run is cancelled there: the cancel is recorded in the state
    /// store, this call returns `aborted`, and that process ends its `wait`
    /// (`aborted`, the run removed) when it reads the record — at once on
    /// PostgreSQL (`NOTIFY`), within [`crate::store::SQLITE_CANCEL_POLL`]
    /// on SQLite. A process draining the run's tool calls cancels them the
    /// same way. A
    /// cell running in an `exec` call is cancelled through that call's
    /// token ([`ExecInput::with_cancel`]) or by closing its session
    /// ([`Runtime::close_session`]).
    pub async fn cancel(&self, run_id: &str, owner: &Owner) -> CellResult {
        self.wait(
            WaitInput::new(run_id)
                .with_owner(owner.clone())
                .cancelling(),
        )
        .await
    }

    /// Closes a session (operations.md §3.1: what the MCP server does when
    /// a client's session ends — stdio EOF, HTTP `DELETE`, idle expiry):
    /// cancels the cells `owner.session` is running in this runtime (each
    /// ends `aborted`, as with [`ExecInput::with_cancel`]), removes its
    /// parked runs from the state store (their slots are freed and their
    /// tool calls in this process get their cancel signal), and deletes its
    /// session values and the saved results of `owner.agent_run`. A later
    /// `wait` of one of its runs gets the unknown-run error. Closing a
    /// session that holds nothing does nothing. Runs and values are found
    /// by session, saved results by agent run (an MCP session is both).
    ///
    /// Waits (up to 5 s) for the cancelled cells to end first, so none of
    /// them parks, commits or saves after the release.
    ///
    /// # Errors
    ///
    /// [`Error::StateStore`] when the store cannot be updated; the cells
    /// are cancelled regardless.
    pub async fn close_session(&self, owner: &Owner) -> Result<SessionClosed, Error> {
        let cancelled_cells = self.runs.cancel_session(&owner.session);
        // Cancelled cells end at their next fuel slice or at once; waiting
        // for them means none parks, commits or saves after the release
        // below. A cell stuck past this bound (a state store that hangs)
        // is released all the same.
        if !self
            .runs
            .session_idle(&owner.session, CLOSE_SESSION_GRACE)
            .await
        {
            tracing::warn!(session = %owner.session, "cells of a closed session still run");
        }
        let store_error = |e: crate::store::StoreError| {
            Error::state_store("cannot release a closed session", e.into())
        };
        let runs = self
            .store
            .remove_session_runs(&owner.session)
            .await
            .map_err(store_error)?;
        self.runs.forget_live(&runs);
        if !runs.is_empty() {
            // Other processes draining their calls cancel them now.
            let expires =
                crate::clock::unix_ms().saturating_add(crate::store::CANCEL_RECORD_TTL_MS);
            if let Err(e) = self.store.record_cancels(&runs, expires).await {
                tracing::warn!(error = %format!("{e:#}"), "cannot record the cancels of a closed session's runs");
            }
        }
        let values = self
            .store
            .store_clear(&owner.session)
            .await
            .map_err(store_error)?;
        let results = self
            .store
            .result_clear(&owner.agent_run)
            .await
            .map_err(store_error)?;
        Ok(SessionClosed {
            cancelled_cells,
            removed_runs: runs.len(),
            removed_values: values,
            removed_results: results,
        })
    }

    /// [`Runtime::exec_json_as`] for `owner`, with `control` applied to
    /// the validated input (a front end's cancel token and progress).
    #[cfg(feature = "mcp-server")]
    pub(crate) async fn exec_json_controlled(
        &self,
        owner: Owner,
        args: &serde_json::Value,
        control: impl FnOnce(ExecInput) -> ExecInput,
    ) -> CellResult {
        match ExecInput::from_json(args) {
            Ok(input) => self.exec(control(input.with_owner(owner))).await,
            Err(message) => self.with_outage(cell::input_failure(message, self.telemetry())),
        }
    }

    /// [`Runtime::wait_json_as`] for `owner`, with `control` applied as
    /// [`Runtime::exec_json_controlled`] does.
    #[cfg(feature = "mcp-server")]
    pub(crate) async fn wait_json_controlled(
        &self,
        owner: Owner,
        args: &serde_json::Value,
        control: impl FnOnce(WaitInput) -> WaitInput,
    ) -> CellResult {
        match WaitInput::from_json(args) {
            Ok(input) => self.wait(control(input.with_owner(owner))).await,
            Err(message) => self.with_outage(cell::input_failure(message, self.telemetry())),
        }
    }

    /// Resumes a parked cell from raw `wait` arguments (`{"runId":..}`).
    pub async fn wait_json(&self, args: &serde_json::Value) -> CellResult {
        self.wait_json_as(None, args).await
    }

    /// [`Runtime::wait_json`] for `owner` (the input's default owner when
    /// `None`): what a front end that knows the caller's session calls with
    /// the caller's raw arguments.
    pub async fn wait_json_as(&self, owner: Option<Owner>, args: &serde_json::Value) -> CellResult {
        match WaitInput::from_json(args) {
            Ok(input) => match owner {
                Some(owner) => self.wait(input.with_owner(owner)).await,
                None => self.wait(input).await,
            },
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
        self.exec_json_as(None, args).await
    }

    /// [`Runtime::exec_json`] for `owner` (the input's default owner when
    /// `None`): what a front end that knows the caller's session calls with
    /// the caller's raw arguments.
    pub async fn exec_json_as(&self, owner: Option<Owner>, args: &serde_json::Value) -> CellResult {
        match ExecInput::from_json(args) {
            Ok(input) => match owner {
                Some(owner) => self.exec(input.with_owner(owner)).await,
                None => self.exec(input).await,
            },
            Err(message) => self.with_outage(cell::input_failure(message, self.telemetry())),
        }
    }

    /// Who decides approvals for a front end's call of `session`: the
    /// call's own approver, else the runtime's; `None` when neither exists.
    #[cfg(feature = "mcp-server")]
    pub(crate) fn approvals_for(
        &self,
        own: Option<Arc<dyn Approver>>,
        session: &str,
    ) -> Option<crate::approval::Approvals> {
        Some(crate::approval::Approvals {
            decider: crate::approval::Decider::Ask(own.or_else(|| self.approver.clone())?),
            timeout: std::time::Duration::from_millis(self.runs.limits.approval_timeout_ms()),
            clock: Default::default(),
            session: session.to_string(),
        })
    }

    /// A signing key for `purpose`, derived from the state key (so hosts
    /// sharing the store share it); without a state key (the in-memory
    /// store, whose runs never leave the process), a random key of this
    /// process.
    #[cfg(feature = "mcp-server")]
    pub(crate) fn signing_key(&self, purpose: &[u8]) -> [u8; 32] {
        static PROCESS_KEY: std::sync::OnceLock<crate::state_key::StateKey> =
            std::sync::OnceLock::new();
        let key = self.state_key.as_ref().unwrap_or_else(|| {
            PROCESS_KEY.get_or_init(|| {
                let mut random = [0u8; 32];
                // Without the OS's randomness the key is still unique to
                // this process's address space and time; runs of the
                // in-memory store never leave the process.
                if getrandom::fill(&mut random).is_err() {
                    let seed = format!("{:p}{:?}", &random, std::time::SystemTime::now());
                    random = <sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes()).into();
                }
                crate::state_key::StateKey::new(&random).expect("32 bytes is a valid key length")
            })
        });
        key.derive(purpose)
    }

    /// The approval timeout (`[host] approval_timeout_ms`), in milliseconds.
    #[cfg(feature = "mcp-server")]
    pub(crate) fn approval_timeout_ms(&self) -> u64 {
        self.runs.limits.approval_timeout_ms()
    }

    /// The catalog, its projection and the tool implementations cells reach.
    #[cfg(feature = "mcp-server")]
    pub(crate) fn cell_tools(&self) -> &CellTools {
        &self.cell_tools
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
