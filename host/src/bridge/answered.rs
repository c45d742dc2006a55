//! Requests the caller answers, not the host: client tool calls
//! (operations.md §3.5, answered by `wait {toolResults}`) and calls waiting
//! for a deferred approval ([`crate::approval`], answered by
//! [`crate::WaitInput::with_approval_answers`]). Their records, the checks
//! of the answers against a parked run, and the answers applied.

use super::settlement::{self, err, malformed};
use super::{Bridge, BridgeState};
use crate::guest_abi::BridgeRequest;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// Checks the caller's answers against a parked run's records (its
/// bridge state): each id must name a client tool call the run still waits
/// on. Fails with the `invalid_input` message naming the first that does
/// not; nothing is answered then.
pub(crate) fn check_answers(
    state: &BridgeState,
    answers: &[crate::ClientToolResult],
) -> Result<(), String> {
    for (i, answer) in answers.iter().enumerate() {
        let pending = answer
            .request_id()
            .and_then(|id| state.outstanding.get(&id))
            .is_some_and(|o| o.method == CLIENT_TOOL_METHOD);
        if !pending {
            return Err(format!(
                "toolResults[{i}].id `{}` is not a client tool call this run waits on (answered already, or never made). Nothing was answered.",
                answer.id.escape_debug()
            ));
        }
    }
    Ok(())
}

/// Checks the caller's approval answers against a parked run's records:
/// each id must name a call that waits for its approval. Fails with the
/// `invalid_input` message naming the first that does not; nothing is
/// answered then (a replayed answer is refused so).
pub(crate) fn check_approval_answers(
    state: &BridgeState,
    answers: &[crate::ApprovalAnswer],
) -> Result<(), String> {
    for answer in answers {
        let pending = answer
            .request_id()
            .and_then(|id| state.outstanding.get(&id))
            .is_some_and(|o| o.method == APPROVAL_METHOD);
        if !pending {
            return Err(format!(
                "`{}` is not a call of this run that waits for an approval (answered already, or never made). Nothing was answered.",
                answer.id.escape_debug()
            ));
        }
    }
    Ok(())
}

/// The method of a call the caller runs, in the bridge's records and in
/// `pendingToolCalls`.
pub(crate) const CLIENT_TOOL_METHOD: &str = "clientTool";

/// What a pending client tool call records (`args_json` of its
/// [`super::Outstanding`]).
#[derive(Serialize, Deserialize)]
pub(super) struct ClientCall {
    pub(super) tool: String,
    pub(super) input: Value,
}

/// The method of a call that waits for its caller's approval, in the
/// bridge's records and in `pendingToolCalls`.
pub(crate) const APPROVAL_METHOD: &str = "approval";

/// What a call waiting for a deferred approval records (`args_json` of its
/// [`super::Outstanding`]): what the caller is shown, and the call itself, which
/// starts as it was made once approved.
#[derive(Serialize, Deserialize)]
pub(crate) struct DeferredApproval {
    /// The tool as the catalog names it.
    pub tool: String,
    /// The policy's `approve` pattern it matched.
    pub pattern: String,
    /// The arguments preview ([`crate::approval::preview`]).
    pub arguments: String,
    /// The `callValue` request's arguments, as the guest sent them (filled
    /// in by the bridge).
    #[serde(default)]
    pub call: Option<Box<serde_json::value::RawValue>>,
}

impl Bridge {
    /// Whether a client tool call waits for the caller's answer.
    pub(crate) fn has_client_calls(&self) -> bool {
        self.outstanding
            .values()
            .any(|r| r.method == CLIENT_TOOL_METHOD)
    }

    /// Whether a call waits for its caller's approval.
    pub(crate) fn has_deferred_approvals(&self) -> bool {
        self.outstanding
            .values()
            .any(|r| r.method == APPROVAL_METHOD)
    }

    /// Applies the caller's approval decisions (checked with
    /// [`check_approval_answers`]): an approved call is queued again as it
    /// was made and starts without asking; a declined one rejects with
    /// its `tool_error`.
    pub(crate) fn answer_approvals(&mut self, answers: &[crate::ApprovalAnswer]) {
        for answer in answers {
            let Some(id) = answer.request_id() else {
                continue;
            };
            let Some(record) = self
                .outstanding
                .get_mut(&id)
                .filter(|o| o.method == APPROVAL_METHOD)
            else {
                continue;
            };
            let deferred = serde_json::from_str::<DeferredApproval>(&record.args_json);
            match (&answer.decision, deferred) {
                (
                    crate::Approval::Approve,
                    Ok(DeferredApproval {
                        call: Some(call), ..
                    }),
                ) => {
                    let args_json: Arc<str> = Arc::from(call.get());
                    record.method = "callValue".to_string();
                    record.args_json = args_json.clone();
                    record.started = false;
                    self.approved.insert(id);
                    self.queued.push_front(BridgeRequest {
                        id,
                        method: "callValue".to_string(),
                        args_json,
                        oversized_args: None,
                        over_outstanding_cap: false,
                    });
                }
                (decision, deferred) => {
                    self.outstanding.remove(&id);
                    let message = match (decision, deferred) {
                        (crate::Approval::Decline { reason }, Ok(d)) => {
                            crate::approval::declined(&d.tool, &d.pattern, reason.as_deref())
                        }
                        _ => "the call's approval record is unreadable: the call was denied"
                            .to_string(),
                    };
                    if let Some(progress) = &self.progress {
                        progress.tool_settled(None);
                    }
                    self.ready.push_back(err(id, message, "tool_error"));
                }
            }
        }
    }

    /// Settles client tool calls with the caller's answers: a value
    /// resolves the guest's call, an error rejects it with a `tool_error`.
    /// The caller has checked them ([`check_answers`]).
    pub(crate) fn answer_client_calls(&mut self, answers: &[crate::ClientToolResult]) {
        for answer in answers {
            let Some(id) = answer.request_id() else {
                continue;
            };
            if self.outstanding.remove(&id).is_none() {
                continue;
            }
            let settlement = match &answer.outcome {
                Ok(value) => settlement::ok(id, value.clone()),
                Err(text) => err(id, text.clone(), "tool_error"),
            };
            let settlement = self.fit_inbox(settlement, CLIENT_TOOL_METHOD);
            if let Some(progress) = &self.progress {
                progress.tool_settled(None);
            }
            self.ready.push_back(settlement);
        }
    }

    /// Holds a client tool call for the caller's answer (its arguments
    /// within the client tool caps); whether it is replay-safe (never).
    pub(super) fn hold_client_call(&mut self, id: u64, tool: String, input: &Value) -> bool {
        let input = serde_json::to_string(input).unwrap_or_default();
        let call = format!(
            r#"{{"tool":{},"input":{input}}}"#,
            serde_json::Value::from(tool)
        );
        let held: usize = self
            .outstanding
            .values()
            .filter(|o| o.method == CLIENT_TOOL_METHOD)
            .map(|o| o.args_json.len())
            .sum();
        use crate::client_tools::{
            MAX_CLIENT_TOOL_INPUT_BYTES as ONE, MAX_PENDING_CLIENT_INPUT_BYTES as ALL,
        };
        let refusal = if input.len() > ONE {
            Some(format!("the arguments of this client tool call are {} bytes of JSON; at most {ONE} are handed to the caller. Pass less data.", input.len()))
        } else if held.saturating_add(call.len()) > ALL {
            Some(format!("this cell's client tool calls waiting for answers would hold more than {ALL} bytes of arguments. Await earlier calls before making more."))
        } else {
            None
        };
        if let Some(message) = refusal {
            self.ready.push_back(err(id, message, "invalid_input"));
            return true;
        }
        if let Some(o) = self.outstanding.get_mut(&id) {
            o.method = CLIENT_TOOL_METHOD.to_string();
            o.args_json = Arc::from(call);
        }
        // Never replay-safe: the host cannot tell what the caller did.
        false
    }

    /// Holds a call for its caller's approval (at most
    /// [`crate::approval::MAX_PENDING_APPROVALS`] per cell); whether it is
    /// replay-safe (never: running it is the caller's decision).
    pub(super) fn hold_deferred_approval(
        &mut self,
        id: u64,
        mut approval: DeferredApproval,
    ) -> bool {
        let waiting = self
            .outstanding
            .values()
            .filter(|o| o.method == APPROVAL_METHOD)
            .count();
        if waiting >= crate::approval::MAX_PENDING_APPROVALS {
            let cap = crate::approval::MAX_PENDING_APPROVALS;
            self.ready.push_back(err(
                id,
                format!("{cap} calls of this cell already wait for an approval; await them before making more calls that need one."),
                "tool_error",
            ));
            return true;
        }
        if let Some(o) = self.outstanding.get_mut(&id) {
            approval.call = serde_json::value::RawValue::from_string(o.args_json.to_string()).ok();
            match serde_json::to_string(&approval) {
                Ok(json) => {
                    o.method = APPROVAL_METHOD.to_string();
                    o.args_json = Arc::from(json);
                }
                Err(e) => {
                    self.ready.push_back(malformed(id, e));
                    return true;
                }
            }
        }
        // Nothing ran: running it again is the caller's decision.
        false
    }
}
