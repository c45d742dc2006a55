//! The messages of the Codex code-mode host protocol, version 1, as JSON.
//!
//! Written from the protocol's facts (openai/codex,
//! `codex-rs/code-mode-protocol/src/host/`): envelopes are tagged by
//! `"type"`, operations by `"method"`, results by `"status"`; envelope and
//! session fields are camelCase, the execute/wait/tool payloads snake_case,
//! runtime responses externally tagged (`{"Result": {...}}`). Every object
//! refuses unknown fields, as the reference does; optional fields are
//! written as the reference writes them (`null` where it writes `null`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::{Duration, Instant};

/// A client message (Codex → host).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub(crate) enum ClientMessage {
    #[serde(rename = "connection/hello", rename_all = "camelCase")]
    Hello {
        supported_versions: Vec<u32>,
        required_capabilities: Vec<String>,
        optional_capabilities: Vec<String>,
    },
    #[serde(rename = "operation/request")]
    Request { id: i64, request: HostRequest },
    #[serde(rename = "operation/cancel")]
    Cancel { id: i64 },
    /// Ends the observation of request `id` (an execute's first, or a
    /// wait) now, the cell going on (capability `yield-observation`).
    #[serde(rename = "operation/yield")]
    Yield { id: i64 },
    #[serde(rename = "delegate/response")]
    DelegateResponse {
        id: i64,
        result: WireResult<DelegateResponse>,
    },
}

/// An operation.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "method", deny_unknown_fields)]
pub(crate) enum HostRequest {
    #[serde(rename = "session/open", rename_all = "camelCase")]
    OpenSession {
        session_id: String,
        #[serde(default)]
        cell_execution_limits: Option<CellExecutionLimits>,
    },
    /// `cellId` is chosen by the client in one revision of the protocol
    /// and by the host in the other; both are accepted.
    #[serde(rename = "session/execute", rename_all = "camelCase")]
    Execute {
        session_id: String,
        #[serde(default)]
        cell_id: Option<String>,
        request: ExecuteRequest,
    },
    #[serde(rename = "session/wait", rename_all = "camelCase")]
    Wait {
        session_id: String,
        request: WaitRequest,
    },
    #[serde(rename = "session/terminate", rename_all = "camelCase")]
    Terminate { session_id: String, cell_id: String },
    #[serde(rename = "session/shutdown", rename_all = "camelCase")]
    Shutdown { session_id: String },
}

impl HostRequest {
    /// The session the operation names.
    pub(crate) fn session_id(&self) -> &str {
        match self {
            Self::OpenSession { session_id, .. }
            | Self::Execute { session_id, .. }
            | Self::Wait { session_id, .. }
            | Self::Terminate { session_id, .. }
            | Self::Shutdown { session_id } => session_id,
        }
    }
}

/// `session/open`'s optional limits (capability
/// `session-cell-execution-resource-limits`).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CellExecutionLimits {
    #[serde(default)]
    pub max_yield_time_ms: Option<u64>,
    #[serde(default)]
    pub max_heap_size_bytes: Option<u64>,
}

/// `session/execute`'s request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecuteRequest {
    pub tool_call_id: String,
    pub enabled_tools: Vec<ToolDefinition>,
    pub source: String,
    pub yield_time_ms: Option<u64>,
    pub max_output_tokens: Option<i64>,
}

/// A nested tool a cell may call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolDefinition {
    pub name: String,
    pub tool_name: ToolName,
    pub description: String,
    pub kind: ToolKind,
    /// Read (so the message is checked whole), not used: the client
    /// validates a call's input against it.
    #[serde(default)]
    #[allow(dead_code)]
    pub input_schema: Option<Value>,
    #[allow(dead_code)]
    #[serde(default)]
    pub output_schema: Option<Value>,
}

/// A tool's identity, echoed in `tool/invoke`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolName {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

/// How a tool takes its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ToolKind {
    Function,
    Freeform,
}

/// `session/wait`'s request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WaitRequest {
    pub cell_id: String,
    pub yield_time_ms: u64,
}

/// A result: `{"status":"ok","value":…}` or `{"status":"error","message":…}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", deny_unknown_fields)]
pub(crate) enum WireResult<T> {
    #[serde(rename = "ok")]
    Ok { value: T },
    #[serde(rename = "error")]
    Err { message: String },
}

/// The client's answer to a delegate request.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub(crate) enum DelegateResponse {
    #[serde(rename = "tool/result")]
    ToolResult { result: Value },
    #[serde(rename = "notification/delivered")]
    NotificationDelivered,
}

/// A host message (host → Codex).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type")]
pub(crate) enum HostMessage {
    #[serde(rename = "connection/ready", rename_all = "camelCase")]
    Ready {
        selected_version: u32,
        capabilities: Vec<String>,
    },
    #[serde(rename = "connection/rejected")]
    Rejected { reason: RejectReason },
    #[serde(rename = "operation/response")]
    Response {
        id: i64,
        result: WireResult<HostResponse>,
    },
    #[serde(rename = "execute/initialResponse")]
    InitialResponse {
        id: i64,
        result: WireResult<RuntimeResponse>,
    },
    #[serde(rename = "delegate/request", rename_all = "camelCase")]
    DelegateRequest {
        id: i64,
        session_id: String,
        request: DelegateRequest,
    },
    #[serde(rename = "delegate/cancel")]
    DelegateCancel { id: i64 },
    #[serde(rename = "cell/closed", rename_all = "camelCase")]
    CellClosed { session_id: String, cell_id: String },
}

/// Why a hello was refused.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type")]
pub(crate) enum RejectReason {
    #[serde(rename = "noCompatibleVersion", rename_all = "camelCase")]
    NoCompatibleVersion { supported_versions: Vec<u32> },
    #[serde(rename = "missingRequiredCapability")]
    MissingRequiredCapability { capability: String },
    #[serde(rename = "invalidHello")]
    InvalidHello { message: String },
}

/// An operation's success value.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type")]
pub(crate) enum HostResponse {
    #[serde(rename = "session/ready", rename_all = "camelCase")]
    SessionReady { session_id: String },
    #[serde(rename = "execution/started", rename_all = "camelCase")]
    ExecutionStarted { cell_id: String },
    #[serde(rename = "wait/completed")]
    WaitCompleted { outcome: WaitOutcome },
    #[serde(rename = "session/closed", rename_all = "camelCase")]
    SessionClosed { session_id: String },
}

/// A wait's outcome.
#[derive(Debug, Clone, Serialize)]
pub(crate) enum WaitOutcome {
    LiveCell(RuntimeResponse),
    MissingCell(RuntimeResponse),
}

/// What a cell has to say.
///
/// `code_mode_host_duration_ns` is the host's time from receiving the
/// request to having its outcome ready; a `Result`'s
/// `result_buffered_for_ns` is how long the cell's end waited for that
/// request (0 when it came while observed). Codex releases from about
/// 0.152 require the first; earlier ones refuse both as unknown fields, so
/// they are left out (`None`) for them
/// (`CodexOptions::report_host_duration`).
#[derive(Debug, Clone, Serialize)]
pub(crate) enum RuntimeResponse {
    Yielded {
        cell_id: String,
        content_items: Vec<ContentItem>,
        #[serde(skip_serializing_if = "Option::is_none")]
        code_mode_host_duration_ns: Option<u64>,
    },
    Terminated {
        cell_id: String,
        content_items: Vec<ContentItem>,
        #[serde(skip_serializing_if = "Option::is_none")]
        code_mode_host_duration_ns: Option<u64>,
    },
    Result {
        cell_id: String,
        content_items: Vec<ContentItem>,
        error_text: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        result_buffered_for_ns: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        code_mode_host_duration_ns: Option<u64>,
    },
}

impl RuntimeResponse {
    /// A `Yielded` of `cell_id` with `content_items`.
    pub(crate) fn yielded(cell_id: String, content_items: Vec<ContentItem>) -> Self {
        Self::Yielded {
            cell_id,
            content_items,
            code_mode_host_duration_ns: None,
        }
    }

    /// A `Terminated` of `cell_id` with `content_items`.
    pub(crate) fn terminated(cell_id: String, content_items: Vec<ContentItem>) -> Self {
        Self::Terminated {
            cell_id,
            content_items,
            code_mode_host_duration_ns: None,
        }
    }

    /// A `Result` of `cell_id` with `content_items` (`error_text`: it
    /// failed).
    pub(crate) fn result(
        cell_id: String,
        content_items: Vec<ContentItem>,
        error_text: Option<String>,
    ) -> Self {
        Self::Result {
            cell_id,
            content_items,
            error_text,
            result_buffered_for_ns: None,
            code_mode_host_duration_ns: None,
        }
    }

    /// A `Result` whose end waited from `ended` for the request received
    /// at `received`.
    pub(crate) fn buffered(mut self, ended: Option<Instant>, received: Instant) -> Self {
        if let Self::Result {
            result_buffered_for_ns,
            ..
        } = &mut self
        {
            let waited = ended.map_or(Duration::ZERO, |ended| {
                received.saturating_duration_since(ended)
            });
            *result_buffered_for_ns = Some(nanos(waited));
        }
        self
    }

    /// The response without its timings (Codex up to 0.151).
    pub(crate) fn untimed(mut self) -> Self {
        if let Self::Result {
            result_buffered_for_ns,
            ..
        } = &mut self
        {
            *result_buffered_for_ns = None;
        }
        self
    }

    /// The response with the host's duration since `received` (and a
    /// `Result`'s buffered time, 0 unless set).
    pub(crate) fn timed(mut self, received: Instant) -> Self {
        let nanos = nanos(received.elapsed());
        if let Self::Result {
            result_buffered_for_ns,
            ..
        } = &mut self
        {
            result_buffered_for_ns.get_or_insert(0);
        }
        match &mut self {
            Self::Yielded {
                code_mode_host_duration_ns,
                ..
            }
            | Self::Terminated {
                code_mode_host_duration_ns,
                ..
            }
            | Self::Result {
                code_mode_host_duration_ns,
                ..
            } => *code_mode_host_duration_ns = Some(nanos),
        }
        self
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// An output item (the protocol names every kind `input_…`).
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ContentItem {
    InputText {
        text: String,
    },
    InputImage {
        image_url: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    InputAudio {
        audio_url: String,
    },
}

/// A reverse call.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type")]
pub(crate) enum DelegateRequest {
    #[serde(rename = "tool/invoke")]
    InvokeTool { invocation: NestedToolCall },
    #[serde(rename = "notification/send", rename_all = "camelCase")]
    Notify {
        call_id: String,
        cell_id: String,
        text: String,
    },
}

/// A nested tool call (`tools.<name>(args)` in a cell).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct NestedToolCall {
    pub cell_id: String,
    pub runtime_tool_call_id: String,
    pub tool_name: ToolName,
    pub tool_kind: ToolKind,
    pub input: Option<Value>,
}
