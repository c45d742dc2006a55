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
    let text = arguments.to_string();
    if text.len() <= MAX_APPROVAL_PREVIEW_BYTES {
        return text;
    }
    let mut end = MAX_APPROVAL_PREVIEW_BYTES - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
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

/// What a cell's bridge needs to ask for approvals.
#[derive(Clone)]
pub(crate) struct Approvals {
    pub approver: Arc<dyn Approver>,
    pub timeout: Duration,
    pub clock: Arc<ApprovalClock>,
    pub session: String,
}

impl Approvals {
    /// Asks for `request`'s decision: `Ok` to run the call, `Err` with the
    /// call's `tool_error` message otherwise.
    pub(crate) async fn ask(&self, request: ApprovalRequest) -> Result<(), String> {
        let _waiting = self.clock.waiting();
        let decided = tokio::time::timeout(self.timeout, self.approver.decide(&request)).await;
        let tool = &request.tool;
        let pattern = &request.pattern;
        match decided {
            Ok(Approval::Approve) => Ok(()),
            Ok(Approval::Decline { reason }) => Err(match reason {
                Some(reason) => format!(
                    "Calling {tool} was declined by the approver (policy approve = \"{pattern}\"): {reason}"
                ),
                None => format!(
                    "Calling {tool} was declined by the approver (policy approve = \"{pattern}\")."
                ),
            }),
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
