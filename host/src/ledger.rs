//! The usage ledger's writer (operations.md §4.2): every `exec` / `wait`
//! call's [`UsageRecord`] goes to the state store off the call's latency,
//! through one writer task per runtime, in call order. Reading the ledger
//! through the runtime flushes it first.

use crate::cell::CallStats;
use crate::clock::unix_ms;
use crate::result::CellResult;
use crate::store::{Owner, StateStore, UsageRecord};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Records waiting for the writer at most; past it a call waits for room
/// (the writer is behind the state store).
const LEDGER_QUEUE: usize = 4_096;

enum Message {
    Record(UsageRecord),
    Flush(oneshot::Sender<()>),
}

/// The writer of one runtime's usage records.
pub(crate) struct Ledger {
    queue: mpsc::Sender<Message>,
}

impl Ledger {
    /// Starts the writer over `store` (inside a Tokio runtime).
    pub(crate) fn start(store: Arc<dyn StateStore>) -> Self {
        let (queue, mut inbox) = mpsc::channel(LEDGER_QUEUE);
        tokio::spawn(async move {
            while let Some(message) = inbox.recv().await {
                match message {
                    Message::Record(record) => {
                        if let Err(e) = store.usage_record(record).await {
                            tracing::warn!(error = %e, "cannot write a usage record");
                        }
                    }
                    Message::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        Self { queue }
    }

    /// Queues the record of a finished call.
    pub(crate) async fn record(
        &self,
        kind: &str,
        owner: &Owner,
        run_id: Option<&str>,
        result: &CellResult,
        started: std::time::Instant,
        stats: &CallStats,
    ) {
        let outcome = match result {
            CellResult::Failed(f) => format!("failed:{}", f.code.as_str()),
            other => other.status().to_string(),
        };
        let record = UsageRecord {
            at_ms: unix_ms(),
            agent_run: owner.agent_run.clone(),
            session: owner.session.clone(),
            run_id: result.run_id().or(run_id).map(str::to_string),
            kind: kind.to_string(),
            fuel: result.telemetry().fuel_used,
            wall_ms: started.elapsed().as_millis() as u64,
            guest_us: stats.guest_ns.load(Ordering::Relaxed) / 1_000,
            tool_calls: stats.tool_calls.load(Ordering::Relaxed),
            output_bytes: result.output_bytes() as u64,
            snapshot_bytes: stats.snapshot_bytes.load(Ordering::Relaxed),
            outcome,
            guest_build: Some(crate::guest_build().to_string()),
        };
        let _ = self.queue.send(Message::Record(record)).await;
    }

    /// Waits until every record queued so far is written.
    pub(crate) async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.queue.send(Message::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}
