//! The host's metrics (operations.md §4.4), recorded through the `metrics`
//! facade: without an installed recorder each is a no-op. `quickcell serve
//! --http` installs a Prometheus recorder and answers `GET /metrics` with
//! them; an embedder may install any recorder of the `metrics` ecosystem.
//!
//! Every label has a bounded set of values — the call kind, the status, the
//! error code, the tool's source kind, ok or error — so no cell, tool name
//! or session can grow the exposition: per-session and per-tool figures
//! are in the usage ledger and the tracing spans instead.

use crate::result::CellResult;
use std::time::Duration;

/// Gauge: cells running in this process (`exec` and `wait` calls between
/// admission and result).
pub const CELLS_RUNNING: &str = "quickcell_cells_running";
/// Gauge: runs parked in the state store (all processes sharing it), read
/// when metrics are rendered.
pub const CELLS_PARKED: &str = "quickcell_cells_parked";
/// Counter: finished `exec` / `wait` calls, by `kind` (`exec`, `wait`),
/// `status` (`completed`, `waiting`, `failed`) and, for failures, `code`
/// (the error code).
pub const CALLS: &str = "quickcell_calls_total";
/// Counter: fuel the guest consumed, by `kind` (the sum of `fuelUsed`).
pub const FUEL: &str = "quickcell_fuel_total";
/// Histogram: seconds a tool call took, by `source` (`host`, `mcp`,
/// `client`) and `outcome` (`ok`, `error`).
pub const TOOL_CALL_SECONDS: &str = "quickcell_tool_call_seconds";
/// Histogram: bytes of each snapshot stored when a cell parked.
pub const SNAPSHOT_BYTES: &str = "quickcell_snapshot_bytes";

/// Bucket bounds of [`TOOL_CALL_SECONDS`], in seconds.
pub const TOOL_CALL_SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Bucket bounds of [`SNAPSHOT_BYTES`], in bytes.
pub const SNAPSHOT_BYTES_BUCKETS: &[f64] = &[
    1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0, 67108864.0,
];

/// Registers the help text and unit of every metric with the installed
/// recorder.
pub fn describe() {
    use metrics::Unit;
    metrics::describe_gauge!(CELLS_RUNNING, Unit::Count, "Cells running in this process");
    metrics::describe_gauge!(
        CELLS_PARKED,
        Unit::Count,
        "Runs parked in the state store, across the processes sharing it"
    );
    metrics::describe_counter!(
        CALLS,
        Unit::Count,
        "Finished exec and wait calls by kind, status and error code"
    );
    metrics::describe_counter!(
        FUEL,
        Unit::Count,
        "Fuel consumed by cells (the sum of fuelUsed)"
    );
    metrics::describe_histogram!(
        TOOL_CALL_SECONDS,
        Unit::Seconds,
        "Duration of tool calls by source kind and outcome"
    );
    metrics::describe_histogram!(
        SNAPSHOT_BYTES,
        Unit::Bytes,
        "Size of each snapshot stored when a cell parked"
    );
}

/// Counts a cell as running while it lives.
pub(crate) struct Running(());

impl Running {
    pub(crate) fn start() -> Self {
        metrics::gauge!(CELLS_RUNNING).increment(1.0);
        Self(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        metrics::gauge!(CELLS_RUNNING).decrement(1.0);
    }
}

/// Records a finished `exec` or `wait`.
pub(crate) fn call_finished(kind: &'static str, result: &CellResult) {
    match result {
        CellResult::Failed(f) => {
            metrics::counter!(CALLS, "kind" => kind, "status" => "failed", "code" => f.code.as_str())
                .increment(1);
        }
        other => {
            metrics::counter!(CALLS, "kind" => kind, "status" => other.status()).increment(1);
        }
    }
    metrics::counter!(FUEL, "kind" => kind).increment(result.telemetry().fuel_used);
}

/// Records a finished tool call.
pub(crate) fn tool_call_finished(source: &'static str, ok: bool, took: Duration) {
    let outcome = if ok { "ok" } else { "error" };
    metrics::histogram!(TOOL_CALL_SECONDS, "source" => source, "outcome" => outcome)
        .record(took.as_secs_f64());
}

/// Records a stored snapshot.
pub(crate) fn snapshot_stored(bytes: u64) {
    metrics::histogram!(SNAPSHOT_BYTES).record(bytes as f64);
}

/// Sets [`CELLS_PARKED`].
pub(crate) fn set_parked(runs: usize) {
    metrics::gauge!(CELLS_PARKED).set(runs as f64);
}
