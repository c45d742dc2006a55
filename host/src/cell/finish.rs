//! How a call ends: the result union, fitted to the output budget, with
//! the automatic reference of a value too large to return, and the
//! mapping of guest statuses and traps to the contract's codes.

use super::*;

impl LiveCell {
    /// Ends the cell: fits the result into the remaining output budget and
    /// forgets the run.
    pub(super) async fn end(mut self, env: &CellEnv<'_>, ending: Ending) -> CellResult {
        self.count_tool_calls(env);
        let mut warnings = Vec::new();
        // Store writes are committed once, atomically, iff the cell
        // completed; any other ending discards them.
        let writes = self.bridge.take_store_writes();
        if matches!(ending, Ending::Completed { .. }) && !writes.is_empty() {
            if let Err(e) = env.store.store_commit(&self.owner.session, writes).await {
                tracing::warn!(error = %e, "session store commit failed");
                warnings.push(STORE_COMMIT_UNCONFIRMED.to_string());
            }
        }
        let telemetry = self.telemetry(env);
        let output = std::mem::take(&mut self.store.data_mut().output);
        let dispatch_started = self.bridge.dispatch_started;
        if let Some(run_id) = &self.run_id {
            let removed = match self.lease {
                Some(lease) => env.store.release(run_id, lease).await,
                None => env.store.remove(run_id).await.map(|()| true),
            };
            match removed {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(run_id, "a finished run was claimed by another wait after this one's claim lapsed; left to it");
                }
                Err(e) => tracing::warn!(run_id, error = %e, "cannot remove a finished run"),
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
                        state: &**env.store,
                        agent_run: &owner.agent_run,
                        capacity_bytes: env.limits.reply_inbox_bytes(),
                        restart_safe,
                    };
                    reference.apply(c, original, budget).await;
                }
            }
            CellResult::Failed(f) => f.replay_safe = replay_safe,
            CellResult::Waiting(w) => w.replay_safe = replay_safe,
        }
        result
    }
}

/// Automatic references (contract §10.4): a final array or object that had
/// to be cut is saved as a result, and the value becomes
/// `{truncated: true, reference: <descriptor>, guidance}`; when it cannot
/// be kept, the truncation marker's guidance says why ("Not retained: …").
pub(super) struct AutoReference<'a> {
    state: &'a dyn crate::store::StateStore,
    agent_run: &'a str,
    capacity_bytes: usize,
    restart_safe: bool,
}

/// Guidance of a value replaced by an automatic reference.
pub(super) const REFERENCE_GUIDANCE: &str = "Output truncated; the full value was saved. Load it in a later cell with await results.load(reference.id).";

impl AutoReference<'_> {
    pub(super) async fn apply(&self, completed: &mut Completed, original: &str, budget: usize) {
        if completed.value["truncated"] != Value::Bool(true) {
            return;
        }
        // Plain strings and scalars never get a reference.
        if !original.starts_with(['[', '{']) {
            return;
        }
        let used_output = completed.exact.output_len(&completed.output);
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
            match crate::bridge::save_result(self.state, self.agent_run, &value, self.capacity_bytes)
                .await
            {
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
                        let _ = self.state.result_delete(self.agent_run, &id).await;
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

pub(super) fn bridge_failure(error: String) -> Ending {
    Ending::Failed {
        code: ErrorCode::InvalidInput,
        phase: FailurePhase::Bridge,
        error,
    }
}

/// A failure of the host's own machinery (the state store) during a cell.
pub(super) fn host_fault(error: String) -> Ending {
    Ending::Failed {
        code: ErrorCode::InternalError,
        phase: FailurePhase::Host,
        error,
    }
}

/// A call refused over a quota (`quota_exceeded`, phase input): nothing
/// ran.
pub(crate) fn quota_failure(error: String, telemetry: Telemetry) -> CellResult {
    let mut result = input_failure(error, telemetry);
    if let CellResult::Failed(f) = &mut result {
        f.code = ErrorCode::QuotaExceeded;
    }
    result
}

pub(crate) fn input_failure(error: String, telemetry: Telemetry) -> CellResult {
    CellResult::Failed(Failed {
        exact: Default::default(),
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

pub(super) fn rand_seed() -> u64 {
    let id = uuid::Uuid::new_v4();
    let bytes = id.as_bytes();
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

/// The ending a guest status reports, or `None` while the cell's promise is
/// still pending.
pub(super) fn ending_from_status(json: &str) -> Option<Ending> {
    // The guest's constant text while the cell has no outcome (most calls).
    if json == crate::guest_abi::PENDING_STATUS {
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
            _ => {
                let error = status
                    .error
                    .unwrap_or_else(|| "Error: unknown guest failure".into());
                // An uncaught permission change (operations.md §3.3) ends
                // the cell as aborted. The guest reports only the error's
                // text, so it is recognised by its exact first line (a
                // cell that throws that text itself gets the same code).
                let first_line = error.lines().next().unwrap_or("");
                let permission_changed = first_line
                    .strip_prefix("Error: ")
                    .is_some_and(|m| m == crate::bridge::PERMISSION_CHANGED);
                Ending::Failed {
                    code: if permission_changed {
                        ErrorCode::Aborted
                    } else {
                        ErrorCode::InternalError
                    },
                    phase: FailurePhase::Guest,
                    error,
                }
            }
        },
        (other, _) => Ending::Failed {
            code: ErrorCode::InternalError,
            phase: FailurePhase::Host,
            error: format!("InternalError: the guest reported an unknown state `{other}`"),
        },
    };
    Some(ending)
}

pub(super) fn ending_from_trap(err: wasmtime::Error, state: &CellState) -> Ending {
    let guest = |code: ErrorCode, error: String| Ending::Failed {
        code,
        phase: FailurePhase::Guest,
        error,
    };
    if err.downcast_ref::<Cancelled>().is_some() {
        return aborted_ending();
    }
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

pub(super) fn trap_summary(err: &wasmtime::Error) -> String {
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

/// The contract's `aborted` result: the run was cancelled.
/// The ending of a cancelled cell (operations.md §3.1): its output so far
/// is kept by [`LiveCell::end`], like any failure's.
pub(super) fn aborted_ending() -> Ending {
    Ending::Failed {
        code: ErrorCode::Aborted,
        phase: FailurePhase::Host,
        error: crate::Error::Aborted.to_string(),
    }
}

/// A call cancelled before any guest code ran.
pub(super) fn aborted_before_start(telemetry: Telemetry) -> CellResult {
    let mut result = aborted(telemetry);
    if let CellResult::Failed(f) = &mut result {
        f.bridge_dispatch_started = false;
    }
    result
}

pub(super) fn aborted(telemetry: Telemetry) -> CellResult {
    CellResult::Failed(Failed {
        exact: Default::default(),
        mcp_outage: Default::default(),
        untrusted_source: None,
        error: crate::Error::Aborted.to_string(),
        code: ErrorCode::Aborted,
        output: Vec::new(),
        telemetry,
        failure_phase: FailurePhase::Host,
        bridge_dispatch_started: true,
        replay_safe: None,
    })
}

pub(crate) fn host_failure(error: String, telemetry: Telemetry) -> CellResult {
    CellResult::Failed(Failed {
        exact: Default::default(),
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

pub(crate) fn unavailable(error: String, telemetry: Telemetry) -> CellResult {
    CellResult::Failed(Failed {
        exact: Default::default(),
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
pub(super) fn finish(
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
                    exact: Default::default(),
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
    let output = fitted.output;
    let exact = crate::result::ExactText {
        value: fitted.value_exact,
        output: fitted.output_exact,
    };
    match ending {
        Ending::Completed { .. } => CellResult::Completed(Completed {
            exact: exact.clone(),
            mcp_outage: Default::default(),
            untrusted_source: None,
            value: fitted.value.unwrap_or(Value::Null),
            warnings: Vec::new(),
            output,
            telemetry,
            replay_safe: None,
        }),
        Ending::Failed { code, phase, .. } => CellResult::Failed(Failed {
            exact,
            mcp_outage: Default::default(),
            untrusted_source: None,
            error: fitted.error.unwrap_or_default(),
            code: *code,
            output,
            telemetry,
            failure_phase: *phase,
            bridge_dispatch_started: dispatch_started,
            replay_safe: None,
        }),
    }
}
