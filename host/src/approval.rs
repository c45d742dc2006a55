//! Approvals (operations.md §3.4): a call to a tool the policy's `approve`
//! list matches waits for a decision from an [`Approver`] before it runs.
//!
//! - The library takes an approver per runtime
//!   ([`crate::RuntimeBuilder::approver`]) or per call
//!   ([`crate::ExecInput::with_approver`]); `quickcell serve` asks its MCP
//!   client with elicitation when the client supports it.
//! - No approver: the call is denied (fail closed) with a `tool_error`
//!   naming the policy pattern.
//! - A decline rejects the call with a catchable `tool_error` saying it was
//!   declined; no decision within the approval timeout
//!   ([`crate::HostLimits::approval_timeout_ms`], default 5 min) counts as
//!   a decline.
//! - While a call waits for its decision the cell's clock is paused (the
//!   time the cell is blocked on it is added back to its deadline, up to
//!   [`crate::HostLimits::max_await_results_ms`] per call) and the cell does
//!   not park for it (see [`ApprovalClock`]).
//! - **Deferred approvals** ([`crate::ExecInput::with_deferred_approvals`]):
//!   the call's caller answers itself, in a later request. The call waits
//!   in the cell's records (method `approval`, id `bridge:approval:N`), the
//!   cell parks with [`crate::WaitReason::Approval`] (its budget paused, as
//!   for any parked run) and a `wait` carrying [`ApprovalAnswer`]s
//!   ([`crate::WaitInput::with_approval_answers`]) resumes it on whichever
//!   host gets it: an approved call starts then, a declined one rejects.
//!   Each call is answered once: an answer to a call that waits no more
//!   fails the `wait` with `invalid_input` and changes nothing. MCP
//!   2026-07-28 requests use this (`input_required`); answers are never
//!   read from `wait`'s JSON arguments, so a model cannot approve its own
//!   calls.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Most bytes of the arguments preview an approver is shown (compact JSON,
/// cut at a character boundary and marked with `…`).
pub const MAX_APPROVAL_PREVIEW_BYTES: usize = 1024;

/// A call waiting for approval.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The tool as the catalog names it (`<server>.<tool>` for an MCP tool).
    pub tool: String,
    /// The policy's `approve` pattern the tool matched.
    pub pattern: String,
    /// The call's arguments as compact JSON, at most
    /// [`MAX_APPROVAL_PREVIEW_BYTES`] (cut ones end with `…`).
    pub arguments_preview: String,
    /// The session of the cell making the call.
    pub session: String,
}

/// An approver's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Approval {
    /// The call runs.
    Approve,
    /// The call is rejected with a `tool_error`; the reason, when given,
    /// is added to its message.
    Decline {
        /// Why, in the approver's words.
        reason: Option<String>,
    },
}

/// Most calls of one cell that wait for a deferred approval at once; a
/// call past it rejects with a catchable `tool_error` (await the earlier
/// ones first). It bounds the questions one answer carries.
pub const MAX_PENDING_APPROVALS: usize = 16;

/// Most bytes of a decline's reason in an [`ApprovalAnswer`]; a longer one
/// is cut at a character boundary.
pub const MAX_APPROVAL_REASON_BYTES: usize = 1024;

/// The prefix of a deferred approval's id in `pendingToolCalls`.
pub(crate) const APPROVAL_ID_PREFIX: &str = "bridge:approval:";

/// The caller's decision on one call that waits for a deferred approval
/// (a `pendingToolCalls` entry with method `approval`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalAnswer {
    /// The call's id, `bridge:approval:N`.
    pub id: String,
    /// What was decided.
    pub decision: Approval,
}

impl ApprovalAnswer {
    /// Approves the call `id`.
    pub fn approve(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            decision: Approval::Approve,
        }
    }

    /// Declines the call `id`, with the reason (cut at
    /// [`MAX_APPROVAL_REASON_BYTES`]) added to its `tool_error`.
    pub fn decline(id: impl Into<String>, reason: Option<String>) -> Self {
        Self {
            id: id.into(),
            decision: Approval::Decline {
                reason: reason.map(|r| cut(r, MAX_APPROVAL_REASON_BYTES)),
            },
        }
    }

    /// The bridge request id this answers, if the id has the canonical
    /// `bridge:approval:N` form.
    pub(crate) fn request_id(&self) -> Option<u64> {
        let n: u64 = self.id.strip_prefix(APPROVAL_ID_PREFIX)?.parse().ok()?;
        (self.id.len() == APPROVAL_ID_PREFIX.len() + n.to_string().len()).then_some(n)
    }
}

/// Checks a `wait`'s approval answers: at most [`MAX_PENDING_APPROVALS`],
/// each id once.
pub(crate) fn check_answers(answers: &[ApprovalAnswer]) -> Result<(), String> {
    if answers.len() > MAX_PENDING_APPROVALS {
        return Err(format!(
            "{} approval answers; a run has at most {MAX_PENDING_APPROVALS} calls waiting for one.",
            answers.len()
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(answers.len());
    for answer in answers {
        if !seen.insert(answer.id.as_str()) {
            return Err(format!(
                "the approval of `{}` is answered twice; answer each call once.",
                answer.id.escape_debug()
            ));
        }
    }
    Ok(())
}

/// The error of a call that needs an approval, on a host with no way to
/// ask for one: it fails closed (operations.md §3.4).
pub(crate) fn approval_denied(tool: &str, pattern: &str) -> String {
    format!(
        "Calling {tool} needs an approval (policy approve = \"{pattern}\"), and this host has no way to ask for one: the call was denied."
    )
}

/// The `tool_error` message of a declined call.
pub(crate) fn declined(tool: &str, pattern: &str, reason: Option<&str>) -> String {
    match reason {
        Some(reason) => format!(
            "Calling {tool} was declined by the approver (policy approve = \"{pattern}\"): {reason}"
        ),
        None => {
            format!("Calling {tool} was declined by the approver (policy approve = \"{pattern}\").")
        }
    }
}

/// `text` cut to at most `max` bytes at a character boundary, marked with
/// `…` when cut.
fn cut(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Decides whether calls that need an approval may run.
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// The decision for one call. Taking longer than the approval timeout
    /// counts as a decline (the future is dropped).
    async fn decide(&self, request: &ApprovalRequest) -> Approval;
}

/// The arguments preview of a call: compact JSON, at most
/// [`MAX_APPROVAL_PREVIEW_BYTES`].
pub(crate) fn preview(arguments: &serde_json::Value) -> String {
    cut(arguments.to_string(), MAX_APPROVAL_PREVIEW_BYTES)
}

/// Whether any call of a cell waits for a decision, so the cell's driver
/// can pause its clock (it waits without a park deadline and gives the
/// time it was blocked back to the cell; see `cell/drive.rs`).
#[derive(Default)]
pub(crate) struct ApprovalClock {
    waiting: AtomicUsize,
    /// Woken whenever a wait starts or ends.
    pub changed: tokio::sync::Notify,
}

impl ApprovalClock {
    /// Marks a call as waiting until the guard is dropped.
    pub(crate) fn waiting(self: &Arc<Self>) -> WaitingGuard {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
        WaitingGuard(self.clone())
    }

    /// Whether a call waits for a decision now.
    pub(crate) fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }
}

/// A call's wait for its decision; ends when dropped.
pub(crate) struct WaitingGuard(Arc<ApprovalClock>);

impl Drop for WaitingGuard {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_waiters();
    }
}

/// Who decides a cell's approvals.
#[derive(Clone)]
pub(crate) enum Decider {
    /// This approver, while the call waits.
    Ask(Arc<dyn Approver>),
    /// The caller, in a later `wait` (the cell parks for it).
    Caller,
}

/// What a cell's bridge needs to ask for approvals.
#[derive(Clone)]
pub(crate) struct Approvals {
    pub decider: Decider,
    pub timeout: Duration,
    pub clock: Arc<ApprovalClock>,
    pub session: String,
}

impl Approvals {
    /// Asks for `request`'s decision: `Ok` to run the call, `Err` with the
    /// call's `tool_error` message otherwise.
    pub(crate) async fn ask(&self, request: ApprovalRequest) -> Result<(), String> {
        let tool = &request.tool;
        let pattern = &request.pattern;
        let Decider::Ask(approver) = &self.decider else {
            return Err(approval_denied(tool, pattern));
        };
        let _waiting = self.clock.waiting();
        let decided = tokio::time::timeout(self.timeout, approver.decide(&request)).await;
        match decided {
            Ok(Approval::Approve) => Ok(()),
            Ok(Approval::Decline { reason }) => Err(declined(tool, pattern, reason.as_deref())),
            Err(_) => Err(format!(
                "Calling {tool} was declined: no approval decision within {} ms (policy approve = \"{pattern}\"; a timeout counts as a decline).",
                self.timeout.as_millis()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_preview_is_cut_at_a_character_boundary() {
        let short = serde_json::json!({"a": 1});
        assert_eq!(preview(&short), r#"{"a":1}"#);
        let long = serde_json::json!({"a": "é".repeat(MAX_APPROVAL_PREVIEW_BYTES)});
        let cut = preview(&long);
        assert!(
            cut.len() <= MAX_APPROVAL_PREVIEW_BYTES && cut.ends_with('…'),
            "{}",
            cut.len()
        );
    }

    #[tokio::test]
    async fn waiting_is_seen_and_its_changes_wake_the_driver() {
        let clock = Arc::new(ApprovalClock::default());
        let changed = clock.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let first = clock.waiting();
        let second = clock.waiting();
        assert!(clock.is_waiting());
        // Registered before the wait began: woken.
        tokio::time::timeout(Duration::from_secs(5), changed)
            .await
            .unwrap();
        drop(first);
        assert!(clock.is_waiting());
        drop(second);
        assert!(!clock.is_waiting());
    }
}

/// An input's approver, if it has one (a slot that is `Debug`).
#[derive(Clone, Default)]
pub(crate) struct ApproverSlot(pub Option<Arc<dyn Approver>>);

impl std::fmt::Debug for ApproverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}
