//! Approvals over MCP.
//!
//! - **2025-11-25 and older** (a session): a call that needs an approval
//!   asks the client with `elicitation/create` while the cell waits
//!   ([`ElicitingApprover`]), when the client supports form elicitation.
//! - **2026-07-28** (no sessions, no server-initiated requests): the cell's
//!   approvals are deferred ([`crate::ExecInput::with_deferred_approvals`])
//!   when the request's client capabilities declare form elicitation. A
//!   call that needs one parks the cell (its budget paused) and
//!   `tools/call` answers `input_required` (multi round-trip requests):
//!   - `inputRequests`: one form elicitation per waiting call, keyed
//!     `approve-N` (`N` of its `bridge:approval:N` id), asking for one
//!     boolean, `approve`;
//!   - `requestState`: the signed handle of the run ([`RequestStates`]):
//!     HMAC-SHA256 under a key derived from the state key, bound to the
//!     principal, the tool and a digest of its arguments, and an expiry.
//!     Signed, not encrypted: it names the run and its waiting calls.
//!
//!   The client retries the same `tools/call` with `inputResponses` and
//!   the `requestState`, on any host sharing the store: the run resumes
//!   with the answers (an accept with `approve: true` approves; anything
//!   else declines) exactly once — the answered calls wait no more, so a
//!   replayed `requestState` is refused (`-32602`), as is one that fails
//!   verification, another principal's, or one presented with other
//!   arguments. Calls the responses leave unanswered are asked again in a
//!   new `input_required`. A `requestState` older than the approval timeout
//!   (`[host] approval_timeout_ms`) declines its calls, as the timeout
//!   does with an approver: the run resumes with them rejected.
//! - Under the Tasks extension the task goes `input_required`; `tasks/get`
//!   carries the same `inputRequests` and `tasks/update` answers them
//!   ([`super::tasks`]).
//! - A 2026-07-28 client without form elicitation cannot be asked: its
//!   calls that need an approval are denied (fail closed).

use rmcp::model::{
    ElicitRequestParams, ElicitResult, ElicitationAction, InputRequests, InputResponses,
};
use rmcp::model::{InputRequiredResult, RequestStateCodec, SealOptions};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::Digest as _;

use crate::approval::{Approval, ApprovalAnswer, ApprovalRequest, Approver, APPROVAL_ID_PREFIX};
use crate::result::{PendingToolCall, Waiting};

/// Most bytes of a `requestState` the server opens; a longer one is
/// refused unread (a sealed state is a few hundred bytes).
pub const MAX_REQUEST_STATE_BYTES: usize = 8 * 1024;

/// The prefix of an approval's key in `inputRequests`.
const INPUT_KEY_PREFIX: &str = "approve-";

/// What the requestState's associated data starts with: domain and version.
const STATE_DOMAIN: &[u8] = b"quickcell mcp approval state v1\0";

/// The form that asks whether one call may run.
fn approval_form(tool: &str, pattern: &str, arguments: &str) -> Value {
    json!({
        "mode": "form",
        "message": format!(
            "A Code Mode cell wants to call {tool} (policy approve = \"{pattern}\") with these arguments: {arguments}. Approve this call?"
        ),
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {"type": "boolean", "title": "Approve", "description": "Let this one call run."}
            },
            "required": ["approve"]
        }
    })
}

/// The decision an elicitation's result stands for: an accept with
/// `approve: true` approves; anything else declines.
fn decision(result: &ElicitResult) -> Approval {
    let decline = |reason: &str| Approval::Decline {
        reason: Some(reason.to_string()),
    };
    match result.action {
        ElicitationAction::Accept
            if result.content.as_ref().and_then(|c| c.get("approve"))
                == Some(&Value::Bool(true)) =>
        {
            Approval::Approve
        }
        ElicitationAction::Accept => decline("the user did not approve it"),
        ElicitationAction::Decline => decline("the user declined it"),
        _ => decline("the user dismissed the request"),
    }
}

/// Asks the MCP client whether a call that needs an approval may run, with
/// a form elicitation (`elicitation/create`): the tool, the policy pattern
/// and a preview of the arguments, and one boolean, `approve`. Accepting
/// with `approve: true` approves; anything else — `approve: false`, a
/// decline, a dismissal, an error — declines.
pub(super) struct ElicitingApprover {
    pub(super) peer: Peer<RoleServer>,
}

#[async_trait::async_trait]
impl Approver for ElicitingApprover {
    async fn decide(&self, request: &ApprovalRequest) -> Approval {
        let params = approval_form(&request.tool, &request.pattern, &request.arguments_preview);
        let params = match serde_json::from_value::<ElicitRequestParams>(params) {
            Ok(params) => params,
            Err(e) => {
                return Approval::Decline {
                    reason: Some(format!("the approval request could not be built: {e}")),
                }
            }
        };
        match self.peer.create_elicitation(params).await {
            Ok(result) => decision(&result),
            Err(e) => Approval::Decline {
                reason: Some(format!("the MCP client could not be asked: {e}")),
            },
        }
    }
}

/// Whether a 2026-07-28 request's client capabilities declare form
/// elicitation (an `elicitation` object naming neither mode means form).
pub(super) fn request_elicits(context: &RequestContext<RoleServer>) -> bool {
    context.client_capabilities().is_some_and(|c| {
        c.elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some() || e.url.is_none())
    })
}

/// The `inputRequests` of a run parked for approvals: one form per call.
pub(super) fn input_requests(calls: &[PendingToolCall]) -> InputRequests {
    let mut requests = InputRequests::new();
    for call in calls {
        let Some(n) = call.id.strip_prefix(APPROVAL_ID_PREFIX) else {
            continue;
        };
        let input = call.input.as_ref();
        let field = |name: &str| {
            input
                .and_then(|i| i.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let form = approval_form(
            call.tool.as_deref().unwrap_or_default(),
            &field("pattern"),
            &field("arguments"),
        );
        let request = json!({"method": "elicitation/create", "params": form});
        if let Ok(request) = serde_json::from_value(request) {
            requests.insert(format!("{INPUT_KEY_PREFIX}{n}"), request);
        }
    }
    requests
}

/// The answers `responses` give to the approvals `keys` asked for (keys of
/// `inputRequests`); responses to other keys are ignored, and keys with no
/// response stay unanswered.
pub(super) fn answers<'a>(
    keys: impl IntoIterator<Item = &'a str>,
    responses: &InputResponses,
) -> Vec<ApprovalAnswer> {
    keys.into_iter()
        .filter_map(|key| {
            let n = key.strip_prefix(INPUT_KEY_PREFIX)?;
            let response = responses.get(key)?;
            let id = format!("{APPROVAL_ID_PREFIX}{n}");
            Some(
                match serde_json::from_value::<ElicitResult>(response.clone()) {
                    Ok(result) => match decision(&result) {
                        Approval::Approve => ApprovalAnswer::approve(id),
                        Approval::Decline { reason } => ApprovalAnswer::decline(id, reason),
                    },
                    Err(_) => ApprovalAnswer::decline(
                        id,
                        Some("the client's answer is not an elicitation result".into()),
                    ),
                },
            )
        })
        .collect()
}

/// What a `requestState` carries (signed, readable).
#[derive(Serialize, Deserialize)]
struct SealedState {
    /// The run.
    run: String,
    /// The `inputRequests` keys asked.
    keys: Vec<String>,
    /// When the answers are due, in Unix milliseconds.
    due_ms: u64,
}

/// A verified `requestState`: the run to resume and the answers to resume
/// it with.
pub(super) struct Retry {
    /// The parked run.
    pub(super) run_id: String,
    /// The decisions on its calls.
    pub(super) answers: Vec<ApprovalAnswer>,
}

/// Seals and opens the `requestState` of approvals (see the module docs).
pub(super) struct RequestStates {
    codec: RequestStateCodec,
    /// How long the client has to answer.
    answer_within_ms: u64,
}

impl RequestStates {
    /// States signed with `key` (32 bytes derived from the state key), due
    /// `answer_within_ms` after they are made.
    pub(super) fn new(key: [u8; 32], answer_within_ms: u64) -> Result<Self, ErrorData> {
        let codec = RequestStateCodec::try_new(key.to_vec()).map_err(|e| {
            ErrorData::internal_error(format!("cannot make the request state key: {e}"), None)
        })?;
        Ok(Self {
            codec,
            answer_within_ms,
        })
    }

    /// The associated data: the scope (the principal), the tool and a
    /// digest of its arguments.
    fn bound_to(scope: &str, tool: &str, arguments: &Value) -> Vec<u8> {
        let digest = sha2::Sha256::digest(arguments.to_string().as_bytes());
        let mut data = STATE_DOMAIN.to_vec();
        for part in [scope.as_bytes(), b"\0", tool.as_bytes(), b"\0"] {
            data.extend_from_slice(part);
        }
        data.extend_from_slice(&digest);
        data
    }

    /// The `input_required` answer of `tools/call tool(arguments)` by
    /// `scope` whose run parked for approvals.
    pub(super) fn input_required(
        &self,
        scope: &str,
        tool: &str,
        arguments: &Value,
        waiting: &Waiting,
    ) -> Result<InputRequiredResult, ErrorData> {
        self.seal(
            scope,
            tool,
            arguments,
            &waiting.run_id,
            &waiting.pending_tool_calls,
        )
    }

    fn seal(
        &self,
        scope: &str,
        tool: &str,
        arguments: &Value,
        run_id: &str,
        calls: &[PendingToolCall],
    ) -> Result<InputRequiredResult, ErrorData> {
        let requests = input_requests(calls);
        let state = SealedState {
            run: run_id.to_string(),
            keys: requests.keys().cloned().collect(),
            due_ms: crate::clock::unix_ms().saturating_add(self.answer_within_ms),
        };
        let bound = Self::bound_to(scope, tool, arguments);
        let sealed = self
            .codec
            .seal_json_with(&state, &SealOptions::new().associated_data(&bound))
            .map_err(|e| {
                ErrorData::internal_error(format!("cannot seal the request state: {e}"), None)
            })?;
        Ok(InputRequiredResult::new(Some(requests), Some(sealed)))
    }

    /// Opens the `requestState` of a retried `tools/call tool(arguments)`
    /// by `scope`: the run and the answers `responses` give. A state that
    /// is too long, forged, altered, another scope's or another call's is
    /// refused with `-32602`; one past its due time declines every call it
    /// asked about.
    pub(super) fn open(
        &self,
        scope: &str,
        tool: &str,
        arguments: &Value,
        sealed: &str,
        responses: Option<&InputResponses>,
    ) -> Result<Retry, ErrorData> {
        let refused = || {
            ErrorData::invalid_params(
                "requestState is not valid for this request (altered, another caller's, or sent with other arguments)",
                None,
            )
        };
        if sealed.len() > MAX_REQUEST_STATE_BYTES {
            return Err(refused());
        }
        let bound = Self::bound_to(scope, tool, arguments);
        let state: SealedState = self
            .codec
            .open_json_with(sealed, &bound)
            .map_err(|_| refused())?;
        let answers = if crate::clock::unix_ms() > state.due_ms {
            let reason = format!(
                "no approval decision within {} ms (a timeout counts as a decline)",
                self.answer_within_ms
            );
            state
                .keys
                .iter()
                .filter_map(|key| key.strip_prefix(INPUT_KEY_PREFIX))
                .map(|n| {
                    ApprovalAnswer::decline(
                        format!("{APPROVAL_ID_PREFIX}{n}"),
                        Some(reason.clone()),
                    )
                })
                .collect()
        } else {
            let empty = InputResponses::new();
            answers(
                state.keys.iter().map(String::as_str),
                responses.unwrap_or(&empty),
            )
        };
        Ok(Retry {
            run_id: state.run,
            answers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(ids: &[u64]) -> Vec<PendingToolCall> {
        ids.iter()
            .map(|n| {
                let mut call = crate::result::PendingToolCall::new(
                    format!("{APPROVAL_ID_PREFIX}{n}"),
                    "approval".into(),
                );
                call.tool = Some("nap".into());
                call.input = Some(json!({"pattern": "na*", "arguments": "{\"x\":1}"}));
                call
            })
            .collect()
    }

    #[test]
    fn a_state_opens_only_for_its_scope_tool_and_arguments() {
        let states = RequestStates::new([7; 32], 60_000).unwrap();
        let args = json!({"code": "1"});
        let asked = states
            .seal("principal:alice", "exec", &args, "run-1", &calls(&[3, 5]))
            .unwrap();
        let requests = asked.input_requests.clone().unwrap();
        assert_eq!(
            requests.keys().collect::<Vec<_>>(),
            ["approve-3", "approve-5"]
        );
        let sealed = asked.request_state.unwrap();
        let accept = json!({"action": "accept", "content": {"approve": true}});
        let responses: InputResponses = serde_json::from_value(
            json!({"approve-3": accept, "approve-5": {"action": "decline"}, "other": {}}),
        )
        .unwrap();
        let responses = &responses;
        let retry = states
            .open("principal:alice", "exec", &args, &sealed, Some(responses))
            .unwrap();
        assert_eq!(retry.run_id, "run-1");
        assert_eq!(
            retry.answers,
            [
                ApprovalAnswer::approve("bridge:approval:3"),
                ApprovalAnswer::decline("bridge:approval:5", Some("the user declined it".into()))
            ]
        );
        // Another principal, tool, arguments; an altered or oversized state;
        // another key.
        for (scope, tool, arguments, state) in [
            ("principal:bob", "exec", &args, sealed.clone()),
            ("principal:alice", "wait", &args, sealed.clone()),
            (
                "principal:alice",
                "exec",
                &json!({"code": "2"}),
                sealed.clone(),
            ),
            ("principal:alice", "exec", &args, format!("{sealed}x")),
            (
                "principal:alice",
                "exec",
                &args,
                "x".repeat(MAX_REQUEST_STATE_BYTES + 1),
            ),
        ] {
            assert!(states
                .open(scope, tool, arguments, &state, Some(responses))
                .is_err());
        }
        let other_key = RequestStates::new([8; 32], 60_000).unwrap();
        assert!(other_key
            .open("principal:alice", "exec", &args, &sealed, Some(responses))
            .is_err());
    }

    #[test]
    fn a_late_answer_declines_every_call_asked() {
        let states = RequestStates::new([7; 32], 0).unwrap();
        let args = json!({});
        let sealed = states
            .seal("s", "wait", &args, "run-1", &calls(&[2]))
            .unwrap()
            .request_state
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let accept: InputResponses = serde_json::from_value(
            json!({"approve-2": {"action": "accept", "content": {"approve": true}}}),
        )
        .unwrap();
        let retry = states
            .open("s", "wait", &args, &sealed, Some(&accept))
            .unwrap();
        assert!(matches!(
            &retry.answers[..],
            [ApprovalAnswer { decision: Approval::Decline { reason: Some(r) }, .. }] if r.contains("within 0 ms")
        ));
    }
}
