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
//! | `timeoutMs` | the guest yields every [`crate::engine::YIELD_FUEL`] of fuel; each guest call is checked against the real clock then and fails with [`DeadlineExceeded`] ([`crate::abi::before_deadline`]) | `timeout` |
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

use crate::abi::{process_nanos, CellState, DeadlineExceeded, GuestExports};
use crate::bridge::{unix_ms, Bridge, BridgeState, CellTools, SessionAccess};
use crate::channel::OutputBuffer;
use crate::config::{Fuel, Limits};
use crate::engine::{FreshInstance, SharedEngine};
use crate::input::{ExecInput, WaitInput};
use crate::output;
use crate::result::{
    CellResult, Completed, ErrorCode, Failed, FailurePhase, PendingToolCall, Telemetry, WaitReason,
    Waiting,
};
use crate::runs::{RunRegistry, SlotGuard};
use crate::source;
use crate::state::{ClaimRefused, Owner, ParkedRun};
use quickcell_snapshot::{self as snapshot, Checkpoint, SnapshotError};
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
    pub tools: &'a Arc<CellTools>,
    pub runs: &'a Arc<RunRegistry>,
    pub telemetry: &'a (dyn Fn() -> Telemetry + Sync),
}

/// The host's per-cell state that a snapshot carries (the guest's state is
/// its linear memory).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HostState {
    run_id: String,
    agent_run: String,
    session: String,
    generation: u64,
    last_request_id: u64,
    delivered_output_bytes: usize,
    max_output_bytes: usize,
    restart_safe: bool,
    /// The guest's monotonic clock at the checkpoint, in nanoseconds.
    guest_clock_ns: u64,
    parked_unix_ms: u64,
    bridge: BridgeState,
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
    slot: Option<SlotGuard>,
    fuel_start: u64,
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
    let FreshInstance { mut store, exports } = match env.shared.instance().await {
        Ok(fresh) => fresh,
        Err(e) => return Err(unavailable(format!("{e:#}"), (env.telemetry)())),
    };
    store.data_mut().prepare_call(
        memory_cap,
        OutputBuffer::new(output_cap),
        clock_offset_ns,
        deadline_ns,
    );
    let fuel = match env.limits.fuel() {
        Fuel::Limited(n) => n,
        Fuel::Unlimited => u64::MAX,
    };
    if let Err(e) = store.set_fuel(fuel) {
        return Err(host_failure(
            format!("cannot set fuel: {e}"),
            (env.telemetry)(),
        ));
    }
    Ok((store, exports, fuel))
}

/// The deadline of a call that starts now, in [`process_nanos`].
fn deadline_after(timeout_ms: u64) -> u64 {
    process_nanos().saturating_add(timeout_ms.saturating_mul(1_000_000))
}

/// Runs a new cell (`exec`) until it completes, fails or parks.
pub(crate) async fn exec(env: &CellEnv<'_>, input: &ExecInput) -> CellResult {
    if let Err(message) = input.validate() {
        return input_failure(message, (env.telemetry)());
    }
    let is_tool_global = |name: &str| env.tools.projection.resolve(name).is_some();
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
    // The random seed has a fixed width, so parsing it costs the same fuel
    // for every seed; the catalog's members are built once per runtime.
    let options = format!(
        r#"{{"memoryLimitBytes":{},"randomSeed":"{:016x}",{}}}"#,
        env.limits.memory_limit_bytes(),
        rand_seed(),
        env.tools.start_options,
    );
    let status = exports
        .start(&mut store, &cell_function, &options, &env.tools.metas_json)
        .await;
    let cell = LiveCell {
        store,
        exports,
        bridge: Bridge::new(
            env.tools.clone(),
            env.limits.max_pending_tool_calls() as usize,
            input.restart_safe,
        )
        .with_reply_inbox(env.limits.reply_inbox_bytes())
        .with_session(SessionAccess {
            state: env.runs.store.clone(),
            owner: input.owner.clone(),
        }),
        run_id: None,
        owner: input.owner.clone(),
        generation: 0,
        delivered: 0,
        max_output,
        restart_safe: input.restart_safe,
        await_results: input.await_results,
        slot: None,
        fuel_start,
    };
    cell.drive(env, status).await
}

/// The contract's message for a refused `wait`.
fn refusal_message(refused: ClaimRefused) -> &'static str {
    match refused {
        ClaimRefused::Unavailable => "code mode run is unavailable or expired.",
        ClaimRefused::OtherAgentRun => "code mode run belongs to a different agent run.",
        ClaimRefused::OtherSession => "code mode run belongs to a different session.",
        ClaimRefused::Busy => "code mode run is already being resumed.",
    }
}

/// Resumes a parked cell (`wait`).
pub(crate) async fn wait(env: &CellEnv<'_>, input: &WaitInput) -> CellResult {
    if let Err(message) = input.validate() {
        return input_failure(message, (env.telemetry)());
    }
    let run_id = input.run_id.trim();
    let live = env.runs.take_live(run_id).await;
    let now = unix_ms();
    // A claim outlives this call's deadline by the hard-stop grace, so a
    // `wait` that is still running is never mistaken for an abandoned one.
    let claim_until = now + env.limits.timeout_ms() + CLAIM_GRACE_MS;
    let claimed = match env.runs.store.claim(run_id, &input.owner, now, claim_until) {
        Ok(Ok(claimed)) => claimed,
        Ok(Err(refused)) => {
            if let (Some(bridge), false) = (live, refused == ClaimRefused::Unavailable) {
                env.runs.put_back(run_id, bridge);
            }
            return input_failure(refusal_message(refused).to_string(), (env.telemetry)());
        }
        Err(e) => {
            if let Some(bridge) = live {
                env.runs.put_back(run_id, bridge);
            }
            return host_failure(
                format!("InternalError: cannot read the state store: {e:#}"),
                (env.telemetry)(),
            );
        }
    };
    match restore(env, run_id, claimed, live).await {
        Ok((cell, status)) => cell.drive(env, status).await,
        Err(failure) => {
            // A runtime that cannot start leaves the run parked for a later
            // `wait`; an unusable snapshot is removed.
            let unavailable = matches!(&failure, CellResult::Failed(f) if f.code == ErrorCode::RuntimeUnavailable);
            let cleanup = if unavailable {
                env.runs.store.unclaim(run_id)
            } else {
                env.runs.store.remove(run_id)
            };
            if let Err(e) = cleanup {
                tracing::warn!(run_id, error = %e, "cannot release a run that failed to restore");
            }
            failure
        }
    }
}

/// How long past a `wait`'s deadline its claim on the run lasts, in
/// milliseconds (the contract's 2,000 ms hard-stop grace).
const CLAIM_GRACE_MS: u64 = 2_000;

/// Restores a claimed run into a fresh instance and delivers what settled
/// while it was parked. Returns the cell and the guest's status.
async fn restore(
    env: &CellEnv<'_>,
    run_id: &str,
    claimed: crate::state::Claimed,
    live: Option<Bridge>,
) -> Result<(LiveCell, wasmtime::Result<String>), CellResult> {
    let unusable = |e: String| {
        CellResult::Failed(Failed {
            mcp_outage: Default::default(),
            untrusted_source: None,
            error: format!("InternalError: code mode snapshot is unusable: {e}"),
            code: ErrorCode::InternalError,
            output: Vec::new(),
            telemetry: (env.telemetry)(),
            failure_phase: FailurePhase::Host,
            bridge_dispatch_started: true,
            replay_safe: None,
        })
    };
    let restore_started = Instant::now();
    // A snapshot can claim no more memory than this runtime would let the
    // cell have: the decoder's bounds (and what a forged one can make it
    // decompress) follow the tenant's limits, not the pool's maximum.
    let ceiling = env
        .limits
        .linear_memory_cap(env.shared.initial_memory_bytes)
        .min(crate::engine::POOL_MAX_MEMORY_BYTES);
    let snapshot = snapshot::decode(&claimed.snapshot, crate::engine::guest_hash(), ceiling)
        .map_err(|e| unusable(e.to_string()))?;
    let host: HostState = serde_json::from_slice(&snapshot.host_state)
        .map_err(|e| unusable(format!("unreadable host state: {e}")))?;
    if host.run_id != run_id {
        return Err(unusable(format!(
            "it belongs to run {}, not {run_id}",
            host.run_id
        )));
    }
    // The guest's clock continues from its reading at the checkpoint plus
    // the wall time spent parked.
    let parked_ns = unix_ms().saturating_sub(host.parked_unix_ms) * 1_000_000;
    let target = host.guest_clock_ns.saturating_add(parked_ns);
    let clock_offset = target.saturating_sub(process_nanos());
    let deadline = deadline_after(env.limits.timeout_ms());
    let output_cap = host
        .max_output_bytes
        .saturating_sub(host.delivered_output_bytes);
    let (mut store, exports, fuel_start) =
        instantiate(env, output_cap, clock_offset, deadline).await?;
    let memory = exports.memory;
    let current = memory.data_size(&store);
    if snapshot.memory_bytes < current {
        return Err(unusable(format!(
            "its memory ({} bytes) is smaller than the guest's image",
            snapshot.memory_bytes
        )));
    }
    let grow_pages = ((snapshot.memory_bytes - current) / 65536) as u64;
    if grow_pages > 0 && memory.grow(&mut store, grow_pages).is_err() {
        return Err(CellResult::Failed(Failed {
            mcp_outage: Default::default(),
            untrusted_source: None,
            error: crate::Error::MemoryLimitExceeded.to_string(),
            code: ErrorCode::MemoryLimitExceeded,
            output: Vec::new(),
            telemetry: (env.telemetry)(),
            failure_phase: FailurePhase::Host,
            bridge_dispatch_started: true,
            replay_safe: None,
        }));
    }
    let stack_pointer = snapshot.stack_pointer;
    let image_bytes = env.shared.memory_image.len();
    if let Err(e) = snapshot.apply(memory.data_mut(&mut store), image_bytes) {
        return Err(unusable(e.to_string()));
    }
    let sp = Val::I32(stack_pointer as i32);
    if let Err(e) = exports.stack_pointer.set(&mut store, sp) {
        return Err(unusable(format!("cannot set the stack pointer: {e}")));
    }
    store.data_mut().last_request_id = host.last_request_id;
    // Restoring consumes no fuel: the reseed runs before the allowance is
    // set again.
    if let Err(e) = exports.resume(&mut store, rand_seed()).await {
        return Err(unusable(format!("the guest could not resume: {e}")));
    }
    let _ = store.set_fuel(fuel_start);
    stats::RESTORE_NANOS.store(
        restore_started.elapsed().as_nanos() as u64,
        Ordering::Relaxed,
    );
    let mut bridge = match live {
        Some(bridge) => bridge,
        None => {
            let recorded = claimed
                .settlements
                .iter()
                .filter_map(|s| serde_json::from_str(s).ok())
                .collect();
            Bridge::restore(
                env.tools.clone(),
                env.limits.max_pending_tool_calls() as usize,
                host.restart_safe,
                host.bridge,
                recorded,
            )
            .with_reply_inbox(env.limits.reply_inbox_bytes())
            .with_session(SessionAccess {
                state: env.runs.store.clone(),
                owner: Owner {
                    agent_run: host.agent_run.clone(),
                    session: host.session.clone(),
                },
            })
        }
    };
    bridge.release_yields();
    bridge.collect_finished();
    let batch = bridge.take_ready();
    let status = if batch.is_empty() {
        exports.status(&mut store).await
    } else {
        exports
            .settle(
                &mut store,
                &serde_json::to_string(&batch).unwrap_or_default(),
            )
            .await
    };
    let cell = LiveCell {
        store,
        exports,
        bridge,
        run_id: Some(run_id.to_string()),
        owner: Owner {
            agent_run: host.agent_run,
            session: host.session,
        },
        generation: claimed.generation,
        delivered: host.delivered_output_bytes,
        max_output: host.max_output_bytes,
        restart_safe: host.restart_safe,
        // `wait` of a parked cell returns when the cell parks again.
        await_results: false,
        slot: None,
        fuel_start,
    };
    Ok((cell, status))
}

impl LiveCell {
    fn telemetry(&self, env: &CellEnv<'_>) -> Telemetry {
        let mut telemetry = (env.telemetry)();
        telemetry.fuel_used = self
            .fuel_start
            .saturating_sub(self.store.get_fuel().unwrap_or(0));
        telemetry
    }

    fn replay_safe(&self) -> Option<bool> {
        self.restart_safe.then_some(true)
    }

    fn park_at(&self, env: &CellEnv<'_>) -> Instant {
        let left_ns = self
            .store
            .data()
            .deadline_ns
            .saturating_sub(process_nanos());
        let margin = resume_margin(env.limits.timeout_ms());
        Instant::now() + Duration::from_nanos(left_ns).saturating_sub(margin)
    }

    /// The boundary loop (contract §9.2): dispatch the guest's requests,
    /// deliver settlements, run the guest again; end, or park.
    async fn drive(mut self, env: &CellEnv<'_>, first: wasmtime::Result<String>) -> CellResult {
        let mut status = first;
        loop {
            let json = match status {
                Ok(json) => json,
                Err(err) => {
                    let ending = ending_from_trap(err, self.store.data());
                    return self.end(env, ending);
                }
            };
            let state = self.store.data_mut();
            let cancels = std::mem::take(&mut state.cancels);
            let requests = std::mem::take(&mut state.requests);
            state.request_bytes = 0;
            let dropped = std::mem::take(&mut state.requests_dropped);
            self.bridge.cancel(cancels);
            if !requests.is_empty() && self.run_id.is_none() && self.slot.is_none() {
                if let Err(message) = self.bridge.check_capacity(requests.len() + dropped) {
                    return self.end(env, bridge_failure(message));
                }
                match env.runs.take_slot(&self.owner.session) {
                    Ok(Ok(slot)) => self.slot = Some(slot),
                    Ok(Err(refused)) => {
                        let message = refused.message(&env.runs.limits);
                        return self.end(env, bridge_failure(message));
                    }
                    Err(e) => {
                        return self.end(
                            env,
                            Ending::Failed {
                                code: ErrorCode::InternalError,
                                phase: FailurePhase::Host,
                                error: format!("InternalError: cannot read the state store: {e:#}"),
                            },
                        )
                    }
                }
            }
            if let Err(message) = self.bridge.accept(requests, dropped) {
                return self.end(env, bridge_failure(message));
            }
            // `None`: the cell's promise has not settled yet.
            match ending_from_status(&json) {
                Some(ending @ Ending::Failed { .. }) => return self.end(env, ending),
                Some(ending) if !self.bridge.has_work() => return self.end(env, ending),
                None if !self.bridge.has_work() => {
                    // A cell can look pending with nothing left to do
                    // because it ran out of memory: an allocation that failed
                    // inside a promise reaction rejects that promise instead
                    // of failing the job (`loop = () => Promise.resolve()
                    // .then(loop)` breaks its chain that way), and nothing
                    // observes the rejection. That is the memory limit's
                    // doing, as is a stop at the deadline the deadline's.
                    let data = self.store.data();
                    let ending = if data.memory_refused {
                        Ending::Failed {
                            code: ErrorCode::MemoryLimitExceeded,
                            phase: FailurePhase::Guest,
                            error: crate::Error::MemoryLimitExceeded.to_string(),
                        }
                    } else if process_nanos() >= data.deadline_ns {
                        Ending::Failed {
                            code: ErrorCode::Timeout,
                            phase: FailurePhase::Guest,
                            error: crate::Error::Timeout.to_string(),
                        }
                    } else {
                        Ending::Failed {
                            code: ErrorCode::InternalError,
                            phase: FailurePhase::Guest,
                            error: format!("Error: {PENDING_WITHOUT_HOST_WORK}"),
                        }
                    };
                    return self.end(env, ending);
                }
                // Awaiting (result pending) or draining (value ready,
                // detached requests outstanding).
                _ => {}
            }
            if self.bridge.has_yield() {
                if self.await_results {
                    // A required cell cannot hand control back to the
                    // model: its yields resolve at once.
                    self.bridge.release_yields();
                } else {
                    return self.park(env).await;
                }
            }
            let batch = if self.await_results {
                // Waiting on tools pauses the clock of a required cell.
                let waiting_since = process_nanos();
                let batch = self.bridge.next_batch(None).await;
                let waited = process_nanos().saturating_sub(waiting_since);
                let deadline = &mut self.store.data_mut().deadline_ns;
                *deadline = deadline.saturating_add(waited);
                batch
            } else {
                let park_at = self.park_at(env);
                if Instant::now() >= park_at {
                    None
                } else {
                    self.bridge.next_batch(Some(park_at)).await
                }
            };
            match batch {
                Some(batch) if batch.is_empty() => status = Ok(json),
                Some(batch) => {
                    let results = serde_json::to_string(&batch).unwrap_or_default();
                    status = self.exports.settle(&mut self.store, &results).await;
                }
                None => return self.park(env).await,
            }
        }
    }

    /// Ends the cell: fits the result into the remaining output budget and
    /// forgets the run.
    fn end(mut self, env: &CellEnv<'_>, ending: Ending) -> CellResult {
        let mut warnings = Vec::new();
        // Store writes are committed once, atomically, iff the cell
        // completed; any other ending discards them.
        let writes = self.bridge.take_store_writes();
        if matches!(ending, Ending::Completed { .. }) && !writes.is_empty() {
            if let Err(e) = env.runs.store.store_commit(&self.owner.session, &writes) {
                tracing::warn!(error = %e, "session store commit failed");
                warnings.push(STORE_COMMIT_UNCONFIRMED.to_string());
            }
        }
        let telemetry = self.telemetry(env);
        let output = std::mem::take(&mut self.store.data_mut().output);
        let dispatch_started = self.bridge.dispatch_started;
        if let Some(run_id) = &self.run_id {
            if let Err(e) = env.runs.store.remove(run_id) {
                tracing::warn!(run_id, error = %e, "cannot remove a finished run");
            }
        }
        let replay_safe = self.replay_safe();
        let untrusted_source = self.bridge.untrusted_source();
        let budget = self.max_output.saturating_sub(self.delivered);
        // Only a value over half the budget can be cut (§10.2).
        let oversized = match &ending {
            Ending::Completed { value_json } if value_json.len() > budget / 2 => {
                Some(value_json.as_str())
            }
            _ => None,
        };
        let restart_safe = self.restart_safe;
        let owner = self.owner.clone();
        // A fresh cell that completed shows which image pages cells write.
        let learn = (self.generation == 0
            && matches!(ending, Ending::Completed { .. })
            && env.shared.hot_pages.get().is_none())
        .then(|| (env.shared.clone(), self.exports.memory));
        release_in_background(self.store, learn);
        let mut result = finish(&ending, output, budget, dispatch_started, telemetry);
        result.set_untrusted_source(untrusted_source);
        match &mut result {
            CellResult::Completed(c) => {
                c.replay_safe = replay_safe;
                c.warnings = warnings;
                if let Some(original) = oversized {
                    let reference = AutoReference {
                        state: &*env.runs.store,
                        agent_run: &owner.agent_run,
                        capacity_bytes: env.limits.reply_inbox_bytes(),
                        restart_safe,
                    };
                    reference.apply(c, original, budget);
                }
            }
            CellResult::Failed(f) => f.replay_safe = replay_safe,
            CellResult::Waiting(w) => w.replay_safe = replay_safe,
        }
        result
    }

    /// Checkpoints the cell and parks it (contract §9.3).
    async fn park(mut self, env: &CellEnv<'_>) -> CellResult {
        let checkpoint_started = Instant::now();
        // Collect garbage (past 1 MiB of new heap) and zero the free pages
        // so the snapshot holds live data; it costs the cell no fuel.
        let fuel = self.store.get_fuel().unwrap_or(0);
        let block_units = match self.exports.checkpoint(&mut self.store).await {
            Ok(units) => units,
            Err(err) => {
                let ending = ending_from_trap(err, self.store.data());
                return self.end(env, ending);
            }
        };
        let _ = self.store.set_fuel(fuel);
        stats::COLLECT_NANOS.store(
            checkpoint_started.elapsed().as_nanos() as u64,
            Ordering::Relaxed,
        );
        let telemetry = self.telemetry(env);
        let run_id = self.run_id.clone().unwrap_or_else(new_run_id);
        let output = std::mem::take(&mut self.store.data_mut().output);
        let budget = self.max_output.saturating_sub(self.delivered);
        let fitted = match output::fit_to_budget_with_dropped(
            budget,
            output.to_values(),
            None,
            None,
            output.stand_in_shortfall(),
        ) {
            Ok(f) => f,
            Err(e) => {
                return self.end(
                    env,
                    Ending::Failed {
                        code: ErrorCode::OutputLimitExceeded,
                        phase: FailurePhase::Host,
                        error: format!("code mode output limit exceeded: {e}"),
                    },
                )
            }
        };
        let delivered_output = fitted.output;
        let parked_unix_ms = unix_ms();
        let host = HostState {
            run_id: run_id.clone(),
            agent_run: self.owner.agent_run.clone(),
            session: self.owner.session.clone(),
            generation: self.generation + 1,
            last_request_id: self.store.data().last_request_id,
            delivered_output_bytes: self.delivered + fitted.used_bytes,
            max_output_bytes: self.max_output,
            restart_safe: self.restart_safe,
            guest_clock_ns: self
                .store
                .data()
                .clock_offset_ns
                .saturating_add(process_nanos()),
            parked_unix_ms,
            bridge: self.bridge.parked_state(),
        };
        let host_json = serde_json::to_vec(&host).expect("host state serializes");
        let stack_pointer = self
            .exports
            .stack_pointer
            .get(&mut self.store)
            .i32()
            .unwrap_or(0) as u32;
        let memory = self.exports.memory.data(&self.store);
        // Below the stack pointer the shadow stack holds nothing live.
        let dead_stack = env.shared.stack.start..(stack_pointer as usize).min(env.shared.stack.end);
        let encoded = snapshot::encode(&Checkpoint {
            memory,
            image: &env.shared.memory_image,
            memory_maps_image: true,
            block_units: &block_units,
            dead: dead_stack,
            stack_pointer,
            host_state: &host_json,
            guest_hash: crate::engine::guest_hash(),
            max_payload_bytes: env.limits.max_snapshot_bytes() as usize,
        });
        let checkpointed = Instant::now();
        stats::CHECKPOINT_NANOS.store(
            (checkpointed - checkpoint_started).as_nanos() as u64,
            Ordering::Relaxed,
        );
        let (bytes, payload_bytes) = match encoded {
            Ok(encoded) => (encoded.bytes, encoded.payload_bytes),
            Err(e) => {
                tracing::info!(run_id, error = %e, "checkpoint refused");
                let (code, error) = match e {
                    SnapshotError::TooLarge { .. } => (
                        ErrorCode::SnapshotLimitExceeded,
                        crate::Error::SnapshotLimitExceeded.to_string(),
                    ),
                    other => (
                        ErrorCode::InternalError,
                        format!("InternalError: checkpoint failed: {other}"),
                    ),
                };
                // The output that would have been delivered is kept.
                self.store.data_mut().output = output;
                return self.end(
                    env,
                    Ending::Failed {
                        code,
                        phase: FailurePhase::Host,
                        error,
                    },
                );
            }
        };
        let ttl_ms = env.limits.snapshot_ttl_seconds().saturating_mul(1000);
        let expires_at_ms = parked_unix_ms.saturating_add(ttl_ms);
        let parked = ParkedRun {
            run_id: run_id.clone(),
            owner: self.owner.clone(),
            generation: host.generation,
            expires_at_ms,
            snapshot: bytes,
        };
        stats::SNAPSHOT_BYTES.store(parked.snapshot.len() as u64, Ordering::Relaxed);
        stats::PAYLOAD_BYTES.store(payload_bytes as u64, Ordering::Relaxed);
        let stored = env.runs.store.park(&parked);
        stats::PERSIST_NANOS.store(checkpointed.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if let Err(e) = stored {
            self.store.data_mut().output = output;
            self.run_id = Some(run_id);
            return self.end(
                env,
                Ending::Failed {
                    code: ErrorCode::InternalError,
                    phase: FailurePhase::Host,
                    error: format!("InternalError: cannot store the parked run: {e:#}"),
                },
            );
        }
        let reason = if self.bridge.only_yields() {
            WaitReason::Yield
        } else {
            WaitReason::PendingTools
        };
        let pending_tool_calls = self
            .bridge
            .pending_calls()
            .into_iter()
            .map(|(id, method)| PendingToolCall {
                id: format!("bridge:{method}:{id}"),
                method,
            })
            .collect();
        let replay_safe = self.replay_safe();
        let untrusted_source = self.bridge.untrusted_source();
        let LiveCell {
            bridge,
            store,
            slot,
            ..
        } = self;
        release_in_background(store, None);
        env.runs
            .keep_live(&run_id, host.generation, expires_at_ms, bridge);
        // The stored run holds the slot from now on.
        drop(slot);
        CellResult::Waiting(Waiting {
            mcp_outage: Default::default(),
            untrusted_source,
            run_id,
            reason,
            pending_tool_calls,
            output: delivered_output,
            telemetry,
            replay_safe,
        })
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

/// Automatic references (contract §10.4): a final array or object that had
/// to be cut is saved as a result, and the value becomes
/// `{truncated: true, reference: <descriptor>, guidance}`; when it cannot
/// be kept, the truncation marker's guidance says why ("Not retained: …").
struct AutoReference<'a> {
    state: &'a dyn crate::state::StateStore,
    agent_run: &'a str,
    capacity_bytes: usize,
    restart_safe: bool,
}

/// Guidance of a value replaced by an automatic reference.
const REFERENCE_GUIDANCE: &str = "Output truncated; the full value was saved. Load it in a later cell with await results.load(reference.id).";

impl AutoReference<'_> {
    fn apply(&self, completed: &mut Completed, original: &str, budget: usize) {
        if completed.value["truncated"] != Value::Bool(true) {
            return;
        }
        // Plain strings and scalars never get a reference.
        if !original.starts_with(['[', '{']) {
            return;
        }
        let used_output = output::output_len(&completed.output);
        let allowance = budget.saturating_sub(used_output);
        let not_retained =
            |guidance: &str| output::truncation_marker_with_guidance(original, allowance, guidance);
        const TOO_LARGE: &str =
            "Not retained: result exceeds the data allowance. Return less data.";
        // Measured on the guest's text before anything is parsed, so a
        // value over the allowance never becomes a tree on the host (its
        // canonical text could only be shorter where serde writes a number
        // more briefly than JavaScript, e.g. `1e20`).
        if self.restart_safe {
            if let Some(marker) =
                not_retained("Not retained in restart-safe mode. Return less data.")
            {
                completed.value = marker;
            }
            return;
        }
        if original.len() > self.capacity_bytes {
            if let Some(marker) = not_retained(TOO_LARGE) {
                completed.value = marker;
            }
            return;
        }
        let Ok(value) = serde_json::from_str::<Value>(original) else {
            return;
        };
        let replacement = if output::json_len(&value) > self.capacity_bytes {
            not_retained(TOO_LARGE)
        } else {
            match crate::bridge::save_result(self.state, self.agent_run, &value, self.capacity_bytes) {
                Ok(Ok(descriptor)) => {
                    let id = descriptor["id"].as_str().unwrap_or_default().to_string();
                    let marker = serde_json::json!({
                        "truncated": true,
                        "reference": descriptor,
                        "guidance": REFERENCE_GUIDANCE,
                    });
                    if output::json_len(&marker) <= allowance {
                        Some(marker)
                    } else {
                        let _ = self.state.result_delete(self.agent_run, &id);
                        not_retained("Not retained: reference exceeds output budget. Return less data.")
                    }
                }
                Ok(Err(_full)) => not_retained(
                    "Not retained: result-store capacity exceeded. Delete references or return less data.",
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot save an automatic reference");
                    not_retained(
                        "Not retained: result-store capacity exceeded. Delete references or return less data.",
                    )
                }
            }
        };
        if let Some(marker) = replacement {
            completed.value = marker;
        }
    }
}

fn bridge_failure(error: String) -> Ending {
    Ending::Failed {
        code: ErrorCode::InvalidInput,
        phase: FailurePhase::Bridge,
        error,
    }
}

pub(crate) fn input_failure(error: String, telemetry: Telemetry) -> CellResult {
    CellResult::Failed(Failed {
        mcp_outage: Default::default(),
        untrusted_source: None,
        error,
        code: ErrorCode::InvalidInput,
        output: Vec::new(),
        telemetry,
        failure_phase: FailurePhase::Input,
        bridge_dispatch_started: false,
        replay_safe: None,
    })
}

fn rand_seed() -> u64 {
    let id = uuid::Uuid::new_v4();
    let bytes = id.as_bytes();
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

/// The ending a guest status reports, or `None` while the cell's promise is
/// still pending.
fn ending_from_status(json: &str) -> Option<Ending> {
    // The guest's constant text while the cell has no outcome (most calls).
    if json == crate::abi::PENDING_STATUS {
        return None;
    }
    let status: GuestStatus = match serde_json::from_str(json) {
        Ok(s) => s,
        Err(e) => {
            return Some(Ending::Failed {
                code: ErrorCode::InternalError,
                phase: FailurePhase::Host,
                error: format!("InternalError: the guest reported an unreadable status: {e}"),
            })
        }
    };
    let ending = match (status.state, status.value) {
        // A JSON `null` value deserializes as `None`.
        ("completed", value) => Ending::Completed {
            value_json: value.map_or_else(|| "null".to_string(), |v| v.get().to_string()),
        },
        ("pending", _) => return None,
        ("failed", _) => match status.kind.as_deref().unwrap_or("error") {
            "module_access" => Ending::Failed {
                code: ErrorCode::InvalidInput,
                phase: FailurePhase::Guest,
                error: source::MODULE_ACCESS_MESSAGE.to_string(),
            },
            "out_of_memory" => Ending::Failed {
                code: ErrorCode::MemoryLimitExceeded,
                phase: FailurePhase::Guest,
                error: crate::Error::MemoryLimitExceeded.to_string(),
            },
            _ => Ending::Failed {
                code: ErrorCode::InternalError,
                phase: FailurePhase::Guest,
                error: status
                    .error
                    .unwrap_or_else(|| "Error: unknown guest failure".into()),
            },
        },
        (other, _) => Ending::Failed {
            code: ErrorCode::InternalError,
            phase: FailurePhase::Host,
            error: format!("InternalError: the guest reported an unknown state `{other}`"),
        },
    };
    Some(ending)
}

fn ending_from_trap(err: wasmtime::Error, state: &CellState) -> Ending {
    let guest = |code: ErrorCode, error: String| Ending::Failed {
        code,
        phase: FailurePhase::Guest,
        error,
    };
    if err.downcast_ref::<DeadlineExceeded>().is_some() {
        return guest(ErrorCode::Timeout, crate::Error::Timeout.to_string());
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => {
            return guest(
                ErrorCode::FuelExhausted,
                crate::Error::FuelExhausted.to_string(),
            )
        }
        Some(Trap::Interrupt) => {
            return guest(ErrorCode::Timeout, crate::Error::Timeout.to_string())
        }
        _ => {}
    }
    if state.memory_refused {
        return guest(
            ErrorCode::MemoryLimitExceeded,
            crate::Error::MemoryLimitExceeded.to_string(),
        );
    }
    if let Some(Trap::StackOverflow) = err.downcast_ref::<Trap>() {
        return guest(
            ErrorCode::InternalError,
            "RangeError: Maximum call stack size exceeded (native stack exhausted)".into(),
        );
    }
    if let Some(fault) = &state.fault {
        return Ending::Failed {
            code: ErrorCode::InternalError,
            phase: FailurePhase::Host,
            error: format!("InternalError: guest fault: {fault}"),
        };
    }
    tracing::warn!(error = ?err, "guest trapped");
    guest(
        ErrorCode::InternalError,
        format!("InternalError: the guest trapped: {}", trap_summary(&err)),
    )
}

fn trap_summary(err: &wasmtime::Error) -> String {
    match err.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => err
            .to_string()
            .lines()
            .next()
            .unwrap_or("unknown")
            .to_string(),
    }
}

/// The result of a cell whose host code panicked (a quickcell bug): that
/// cell alone fails; the process goes on.
pub(crate) fn host_panic(telemetry: Telemetry) -> CellResult {
    tracing::error!("a cell's host code panicked; the cell was stopped");
    host_failure(
        "InternalError: the host failed while running this cell and stopped it; other cells are unaffected. Run it again; report it if it repeats.".to_string(),
        telemetry,
    )
}

fn host_failure(error: String, telemetry: Telemetry) -> CellResult {
    CellResult::Failed(Failed {
        mcp_outage: Default::default(),
        untrusted_source: None,
        error,
        code: ErrorCode::InternalError,
        output: Vec::new(),
        telemetry,
        failure_phase: FailurePhase::Host,
        bridge_dispatch_started: false,
        replay_safe: None,
    })
}

fn unavailable(error: String, telemetry: Telemetry) -> CellResult {
    CellResult::Failed(Failed {
        mcp_outage: Default::default(),
        untrusted_source: None,
        error,
        code: ErrorCode::RuntimeUnavailable,
        output: Vec::new(),
        telemetry,
        failure_phase: FailurePhase::Host,
        bridge_dispatch_started: false,
        replay_safe: None,
    })
}

/// Fits output, value and error into the cell's output budget and builds
/// the result.
fn finish(
    ending: &Ending,
    output: OutputBuffer,
    budget: usize,
    dispatch_started: bool,
    telemetry: Telemetry,
) -> CellResult {
    let entries = output.to_values();
    let (value_json, error) = match ending {
        Ending::Completed { value_json } => (Some(value_json.as_str()), None),
        Ending::Failed { error, .. } => (None, Some(error.as_str())),
    };
    let shortfall = output.stand_in_shortfall();
    let fitted =
        match output::fit_to_budget_with_dropped(budget, entries, value_json, error, shortfall) {
            Ok(f) => f,
            Err(e) => {
                return CellResult::Failed(Failed {
                    mcp_outage: Default::default(),
                    untrusted_source: None,
                    error: format!("code mode output limit exceeded: {e}"),
                    code: ErrorCode::OutputLimitExceeded,
                    output: Vec::new(),
                    telemetry,
                    failure_phase: FailurePhase::Host,
                    bridge_dispatch_started: false,
                    replay_safe: None,
                })
            }
        };
    match ending {
        Ending::Completed { .. } => CellResult::Completed(Completed {
            mcp_outage: Default::default(),
            untrusted_source: None,
            value: fitted.value.unwrap_or(Value::Null),
            warnings: Vec::new(),
            output: fitted.output,
            telemetry,
            replay_safe: None,
        }),
        Ending::Failed { code, phase, .. } => CellResult::Failed(Failed {
            mcp_outage: Default::default(),
            untrusted_source: None,
            error: fitted.error.unwrap_or_default(),
            code: *code,
            output: fitted.output,
            telemetry,
            failure_phase: *phase,
            bridge_dispatch_started: dispatch_started,
            replay_safe: None,
        }),
    }
}
