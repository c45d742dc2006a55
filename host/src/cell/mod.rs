//! Running one cell: admission checks, a fresh instance in its own `Store`,
//! the boundary loop (dispatch, settle, run the guest again), parking and
//! resuming, and the mapping of every way a call can end to the contract's
//! result union.
//!
//! A call (`exec` or `wait`) ends in one of three ways: the cell completes,
//! fails, or *parks*. It parks when a `yield` is pending, or when host work
//! is still unsettled as the call's remaining budget reaches the resume
//! margin ([`resume_margin`]). Parking prepares the guest's heap (garbage
//! collection once the cell has taken 1 MiB of new heap, then the
//! allocator's free pages zeroed), encodes a snapshot
//! (`quickcell-snapshot`: changed pages as XOR deltas, the stack pointer,
//! and [`HostState`]), stores it in the state store and hands the bridge to
//! the run registry, which keeps its requests running. `wait` claims the
//! run, restores it into a fresh instance and continues the same loop. See
//! `docs/decisions.md` (Suspension) for the decisions behind each step.
//!
//! How each limit ends a call (told apart by type, never by message text):
//!
//! | limit | mechanism | code |
//! |---|---|---|
//! | `timeoutMs` | the guest yields every [`crate::engine::YIELD_FUEL`] of fuel; each guest call is checked against the real clock then and fails with [`DeadlineExceeded`] ([`crate::guest_abi::before_deadline`]) | `timeout` |
//! | `fuel` | Wasmtime fuel; [`Trap::OutOfFuel`] | `fuel_exhausted` |
//! | `memoryLimitBytes` | QuickJS heap limit (catchable `InternalError: out of memory`; uncaught → failure) and a linear-memory cap in the store's limiter (refused growth) | `memory_limit_exceeded` |
//! | stack depth | the guest's stack guard raises a catchable `RangeError` | `internal_error` when uncaught |
//!
//! The timeout is enforced by the host's deadline check at the guest's
//! fuel yields alone: the QuickJS interrupt handler is not used, so there
//! is no separate hard-stop grace period — the deadline *is* the hard stop,
//! and output emitted before it is kept. A module-access `ReferenceError` at run time
//! (`require`, `module`, `process`) fails with `invalid_input` and the
//! module-access message, in phase `guest` (the guest had started).

mod drive;
mod finish;
mod park;
mod restore;
pub(crate) mod runs;

use crate::bridge::{Bridge, BridgeState, CellTools, SessionAccess};
use crate::clock::unix_ms;
use crate::config::{Fuel, Limits};
use crate::engine::{FreshInstance, SharedEngine};
use crate::guest_abi::channel::OutputBuffer;
use crate::guest_abi::{
    process_nanos, CancelOn, Cancelled, CellState, DeadlineExceeded, GuestExports,
};
use crate::input::{ExecInput, WaitInput};
use crate::output;
use crate::result::{
    CellResult, Completed, ErrorCode, Failed, FailurePhase, Telemetry, WaitReason, Waiting,
};
use crate::source;
use crate::store::{ClaimRefused, Owner, ParkedRun};
use finish::*;
pub(crate) use finish::{host_failure, host_panic, input_failure, quota_failure, unavailable};
use quickcell_snapshot::{self as snapshot, Checkpoint, SnapshotError};
use restore::restore;
use runs::{RunRegistry, SlotGuard};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{Memory, Store, Trap, Val};

/// Warning of a completed cell whose store writes could not be committed.
pub(crate) const STORE_COMMIT_UNCONFIRMED: &str = "Code Mode session store persistence could not be confirmed. The cell completed; verify the session transcript before relying on these values in a later cell or reply.";

/// Message of a cell whose promise can never settle.
pub(crate) const PENDING_WITHOUT_HOST_WORK: &str = "code mode promise is pending without host work";

/// The guest's status JSON (see `wit/bridge.wit`): `state` is
/// `completed` (with `value`), `failed` (with `kind` and `error`) or
/// `pending` (with `requests`).
#[derive(Deserialize)]
struct GuestStatus<'a> {
    state: &'a str,
    #[serde(borrow)]
    value: Option<&'a RawValue>,
    kind: Option<String>,
    error: Option<String>,
}

/// How a call ended, before output fitting.
enum Ending {
    Completed {
        value_json: String,
    },
    Failed {
        code: ErrorCode,
        phase: FailurePhase,
        error: String,
    },
}

/// What a cell call needs from its runtime.
pub(crate) struct CellEnv<'a> {
    pub shared: &'a Arc<SharedEngine>,
    pub limits: &'a Limits,
    /// The fuel this call may spend when a quota cut it below
    /// `limits.fuel()` (the `quota` module).
    pub fuel_allowance: Option<u64>,
    pub tools: &'a Arc<CellTools>,
    /// Builds the tools of a cell that declares client tools.
    pub tools_for_cells: &'a crate::bridge::ToolsForCells,
    /// The runtime's approver, if any.
    pub approver: Option<&'a Arc<dyn crate::approval::Approver>>,
    pub runs: &'a Arc<RunRegistry>,
    /// Parked runs, session values and saved results.
    pub store: &'a Arc<dyn crate::store::StateStore>,
    /// The key that seals stored snapshots (none: the store never leaves
    /// the process).
    pub state_key: Option<&'a crate::state_key::StateKey>,
    pub telemetry: &'a (dyn Fn() -> Telemetry + Sync),
    /// What the call used, for its usage record.
    pub stats: &'a CallStats,
}

/// What one `exec` or `wait` call used besides fuel (its usage record,
/// operations.md §4.2).
#[derive(Default)]
pub(crate) struct CallStats {
    /// Time spent running guest code, in nanoseconds.
    pub guest_ns: std::sync::atomic::AtomicU64,
    /// Tool calls the cell started.
    pub tool_calls: std::sync::atomic::AtomicU64,
    /// Bytes of the snapshot stored when the call parked the cell.
    pub snapshot_bytes: std::sync::atomic::AtomicU64,
}

impl CallStats {
    /// Adds the guest time since `since` (an [`Instant`]).
    pub(crate) fn guest_since(&self, since: Instant) {
        self.guest_ns
            .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

/// The host's per-cell state that a snapshot carries (the guest's state is
/// its linear memory).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HostState {
    run_id: String,
    // Fields at their defaults are left out (~120 bytes of a one-tool
    // cell's snapshot); every one reads back as its default.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    agent_run: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    session: String,
    generation: u64,
    last_request_id: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    delivered_output_bytes: usize,
    max_output_bytes: usize,
    #[serde(default, skip_serializing_if = "crate::bridge::is_false")]
    pub(crate) restart_safe: bool,
    /// The guest's monotonic clock at the checkpoint, in nanoseconds.
    guest_clock_ns: u64,
    parked_unix_ms: u64,
    pub(crate) bridge: BridgeState,
    /// The client tools the cell declared: its catalog is rebuilt from
    /// them wherever it resumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    client_tools: Vec<crate::ClientToolSpec>,
    /// The digest of the tools the cell could call when it parked
    /// ([`CellTools::digest`]).
    #[serde(default)]
    catalog_digest: String,
    /// Whether the cell's promise had settled when it parked (it waited on
    /// detached requests). `None` in snapshots from before this field: the
    /// restore then asks the guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    guest_finished: Option<bool>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A cell with a live instance, during one call.
struct LiveCell {
    store: Store<CellState>,
    exports: GuestExports,
    bridge: Bridge,
    run_id: Option<String>,
    owner: Owner,
    generation: u64,
    delivered: usize,
    max_output: usize,
    restart_safe: bool,
    await_results: bool,
    /// Time this call has waited off the VM with its clock paused — with
    /// `await_results` on, or for approval decisions — in all (bounded by
    /// `HostLimits::max_await_results_ms`).
    awaited: Duration,
    slot: Option<SlotGuard>,
    fuel_start: u64,
    /// What cancels the call (also in the store's [`CellState`]).
    cancel: CancelOn,
    /// The bridge's count of started tool calls when this call began.
    tool_calls_before: u64,
    /// Whether the guest's latest status had an outcome (its promise had
    /// settled); a snapshot keeps it, so a restore need not ask the guest.
    guest_finished: bool,
    /// The lease of this call's claim on the run (a resumed cell): its
    /// park or removal is fenced by it.
    lease: Option<u64>,
}

/// Margin before the deadline at which a cell waiting on host work parks
/// (contract §6: 250 ms, or half the budget when that is smaller).
fn resume_margin(timeout_ms: u64) -> Duration {
    Duration::from_millis(250.min((timeout_ms / 2).max(1)))
}

fn new_run_id() -> String {
    format!("cm_{}", uuid::Uuid::new_v4())
}

/// A fresh instance in its own store (see [`SharedEngine::instance`]), with
/// the cell's state, fuel and deadline (in [`process_nanos`]).
async fn instantiate(
    env: &CellEnv<'_>,
    output_cap: usize,
    clock_offset_ns: u64,
    deadline_ns: u64,
) -> Result<(Store<CellState>, GuestExports, u64), CellResult> {
    let memory_cap = env
        .limits
        .linear_memory_cap(env.shared.initial_memory_bytes);
    // A cell waits for an instance at most until its deadline.
    let wait = Duration::from_nanos(deadline_ns.saturating_sub(process_nanos()));
    let FreshInstance { mut store, exports } = match env.shared.instance(wait).await {
        Ok(fresh) => fresh,
        Err(e) => return Err(unavailable(format!("{e:#}"), (env.telemetry)())),
    };
    store.data_mut().prepare_call(
        memory_cap,
        OutputBuffer::new(output_cap),
        clock_offset_ns,
        deadline_ns,
    );
    let fuel = match (env.fuel_allowance, env.limits.fuel()) {
        (Some(allowance), _) => allowance,
        (None, Fuel::Limited(n)) => n,
        (None, Fuel::Unlimited) => u64::MAX,
    };
    if let Err(e) = store.set_fuel(fuel) {
        return Err(host_failure(
            format!("cannot set fuel: {e}"),
            (env.telemetry)(),
        ));
    }
    Ok((store, exports, fuel))
}

/// Who decides a call's approvals: its caller, when it defers them
/// ([`crate::ExecInput::with_deferred_approvals`]); else its own approver,
/// else the runtime's; `None` when none exists (such calls are denied).
fn approvals(
    env: &CellEnv<'_>,
    controls: &crate::input::CallControls,
    owner: &Owner,
) -> Option<crate::approval::Approvals> {
    use crate::approval::Decider;
    let decider = if controls.defer_approvals {
        Decider::Caller
    } else {
        Decider::Ask(controls.approver.0.as_ref().or(env.approver)?.clone())
    };
    Some(crate::approval::Approvals {
        decider,
        timeout: Duration::from_millis(env.runs.limits.approval_timeout_ms()),
        clock: Arc::default(),
        session: owner.session.clone(),
    })
}

/// The deadline of a call that starts now, in [`process_nanos`].
fn deadline_after(timeout_ms: u64) -> u64 {
    process_nanos().saturating_add(timeout_ms.saturating_mul(1_000_000))
}

/// Runs a new cell (`exec`) until it completes, fails or parks, or
/// `session` (its session's token) or the input's token cancels it.
pub(crate) async fn exec(
    env: &CellEnv<'_>,
    input: &ExecInput,
    session: tokio_util::sync::CancellationToken,
) -> CellResult {
    if let Err(message) = input.validate() {
        return input_failure(message, (env.telemetry)());
    }
    let cancel = CancelOn {
        call: input.controls().cancel_token.clone(),
        session,
        run: Default::default(),
    };
    if cancel.is_cancelled() {
        return aborted_before_start((env.telemetry)());
    }
    let tools = env
        .tools_for_cells
        .for_cell(
            env.tools,
            &input.client_tools,
            input.controls().policy.as_ref(),
        )
        .await;
    let is_tool_global = |name: &str| tools.projection.resolve(name).is_some();
    // Large sources are checked a few at a time process-wide: a hostile one
    // may touch a lot of stack while it is parsed (see `source`).
    static LARGE_CHECKS: tokio::sync::Semaphore =
        tokio::sync::Semaphore::const_new(source::MAX_LARGE_SOURCE_CHECKS);
    let permit = if input.code.len() > source::LARGE_SOURCE_BYTES {
        LARGE_CHECKS.acquire().await.ok()
    } else {
        None
    };
    let prepared = source::prepare_source(&input.code, &is_tool_global);
    drop(permit);
    let cell_function = match prepared {
        Ok(text) => text,
        Err(rejection) => return input_failure(rejection.message(), (env.telemetry)()),
    };
    let deadline = deadline_after(env.limits.timeout_ms());
    let max_output = env.limits.max_output_bytes() as usize;
    let (mut store, exports, fuel_start) = match instantiate(env, max_output, 0, deadline).await {
        Ok(x) => x,
        Err(failure) => return failure,
    };
    store.data_mut().cancel = cancel.clone();
    // The random seed has a fixed width, so parsing it costs the same fuel
    // for every seed; the catalog's members are built once per runtime.
    let options = format!(
        r#"{{"memoryLimitBytes":{},"randomSeed":"{:016x}",{}}}"#,
        input.memory_limit_within(env.limits.memory_limit_bytes()),
        rand_seed(),
        tools.start_options,
    );
    let guest_started = Instant::now();
    let status = exports
        .start(&mut store, &cell_function, &options, &tools.metas_json)
        .await;
    env.stats.guest_since(guest_started);
    let mut bridge = Bridge::new(
        tools.clone(),
        env.limits.max_pending_tool_calls() as usize,
        input.restart_safe,
    )
    .with_reply_inbox(env.limits.reply_inbox_bytes())
    .with_session(SessionAccess {
        state: env.store.clone(),
        owner: input.owner.clone(),
    });
    bridge.set_progress(input.controls().progress.clone());
    bridge.set_approvals(approvals(env, input.controls(), &input.owner));
    let cell = LiveCell {
        store,
        exports,
        bridge,
        run_id: None,
        owner: input.owner.clone(),
        generation: 0,
        delivered: 0,
        max_output,
        restart_safe: input.restart_safe,
        await_results: input.await_results,
        awaited: Duration::ZERO,
        slot: None,
        fuel_start,
        cancel,
        tool_calls_before: 0,
        guest_finished: false,
        lease: None,
    };
    cell.drive(env, status).await
}

/// The unknown-run error's guidance when the catalog has a `process` tool
/// (contract §4's message catalogue); never given otherwise.
pub(crate) const PROCESS_GUIDANCE: &str = " If this id came from a background shell session, poll it with the `process` tool (action \"poll\"), not with `wait`.";

/// The contract's message for a refused `wait`.
fn refusal_message(refused: ClaimRefused, tools: &crate::bridge::CellTools) -> String {
    match refused {
        ClaimRefused::Unavailable if tools.has_process_tool => {
            format!("code mode run is unavailable or expired.{PROCESS_GUIDANCE}")
        }
        ClaimRefused::Unavailable => "code mode run is unavailable or expired.".into(),
        ClaimRefused::OtherAgentRun => "code mode run belongs to a different agent run.".into(),
        ClaimRefused::OtherSession => "code mode run belongs to a different session.".into(),
        ClaimRefused::Busy => "code mode run is already being resumed.".into(),
        // Answered as `snapshot_incompatible` before it gets here.
        ClaimRefused::OtherGuestBuild { parked } => {
            format!("code mode run was parked by guest build {parked}.")
        }
    }
}

/// Resumes a parked cell (`wait`); cancelled as [`exec`] is.
pub(crate) async fn wait(
    env: &CellEnv<'_>,
    input: &WaitInput,
    session: tokio_util::sync::CancellationToken,
) -> CellResult {
    if let Err(message) = input.validate() {
        return input_failure(message, (env.telemetry)());
    }
    let mut cancel = CancelOn {
        call: input.controls().cancel_token.clone(),
        session,
        run: Default::default(),
    };
    if cancel.is_cancelled() {
        return aborted_before_start((env.telemetry)());
    }
    let run_id = input.run_id.trim();
    let now = unix_ms();
    // A claim outlives this call's deadline by the hard-stop grace, so a
    // `wait` that is still running is never mistaken for an abandoned one.
    let claim_until = now + env.limits.timeout_ms() + CLAIM_GRACE_MS;
    // Only a host carrying the guest build that parked a run can resume
    // it; a cancel needs no guest.
    let guest_build = (!input.cancel).then(crate::guest_build);
    let claimed = match env
        .store
        .claim(run_id, &input.owner, guest_build, now, claim_until)
        .await
    {
        Ok(Ok(claimed)) => claimed,
        // Refused before the claim: the run stays parked, untouched.
        Ok(Err(ClaimRefused::OtherGuestBuild { parked })) => {
            return restore::incompatible(
                run_id,
                Some(&parked),
                &SnapshotError::ForeignGuest,
                (env.telemetry)(),
            );
        }
        // Cancelling a run that a `wait` of this process is resuming ends
        // that `wait` (aborted, the run removed); this call reports it.
        Ok(Err(ClaimRefused::Busy)) if input.cancel && env.runs.cancel_resuming(run_id) => {
            return aborted((env.telemetry)());
        }
        // Another process resumes it: the cancel is recorded there, and
        // that process ends its `wait` (`aborted`, the run removed) when it
        // reads the record — at once, or at its next poll.
        Ok(Err(ClaimRefused::Busy)) if input.cancel => {
            let expires = now.saturating_add(crate::store::CANCEL_RECORD_TTL_MS);
            return match env
                .store
                .record_cancels(&[run_id.to_string()], expires)
                .await
            {
                Ok(()) => aborted((env.telemetry)()),
                Err(e) => host_failure(
                    format!("InternalError: cannot record the cancel in the state store: {e:#}"),
                    (env.telemetry)(),
                ),
            };
        }
        Ok(Err(refused)) => {
            let refused = match refused {
                ClaimRefused::OtherAgentRun | ClaimRefused::OtherSession
                    if input.controls().conceal_owners =>
                {
                    ClaimRefused::Unavailable
                }
                other => other,
            };
            return input_failure(refusal_message(refused, env.tools), (env.telemetry)());
        }
        Err(e) => {
            return host_failure(
                format!("InternalError: cannot read the state store: {e:#}"),
                (env.telemetry)(),
            );
        }
    };
    // This process's bridge of the run, taken over only once the run is
    // claimed (a refused `wait` leaves its drainer alone). A drainer that
    // records a settlement after the claim read them is harmless: the live
    // bridge holds it too, and the recorded ones are used only without it.
    let live = env.runs.take_live(run_id, claimed.generation).await;
    if input.cancel {
        return abandon(env, run_id, live).await;
    }
    let lease = claimed.lease;
    let resuming = env.runs.resuming(run_id);
    cancel.run = resuming.token.clone();
    let restoring =
        tracing::info_span!("restore", run_id = %run_id, session = %input.owner.session);
    let restored = tracing::Instrument::instrument(
        restore(env, run_id, claimed, live, cancel, input),
        restoring,
    )
    .await;
    match restored {
        Ok((cell, status)) => cell.drive(env, status).await,
        Err(failure) => {
            // A runtime that cannot start, answers the run does not wait
            // on, or a snapshot of another guest build leave the run parked
            // for a later `wait`; an unusable snapshot is removed.
            let unavailable = matches!(&failure, CellResult::Failed(f) if matches!(f.code, ErrorCode::RuntimeUnavailable | ErrorCode::SnapshotIncompatible) || f.failure_phase == FailurePhase::Input);
            let cleanup = if unavailable {
                env.store.unclaim(run_id, lease).await
            } else {
                env.store.release(run_id, lease).await.map(drop)
            };
            if let Err(e) = cleanup {
                tracing::warn!(run_id, error = %e, "cannot release a run that failed to restore");
            }
            failure
        }
    }
}

/// Abandons a parked run this call has claimed (`wait {cancel: true}`,
/// [`crate::Runtime::cancel`]): removes it from the state store, which
/// frees its slot and discards what it buffered (session-store writes),
/// and drops this process's bridge of it, which sends every tool call still
/// running its cancel signal. Returns the `aborted` result; a later `wait`
/// gets the unknown-run error.
async fn abandon(
    env: &CellEnv<'_>,
    run_id: &str,
    live: Option<crate::bridge::Bridge>,
) -> CellResult {
    drop(live);
    // Drainers of earlier generations of it too.
    env.runs.forget_live(&[run_id.to_string()]);
    if let Err(e) = env.store.remove(run_id).await {
        return host_failure(
            format!("InternalError: cannot remove the cancelled run from the state store: {e:#}"),
            (env.telemetry)(),
        );
    }
    // Another process may still drain its tool calls: the record tells it
    // to cancel them now rather than at their next settlement.
    let expires = unix_ms().saturating_add(crate::store::CANCEL_RECORD_TTL_MS);
    if let Err(e) = env
        .store
        .record_cancels(&[run_id.to_string()], expires)
        .await
    {
        tracing::warn!(run_id, error = %format!("{e:#}"), "cannot record a cancel; other hosts end the run's calls at their next settlement");
    }
    aborted((env.telemetry)())
}

/// How long past a `wait`'s deadline its claim on the run lasts, in
/// milliseconds (the contract's 2,000 ms hard-stop grace).
const CLAIM_GRACE_MS: u64 = 2_000;

impl LiveCell {
    fn telemetry(&self, env: &CellEnv<'_>) -> Telemetry {
        let mut telemetry = (env.telemetry)();
        telemetry.fuel_used = self
            .fuel_start
            .saturating_sub(self.store.get_fuel().unwrap_or(0));
        telemetry
    }

    /// Records the tool calls this call started in its usage record.
    fn count_tool_calls(&self, env: &CellEnv<'_>) {
        let started = self
            .bridge
            .tool_calls_started()
            .saturating_sub(self.tool_calls_before);
        env.stats.tool_calls.store(started, Ordering::Relaxed);
    }

    fn replay_safe(&self) -> Option<bool> {
        self.restart_safe.then_some(true)
    }

    fn park_at(&self, env: &CellEnv<'_>) -> Instant {
        // A runtime shutting down parks what waits at once.
        if env.runs.draining.is_cancelled() {
            return Instant::now();
        }
        let left_ns = self
            .store
            .data()
            .deadline_ns
            .saturating_sub(process_nanos());
        let margin = resume_margin(env.limits.timeout_ms());
        Instant::now() + Duration::from_nanos(left_ns).saturating_sub(margin)
    }
}

/// Durations of the process's latest checkpoint and restore, for
/// benchmarks (`quickcell::testing::last_suspend_stats`).
pub(crate) mod stats {
    use std::sync::atomic::AtomicU64;
    /// GC, memory diff and compression of the latest checkpoint.
    pub static CHECKPOINT_NANOS: AtomicU64 = AtomicU64::new(0);
    /// The garbage collection part of `CHECKPOINT_NANOS`.
    pub static COLLECT_NANOS: AtomicU64 = AtomicU64::new(0);
    /// Writing the latest parked run to the state store.
    pub static PERSIST_NANOS: AtomicU64 = AtomicU64::new(0);
    /// Size of the latest stored snapshot.
    pub static SNAPSHOT_BYTES: AtomicU64 = AtomicU64::new(0);
    /// Uncompressed payload (changed pages and host state) of the latest
    /// snapshot: what `maxSnapshotBytes` bounds.
    pub static PAYLOAD_BYTES: AtomicU64 = AtomicU64::new(0);
    /// Decode, instantiation, page writes and reseed of the latest restore.
    pub static RESTORE_NANOS: AtomicU64 = AtomicU64::new(0);
}

/// Drops a finished cell's store (its instance goes back to the pool) after
/// the result has been returned, keeping the teardown off the call's
/// latency.
/// With `learn`, the engine first learns its hot pages from the cell's
/// memory (also off the call's latency).
fn release_in_background(store: Store<CellState>, learn: Option<(Arc<SharedEngine>, Memory)>) {
    tokio::spawn(async move {
        if let Some((shared, memory)) = learn {
            shared.learn_hot_pages(memory.data(&store));
        }
        drop(store)
    });
}
