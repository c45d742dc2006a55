//! Running one cell: admission checks, a fresh instance in its own `Store`,
//! the guest's status, and the mapping of every way a call can end to the
//! contract's result union.
//!
//! How each limit ends a call (told apart by type, never by message text):
//!
//! | limit | mechanism | code |
//! |---|---|---|
//! | `timeoutMs` | epoch ticks; the deadline callback compares the real clock and raises [`DeadlineExceeded`] | `timeout` |
//! | `fuel` | Wasmtime fuel; [`Trap::OutOfFuel`] | `fuel_exhausted` |
//! | `memoryLimitBytes` | QuickJS heap limit (catchable `InternalError: out of memory`; uncaught → failure) and a linear-memory cap in the store's limiter (refused growth) | `memory_limit_exceeded` |
//! | stack depth | the guest's stack guard raises a catchable `RangeError` | `internal_error` when uncaught |
//!
//! The timeout is enforced by Wasmtime's epoch interruption alone: the
//! QuickJS interrupt handler is not used, so there is no separate hard-stop
//! grace period — the epoch deadline *is* the hard stop, and output emitted
//! before it is kept. A module-access `ReferenceError` at run time
//! (`require`, `module`, `process`) fails with `invalid_input` and the
//! module-access message, in phase `guest` (the guest had started).

use crate::abi::{CellState, DeadlineExceeded, GuestExports};
use crate::bridge::{Bridge, CellTools};
use crate::channel::OutputBuffer;
use crate::config::{Fuel, Limits};
use crate::engine::SharedEngine;
use crate::input::ExecInput;
use crate::output;
use crate::result::{CellResult, Completed, ErrorCode, Failed, FailurePhase, Telemetry};
use crate::source;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{ResourceLimiter, Store, Trap, UpdateDeadline};

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

/// Runs a new cell to its end (this foundation has no suspension yet: a
/// cell either completes or fails within its call).
pub(crate) async fn exec(
    shared: &SharedEngine,
    limits: &Limits,
    tools: &Arc<CellTools>,
    telemetry: impl Fn() -> Telemetry,
    input: &ExecInput,
) -> CellResult {
    if let Err(message) = input.validate() {
        return input_failure(message, telemetry());
    }
    if let Err(rejection) = source::validate_source(&input.code) {
        return input_failure(rejection.message(), telemetry());
    }

    let deadline = Instant::now() + Duration::from_millis(limits.timeout_ms);
    let memory_cap = limits.linear_memory_cap(shared.initial_memory_bytes);
    let state = CellState::new(
        memory_cap,
        OutputBuffer::new(limits.max_output_bytes as usize),
    );
    let mut store = Store::new(&shared.engine, state);
    store.limiter(|s| s as &mut dyn ResourceLimiter);
    let fuel = match limits.fuel {
        Fuel::Limited(n) => n,
        Fuel::Unlimited => u64::MAX,
    };
    if let Err(e) = store.set_fuel(fuel) {
        return host_failure(format!("cannot set fuel: {e}"), telemetry());
    }
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= deadline {
            Err(wasmtime::Error::new(DeadlineExceeded))
        } else {
            Ok(UpdateDeadline::Yield(1))
        }
    });

    let instance = match shared.instance_pre.instantiate_async(&mut store).await {
        Ok(i) => i,
        Err(e) => return unavailable(format!("cannot instantiate the guest: {e}"), telemetry()),
    };
    let exports = match GuestExports::new(&mut store, &instance) {
        Ok(x) => x,
        Err(e) => return unavailable(format!("{e}"), telemetry()),
    };
    let options = serde_json::json!({
        "memoryLimitBytes": limits.memory_limit_bytes,
        // Fixed width, so parsing costs the same fuel for every seed.
        "randomSeed": format!("{:016x}", rand_seed()),
        "toolNames": tools.callable_names,
        "toolMetas": tools.metas_json,
    })
    .to_string();
    let mut bridge = Bridge::new(tools.clone(), limits.max_pending_tool_calls as usize);
    let mut status = exports.start(&mut store, &input.code, &options).await;
    let ending = loop {
        let json = match status {
            Ok(json) => json,
            Err(err) => break ending_from_trap(err, store.data()),
        };
        let state = store.data_mut();
        let cancels = std::mem::take(&mut state.cancels);
        let requests = std::mem::take(&mut state.requests);
        bridge.cancel(cancels);
        if let Err(message) = bridge.accept(requests) {
            break Ending::Failed {
                code: ErrorCode::InvalidInput,
                phase: FailurePhase::Bridge,
                error: message,
            };
        }
        // `None`: the cell's promise has not settled yet.
        let ending = ending_from_status(&json);
        if !bridge.has_work() {
            break ending.unwrap_or_else(|| Ending::Failed {
                code: ErrorCode::InternalError,
                phase: FailurePhase::Guest,
                error: format!("Error: {PENDING_WITHOUT_HOST_WORK}"),
            });
        }
        // Awaiting (result pending) or draining (value ready, detached
        // requests outstanding): deliver the next settlements.
        match bridge.next_batch(deadline).await {
            Some(batch) => {
                let results = Value::Array(batch).to_string();
                status = exports.settle(&mut store, &results).await;
            }
            // Deadline: a settled cell keeps its result (detached requests
            // still running are cancelled); a pending one times out.
            None => {
                break ending.unwrap_or_else(|| Ending::Failed {
                    code: ErrorCode::Timeout,
                    phase: FailurePhase::Guest,
                    error: crate::Error::Timeout.to_string(),
                })
            }
        }
    };
    let mut telemetry = telemetry();
    telemetry.fuel_used = fuel.saturating_sub(store.get_fuel().unwrap_or(0));
    let output = std::mem::take(&mut store.data_mut().output);
    let dispatch_started = bridge.dispatch_started;
    drop(bridge);
    drop(store);
    finish(
        ending,
        output,
        limits.max_output_bytes as usize,
        dispatch_started,
        telemetry,
    )
}

pub(crate) fn input_failure(error: String, telemetry: Telemetry) -> CellResult {
    CellResult::Failed(Failed {
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

fn host_failure(error: String, telemetry: Telemetry) -> CellResult {
    CellResult::Failed(Failed {
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
    ending: Ending,
    output: OutputBuffer,
    budget: usize,
    dispatch_started: bool,
    telemetry: Telemetry,
) -> CellResult {
    let entries = output.to_values();
    let (value_json, error) = match &ending {
        Ending::Completed { value_json } => (Some(value_json.as_str()), None),
        Ending::Failed { error, .. } => (None, Some(error.as_str())),
    };
    let mut fitted = match output::fit_to_budget(budget, entries, value_json, error) {
        Ok(f) => f,
        Err(e) => {
            return CellResult::Failed(Failed {
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
    let shortfall = output.stand_in_shortfall();
    if shortfall > 0 && fitted.output_truncated {
        if let Some(marker) = fitted.output.last_mut().and_then(|e| e.get_mut("value")) {
            count_dropped_output(marker, shortfall);
        }
    }
    match ending {
        Ending::Completed { .. } => CellResult::Completed(Completed {
            value: fitted.value.unwrap_or(Value::Null),
            warnings: Vec::new(),
            output: fitted.output,
            telemetry,
            replay_safe: None,
        }),
        Ending::Failed { code, phase, .. } => CellResult::Failed(Failed {
            error: fitted.error.unwrap_or_default(),
            code,
            output: fitted.output,
            telemetry,
            failure_phase: phase,
            bridge_dispatch_started: dispatch_started,
            replay_safe: None,
        }),
    }
}

/// Adds output the host dropped at its buffer cap to a summary marker's
/// `omittedBytes`, shortening the marker's `prefix` by as many bytes as the
/// larger number adds, so the marker's size does not change.
fn count_dropped_output(marker: &mut Value, shortfall: usize) {
    let Some(old) = marker.get("omittedBytes").and_then(Value::as_u64) else {
        return;
    };
    let new = old + shortfall as u64;
    let growth = new.to_string().len() - old.to_string().len();
    if let Some(Value::String(prefix)) = marker.get_mut("prefix") {
        let target = output::json_string_len(prefix).saturating_sub(growth);
        while output::json_string_len(prefix) > target {
            prefix.pop();
        }
    }
    marker["omittedBytes"] = Value::from(new);
}
