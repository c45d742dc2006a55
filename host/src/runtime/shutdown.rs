//! Graceful shutdown of a runtime ([`Runtime::shutdown`]).

use super::Runtime;
use std::time::Duration;

/// How long cells still in progress when the drain time is over get to
/// end `aborted` (they stop at their next fuel yield, or at once when
/// they wait on host work).
const ABORT_GRACE: Duration = Duration::from_secs(5);

/// What a shutdown found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shutdown {
    /// Every cell in progress ended (completed, failed or parked) within
    /// the drain time; `false`: the rest were aborted.
    pub drained: bool,
}

impl Runtime {
    /// Shuts the runtime down gracefully (what `quickcell serve` and
    /// `exec` do on SIGTERM or SIGINT):
    ///
    /// 1. From now on every `exec` and `wait` fails at once with
    ///    `runtime_unavailable` (nothing runs; call again elsewhere or
    ///    after the restart).
    /// 2. Cells in progress go on until they complete, fail, or wait on
    ///    host work — which now parks them at once (a cell whose call
    ///    waits for an approval cannot park and keeps waiting) — for at
    ///    most `drain`. Their calls return as usual: a parked cell's
    ///    result is `waiting`, and it resumes on any runtime sharing the
    ///    state store.
    /// 3. Cells still in progress after `drain` are cancelled (`aborted`).
    /// 4. Parked runs' tool calls still running in this process get their
    ///    cancel signal (a command tool's process group is killed); the
    ///    runs stay parked, and the `wait` that resumes them applies the
    ///    restart rule to those calls (replay-safe ones run again; others
    ///    settle with an unknown effect).
    /// 5. The usage ledger is written out.
    ///
    /// The caller then flushes its telemetry export and exits.
    pub async fn shutdown(&self, drain: Duration) -> Shutdown {
        self.runs.draining.cancel();
        let drained = self.runs.all_idle(drain).await;
        if !drained {
            tracing::warn!(
                drain_ms = drain.as_millis() as u64,
                "cells still running after the drain time are aborted"
            );
            self.runs.abort_all();
            self.runs.all_idle(ABORT_GRACE).await;
        }
        self.runs.drop_live().await;
        self.ledger.flush().await;
        Shutdown { drained }
    }

    /// Whether [`Runtime::shutdown`] has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.runs.draining.is_cancelled()
    }
}
