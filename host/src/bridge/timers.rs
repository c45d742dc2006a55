//! Timers (`sleep {ms}`, from `setTimeout`): a task per timer, cancelled by
//! `clearTimeout`; its absolute due time is kept so that a run resumed
//! elsewhere re-arms it for the time it had left.

use super::settlement::{err, ok_null};
use super::{Start, Work};
use crate::clock::unix_ms;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Longest timer a cell may set, in milliseconds (a day).
pub(crate) const MAX_SLEEP_MS: u64 = 86_400_000;

/// Starts a timer.
pub(crate) fn start(id: u64, args: &Value) -> Start {
    let ms = match args["ms"].as_f64() {
        Some(ms) if ms.is_finite() && ms >= 0.0 => (ms as u64).min(MAX_SLEEP_MS),
        _ => {
            return Start::Settled(err(
                id,
                "setTimeout delay must be a non-negative finite number.",
                "invalid_input",
            ))
        }
    };
    let token = CancellationToken::new();
    let cancelled = token.clone();
    Start::Work(Work {
        future: Box::pin(async move {
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(ms)) => {}
                _ = cancelled.cancelled() => {}
            }
            ok_null(id)
        }),
        token: Some(token),
        replay_safe: true,
        poll_first: false,
        due_unix_ms: Some(unix_ms().saturating_add(ms)),
    })
}
