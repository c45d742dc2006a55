//! MCP front end: serves quickcell's two operations, `exec` and `wait`, as MCP
//! tools over stdio or streamable HTTP, using `rmcp` (the official Rust MCP SDK).
//!
//! # What clients see
//!
//! - `initialize` / `server/discover` answer with server name `quickcell`, this
//!   crate's version, the `tools` capability only, and a one-sentence
//!   instruction.
//! - `tools/list` returns exactly two tools: `exec` (its description comes from
//!   [`CellService::exec_description`], the quick index of tools) and `wait`.
//!   Their input schemas are fixed in `schemas.rs` ([`exec_input_schema`],
//!   [`wait_input_schema`]).
//! - With [`ServeMode::Tools`] (`quickcell serve --mode tools`) it returns
//!   `tool_search`, `tool_describe` and `tool_call` instead (tool-search.md
//!   §9–10), over the same catalog and tool implementations, without cells.
//!   Their text content is the compact JSON of the reply, wrapped in the
//!   untrusted-content envelope when it carries MCP or client tool content
//!   (search hits, descriptions, results, errors); `structuredContent` is
//!   the reply itself, unwrapped.
//! - `tools/call` for `exec` or `wait` hands the raw `arguments` object (`{}`
//!   when absent) to [`CellService`], which validates it and returns the
//!   result object. The tool result carries that object twice: as one text
//!   content block holding its compact JSON ([`crate::CellResult::to_json`],
//!   which keeps a lone surrogate as its `\udXXX` escape; inside the untrusted-content
//!   envelope when the cell may carry text from an MCP server or a client
//!   tool, see [`crate::CellResult::untrusted_source`]), and as
//!   `structuredContent`.
//!   `isError` is `true` exactly when the object's `"status"` is `"failed"`.
//!   Any other tool name, and `tools/call` params that do not parse (say,
//!   `arguments` that is not an object), are a JSON-RPC `-32602` (invalid
//!   params) error. A panic inside the service becomes a JSON-RPC `-32603`
//!   (internal error) for that call alone; the server keeps serving.
//!
//! # Session scoping
//!
//! [`CellService`] receives a session id, `mcp-<uuid v4>`, with every call, so
//! parked runs (and whatever else quickcell keys by session) belong to one MCP
//! session:
//!
//! - stdio: one id for the process's one connection;
//! - streamable HTTP: rmcp's session manager builds one handler per MCP
//!   session (created by `initialize`, named by the `Mcp-Session-Id` header),
//!   and each handler draws its own id when it is created.
//!
//! Protocol revision 2026-07-28 has no sessions: its requests are scoped by
//! their principal (`principal:<name>`: the bearer token's over HTTP, `[mcp]
//! principal` over stdio, else the stdio connection), so a run parked
//! through one host resumes through any host sharing the store, for that
//! principal only (docs/mcp.md). Its cells that park may become tasks
//! ([`tasks`]); its approvals are `input_required` results ([`approvals`]).
//! A client that `initialize`s gets a 2025-11-25 (or older) session, its
//! own scope, as before.
//!
//! # Transports and robustness
//!
//! - [`transport::serve_stdio`] reads newline-delimited JSON-RPC from stdin and writes to
//!   stdout until the client closes stdin. Nothing else may write to stdout:
//!   logs go to stderr. rmcp answers well-formed JSON that is not a valid
//!   message with `-32600` (invalid request) and, like the other official
//!   SDKs, ignores lines that are not JSON at all. Notifications and
//!   responses sent before the client's first `initialize` (or 2026-07-28
//!   request) are dropped here: rmcp would end the connection on them.
//! - [`transport::serve_http`] serves the streamable HTTP transport at `/mcp` until the
//!   process is killed. A POST body that is not JSON gets HTTP 400 with a
//!   JSON-RPC `-32700` (parse error); JSON that is not a valid JSON-RPC
//!   message gets HTTP 400 with `-32600`; a body over `[http]
//!   max_body_bytes` gets HTTP 413 with `-32600`. Before any of that,
//!   [`transport::guard`] checks the bearer token (401), `Host` and `Origin` (403,
//!   DNS-rebinding protection), a declared body size (413) and the session
//!   cap (503). rmcp adds `Accept`/`Content-Type` checks, and sessions end
//!   after `[http] session_idle_seconds` without traffic.
//!
//! Nothing here panics: schemas are built without unwrapping, and the service
//! runs in its own task so that its panic is caught.
use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

use rmcp::{
    model::{
        CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CustomRequest,
        CustomResult, DiscoverResult, ErrorCode, Implementation, InitializeRequestParams,
        InitializeResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
        ProgressToken, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
    },
    service::{ElicitationMode, Peer, RequestContext},
    ErrorData, RoleServer, ServerHandler,
};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::approval::Approver;
use crate::error::Error;
use crate::progress::Progress;
use crate::result::CellResult;
use crate::Runtime;
use schemas::{
    exec_input_schema, schema_object, tool_call_input_schema, tool_describe_input_schema,
    tool_search_input_schema, wait_input_schema, TOOL_CALL_DESCRIPTION, TOOL_DESCRIBE_DESCRIPTION,
    TOOL_SEARCH_DESCRIPTION, WAIT_DESCRIPTION,
};
use tool_search::CatalogReply;
pub use transport::{HttpOptions, DEFAULT_PRINCIPAL, LOCAL_PRINCIPAL, MAX_PRINCIPALS};

mod approvals;
mod schemas;
mod service;
mod tasks;
mod tool_search;
mod transport;

pub use approvals::MAX_REQUEST_STATE_BYTES;
pub use tasks::MAX_TASKS_PER_SCOPE;

/// A `requestState` and `inputResponses` from a client, opened as a retry
/// of `tools/call` opens them (`testing::fuzz`): a verdict, never a panic.
pub(crate) fn fuzz_request_state(
    state: &str,
    responses: Option<&rmcp::model::InputResponses>,
    arguments: &Value,
) {
    let Ok(states) = approvals::RequestStates::new([7; 32], 1_000) else {
        return;
    };
    if let Ok(retry) = states.open("principal:fuzz", "exec", arguments, state, responses) {
        assert!(retry.answers.len() <= crate::MAX_PENDING_APPROVALS * 4);
    }
    if let Some(responses) = responses {
        let answers = approvals::answers(responses.keys().map(String::as_str), responses);
        assert!(answers.len() <= responses.len());
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How the MCP request behind an `exec` or `wait` controls it.
#[derive(Clone, Default)]
pub(crate) struct CallControl {
    /// Cancelled by the client's `notifications/cancelled` for the request
    /// (and by rmcp when the connection ends).
    pub cancel: CancellationToken,
    /// Read by the progress reporter ([`report_progress`]).
    pub progress: Progress,
    /// Asks the client about calls that need an approval, when it
    /// supports elicitation ([`ElicitingApprover`]).
    pub approver: Option<Arc<dyn Approver>>,
    /// The call is a principal's (MCP 2026-07-28 over HTTP): another
    /// owner's run is refused as no run at all.
    pub conceal_owners: bool,
    /// The request's `_meta` `traceparent` and `tracestate`.
    pub trace_context: Option<(String, Option<String>)>,
    /// The caller answers approvals itself (MCP 2026-07-28:
    /// `input_required`, see [`approvals`]).
    pub defer_approvals: bool,
    /// Its answers, for a `wait`.
    pub approval_answers: Vec<crate::ApprovalAnswer>,
}

impl From<CallControl> for crate::input::CallControls {
    fn from(call: CallControl) -> Self {
        Self {
            cancel_token: call.cancel,
            progress: Some(call.progress),
            approver: crate::approval::ApproverSlot(call.approver),
            defer_approvals: call.defer_approvals,
            policy: None,
            conceal_owners: call.conceal_owners,
            trace_context: call.trace_context,
        }
    }
}

/// What the MCP server needs from quickcell.
#[async_trait::async_trait]
pub(crate) trait CellService: Send + Sync + 'static {
    /// Runs `exec` with raw MCP arguments for the given MCP session id.
    async fn exec(&self, session: &str, args: serde_json::Value, call: CallControl) -> CellResult;
    /// Runs `wait` likewise.
    async fn wait(&self, session: &str, args: serde_json::Value, call: CallControl) -> CellResult;
    /// Closes an MCP session: cancels its running cells and releases its
    /// parked runs, session values and saved results.
    async fn close_session(&self, session: &str);
    /// Refreshes the gauges that are read rather than counted (parked
    /// runs) before the metrics are rendered.
    async fn refresh_gauges(&self);
    /// The record of task `task_id` of `scope` ([`tasks`]).
    async fn task_record(
        &self,
        scope: &str,
        task_id: &str,
    ) -> Result<Option<tasks::TaskRecord>, String>;
    /// Writes (`Some`) or deletes (`None`) the record of task `task_id`.
    async fn set_task_record(
        &self,
        scope: &str,
        task_id: &str,
        record: Option<&tasks::TaskRecord>,
    ) -> Result<(), String>;
    /// Every task record of `scope`.
    async fn task_records(&self, scope: &str) -> Result<Vec<(String, tasks::TaskRecord)>, String>;
    /// The key that signs `requestState`s ([`approvals::RequestStates`]).
    fn request_state_key(&self) -> [u8; 32];
    /// How long a client has to answer an approval, in milliseconds.
    fn approval_timeout_ms(&self) -> u64;
    /// The `exec` tool's description (it carries a quick index of tools and changes rarely).
    fn exec_description(&self) -> String;
    /// The bounded directory of trusted host tools (tool-search.md §11).
    fn directory(&self) -> String;
    /// Runs a structured Tool Search operation (`--mode tools`) for the
    /// MCP session `session`; `tool_call` honours `call`'s cancel token
    /// and asks its approver.
    async fn catalog_operation(
        &self,
        session: &str,
        operation: CatalogOperation,
        args: serde_json::Value,
        call: CallControl,
    ) -> CatalogReply;
}

/// Which tools `quickcell serve` offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServeMode {
    /// Code Mode: `exec` and `wait` (the default).
    #[default]
    Code,
    /// Structured Tool Search: `tool_search`, `tool_describe` and
    /// `tool_call` over the same catalog, no cells.
    Tools,
    /// [`ServeMode::Tools`], plus the bounded directory of trusted host
    /// tools (tool-search.md §11) in the server's `instructions`.
    Directory,
}

/// The structured Tool Search operations of [`ServeMode::Tools`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatalogOperation {
    /// `tool_search`.
    Search,
    /// `tool_describe`.
    Describe,
    /// `tool_call`.
    Call,
}

/// The server's `instructions` in Code Mode, sent with `initialize` and
/// `server/discover`.
const INSTRUCTIONS: &str =
    "Use exec to run JavaScript that calls tools, and wait to resume a parked cell by its runId.";

/// The server's `instructions` in the Tool Search modes (the directory
/// follows in `directory` mode).
const TOOL_SEARCH_INSTRUCTIONS: &str = "Use tool_search to find tools, tool_describe for a tool's full input schema, and tool_call to call one by its id.";

/// How long an `exec` or `wait` runs before its first progress
/// notification (operations.md §3.2).
pub(crate) const PROGRESS_DELAY: Duration = Duration::from_secs(1);

/// Least time between two progress notifications of one request.
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_millis(500);

/// Sends `notifications/progress` for one request until it is dropped
/// (aborted when the request ends): the first after [`PROGRESS_DELAY`],
/// then one whenever more tool calls have settled, at most every
/// [`PROGRESS_INTERVAL`]. `progress` is the number of settled tool calls
/// (so it only grows, as MCP requires) and `message` the latest tool's
/// name.
async fn report_progress(peer: Peer<RoleServer>, token: ProgressToken, progress: Progress) {
    tokio::time::sleep(PROGRESS_DELAY).await;
    let mut sent: Option<u64> = None;
    loop {
        let settled = progress.settled_tool_calls();
        if sent.is_none_or(|before| settled > before) {
            let mut note = ProgressNotificationParam::new(token.clone(), settled as f64);
            if let Some(tool) = progress.latest_tool() {
                note = note.with_message(tool);
            }
            if peer.notify_progress(note).await.is_err() {
                // The connection is gone.
                return;
            }
            sent = Some(settled);
        }
        tokio::time::sleep(PROGRESS_INTERVAL).await;
    }
}

/// Whether the request is of a revision without sessions (2026-07-28 on).
fn stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| !v.has_initialize())
}

/// The scope of a principal's MCP 2026-07-28 requests starts so, then
/// names the principal (MCP session ids start `mcp-`).
const PRINCIPAL_SCOPE: &str = "principal:";

/// A fresh MCP session id: `mcp-` and a random UUID.
fn new_session_id() -> Arc<str> {
    format!("mcp-{}", uuid::Uuid::new_v4()).into()
}

/// The operations a tool call can name.
#[derive(Clone, Copy, Debug)]
enum Operation {
    Exec,
    Wait,
    Catalog(CatalogOperation),
}

impl Operation {
    /// The operations `mode` offers, in `tools/list` order.
    fn offered(mode: ServeMode) -> &'static [Operation] {
        match mode {
            ServeMode::Code => &[Self::Exec, Self::Wait],
            ServeMode::Tools | ServeMode::Directory => &[
                Self::Catalog(CatalogOperation::Search),
                Self::Catalog(CatalogOperation::Describe),
                Self::Catalog(CatalogOperation::Call),
            ],
        }
    }

    /// The operation a tool name names in `mode`, if any.
    fn from_tool_name(mode: ServeMode, name: &str) -> Option<Self> {
        Self::offered(mode)
            .iter()
            .copied()
            .find(|op| op.name() == name)
    }

    /// The tool name.
    fn name(self) -> &'static str {
        match self {
            Self::Exec => "exec",
            Self::Wait => "wait",
            Self::Catalog(CatalogOperation::Search) => "tool_search",
            Self::Catalog(CatalogOperation::Describe) => "tool_describe",
            Self::Catalog(CatalogOperation::Call) => "tool_call",
        }
    }
}

/// The MCP tool result of a structured Tool Search operation.
fn catalog_result(reply: CatalogReply) -> CallToolResult {
    let mut result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(reply.text)]);
    result.structured_content = Some(reply.value);
    result.is_error = Some(reply.is_error);
    result
}

/// The MCP tool result for a quickcell result: its compact JSON as the one
/// text block (wrapped in the untrusted-content envelope when the cell may
/// carry MCP or client content), the result object as `structuredContent`,
/// and `isError` when it failed.
fn tool_result(result: CellResult) -> CallToolResult {
    let untrusted = result.untrusted_source();
    let failed = result.status() == "failed";
    let value = serde_json::to_value(&result).unwrap_or(Value::Null);
    // The text keeps lone surrogates as their JSON escapes (inside this
    // string, so the message stays well-formed for every parser);
    // `structuredContent` holds the well-formed projection.
    let text = result.to_json();
    let text = match untrusted {
        Some(source) => quickcell_catalog::wrap_untrusted(source, &text),
        None => text,
    };
    let mut out = CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]);
    out.structured_content = Some(value);
    out.is_error = Some(failed);
    out
}

/// The rmcp handler: one per stdio connection, one per HTTP MCP session (and
/// one per sessionless HTTP request).
struct McpServer<S: CellService> {
    service: Arc<S>,
    /// Which tools this server offers.
    mode: ServeMode,
    /// This handler's own session id, drawn when it is created.
    session: Arc<str>,
    /// Set once this handler has answered `initialize`, i.e. it is bound to a
    /// (pre-2026-07-28) MCP session and lives as long as that session.
    initialized: AtomicBool,
    /// HTTP only: the id shared by requests served without an MCP session.
    sessionless: Option<Arc<str>>,
    /// `[mcp]`: cache hints, and the principal of stdio's 2026-07-28
    /// requests.
    options: Arc<crate::McpOptions>,
    /// The runs this process drives as tasks, shared by every handler.
    drivers: Arc<tasks::TaskDrivers>,
    /// HTTP: the principal whose token opened this MCP session
    /// (`initialize`); requests of another principal are refused.
    owner: std::sync::Mutex<Option<Arc<str>>>,
}

impl<S: CellService> McpServer<S> {
    /// A handler with a fresh session id.
    fn new(
        service: Arc<S>,
        mode: ServeMode,
        sessionless: Option<Arc<str>>,
        options: Arc<crate::McpOptions>,
        drivers: Arc<tasks::TaskDrivers>,
    ) -> Self {
        Self {
            service,
            mode,
            session: new_session_id(),
            initialized: AtomicBool::new(false),
            sessionless,
            options,
            drivers,
            owner: std::sync::Mutex::default(),
        }
    }

    /// The principal the HTTP guard found for the request, if any.
    fn principal(context: &RequestContext<RoleServer>) -> Option<Arc<str>> {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<transport::Principal>())
            .map(|principal| principal.0.clone())
    }

    /// The principal scope of a `tasks/*` request, or the error it gets:
    /// `-32021` when it does not declare the extension, `-32602` (as for
    /// an unknown task) when it has no principal.
    fn task_scope(
        &self,
        context: &RequestContext<RoleServer>,
        task_id: &str,
    ) -> Result<Arc<str>, ErrorData> {
        if !context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
        {
            return Err(tasks::tasks_not_declared());
        }
        let scope = self.scope(context);
        if !scope.starts_with(PRINCIPAL_SCOPE) {
            return Err(tasks::unknown_task(task_id));
        }
        Ok(scope)
    }

    /// The cache hints of `tools/list` and `server/discover`.
    fn cache_hints(&self) -> (u64, CacheScope) {
        let scope = if self.options.cache_public {
            CacheScope::Public
        } else {
            CacheScope::Private
        };
        (self.options.tools_ttl_ms, scope)
    }

    /// The session id to hand to the service for a call on this handler:
    /// its MCP session's, or (HTTP, MCP 2026-07-28, no session) the
    /// request's principal's, `principal:<name>`, the same on every host;
    /// over stdio, a 2026-07-28 request is `[mcp] principal`'s when one is
    /// configured.
    fn scope(&self, context: &RequestContext<RoleServer>) -> Arc<str> {
        if let (None, Some(principal), true) = (
            &self.sessionless,
            &self.options.principal,
            stateless(context),
        ) {
            return Arc::from(format!("{PRINCIPAL_SCOPE}{principal}"));
        }
        match &self.sessionless {
            Some(shared) if !self.initialized.load(Ordering::Acquire) => Self::principal(context)
                .map(|principal| Arc::from(format!("{PRINCIPAL_SCOPE}{principal}")))
                .unwrap_or_else(|| shared.clone()),
            _ => self.session.clone(),
        }
    }

    /// The tool definition of one operation.
    fn tool(&self, operation: Operation) -> Tool {
        match operation {
            Operation::Exec => Tool::new(
                "exec",
                self.service.exec_description(),
                schema_object(exec_input_schema()),
            ),
            Operation::Wait => {
                Tool::new("wait", WAIT_DESCRIPTION, schema_object(wait_input_schema()))
            }
            Operation::Catalog(op) => {
                let (description, schema) = match op {
                    CatalogOperation::Search => {
                        (TOOL_SEARCH_DESCRIPTION, tool_search_input_schema())
                    }
                    CatalogOperation::Describe => {
                        (TOOL_DESCRIBE_DESCRIPTION, tool_describe_input_schema())
                    }
                    CatalogOperation::Call => (TOOL_CALL_DESCRIPTION, tool_call_input_schema()),
                };
                Tool::new(operation.name(), description, schema_object(schema))
            }
        }
    }
}

impl<S: CellService> ServerHandler for McpServer<S> {
    /// Every revision, over both transports: the version a request names
    /// decides. Over HTTP a client that `initialize`s (up to 2025-11-25)
    /// is its own scope; a 2026-07-28 request, which has no session, is
    /// its principal's ([`McpServer::scope`]).
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
    }

    fn get_info(&self) -> ServerConfig {
        let instructions = match self.mode {
            ServeMode::Code => INSTRUCTIONS.to_string(),
            ServeMode::Tools => TOOL_SEARCH_INSTRUCTIONS.to_string(),
            // Byte-identical while the catalog and policy are unchanged:
            // it sits in the client's cache-stable prompt prefix.
            ServeMode::Directory => {
                format!("{TOOL_SEARCH_INSTRUCTIONS}\n\n{}", self.service.directory())
            }
        };
        // Code Mode's `exec` makes tasks (the Tasks extension of
        // 2026-07-28, which rmcp routes only when it is advertised).
        let capabilities = match self.mode {
            ServeMode::Code => ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
            ServeMode::Tools | ServeMode::Directory => {
                ServerCapabilities::builder().enable_tools().build()
            }
        };
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("quickcell", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // The default body, plus marking this handler as session-bound.
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        *lock(&self.owner) = Self::principal(&context);
        self.initialized.store(true, Ordering::Release);
        tracing::debug!(
            session = %self.session,
            client = %request.client_info.name,
            protocol = %result.protocol_version,
            "MCP session initialized"
        );
        Ok(result)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut result = ListToolsResult::with_all_items(
            Operation::offered(self.mode)
                .iter()
                .map(|&op| self.tool(op))
                .collect(),
        );
        // Cache hints are part of 2026-07-28 (`[mcp] tools_ttl_ms`,
        // `cache_scope`): the list changes only with the configuration.
        if stateless(&context) {
            let (ttl_ms, scope) = self.cache_hints();
            result.ttl_ms = Some(ttl_ms);
            result.cache_scope = Some(scope);
        }
        Ok(result)
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        let mut result = DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        );
        (result.ttl_ms, result.cache_scope) = self.cache_hints();
        Ok(result)
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        let scope = self.task_scope(&context, &request.task_id)?;
        let record = tasks::live_record(&*self.service, &scope, &request.task_id).await?;
        if record.status == rmcp::model::TaskStatus::Working {
            // A host that stopped left it parked: this one takes it over
            // (one host resumes a run at a time).
            tasks::drive(
                self.service.clone(),
                self.drivers.clone(),
                scope.to_string(),
                request.task_id.clone(),
            );
        }
        Ok(rmcp::model::GetTaskResult::new(
            record.detailed(&request.task_id),
        ))
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Answers to the approvals a task asks about resume it; anything
        // else is acknowledged (unknown keys are ignored, as the extension
        // says).
        let scope = self.task_scope(&context, &request.task_id)?;
        tasks::update(
            &self.service,
            &self.drivers,
            &scope,
            &request.task_id,
            &request.input_responses,
        )
        .await
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let scope = self.task_scope(&context, &request.task_id)?;
        tasks::cancel(&*self.service, &scope, &request.task_id).await
    }

    /// rmcp hands over a request whose params do not parse as its method's
    /// as a custom request: answer those of the tools methods with `-32602`
    /// (invalid params) rather than `-32601` (method not found).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        match request.method.as_str() {
            "tools/call" => {
                let params = request.params.unwrap_or(Value::Null);
                let reason = match serde_json::from_value::<CallToolRequestParams>(params) {
                    Err(error) => error.to_string(),
                    Ok(_) => "unexpected shape".to_string(),
                };
                Err(ErrorData::invalid_params(
                    format!("invalid tools/call params: {reason}"),
                    None,
                ))
            }
            "tools/list" => Err(ErrorData::invalid_params("invalid tools/list params", None)),
            _ => Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            )),
        }
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        Operation::from_tool_name(self.mode, name).map(|operation| self.tool(operation))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(operation) = Operation::from_tool_name(self.mode, &request.name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {}", request.name),
                None,
            ));
        };
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        // An MCP session opened by one principal's token is not another's.
        if self.initialized.load(Ordering::Acquire) {
            let owner = lock(&self.owner).clone();
            if owner.is_some() && owner != Self::principal(&context) {
                return Err(ErrorData::invalid_request(
                    "this MCP session was opened with another principal's token",
                    None,
                ));
            }
        }
        let session = self.scope(&context);
        let service = self.service.clone();
        // A principal's `exec` that declares the Tasks extension: a cell
        // that parks becomes a task ([`tasks`]).
        let tasked = matches!(operation, Operation::Exec)
            && session.starts_with(PRINCIPAL_SCOPE)
            && context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks());
        let task_scope = session.clone();
        // MCP 2026-07-28 has no server-initiated requests: approvals go to
        // the caller as `input_required` ([`approvals`]); older revisions
        // ask with `elicitation/create` while the cell waits.
        let modern = stateless(&context);
        let defer_approvals = modern && approvals::request_elicits(&context);
        let elicits = !modern
            && context
                .peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form);
        let states = if modern {
            Some(approvals::RequestStates::new(
                self.service.request_state_key(),
                self.service.approval_timeout_ms(),
            )?)
        } else {
            None
        };
        // The retry of an `input_required`: the run resumes with the
        // answers, whatever the arguments ask.
        let retry = match (&request.request_state, &states, operation) {
            (None, ..) => None,
            (Some(sealed), Some(states), Operation::Exec | Operation::Wait) => Some(states.open(
                &session,
                operation.name(),
                &args,
                sealed,
                request.input_responses.as_ref(),
            )?),
            (Some(_), ..) => return Err(ErrorData::invalid_params(
                "requestState answers an input_required result of exec or wait (MCP 2026-07-28)",
                None,
            )),
        };
        let (retry_run, approval_answers) = match retry {
            Some(retry) => (Some(retry.run_id), retry.answers),
            None => (None, Vec::new()),
        };
        let retried = retry_run.is_some();
        let control = CallControl {
            cancel: context.ct.clone(),
            progress: Progress::new(),
            approver: elicits.then(|| {
                Arc::new(approvals::ElicitingApprover {
                    peer: context.peer.clone(),
                }) as Arc<dyn Approver>
            }),
            defer_approvals,
            approval_answers,
            conceal_owners: session.starts_with(PRINCIPAL_SCOPE),
            trace_context: context.meta.get_traceparent().map(|parent| {
                (
                    parent.to_string(),
                    context.meta.get_tracestate().map(str::to_string),
                )
            }),
        };
        let reporter = match (operation, context.meta.get_progress_token()) {
            (Operation::Exec | Operation::Wait, Some(token)) => Some(AbortOnDrop(tokio::spawn(
                report_progress(context.peer.clone(), token, control.progress.clone()),
            ))),
            _ => None,
        };
        // Its own task, so that a panic in the service fails this call alone
        // instead of leaving it unanswered.
        let call_args = args.clone();
        let task = tokio::spawn(async move {
            let args = call_args;
            if let Some(run_id) = retry_run {
                return Ok(service
                    .wait(&session, json!({"runId": run_id}), control)
                    .await);
            }
            match operation {
                Operation::Exec => Ok(service.exec(&session, args, control).await),
                Operation::Wait => Ok(service.wait(&session, args, control).await),
                Operation::Catalog(op) => Err(catalog_result(
                    service.catalog_operation(&session, op, args, control).await,
                )),
            }
        });
        let joined = task.await;
        drop(reporter);
        let asks = |waiting: &crate::result::Waiting| {
            waiting.reason == crate::WaitReason::Approval && defer_approvals
        };
        match joined {
            Ok(Ok(CellResult::Waiting(waiting)))
                if tasked && waiting.reason != crate::WaitReason::ClientTools =>
            {
                let asking =
                    asks(&waiting).then(|| approvals::input_requests(&waiting.pending_tool_calls));
                let created = tasks::create(
                    &self.service,
                    &self.drivers,
                    &task_scope,
                    tasks::NewTask {
                        run_id: &waiting.run_id,
                        ttl_ms: self.options.task_ttl_ms,
                        elicits: defer_approvals,
                        asking,
                    },
                )
                .await;
                match (created, &states) {
                    (Some(task), _) => Ok(CallToolResponse::Task(task)),
                    (None, Some(states)) if asks(&waiting) => Ok(states
                        .input_required(&task_scope, operation.name(), &args, &waiting)?
                        .into()),
                    (None, _) => Ok(tool_result(CellResult::Waiting(waiting)).into()),
                }
            }
            Ok(Ok(CellResult::Waiting(waiting))) if asks(&waiting) && states.is_some() => {
                let states = states.as_ref().ok_or_else(|| {
                    ErrorData::internal_error("no request states for a 2026-07-28 request", None)
                })?;
                Ok(states
                    .input_required(&task_scope, operation.name(), &args, &waiting)?
                    .into())
            }
            // A retry whose calls wait no more (answered already: a
            // replay) or whose run is gone.
            Ok(Ok(CellResult::Failed(failed)))
                if retried && failed.code == crate::ErrorCode::InvalidInput =>
            {
                Err(ErrorData::invalid_params(
                    format!(
                        "requestState was used already, or its run has ended: {}",
                        failed.error
                    ),
                    None,
                ))
            }
            Ok(Ok(result)) => Ok(tool_result(result).into()),
            Ok(Err(result)) => Ok(result.into()),
            Err(error) => {
                tracing::error!(tool = operation.name(), %error, "the cell service failed");
                Err(ErrorData::internal_error(
                    format!("{} failed inside the server", operation.name()),
                    None,
                ))
            }
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<S: CellService> Drop for McpServer<S> {
    /// The handler of a session goes away with its session (stdio EOF,
    /// HTTP `DELETE`, idle expiry): the session is closed. A handler that
    /// served sessionless HTTP requests closes nothing (its scope is
    /// shared).
    fn drop(&mut self) {
        if self.sessionless.is_some() && !self.initialized.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (service, session) = (self.service.clone(), self.session.clone());
        runtime.spawn(async move { service.close_session(&session).await });
    }
}

impl Runtime {
    /// Serves MCP over stdin/stdout (the tools `mode` names) until the
    /// client closes stdin. Each connection is one MCP session: its parked
    /// runs and session values are its own.
    pub async fn serve_mcp_stdio(self: Arc<Self>, mode: ServeMode) -> Result<(), Error> {
        self.serve_mcp_stdio_until(mode, CancellationToken::new())
            .await
    }

    /// [`Runtime::serve_mcp_stdio`] that also stops when `shutdown` is
    /// cancelled (requests still running are dropped: park or cancel the
    /// runtime's cells first with [`Runtime::shutdown`]).
    pub async fn serve_mcp_stdio_until(
        self: Arc<Self>,
        mode: ServeMode,
        shutdown: CancellationToken,
    ) -> Result<(), Error> {
        self.serve_mcp_stdio_with(mode, crate::McpOptions::default(), shutdown)
            .await
    }

    /// [`Runtime::serve_mcp_stdio_until`] with `[mcp]`'s options: the cache
    /// hints of `tools/list`, and the principal that owns the runs of
    /// 2026-07-28 requests across connections.
    pub async fn serve_mcp_stdio_with(
        self: Arc<Self>,
        mode: ServeMode,
        options: crate::McpOptions,
        shutdown: CancellationToken,
    ) -> Result<(), Error> {
        transport::serve_stdio(self, mode, options, shutdown)
            .await
            .map_err(|e| Error::runtime_unavailable("MCP over stdio", e))
    }

    /// Serves MCP (the tools `mode` names) over streamable HTTP at
    /// `http://ADDR/mcp` until the process ends or `options.shutdown` is
    /// cancelled. Each MCP session is its
    /// own scope. `options` sets the bearer token and the body, session and
    /// idle caps (operations.md §2); a non-loopback `addr` needs a token.
    pub async fn serve_mcp_http(
        self: Arc<Self>,
        addr: std::net::SocketAddr,
        mode: ServeMode,
        options: HttpOptions,
    ) -> Result<(), Error> {
        transport::serve_http(self, addr, mode, options)
            .await
            .map_err(|e| Error::runtime_unavailable("MCP over HTTP", e))
    }
}
