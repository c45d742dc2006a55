//! Limits and the TOML configuration file.
//!
//! Every limit documents its unit, scope and default. Values follow the
//! contract's rule: a non-integer or non-positive value falls back to the
//! default, a valid integer is clamped into the allowed range. The file is
//! parsed in one place, [`file`] (serde structs with
//! `deny_unknown_fields`, one per table): unknown keys, values of the wrong
//! type and malformed files are errors that name the key and the line, as
//! in ``line 2, column 1: unknown key `limits.timeout`; known keys: …``
//! ([`problem`]).

mod file;
mod problem;

use crate::error::Error;
use crate::tools::mcp::McpServerConfig;
use crate::tools::CommandToolConfig;
use std::path::{Path, PathBuf};

/// Fuel allowance of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fuel {
    /// At most this many units of Wasmtime fuel (roughly one per executed
    /// wasm instruction) per call.
    Limited(u64),
    /// No fuel limit (`fuel = false`); fuel is still counted for telemetry.
    Unlimited,
}

/// Default fuel per call: ten billion units — several seconds of busy
/// JavaScript on this class of machine, so that with the default
/// `timeoutMs` the wall clock normally ends a runaway loop first while the
/// fuel cap stays a deterministic bound for metered hosts.
pub const DEFAULT_FUEL: u64 = 10_000_000_000;

/// Sets one limit: 0 stands for the default (the contract's rule for a
/// non-positive value), anything else is clamped into `min..=max`.
fn limit(value: u64, default: u64, min: u64, max: u64) -> u64 {
    if value == 0 {
        default
    } else {
        value.clamp(min, max)
    }
}

/// Execution limits of a runtime (contract §6). Construct with
/// [`Limits::default`] and adjust with the `with_*` setters, which clamp
/// into range and read 0 as "the default"; read with the getters of the
/// same names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    timeout_ms: u64,
    memory_limit_bytes: u64,
    max_output_bytes: u64,
    max_snapshot_bytes: u64,
    max_pending_tool_calls: u64,
    snapshot_ttl_seconds: u64,
    search_default_limit: u64,
    max_search_limit: u64,
    fuel: Fuel,
}

/// [`Limits::default`].
const LIMITS: Limits = Limits {
    timeout_ms: 10_000,
    memory_limit_bytes: 64 << 20,
    max_output_bytes: 65_536,
    max_snapshot_bytes: 10 << 20,
    max_pending_tool_calls: 16,
    snapshot_ttl_seconds: 900,
    search_default_limit: 8,
    max_search_limit: 50,
    fuel: Fuel::Limited(DEFAULT_FUEL),
};

impl Default for Limits {
    fn default() -> Self {
        LIMITS
    }
}

impl Limits {
    /// Wall-clock budget of one call (`exec` or `wait`), in milliseconds.
    /// Default 10,000; range 100–60,000.
    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms
    }
    /// QuickJS heap limit of a cell, in bytes; also caps the cell's Wasm
    /// linear memory at this value plus the runtime image and a quarter for
    /// allocator overhead. Default 64 MiB; range 1 MiB–1 GiB.
    pub fn memory_limit_bytes(&self) -> u64 {
        self.memory_limit_bytes
    }
    /// Output budget of a cell, in bytes of compact JSON, shared by output,
    /// value and error across all of the cell's calls. Default 65,536;
    /// range 1,024–10,485,760.
    pub fn max_output_bytes(&self) -> u64 {
        self.max_output_bytes
    }
    /// Largest checkpoint of a parked cell, in bytes. Default 10 MiB; range
    /// 1,024–268,435,456.
    pub fn max_snapshot_bytes(&self) -> u64 {
        self.max_snapshot_bytes
    }
    /// Bridge requests in flight at the host per cell. Default 16; range 1–128.
    pub fn max_pending_tool_calls(&self) -> u64 {
        self.max_pending_tool_calls
    }
    /// Idle lifetime of a parked cell, in seconds. Default 900; range 1–86,400.
    pub fn snapshot_ttl_seconds(&self) -> u64 {
        self.snapshot_ttl_seconds
    }
    /// `catalog.search`'s default and cap in cells, as the catalog takes them.
    pub(crate) fn guest_search_limits(&self) -> quickcell_catalog::SearchLimits {
        quickcell_catalog::SearchLimits {
            default_limit: self.search_default_limit as usize,
            max_limit: self.max_search_limit as usize,
        }
    }

    /// Default `catalog.search` limit. Default 8; range 1–`max_search_limit`.
    pub fn search_default_limit(&self) -> u64 {
        self.search_default_limit
    }
    /// Cap of any search limit. Default 50; range 1–50.
    pub fn max_search_limit(&self) -> u64 {
        self.max_search_limit
    }
    /// Fuel per call. Default [`DEFAULT_FUEL`]; a positive integer, or
    /// [`Fuel::Unlimited`].
    pub fn fuel(&self) -> Fuel {
        self.fuel
    }

    /// Sets `timeout_ms` (clamped to 100–60,000; 0 → the default).
    pub fn with_timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = limit(ms, LIMITS.timeout_ms, 100, 60_000);
        self
    }
    /// Sets `memory_limit_bytes` (clamped to 1 MiB–1 GiB; 0 → the default).
    pub fn with_memory_limit_bytes(mut self, bytes: u64) -> Self {
        self.memory_limit_bytes = limit(bytes, LIMITS.memory_limit_bytes, 1 << 20, 1 << 30);
        self
    }
    /// Sets `max_output_bytes` (clamped to 1,024–10,485,760; 0 → the
    /// default).
    pub fn with_max_output_bytes(mut self, bytes: u64) -> Self {
        self.max_output_bytes = limit(bytes, LIMITS.max_output_bytes, 1_024, 10_485_760);
        self
    }
    /// Sets `max_snapshot_bytes` (clamped to 1,024–268,435,456; 0 → the
    /// default).
    pub fn with_max_snapshot_bytes(mut self, bytes: u64) -> Self {
        self.max_snapshot_bytes = limit(bytes, LIMITS.max_snapshot_bytes, 1_024, 268_435_456);
        self
    }
    /// Sets `max_pending_tool_calls` (clamped to 1–128; 0 → the default).
    pub fn with_max_pending_tool_calls(mut self, n: u64) -> Self {
        self.max_pending_tool_calls = limit(n, LIMITS.max_pending_tool_calls, 1, 128);
        self
    }
    /// Sets `snapshot_ttl_seconds` (clamped to 1–86,400; 0 → the default).
    pub fn with_snapshot_ttl_seconds(mut self, s: u64) -> Self {
        self.snapshot_ttl_seconds = limit(s, LIMITS.snapshot_ttl_seconds, 1, 86_400);
        self
    }
    /// Sets `max_search_limit` (clamped to 1–50; 0 → the default); lowers
    /// `search_default_limit` to it when needed.
    pub fn with_max_search_limit(mut self, n: u64) -> Self {
        self.max_search_limit = limit(n, LIMITS.max_search_limit, 1, 50);
        self.search_default_limit = self.search_default_limit.min(self.max_search_limit);
        self
    }
    /// Sets `search_default_limit` (clamped to 1–`max_search_limit`; 0 →
    /// the default, lowered to `max_search_limit` when needed).
    pub fn with_search_default_limit(mut self, n: u64) -> Self {
        self.search_default_limit =
            limit(n, LIMITS.search_default_limit, 1, 50).min(self.max_search_limit);
        self
    }
    /// Sets the fuel allowance per call (`Fuel::Limited(0)` → the default).
    pub fn with_fuel(mut self, fuel: Fuel) -> Self {
        self.fuel = match fuel {
            Fuel::Limited(0) => LIMITS.fuel,
            other => other,
        };
        self
    }

    /// Largest settlement value a cell receives, in bytes of JSON: the
    /// contract's reply inbox, `min(memoryLimitBytes, maxSnapshotBytes)`.
    pub(crate) fn reply_inbox_bytes(&self) -> usize {
        self.memory_limit_bytes.min(self.max_snapshot_bytes) as usize
    }

    /// The Wasm linear-memory cap of a cell whose runtime image is
    /// `image_bytes`: image + heap limit + 25% allocator overhead.
    pub(crate) fn linear_memory_cap(&self, image_bytes: usize) -> usize {
        let heap = self.memory_limit_bytes as usize;
        image_bytes + heap + heap / 4
    }
}

/// The ranges of the [`HostLimits`] values, inclusive: what the setters
/// clamp to and what the `[host]` table accepts.
pub(crate) mod host_range {
    /// `max_suspended_runs`, in runs.
    pub const SUSPENDED_RUNS: (u64, u64) = (1, 100_000);
    /// `max_running_cells_per_session`, in cells (the engine's instance
    /// pool).
    pub const RUNNING_CELLS_PER_SESSION: (u64, u64) = (1, 256);
    /// `max_await_results_ms` and `approval_timeout_ms`, in milliseconds.
    pub const WAIT_MS: (u64, u64) = (100, 86_400_000);
    /// `drain_timeout_ms`, in milliseconds.
    pub const DRAIN_MS: (u64, u64) = (100, 3_600_000);
}

/// Runs that may hold a suspended-run slot at once by default (contract §6;
/// [`HostLimits::with_max_suspended_runs`] changes it).
pub const MAX_SUSPENDED_RUNS: usize = 64;

/// Process-wide caps of a runtime and each session's share of them
/// (operations.md §1.5): what one tenant may hold of what all tenants
/// share. The `[host]` table of the configuration file sets them, and
/// refuses a value outside its range with an error naming the key; the
/// `with_*` setters take 0 as the default and clamp the rest.
///
/// A session over its share gets the ordinary slot error for that call
/// alone; other sessions are unaffected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLimits {
    max_suspended_runs: u64,
    max_suspended_runs_per_session: u64,
    max_running_cells_per_session: u64,
    max_await_results_ms: u64,
    approval_timeout_ms: u64,
    drain_timeout_ms: u64,
}

/// [`HostLimits::default`].
const HOST_LIMITS: HostLimits = HostLimits {
    max_suspended_runs: MAX_SUSPENDED_RUNS as u64,
    max_suspended_runs_per_session: 16,
    max_running_cells_per_session: 4,
    max_await_results_ms: 600_000,
    approval_timeout_ms: 300_000,
    drain_timeout_ms: 10_000,
};

impl Default for HostLimits {
    fn default() -> Self {
        HOST_LIMITS
    }
}

impl HostLimits {
    /// Runs that may hold a suspended-run slot at once, across all
    /// sessions: parked runs in the state store plus cells of this runtime
    /// that have dispatched host work. Unit: runs; scope: the runtime (and
    /// every process sharing its state store); default 64 (the contract's
    /// value); range 1–100,000. A parked run costs no pool instance.
    pub fn max_suspended_runs(&self) -> u64 {
        self.max_suspended_runs
    }
    /// Share of `max_suspended_runs` one session may hold. Unit: runs;
    /// scope: one session; default 16; range 1–`max_suspended_runs`.
    pub fn max_suspended_runs_per_session(&self) -> u64 {
        self.max_suspended_runs_per_session
    }
    /// Cells of one session that may run (`exec` or `wait` in progress) in
    /// this runtime at once; a further call fails at once with
    /// `invalid_input`. Unit: cells; scope: one session in one runtime;
    /// default 4; range 1–256 (the engine's instance pool).
    pub fn max_running_cells_per_session(&self) -> u64 {
        self.max_running_cells_per_session
    }
    /// How long an `exec` with `awaitResults: true` may wait off the VM
    /// for tool results and timers, in all (contract §9.5 pauses the cell's
    /// clock while it waits, so without this a long timer would hold the
    /// call open as long as it liked). Past it the call fails with
    /// `timeout`. Unit: milliseconds; scope: one `exec` call; default
    /// 600,000 (10 minutes); range 100–86,400,000.
    pub fn max_await_results_ms(&self) -> u64 {
        self.max_await_results_ms
    }
    /// How long a call that needs an approval (operations.md §3.4) waits
    /// for the approver's decision; no decision by then counts as a
    /// decline. The cell's clock is paused meanwhile. Unit: milliseconds;
    /// scope: one call; default 300,000 (5 minutes); range
    /// 100–86,400,000.
    pub fn approval_timeout_ms(&self) -> u64 {
        self.approval_timeout_ms
    }
    /// How long a graceful shutdown (SIGTERM or SIGINT on `serve`, `exec`
    /// and `wait`; [`crate::Runtime::shutdown`]) lets cells in progress
    /// complete or park before it aborts them. Unit: milliseconds; scope:
    /// the process; default 10,000; range 100–3,600,000.
    pub fn drain_timeout_ms(&self) -> u64 {
        self.drain_timeout_ms
    }

    /// Sets `max_suspended_runs` (clamped to 1–100,000; 0 → the default;
    /// the per-session share is lowered to it when needed).
    pub fn with_max_suspended_runs(mut self, n: u64) -> Self {
        let (min, max) = host_range::SUSPENDED_RUNS;
        self.max_suspended_runs = limit(n, HOST_LIMITS.max_suspended_runs, min, max);
        self.max_suspended_runs_per_session = self
            .max_suspended_runs_per_session
            .min(self.max_suspended_runs);
        self
    }

    /// Sets `max_suspended_runs_per_session` (clamped to
    /// 1–`max_suspended_runs`; 0 → the default, lowered to
    /// `max_suspended_runs` when needed).
    pub fn with_max_suspended_runs_per_session(mut self, n: u64) -> Self {
        self.max_suspended_runs_per_session = limit(
            n,
            HOST_LIMITS.max_suspended_runs_per_session,
            1,
            self.max_suspended_runs,
        )
        .min(self.max_suspended_runs);
        self
    }

    /// Sets `max_running_cells_per_session` (clamped to 1–256; 0 → the
    /// default).
    pub fn with_max_running_cells_per_session(mut self, n: u64) -> Self {
        let (min, max) = host_range::RUNNING_CELLS_PER_SESSION;
        self.max_running_cells_per_session =
            limit(n, HOST_LIMITS.max_running_cells_per_session, min, max);
        self
    }
    /// Sets `max_await_results_ms` (clamped to 100–86,400,000; 0 → the
    /// default).
    pub fn with_max_await_results_ms(mut self, ms: u64) -> Self {
        let (min, max) = host_range::WAIT_MS;
        self.max_await_results_ms = limit(ms, HOST_LIMITS.max_await_results_ms, min, max);
        self
    }
    /// Sets `approval_timeout_ms` (clamped to 100–86,400,000; 0 → the
    /// default).
    pub fn with_approval_timeout_ms(mut self, ms: u64) -> Self {
        let (min, max) = host_range::WAIT_MS;
        self.approval_timeout_ms = limit(ms, HOST_LIMITS.approval_timeout_ms, min, max);
        self
    }
    /// Sets `drain_timeout_ms` (clamped to 100–3,600,000; 0 → the
    /// default).
    pub fn with_drain_timeout_ms(mut self, ms: u64) -> Self {
        let (min, max) = host_range::DRAIN_MS;
        self.drain_timeout_ms = limit(ms, HOST_LIMITS.drain_timeout_ms, min, max);
        self
    }
}

/// Caps of the HTTP front end (`quickcell serve --http`, operations.md §2),
/// set by the `[http]` table (same rule as `[limits]`) or the `with_*`
/// setters (0 → the default, else clamped). Over a cap a request gets a
/// JSON-RPC error and nothing already accepted is lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    max_body_bytes: u64,
    max_sessions: u64,
    session_idle_seconds: u64,
    allowed_origins: Vec<String>,
    allowed_hosts: Vec<String>,
    auth_token_file: Option<PathBuf>,
}

/// [`HttpLimits::default`].
const HTTP_LIMITS: HttpLimits = HttpLimits {
    max_body_bytes: 8 << 20,
    max_sessions: 1_024,
    session_idle_seconds: 1_800,
    allowed_origins: Vec::new(),
    allowed_hosts: Vec::new(),
    auth_token_file: None,
};

impl Default for HttpLimits {
    fn default() -> Self {
        HTTP_LIMITS
    }
}

impl HttpLimits {
    /// Largest request body, in bytes. Default 8 MiB; range 1 KiB–256 MiB.
    /// A larger body gets HTTP 413 (checked against `Content-Length` before
    /// it is read, and while it is read otherwise).
    pub fn max_body_bytes(&self) -> u64 {
        self.max_body_bytes
    }
    /// MCP sessions open at once. Default 1,024; range 1–100,000. An
    /// `initialize` over the cap gets HTTP 503; open sessions go on.
    pub fn max_sessions(&self) -> u64 {
        self.max_sessions
    }
    /// Seconds an MCP session may go without a request before it is closed.
    /// Default 1,800 (30 minutes); range 1–86,400. Keep it above
    /// `snapshot_ttl_seconds` when clients come back to `wait` parked runs
    /// much later.
    pub fn session_idle_seconds(&self) -> u64 {
        self.session_idle_seconds
    }
    /// Values of the `Origin` header accepted besides loopback origins
    /// (`http://localhost:*`, `http://127.0.0.1:*`, `http://[::1]:*`), for
    /// example `"https://app.example.com"`. Requests without `Origin`
    /// (non-browser clients) are accepted. Default: none.
    pub fn allowed_origins(&self) -> &[String] {
        &self.allowed_origins
    }
    /// Host names accepted in the `Host` header besides loopback names and
    /// the address the server binds. Default: none.
    pub fn allowed_hosts(&self) -> &[String] {
        &self.allowed_hosts
    }
    /// File holding the bearer token every request must carry
    /// (`--auth-token-file` overrides it; `QUICKCELL_AUTH_TOKEN` is used
    /// when neither is given). In the configuration file it is relative to
    /// the file. Default: none.
    pub fn auth_token_file(&self) -> Option<&Path> {
        self.auth_token_file.as_deref()
    }

    /// Sets `max_body_bytes` (clamped to 1 KiB–256 MiB; 0 → the default).
    pub fn with_max_body_bytes(mut self, bytes: u64) -> Self {
        self.max_body_bytes = limit(bytes, HTTP_LIMITS.max_body_bytes, 1 << 10, 256 << 20);
        self
    }
    /// Sets `max_sessions` (clamped to 1–100,000; 0 → the default).
    pub fn with_max_sessions(mut self, n: u64) -> Self {
        self.max_sessions = limit(n, HTTP_LIMITS.max_sessions, 1, 100_000);
        self
    }
    /// Sets `session_idle_seconds` (clamped to 1–86,400; 0 → the default).
    pub fn with_session_idle_seconds(mut self, s: u64) -> Self {
        self.session_idle_seconds = limit(s, HTTP_LIMITS.session_idle_seconds, 1, 86_400);
        self
    }
    /// Sets the `Origin` values accepted besides loopback origins.
    pub fn with_allowed_origins(mut self, origins: Vec<String>) -> Self {
        self.allowed_origins = origins;
        self
    }
    /// Sets the `Host` names accepted besides loopback names and the bound
    /// address.
    pub fn with_allowed_hosts(mut self, hosts: Vec<String>) -> Self {
        self.allowed_hosts = hosts;
        self
    }
    /// Sets the bearer token file (`None`: no token file).
    pub fn with_auth_token_file(mut self, file: Option<PathBuf>) -> Self {
        self.auth_token_file = file;
        self
    }
}

/// The parsed configuration file.
///
/// ```toml
/// [limits]
/// timeout_ms = 5000
///
/// [workspace]
/// root = "."          # relative to the config file's directory
///
/// [[tools]]
/// name = "weather"
/// description = "Current weather for a city"
/// input_schema = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }
/// command = ["./weather.sh"]
/// replay_safe = true
/// timeout_ms = 5000
///
/// [mcp.servers.tickets]          # a stdio server
/// command = "python3"
/// args = ["tickets_server.py"]
/// env = { TICKETS_DB = "/var/lib/tickets.db" }
///
/// [mcp.servers.search]           # a streamable HTTP server
/// url = "http://127.0.0.1:8000/mcp"
/// timeout_ms = 20000
/// ```
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The `[limits]` table.
    pub limits: Limits,
    /// The `[host]` table: process-wide caps and per-session shares.
    pub host: HostLimits,
    /// The `[http]` table: the HTTP front end of `quickcell serve --http`.
    pub http: HttpLimits,
    /// `[[tools]]`: command tools, in file order.
    pub tools: Vec<CommandToolConfig>,
    /// `[workspace] root`: the directory the built-in `read`, `ls`, `find`
    /// and `grep` tools serve. Absent → no workspace tools.
    pub workspace_root: Option<PathBuf>,
    /// `[mcp.servers.NAME]`: downstream MCP servers, in name order (see
    /// [`crate::tools::mcp`]).
    pub mcp_servers: Vec<McpServerConfig>,
    /// `[policy]`: which tools cells may see and call, and which calls need
    /// an approval ([`crate::RuntimeBuilder::policy`]).
    pub policy: quickcell_catalog::Policy,
    /// `[tool_search]`: whether `quickcell serve` offers Tool Search
    /// instead of Code Mode, in which mode, and its search limits
    /// (tool-search.md §2.1).
    pub tool_search: ToolSearchConfig,
    /// `[quotas]`: per-session fuel and cell-rate quotas.
    pub quotas: Quotas,
    /// `[telemetry]`: where the `quickcell` binary exports its tracing
    /// spans.
    pub telemetry: TelemetryConfig,
    /// `[state] url`: the PostgreSQL database that keeps parked runs,
    /// session values, saved results and the usage ledger
    /// (`postgres://…`; [`crate::RuntimeBuilder::state_url`]). Absent → the
    /// SQLite store of the state directory.
    pub state_url: Option<String>,
    /// `[state] key_file`: the file of the key that authenticates stored
    /// snapshots ([`crate::RuntimeBuilder::state_key`]).
    pub state_key_file: Option<PathBuf>,
    /// `[mcp]` (beside `[mcp.servers]`): how `quickcell serve` answers
    /// MCP 2026-07-28 requests.
    pub mcp: McpOptions,
}

/// How `quickcell serve` answers MCP 2026-07-28 requests, set by `[mcp]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpOptions {
    /// `tools_ttl_ms`: how long a client may keep `tools/list` (and
    /// `server/discover`) without asking again, in milliseconds, from 0 to
    /// [`MAX_TOOLS_TTL_MS`]. Default: 3,600,000 (one hour): the tool list
    /// changes only with the configuration, which a restart reads.
    pub tools_ttl_ms: u64,
    /// `cache_scope`: whether the list may be shared between principals
    /// (`"public"`, the default: it does not depend on who asks) or only
    /// reused by the same one (`"private"`).
    pub cache_public: bool,
    /// `principal`: the principal of 2026-07-28 requests over stdio, which
    /// then own their runs across connections (as a token's principal does
    /// over HTTP). Absent (the default): each stdio connection is its own
    /// scope.
    pub principal: Option<String>,
    /// `task_ttl_ms`: how long an MCP task lives from its creation, in
    /// milliseconds, from 1,000 to [`MAX_TASK_TTL_MS`]. Default: 3,600,000.
    pub task_ttl_ms: u64,
}

/// The longest `[mcp] task_ttl_ms`: seven days.
pub const MAX_TASK_TTL_MS: u64 = 604_800_000;

/// Whether `name` may name a principal: 1 to 64 of `A-Za-z0-9._-`.
pub(crate) fn valid_principal(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The longest `[mcp] tools_ttl_ms`: one day.
pub const MAX_TOOLS_TTL_MS: u64 = 86_400_000;

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            tools_ttl_ms: 3_600_000,
            cache_public: true,
            principal: None,
            task_ttl_ms: 3_600_000,
        }
    }
}

/// Most bytes a state URL (`[state] url`, `--state-url`,
/// `QUICKCELL_STATE_URL`) may have.
pub const MAX_STATE_URL_BYTES: usize = 4096;

/// Checks a state URL: `postgres://` or `postgresql://`, at most
/// [`MAX_STATE_URL_BYTES`], no control characters.
pub fn check_state_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_STATE_URL_BYTES {
        return Err(format!("the state URL is over {MAX_STATE_URL_BYTES} bytes"));
    }
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err("the state URL must be a postgres:// URL".into());
    }
    if url.chars().any(char::is_control) {
        return Err("the state URL contains control characters".into());
    }
    Ok(())
}

/// Most bytes `[telemetry] otlp_endpoint` may have.
pub const MAX_OTLP_ENDPOINT_BYTES: usize = 2048;

/// The `[telemetry]` table: OpenTelemetry export of the `quickcell`
/// binary's tracing spans (operations.md §4.4). Off by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TelemetryConfig {
    /// `otlp_endpoint`: the base URL of an OTLP/HTTP receiver
    /// (`http://collector:4318`); spans go to `<otlp_endpoint>/v1/traces` as
    /// protobuf. An `http://` or `https://` URL of at most
    /// [`MAX_OTLP_ENDPOINT_BYTES`]. Without it the standard
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// variables apply.
    pub otlp_endpoint: Option<String>,
}

impl TelemetryConfig {
    /// The URL spans are posted to: `otlp_endpoint` + `/v1/traces`, else
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`; `None` when none is set
    /// (no export).
    pub fn traces_url(&self) -> Option<String> {
        let base = |url: &str| format!("{}/v1/traces", url.trim_end_matches('/'));
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        self.otlp_endpoint
            .as_deref()
            .map(base)
            .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|url| base(&url)))
    }
}

/// Checks an OTLP endpoint URL: `http://` or `https://` with a host, at
/// most [`MAX_OTLP_ENDPOINT_BYTES`], no whitespace or control characters.
pub(crate) fn check_otlp_endpoint(url: &str) -> Result<(), String> {
    if url.len() > MAX_OTLP_ENDPOINT_BYTES {
        return Err(format!(
            "the OTLP endpoint is over {MAX_OTLP_ENDPOINT_BYTES} bytes"
        ));
    }
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("the OTLP endpoint must be an http:// or https:// URL")?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err("the OTLP endpoint has no host".into());
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the OTLP endpoint contains whitespace or control characters".into());
    }
    Ok(())
}

/// Per-session quotas (operations.md §4.3), the `[quotas]` table or
/// [`crate::RuntimeBuilder::quotas`]: none by default. Over a quota an
/// `exec` fails before any guest code runs with `quota_exceeded` and a
/// message naming the quota and when it frees; a `wait` over the fuel quota
/// is refused the same way and its run stays parked. Quotas are read from
/// the usage ledger, so they hold across every runtime sharing the state
/// store. (The parked-run and running-cell shares are `[host]`'s.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quotas {
    fuel_per_session_per_hour: Option<u64>,
    cells_per_session_per_minute: Option<u64>,
}

impl Quotas {
    /// Fuel one session may use in any hour (the ledger's `fuel` over the
    /// last 3,600 s). Unit: fuel; scope: one session, all runtimes sharing
    /// the store; default none.
    pub fn fuel_per_session_per_hour(&self) -> Option<u64> {
        self.fuel_per_session_per_hour
    }
    /// `exec` calls one session may make in any minute. Unit: calls; scope:
    /// one session, all runtimes sharing the store; default none.
    pub fn cells_per_session_per_minute(&self) -> Option<u64> {
        self.cells_per_session_per_minute
    }
    /// Sets `fuel_per_session_per_hour` (0: none).
    pub fn with_fuel_per_session_per_hour(mut self, fuel: u64) -> Self {
        self.fuel_per_session_per_hour = (fuel > 0).then_some(fuel);
        self
    }
    /// Sets `cells_per_session_per_minute` (0: none).
    pub fn with_cells_per_session_per_minute(mut self, cells: u64) -> Self {
        self.cells_per_session_per_minute = (cells > 0).then_some(cells);
        self
    }
    /// Whether any quota is set.
    pub fn is_empty(&self) -> bool {
        self.fuel_per_session_per_hour.is_none() && self.cells_per_session_per_minute.is_none()
    }
}

/// Which surface `quickcell serve` offers when Tool Search is active
/// (tool-search.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ToolSearchMode {
    /// Code Mode: `exec` and `wait` (quickcell's code tool).
    #[default]
    Code,
    /// `tool_search`, `tool_describe` and `tool_call`.
    Tools,
    /// `tools`, plus the bounded directory of trusted host tools in the
    /// server's instructions.
    Directory,
}

/// The `[tool_search]` table (tool-search.md §2.1). Activation: `enabled`
/// when given; otherwise Tool Search is active when any other key is set.
/// `lean = true` selects the lean profile for local-inference models —
/// mode `tools`, search limits 5/10 — for the keys left unset; an explicit
/// value always wins. Limits follow the catalog's rule: non-positive or
/// non-integer values fall back to the default, integers are clamped
/// (`max_search_limit` to 1–50, the default to 1–max).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolSearchConfig {
    /// `enabled`, when given.
    pub enabled: Option<bool>,
    /// `mode`, when given.
    pub mode: Option<ToolSearchMode>,
    /// `search_default_limit`, when given (a positive integer).
    pub search_default_limit: Option<u64>,
    /// `max_search_limit`, when given (a positive integer).
    pub max_search_limit: Option<u64>,
    /// `lean`: the lean profile's defaults.
    pub lean: bool,
}

impl ToolSearchConfig {
    /// Whether Tool Search is active: `enabled` when given, else whether
    /// any other key is set.
    pub fn active(&self) -> bool {
        self.enabled.unwrap_or(
            self.mode.is_some()
                || self.search_default_limit.is_some()
                || self.max_search_limit.is_some()
                || self.lean,
        )
    }

    /// The mode: `mode` when given, else `tools` in the lean profile, else
    /// `code`.
    pub fn mode(&self) -> ToolSearchMode {
        self.mode.unwrap_or(if self.lean {
            ToolSearchMode::Tools
        } else {
            ToolSearchMode::Code
        })
    }

    /// Tool Search's search limits: the given values over the defaults
    /// (8/20, or the lean 5/10).
    pub fn search_limits(&self) -> quickcell_catalog::SearchLimits {
        let defaults = if self.lean {
            quickcell_catalog::SearchLimits::LEAN
        } else {
            quickcell_catalog::SearchLimits::TOOL_SEARCH
        };
        quickcell_catalog::SearchLimits::from_config(
            self.search_default_limit
                .map(serde_json::Value::from)
                .as_ref(),
            self.max_search_limit.map(serde_json::Value::from).as_ref(),
            defaults,
        )
    }
}

impl Config {
    /// Reads and parses a TOML configuration file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
        let mut config = file::parse(&text)
            .map_err(|problem| Error::Config(format!("{}: {problem}", path.display())))?;
        // A relative token file is relative to the config file.
        if let Some(file) = &config.http.auth_token_file {
            if file.is_relative() {
                let base = path.parent().unwrap_or(Path::new("."));
                config.http.auth_token_file = Some(base.join(file));
            }
        }
        // A relative workspace root is relative to the config file.
        if let Some(root) = &config.workspace_root {
            if root.is_relative() {
                let base = path.parent().unwrap_or(Path::new("."));
                config.workspace_root = Some(base.join(root));
            }
        }
        Ok(config)
    }

    /// Parses TOML configuration text. An error names the key and the
    /// line: ``invalid configuration: line 2, column 1: unknown key
    /// `limits.timeout`; known keys: …`` ([`Config::load`] puts the file's
    /// path first).
    ///
    /// ```
    /// let config = quickcell::Config::parse("[limits]\ntimeout_ms = 99999\n").unwrap();
    /// assert_eq!(config.limits.timeout_ms(), 60_000); // clamped
    /// ```
    pub fn parse(text: &str) -> Result<Self, Error> {
        file::parse(text).map_err(Error::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_and_defaults() {
        let c = Config::parse(
            "[limits]\ntimeout_ms = 5\nmemory_limit_bytes = -3\nmax_output_bytes = 2.5\nmax_search_limit = 3\nfuel = false\n",
        )
        .unwrap();
        assert_eq!(c.limits.timeout_ms(), 100);
        assert_eq!(c.limits.memory_limit_bytes(), 64 << 20);
        assert_eq!(c.limits.max_output_bytes(), 65_536);
        assert_eq!(c.limits.max_search_limit(), 3);
        assert_eq!(c.limits.search_default_limit(), 3);
        assert_eq!(c.limits.fuel(), Fuel::Unlimited);
    }

    #[test]
    fn unknown_key_is_named() {
        let e = Config::parse("[limits]\ntimeout = 5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("limits.timeout"), "{e}");
        let e = Config::parse("[limitz]\n").unwrap_err().to_string();
        assert!(e.contains("limitz"), "{e}");
    }

    #[test]
    fn tools_and_workspace() {
        let c = Config::parse(
            "[workspace]\nroot = \"/tmp\"\n[[tools]]\nname = \"t\"\ndescription = \"d\"\ninput_schema = { type = \"object\" }\ncommand = [\"/bin/true\"]\n",
        )
        .unwrap();
        assert_eq!(c.workspace_root.as_deref(), Some(Path::new("/tmp")));
        assert_eq!(c.tools.len(), 1);
        assert_eq!(c.tools[0].name, "t");
        let e = Config::parse("[workspace]\nroots = \"/\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("workspace.roots"), "{e}");
        let e = Config::parse("[[tools]]\nname = \"t\"\ncmd = []\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tools[0]"), "{e}");
    }

    #[test]
    fn mcp_servers() {
        let c = Config::parse(
            "[mcp.servers.a]\ncommand = \"srv\"\nargs = [\"-x\"]\nenv = { K = \"v\" }\n[mcp.servers.b]\nurl = \"http://127.0.0.1:1/mcp\"\ntimeout_ms = 999999999\n",
        )
        .unwrap();
        assert_eq!(c.mcp_servers.len(), 2);
        assert_eq!(c.mcp_servers[0].name, "a");
        assert!(matches!(
            &c.mcp_servers[0].transport,
            crate::McpTransport::Stdio { command, args, env }
                if command == "srv" && args == &["-x"] && env["K"] == "v"
        ));
        assert_eq!(
            c.mcp_servers[1].timeout_ms,
            crate::tools::mcp::MAX_MCP_CALL_TIMEOUT_MS
        );
        for (bad, needle) in [
            (
                "[mcp.servers.a]\n",
                "needs a non-empty `command` or a `url`",
            ),
            (
                "[mcp.servers.a]\ncommand = \"x\"\nurl = \"http://h\"\n",
                "not both",
            ),
            ("[mcp.servers.a]\nurl = \"ftp://h\"\n", "http://"),
            (
                "[mcp.servers.a]\ncommand = \"x\"\nargv = []\n",
                "mcp.servers.a.argv",
            ),
            (
                "[mcp.servers.a]\ncommand = \"x\"\nargs = [1]\n",
                "array of strings",
            ),
            (
                "[mcp.servers.a]\ncommand = \"x\"\ntimeout_ms = 0\n",
                "positive integer",
            ),
            ("[mcp.server.a]\ncommand = \"x\"\n", "mcp.server"),
        ] {
            let e = Config::parse(bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn setters_clamp_and_read_zero_as_the_default() {
        let l = Limits::default()
            .with_timeout_ms(5)
            .with_memory_limit_bytes(u64::MAX)
            .with_max_output_bytes(0)
            .with_max_search_limit(3);
        assert_eq!(l.timeout_ms(), 100);
        assert_eq!(l.memory_limit_bytes(), 1 << 30);
        assert_eq!(l.max_output_bytes(), 65_536);
        assert_eq!(l.max_search_limit(), 3);
        assert_eq!(l.search_default_limit(), 3);
        assert_eq!(l.with_search_default_limit(0).search_default_limit(), 3);
        assert_eq!(
            Limits::default().with_fuel(Fuel::Limited(0)).fuel(),
            Fuel::Limited(DEFAULT_FUEL)
        );
        let h = HostLimits::default()
            .with_max_suspended_runs(8)
            .with_max_suspended_runs_per_session(0)
            .with_max_running_cells_per_session(1_000);
        assert_eq!(h.max_suspended_runs(), 8);
        assert_eq!(h.max_suspended_runs_per_session(), 8);
        assert_eq!(h.max_running_cells_per_session(), 256);
        assert_eq!(
            HostLimits::default().with_max_suspended_runs(0),
            HostLimits::default()
        );
        let http = HttpLimits::default()
            .with_max_body_bytes(1)
            .with_max_sessions(0)
            .with_session_idle_seconds(1 << 40)
            .with_allowed_hosts(vec!["h".into()])
            .with_auth_token_file(Some("t".into()));
        assert_eq!(http.max_body_bytes(), 1 << 10);
        assert_eq!(http.max_sessions(), 1_024);
        assert_eq!(http.session_idle_seconds(), 86_400);
        assert_eq!(http.allowed_hosts(), ["h"]);
        assert_eq!(http.auth_token_file(), Some(Path::new("t")));
    }

    #[test]
    fn load_names_the_file_and_resolves_paths_beside_it() {
        let dir = std::env::temp_dir().join(format!("quickcell-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("q.toml");
        std::fs::write(
            &path,
            "[http]\nauth_token_file = \"token\"\n[workspace]\nroot = \"w\"\n",
        )
        .unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(c.http.auth_token_file(), Some(dir.join("token").as_path()));
        assert_eq!(c.workspace_root, Some(dir.join("w")));
        std::fs::write(&path, "[http]\n\nmax = 1\n").unwrap();
        let e = Config::load(&path).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "invalid configuration: {}: line 3, column 1: unknown key `http.max`; known keys: max_body_bytes, max_sessions, session_idle_seconds, allowed_origins, allowed_hosts, auth_token_file",
                path.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn malformed_file_names_the_line() {
        let e = Config::parse("[limits]\ntimeout_ms = = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
    }
}
