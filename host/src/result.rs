//! The result union of `exec` and `wait` (contract §4) and its error codes.

use crate::error::Error;
use serde::Serialize;
use serde_json::Value;

/// The outcome of a call, serialized exactly as the contract's `Result`
/// union (`{"status":"completed",...}` / `{"status":"waiting",...}` /
/// `{"status":"failed",...}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum CellResult {
    /// The cell finished and returned a value.
    Completed(Completed),
    /// The cell is parked: resume it with `wait`.
    Waiting(Waiting),
    /// The cell failed.
    Failed(Failed),
}

/// A finished cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Completed {
    /// The returned value after the safe projection; `undefined` → `null`.
    /// May be a truncation marker (contract §10).
    pub value: Value,
    /// Non-fatal notices.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Output entries not delivered by an earlier result of the cell.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<Value>,
    /// Counters of the call.
    pub telemetry: Telemetry,
    /// `true` on results of `restartSafe` cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_safe: Option<bool>,
    /// MCP servers unavailable during the call (contract §4).
    #[serde(flatten)]
    pub mcp_outage: McpOutage,
    /// Exact texts of the value and output entries that hold lone
    /// surrogates, which `Value` cannot ([`CellResult::to_json`] writes
    /// them). Not serialized.
    #[serde(skip)]
    pub(crate) exact: ExactText,
    /// Set when the value, output or error may carry text from an
    /// untrusted tool provider: `"mcp"` (an MCP server) or `"client"` (a
    /// client tool). Model-facing renderings wrap such results in the
    /// untrusted-content envelope ([`quickcell_catalog::wrap_untrusted`]); the
    /// structured result is unchanged. Not serialized.
    #[serde(skip)]
    pub untrusted_source: Option<&'static str>,
}

/// A parked cell: waiting on host work, or yielded.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Waiting {
    /// The run to pass to `wait`: `cm_<uuid>`, kept across `wait`s.
    pub run_id: String,
    /// Why the cell parked.
    pub reason: WaitReason,
    /// Unsettled bridge requests.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_tool_calls: Vec<PendingToolCall>,
    /// Output entries not delivered by an earlier result of the cell.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<Value>,
    /// Counters of the call.
    pub telemetry: Telemetry,
    /// `true` on results of `restartSafe` cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_safe: Option<bool>,
    /// MCP servers unavailable during the call (contract §4).
    #[serde(flatten)]
    pub mcp_outage: McpOutage,
    /// Exact texts of the value and output entries that hold lone
    /// surrogates, which `Value` cannot ([`CellResult::to_json`] writes
    /// them). Not serialized.
    #[serde(skip)]
    pub(crate) exact: ExactText,
    /// Set when the value, output or error may carry text from an
    /// untrusted tool provider: `"mcp"` (an MCP server) or `"client"` (a
    /// client tool). Model-facing renderings wrap such results in the
    /// untrusted-content envelope ([`quickcell_catalog::wrap_untrusted`]); the
    /// structured result is unchanged. Not serialized.
    #[serde(skip)]
    pub untrusted_source: Option<&'static str>,
}

/// The exact texts of a result's value and output entries where they hold
/// lone surrogates (`crate::output::GuestJson`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ExactText {
    /// The value's.
    pub value: Option<String>,
    /// Output entries', by index.
    pub output: Vec<(usize, String)>,
}

impl ExactText {
    fn is_empty(&self) -> bool {
        self.value.is_none() && self.output.is_empty()
    }

    /// Bytes of the list of `entries` as the text form writes it.
    pub(crate) fn output_len(&self, entries: &[Value]) -> usize {
        let mut exact = self.output.iter().peekable();
        let sum: usize = entries
            .iter()
            .enumerate()
            .map(|(i, entry)| match exact.next_if(|(at, _)| *at == i) {
                Some((_, text)) => text.len(),
                None => crate::output::json_len(entry),
            })
            .sum();
        if entries.is_empty() {
            0
        } else {
            sum + entries.len() + 1
        }
    }

    /// The raw JSON of `text`, if it is JSON (it always is: the host made
    /// it).
    fn raw(text: &str) -> Option<Box<serde_json::value::RawValue>> {
        serde_json::value::RawValue::from_string(text.to_string()).ok()
    }
}

/// A result's fields with the exact texts written in place of their
/// projections.
struct Spliced<'a> {
    fields: &'a serde_json::Map<String, Value>,
    exact: &'a ExactText,
}

impl Serialize for Spliced<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap as _, SerializeSeq as _};
        /// An output list with exact entries.
        struct Entries<'a>(&'a [Value], &'a [(usize, String)]);
        impl Serialize for Entries<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
                let mut exact = self.1.iter().peekable();
                for (i, entry) in self.0.iter().enumerate() {
                    match exact
                        .next_if(|(at, _)| *at == i)
                        .and_then(|(_, text)| ExactText::raw(text))
                    {
                        Some(raw) => seq.serialize_element(&raw)?,
                        None => seq.serialize_element(entry)?,
                    }
                }
                seq.end()
            }
        }
        let mut map = serializer.serialize_map(Some(self.fields.len()))?;
        for (key, value) in self.fields {
            match (key.as_str(), value) {
                ("value", _) if self.exact.value.is_some() => {
                    match self.exact.value.as_deref().and_then(ExactText::raw) {
                        Some(raw) => map.serialize_entry(key, &raw)?,
                        None => map.serialize_entry(key, value)?,
                    }
                }
                ("output", Value::Array(entries)) if !self.exact.output.is_empty() => {
                    map.serialize_entry(key, &Entries(entries, &self.exact.output))?
                }
                _ => map.serialize_entry(key, value)?,
            }
        }
        map.end()
    }
}

/// Why a cell parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WaitReason {
    /// Requests were still running when the call's budget ran out.
    PendingTools,
    /// Every unsettled request is a `yield_control`.
    Yield,
    /// The cell called client tools (operations.md §3.5): the caller runs
    /// them and answers with `wait {toolResults}`.
    ClientTools,
    /// Calls of the cell wait for approvals its caller decides
    /// ([`crate::ExecInput::with_deferred_approvals`]): answered with
    /// [`crate::WaitInput::with_approval_answers`]. Outranks `ClientTools`
    /// when both wait.
    Approval,
}

/// An unsettled bridge request of a parked cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PendingToolCall {
    /// `bridge:<method>:<seq>`.
    pub id: String,
    /// The request's method (`callValue`, `search`, `describe`, `sleep`,
    /// `yield`, `clientTool` for a call the caller runs, or `approval` for
    /// a call that waits for the caller's approval).
    pub method: String,
    /// A `clientTool` call's tool name; the tool an `approval` is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// A `clientTool` call's arguments; an `approval`'s `{pattern,
    /// arguments}` (the policy pattern, and a preview of the call's
    /// arguments as compact JSON, at most
    /// [`crate::MAX_APPROVAL_PREVIEW_BYTES`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Value>,
}

impl PendingToolCall {
    pub(crate) fn new(id: String, method: String) -> Self {
        Self {
            id,
            method,
            tool: None,
            input: None,
        }
    }
}

/// A failed cell (or a rejected call).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Failed {
    /// `"<Name>: <message>"` plus guest frames when available.
    pub error: String,
    /// The error code.
    pub code: ErrorCode,
    /// Output entries not delivered by an earlier result of the cell;
    /// output emitted before the failure is kept.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<Value>,
    /// Counters of the call.
    pub telemetry: Telemetry,
    /// Where the failure happened.
    pub failure_phase: FailurePhase,
    /// `true` once any bridge request of the cell reached the host;
    /// `false` guarantees that no tool ran.
    pub bridge_dispatch_started: bool,
    /// `true` on results of `restartSafe` cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_safe: Option<bool>,
    /// MCP servers unavailable during the call (contract §4).
    #[serde(flatten)]
    pub mcp_outage: McpOutage,
    /// Exact texts of the value and output entries that hold lone
    /// surrogates, which `Value` cannot ([`CellResult::to_json`] writes
    /// them). Not serialized.
    #[serde(skip)]
    pub(crate) exact: ExactText,
    /// Set when the value, output or error may carry text from an
    /// untrusted tool provider: `"mcp"` (an MCP server) or `"client"` (a
    /// client tool). Model-facing renderings wrap such results in the
    /// untrusted-content envelope ([`quickcell_catalog::wrap_untrusted`]); the
    /// structured result is unchanged. Not serialized.
    #[serde(skip)]
    pub untrusted_source: Option<&'static str>,
}

/// Error codes (contract §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// Bad arguments, rejected source, module access.
    InvalidInput,
    /// The Wasmtime engine, module or instance could not be created.
    RuntimeUnavailable,
    /// The run was cancelled.
    Aborted,
    /// Guest execution passed the call deadline.
    Timeout,
    /// The result cannot be serialized within limits at all.
    OutputLimitExceeded,
    /// A checkpoint exceeded `maxSnapshotBytes`.
    SnapshotLimitExceeded,
    /// A `wait` on a run parked by another guest build (or another
    /// snapshot format) than this host carries: refused before anything
    /// of the run changed; it stays parked for a host of its build.
    SnapshotIncompatible,
    /// Any other uncaught guest error or host fault.
    InternalError,
    /// The call's fuel ran out.
    FuelExhausted,
    /// The cell hit its memory cap.
    MemoryLimitExceeded,
    /// The session is over a quota (`[quotas]`); nothing ran.
    QuotaExceeded,
}

impl ErrorCode {
    /// The code as the contract spells it (`"quota_exceeded"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidInput => "invalid_input",
            Self::RuntimeUnavailable => "runtime_unavailable",
            Self::Aborted => "aborted",
            Self::Timeout => "timeout",
            Self::OutputLimitExceeded => "output_limit_exceeded",
            Self::SnapshotLimitExceeded => "snapshot_limit_exceeded",
            Self::SnapshotIncompatible => "snapshot_incompatible",
            Self::InternalError => "internal_error",
            Self::FuelExhausted => "fuel_exhausted",
            Self::MemoryLimitExceeded => "memory_limit_exceeded",
            Self::QuotaExceeded => "quota_exceeded",
        }
    }
}

/// Where a failure happened (contract §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum FailurePhase {
    /// Argument, source or admission checks; nothing ran.
    Input,
    /// The guest threw, timed out, ran out of fuel or memory.
    Guest,
    /// Bridge limits ended the cell.
    Bridge,
    /// Runtime start/restore, snapshot limit, expiry, abort, host fault.
    Host,
}

/// MCP outage fields of a result: present (both) when a configured MCP
/// server is unavailable, absent otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct McpOutage {
    /// Configured names of the unavailable servers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unavailable_mcp_servers: Vec<String>,
    /// Why they are unavailable and what that means for the cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Counters reported with every result: the catalog's counters
/// (`catalogSize`, `sources`, `counterScope`, `searchCount`,
/// `describeCount`, `callCount`, `visibleTools`) plus the call's fuel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Telemetry {
    /// The catalog instance's counters, serialized inline.
    #[serde(flatten)]
    pub catalog: quickcell_catalog::Telemetry,
    /// Wasmtime fuel the guest consumed during this call. Deterministic:
    /// the same cell with the same inputs and limits always reports the
    /// same number.
    pub fuel_used: u64,
}

impl CellResult {
    /// The status word: `"completed"`, `"waiting"` or `"failed"`.
    pub fn status(&self) -> &'static str {
        match self {
            CellResult::Completed(_) => "completed",
            CellResult::Waiting(_) => "waiting",
            CellResult::Failed(_) => "failed",
        }
    }

    /// The call's telemetry.
    pub fn telemetry(&self) -> &Telemetry {
        match self {
            CellResult::Completed(c) => &c.telemetry,
            CellResult::Waiting(w) => &w.telemetry,
            CellResult::Failed(f) => &f.telemetry,
        }
    }

    /// Sets the MCP outage fields.
    pub(crate) fn set_mcp_outage(&mut self, outage: McpOutage) {
        match self {
            CellResult::Completed(c) => c.mcp_outage = outage,
            CellResult::Waiting(w) => w.mcp_outage = outage,
            CellResult::Failed(f) => f.mcp_outage = outage,
        }
    }

    /// Which untrusted provider's content the result may carry, if any
    /// (see [`Completed::untrusted_source`]).
    pub fn untrusted_source(&self) -> Option<&'static str> {
        match self {
            CellResult::Completed(c) => c.untrusted_source,
            CellResult::Waiting(w) => w.untrusted_source,
            CellResult::Failed(f) => f.untrusted_source,
        }
    }

    pub(crate) fn set_untrusted_source(&mut self, source: Option<&'static str>) {
        match self {
            CellResult::Completed(c) => c.untrusted_source = source,
            CellResult::Waiting(w) => w.untrusted_source = source,
            CellResult::Failed(f) => f.untrusted_source = source,
        }
    }

    /// Output entries carried by this result.
    pub fn output(&self) -> &[Value] {
        match self {
            CellResult::Completed(c) => &c.output,
            CellResult::Waiting(w) => &w.output,
            CellResult::Failed(f) => &f.output,
        }
    }

    /// The run id of a parked cell.
    pub fn run_id(&self) -> Option<&str> {
        match self {
            CellResult::Waiting(w) => Some(&w.run_id),
            _ => None,
        }
    }

    /// The result as compact JSON text. A lone surrogate the cell wrote
    /// (in its value or an output entry) is its JSON escape here
    /// (`"\ud800"`), as JavaScript's `JSON.stringify` writes it; the
    /// structured form ([`serde::Serialize`], MCP's `structuredContent`)
    /// has U+FFFD in its place, since Rust strings — and most JSON
    /// parsers' — cannot hold it.
    pub fn to_json(&self) -> String {
        let exact = self.exact();
        if exact.is_empty() {
            return serde_json::to_string(self).expect("results serialize");
        }
        let Ok(Value::Object(fields)) = serde_json::to_value(self) else {
            return serde_json::to_string(self).expect("results serialize");
        };
        serde_json::to_string(&Spliced {
            fields: &fields,
            exact,
        })
        .expect("results serialize")
    }

    fn exact(&self) -> &ExactText {
        match self {
            CellResult::Completed(c) => &c.exact,
            CellResult::Waiting(w) => &w.exact,
            CellResult::Failed(f) => &f.exact,
        }
    }

    /// Bytes of the output entries as [`CellResult::to_json`] writes them.
    pub(crate) fn output_bytes(&self) -> usize {
        self.exact().output_len(self.output())
    }

    /// The completed value, or the failure as an [`Error`]. A parked cell
    /// is [`Error::Waiting`].
    pub fn into_value(self) -> Result<Value, Error> {
        match self {
            CellResult::Completed(c) => Ok(c.value),
            CellResult::Waiting(w) => Err(Error::Waiting(w.run_id)),
            CellResult::Failed(f) => Err(match f.code {
                ErrorCode::InvalidInput => Error::InvalidInput(f.error),
                ErrorCode::Timeout => Error::Timeout,
                ErrorCode::FuelExhausted => Error::FuelExhausted,
                ErrorCode::MemoryLimitExceeded => Error::MemoryLimitExceeded,
                ErrorCode::SnapshotLimitExceeded => Error::SnapshotLimitExceeded,
                ErrorCode::SnapshotIncompatible => Error::SnapshotIncompatible(f.error),
                ErrorCode::OutputLimitExceeded => Error::OutputLimitExceeded(f.error),
                ErrorCode::Aborted => Error::Aborted,
                ErrorCode::RuntimeUnavailable => Error::RuntimeUnavailable {
                    message: f.error,
                    source: None,
                },
                ErrorCode::InternalError => Error::Internal(f.error),
                ErrorCode::QuotaExceeded => Error::QuotaExceeded(f.error),
            }),
        }
    }
}
