//! `exec` input validation (contract §2): title rules, the `code` /
//! `command` alias, retired fields and boolean flags.
//!
//! Decisions on the contract's open points:
//! - `title` is limited to 120 Unicode code points (not UTF-16 units).
//! - `awaitResults` that is not a boolean is rejected with
//!   `awaitResults must be a boolean.`
//! - A bad title is rejected with
//!   `title must be a non-empty string of at most 120 characters.`

use crate::approval::{ApprovalAnswer, Approver, ApproverSlot};
use crate::client_tools::{
    check_client_tools, check_tool_results, parse_client_tools, parse_tool_results,
    ClientToolResult, ClientToolSpec,
};
use crate::progress::Progress;
use crate::store::Owner;
use quickcell_catalog::Policy;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

/// The lowest memory limit a cell runs under, in bytes (1 MiB, the floor
/// of [`crate::Limits::memory_limit_bytes`] too).
pub const MIN_CELL_MEMORY_LIMIT_BYTES: u64 = 1 << 20;

/// Most characters (Unicode code points) a title may have.
pub const MAX_TITLE_CHARS: usize = 120;

/// A validated `exec` request.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ExecInput {
    /// Short intent shown to people; not executed.
    pub title: String,
    /// The JavaScript source: the body of an async function.
    pub code: String,
    /// Replay after a restart was requested (contract §11).
    pub restart_safe: bool,
    /// Keep the call open until results settle (contract §9.5).
    pub await_results: bool,
    /// Who may `wait` the cell if it parks (default: the anonymous owner).
    pub owner: Owner,
    /// Tools the caller runs itself, for this cell (operations.md §3.5).
    pub client_tools: Vec<ClientToolSpec>,
    /// This cell's memory limit, in bytes, when lower than the runtime's
    /// ([`ExecInput::with_memory_limit`]; `None`: the runtime's).
    pub memory_limit_bytes: Option<u64>,
    /// How the caller controls the call (`with_cancel`, `with_progress`,
    /// `with_approver`, `with_policy`).
    controls: CallControls,
}

impl ExecInput {
    /// An input with the given title and code and both flags off.
    pub fn new(title: impl Into<String>, code: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            code: code.into(),
            restart_safe: false,
            await_results: false,
            owner: Owner::default(),
            client_tools: Vec::new(),
            memory_limit_bytes: None,
            controls: CallControls::default(),
        }
    }

    /// Lowers this cell's memory limit (bytes of JavaScript heap, for the
    /// cell's whole life, parks included) below the runtime's
    /// [`crate::Limits::memory_limit_bytes`]; it never raises it. Values
    /// under [`MIN_CELL_MEMORY_LIMIT_BYTES`] count as that. A cell over
    /// its limit fails with `memory_limit_exceeded`, as over the
    /// runtime's.
    pub fn with_memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit_bytes = Some(bytes);
        self
    }

    /// The memory limit this cell runs under, given the runtime's.
    pub(crate) fn memory_limit_within(&self, runtime_limit: u64) -> u64 {
        self.memory_limit_bytes.map_or(runtime_limit, |bytes| {
            bytes.max(MIN_CELL_MEMORY_LIMIT_BYTES).min(runtime_limit)
        })
    }

    /// Declares tools the caller runs itself, for this cell (operations.md
    /// §3.5): they join the catalog as untrusted `client` tools (shadowing
    /// a host tool of the same name) and are globals like any other. A call
    /// to one parks the cell with [`crate::WaitReason::ClientTools`]; answer
    /// it with [`WaitInput::with_tool_results`]. At most
    /// [`crate::MAX_CLIENT_TOOLS`], each named by a JavaScript identifier.
    pub fn with_client_tools(mut self, tools: Vec<ClientToolSpec>) -> Self {
        self.client_tools = tools;
        self
    }

    /// Sets the owner that may `wait` the cell.
    pub fn with_owner(mut self, owner: Owner) -> Self {
        self.owner = owner;
        self
    }

    /// Validates raw `exec` arguments (a JSON object as a model or MCP
    /// client sends them). Errors carry the contract's exact text.
    pub fn from_json(args: &Value) -> Result<Self, String> {
        let empty = Map::new();
        let obj = args.as_object().unwrap_or(&empty);
        if obj.contains_key("language") || obj.contains_key("typecheck") {
            return Err("Code Mode accepts JavaScript only. Remove language and typecheck; use API.read(...) for tool types.".into());
        }
        let code = alias_field(obj.get("code"))?;
        let command = alias_field(obj.get("command"))?;
        let source = match (code, command) {
            (Some(c), Some(m)) if c != m => {
                return Err("code and command must match when both are provided.".into())
            }
            (_, Some(m)) => m,
            (Some(c), None) => c,
            (None, None) => return Err("code or command must be a non-empty string.".into()),
        };
        let restart_safe = bool_field(obj.get("restartSafe"), "restartSafe")?;
        let await_results = bool_field(obj.get("awaitResults"), "awaitResults")?;
        let title = match obj.get("title") {
            Some(Value::String(t)) => t.clone(),
            _ => return Err(TITLE_ERROR.into()),
        };
        let client_tools = parse_client_tools(obj.get("clientTools"))?;
        let input = ExecInput {
            title,
            code: source,
            restart_safe,
            await_results,
            owner: Owner::default(),
            client_tools,
            memory_limit_bytes: None,
            controls: CallControls::default(),
        };
        input.validate()?;
        Ok(input)
    }

    /// Checks the title rules and that the code is non-blank.
    pub fn validate(&self) -> Result<(), String> {
        if self.title.trim().is_empty() || self.title.chars().count() > MAX_TITLE_CHARS {
            return Err(TITLE_ERROR.into());
        }
        if self.code.trim().is_empty() {
            return Err("code or command must be a non-empty string.".into());
        }
        if let Some(policy) = &self.controls.policy {
            policy.check()?;
        }
        check_client_tools(&self.client_tools)
    }
}

/// A validated `wait` request (contract §3).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WaitInput {
    /// The parked run, trimmed.
    pub run_id: String,
    /// Who is asking; must be the run's owner.
    pub owner: Owner,
    /// Abandon the parked run instead of resuming it (operations.md §3.1):
    /// it is removed and this call returns the `aborted` result once.
    pub cancel: bool,
    /// Answers to the run's client tool calls (operations.md §3.5).
    pub tool_results: Vec<ClientToolResult>,
    /// Decisions on the run's calls that wait for a deferred approval.
    pub approval_answers: Vec<ApprovalAnswer>,
    /// How the caller controls the call (`with_cancel`, `with_progress`,
    /// `with_approver`, `with_policy`).
    controls: CallControls,
}

impl WaitInput {
    /// A `wait` for `run_id` by the anonymous owner.
    pub fn new(run_id: impl Into<String>) -> Self {
        Self {
            run_id: run_id.into().trim().to_string(),
            owner: Owner::default(),
            cancel: false,
            tool_results: Vec::new(),
            approval_answers: Vec::new(),
            controls: CallControls::default(),
        }
    }

    /// Answers client tool calls of the run (`pendingToolCalls` entries with
    /// method `clientTool`): each id at most once; an id that is not a
    /// pending client call of the run makes the `wait` fail with
    /// `invalid_input` and change nothing. An error answer rejects the
    /// guest's call with a catchable `tool_error`.
    pub fn with_tool_results(mut self, results: Vec<ClientToolResult>) -> Self {
        self.tool_results = results;
        self
    }

    /// Decides calls of the run that wait for a deferred approval
    /// (`pendingToolCalls` entries with method `approval`; see
    /// [`ExecInput::with_deferred_approvals`]): an approved call starts, a
    /// declined one rejects with a catchable `tool_error`. Each id at most
    /// once, at most [`crate::MAX_PENDING_APPROVALS`]; an id that is not a
    /// call of the run waiting for its approval (answered already, or never
    /// made) makes the `wait` fail with `invalid_input` and change nothing.
    /// Never read from JSON arguments ([`WaitInput::from_json`]): only the
    /// embedder answers.
    pub fn with_approval_answers(mut self, answers: Vec<ApprovalAnswer>) -> Self {
        self.approval_answers = answers;
        self
    }

    /// Asks to abandon the run instead of resuming it.
    pub fn cancelling(mut self) -> Self {
        self.cancel = true;
        self
    }

    /// Sets the owner asking.
    pub fn with_owner(mut self, owner: Owner) -> Self {
        self.owner = owner;
        self
    }

    /// Validates raw `wait` arguments: `runId` (alias `run_id`), trimmed,
    /// non-empty; `cancel`, a boolean.
    pub fn from_json(args: &Value) -> Result<Self, String> {
        let id = args
            .get("runId")
            .or_else(|| args.get("run_id"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut input = Self::new(id);
        input.validate()?;
        input.cancel = bool_field(args.get("cancel"), "cancel")?;
        input.tool_results = parse_tool_results(args.get("toolResults"))?;
        Ok(input)
    }

    /// Checks that the run id is non-blank.
    pub fn validate(&self) -> Result<(), String> {
        if self.run_id.trim().is_empty() {
            return Err(RUN_ID_ERROR.into());
        }
        if let Some(policy) = &self.controls.policy {
            policy.check()?;
        }
        crate::approval::check_answers(&self.approval_answers)?;
        check_tool_results(&self.tool_results)
    }
}

/// How the caller controls an `exec` or `wait` call (operations.md §3):
/// set with the inputs' `with_*` methods, read by the cell machinery.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallControls {
    /// Cancels the call.
    pub cancel_token: CancellationToken,
    /// Counts the call's settled tool calls.
    pub progress: Option<Progress>,
    /// Decides the call's approvals.
    pub approver: ApproverSlot,
    /// The caller decides approvals itself, in a later `wait`.
    pub defer_approvals: bool,
    /// The caller's policy, within the runtime's.
    pub policy: Option<Policy>,
    /// A `wait` for a run of another owner is refused as for no run at
    /// all (MCP 2026-07-28: a run id names nothing to another principal).
    pub conceal_owners: bool,
    /// The caller's W3C trace context (`traceparent`, `tracestate`): the
    /// call's span is its child (OTLP export).
    #[cfg_attr(not(feature = "otlp"), allow(dead_code))]
    pub trace_context: Option<(String, Option<String>)>,
}

/// Most bytes of a `traceparent` or `tracestate` a caller may hand over
/// (W3C: 55 and 512); longer ones are ignored.
#[cfg_attr(not(feature = "otlp"), allow(dead_code))]
pub(crate) const MAX_TRACE_CONTEXT_BYTES: usize = 512;

/// The control methods `ExecInput` and `WaitInput` share.
macro_rules! call_controls {
    ($input:ident) => {
        impl $input {
            /// Cancels the call when `token` is cancelled (operations.md
            /// §3.1): the cell ends with `failed`, code `aborted` (`code
            /// mode execution aborted`), keeping the output it produced;
            /// its tool calls get their cancel signal (command tools: the
            /// process group is killed), its store writes are discarded,
            /// its slot is freed and a resumed run is removed. Guest code
            /// stops within one fuel slice (1,000,000 units);
            /// a cell waiting on tools stops at once. A token cancelled
            /// before the call starts aborts it before any guest code runs.
            pub fn with_cancel(mut self, token: CancellationToken) -> Self {
                self.controls.cancel_token = token;
                self
            }

            /// Reports the call's progress to `progress` (operations.md
            /// §3.2): each tool call that settles while this call runs
            /// counts one, and its name becomes the latest.
            pub fn with_progress(mut self, progress: Progress) -> Self {
                self.controls.progress = Some(progress);
                self
            }

            /// Asks `approver` about this call's tool calls that need an
            /// approval (operations.md §3.4), instead of the runtime's
            /// approver ([`crate::RuntimeBuilder::approver`]).
            pub fn with_approver(mut self, approver: std::sync::Arc<dyn Approver>) -> Self {
                self.controls.approver = ApproverSlot(Some(approver));
                self
            }

            /// Defers the approvals of this call's tool calls to its caller
            /// (operations.md §3.4, [`crate::ApprovalAnswer`]): instead of asking an
            /// approver while the cell waits, a call that needs an approval
            /// parks the cell with [`crate::WaitReason::Approval`], listed in
            /// `pendingToolCalls` (method `approval`, `tool`, `input: {pattern,
            /// arguments}`); answer with [`WaitInput::with_approval_answers`].
            /// At most [`crate::MAX_PENDING_APPROVALS`] calls of a cell wait so.
            /// Set it on each `exec` and `wait` whose caller answers so; it
            /// outranks [`Self::with_approver`].
            pub fn with_deferred_approvals(mut self) -> Self {
                self.controls.defer_approvals = true;
                self
            }

            /// Limits the tools this call's cell may see and call further,
            /// within the runtime's policy (operations.md §3.3: a policy
            /// per owner, say a tenant's): a tool must pass both, and both
            /// `approve` lists apply. The cell's catalog is then built for
            /// it (linear in the catalog; kept for the next calls with the
            /// same policy). Over [`crate::catalog::MAX_POLICY_PATTERNS`]
            /// patterns in a list, or a pattern over
            /// [`crate::catalog::MAX_POLICY_PATTERN_BYTES`], the call fails
            /// with `invalid_input`.
            pub fn with_policy(mut self, policy: Policy) -> Self {
                self.controls.policy = Some(policy);
                self
            }

            /// How the caller controls the call.
            pub(crate) fn controls(&self) -> &CallControls {
                &self.controls
            }

            /// The call with these controls (a front end's).
            #[cfg_attr(not(feature = "mcp-server"), allow(dead_code))]
            pub(crate) fn with_controls(mut self, controls: CallControls) -> Self {
                self.controls = controls;
                self
            }
        }
    };
}

call_controls!(ExecInput);
call_controls!(WaitInput);

const RUN_ID_ERROR: &str = "runId must be a non-empty string.";

const TITLE_ERROR: &str = "title must be a non-empty string of at most 120 characters.";

/// A blank alias counts as absent; a non-string populated alias is invalid
/// (fail closed).
fn alias_field(v: Option<&Value>) -> Result<Option<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err("code or command must be a non-empty string.".into()),
    }
}

fn bool_field(v: Option<&Value>, name: &str) -> Result<bool, String> {
    match v {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("{name} must be a boolean.")),
    }
}

/// A title derived from the source when the caller gave none: the first
/// non-blank line, whitespace collapsed, cut to 60 characters.
pub fn title_from_source(code: &str) -> String {
    let line = code
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("cell");
    let collapsed: String = line.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut title: String = collapsed.chars().take(60).collect();
    if collapsed.chars().count() > 60 {
        title.push('…');
    }
    title
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn alias_rules() {
        let ok = ExecInput::from_json(&json!({"title":"t","code":"return 1","command":"return 1"}))
            .unwrap();
        assert_eq!(ok.code, "return 1");
        let ok =
            ExecInput::from_json(&json!({"title":"t","code":"  ","command":"return 2"})).unwrap();
        assert_eq!(ok.code, "return 2");
        assert_eq!(
            ExecInput::from_json(&json!({"title":"t","code":"a","command":"b"})).unwrap_err(),
            "code and command must match when both are provided."
        );
        assert_eq!(
            ExecInput::from_json(&json!({"title":"t","code":" "})).unwrap_err(),
            "code or command must be a non-empty string."
        );
        assert_eq!(
            ExecInput::from_json(&json!({"title":"t","code":5})).unwrap_err(),
            "code or command must be a non-empty string."
        );
    }

    #[test]
    fn retired_fields_and_flags() {
        assert!(
            ExecInput::from_json(&json!({"title":"t","code":"1","language":"ts"}))
                .unwrap_err()
                .starts_with("Code Mode accepts JavaScript only.")
        );
        assert!(ExecInput::from_json(&json!({"title":"t","code":"1","typecheck":false})).is_err());
        assert_eq!(
            ExecInput::from_json(&json!({"title":"t","code":"1","restartSafe":"yes"})).unwrap_err(),
            "restartSafe must be a boolean."
        );
        assert_eq!(
            ExecInput::from_json(&json!({"title":"t","code":"1","awaitResults":1})).unwrap_err(),
            "awaitResults must be a boolean."
        );
    }

    #[test]
    fn title_rules() {
        assert!(ExecInput::from_json(&json!({"code":"1"})).is_err());
        assert!(ExecInput::from_json(&json!({"title":"   ","code":"1"})).is_err());
        let t120: String = "é".repeat(120);
        assert!(ExecInput::from_json(&json!({"title":t120,"code":"1"})).is_ok());
        let t121: String = "é".repeat(121);
        assert!(ExecInput::from_json(&json!({"title":t121,"code":"1"})).is_err());
        assert_eq!(
            title_from_source("\n  const x =   1;\nreturn x"),
            "const x = 1;"
        );
    }
}
