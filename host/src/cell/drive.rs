//! The boundary loop (contract §9.2): dispatch the guest's requests,
//! deliver settlements, run the guest again; end, or park.

use super::*;

impl LiveCell {
    /// The boundary loop (contract §9.2): dispatch the guest's requests,
    /// deliver settlements, run the guest again; end, or park.
    pub(super) async fn drive(
        mut self,
        env: &CellEnv<'_>,
        first: wasmtime::Result<String>,
    ) -> CellResult {
        let mut status = first;
        loop {
            let json = match status {
                Ok(json) => json,
                Err(err) => {
                    let ending = ending_from_trap(err, self.store.data());
                    return self.end(env, ending).await;
                }
            };
            let state = self.store.data_mut();
            let cancels = std::mem::take(&mut state.cancels);
            let requests = std::mem::take(&mut state.requests);
            state.request_bytes = 0;
            let dropped = std::mem::take(&mut state.requests_dropped);
            if !requests.is_empty() && self.run_id.is_none() && self.slot.is_none() {
                if let Err(message) = self.bridge.check_capacity(requests.len() + dropped) {
                    return self.end(env, bridge_failure(message)).await;
                }
                match env.runs.take_slot(&self.owner.session).await {
                    Ok(Ok(slot)) => self.slot = Some(slot),
                    Ok(Err(refused)) => {
                        let message = refused.message(&env.runs.limits);
                        return self.end(env, bridge_failure(message)).await;
                    }
                    Err(e) => {
                        let error = format!("InternalError: cannot read the state store: {e:#}");
                        return self.end(env, host_fault(error)).await;
                    }
                }
            }
            if let Err(message) = self.bridge.accept(requests, dropped) {
                return self.end(env, bridge_failure(message)).await;
            }
            // After the batch is accepted: a timer made and cleared in the
            // same guest run is cancelled too (before, its cancel named a
            // request the bridge did not have yet, and the host kept it —
            // a cleared ten-minute timer held the cell ten minutes).
            self.bridge.cancel(cancels);
            // `None`: the cell's promise has not settled yet.
            let ending = ending_from_status(&json);
            self.guest_finished = ending.is_some();
            match ending {
                Some(ending @ Ending::Failed { .. }) => return self.end(env, ending).await,
                Some(ending) if !self.bridge.has_work() => return self.end(env, ending).await,
                None if !self.bridge.has_work() => {
                    // A cell can look pending with nothing left to do
                    // because it ran out of memory: an allocation that failed
                    // inside a promise reaction rejects that promise instead
                    // of failing the job (`loop = () => Promise.resolve()
                    // .then(loop)` breaks its chain that way), and nothing
                    // observes the rejection. That is the memory limit's
                    // doing, as is a stop at the deadline the deadline's.
                    // The guest's heap limit may have refused one too (the
                    // status after a `settle` is not asked for: ask now).
                    let heap_refused = json == crate::guest_abi::PENDING_AFTER_REFUSAL_STATUS
                        || self.exports.status(&mut self.store).await.ok().as_deref()
                            == Some(crate::guest_abi::PENDING_AFTER_REFUSAL_STATUS);
                    let data = self.store.data();
                    let ending = if data.memory_refused || heap_refused {
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
                    return self.end(env, ending).await;
                }
                // Awaiting (result pending) or draining (value ready,
                // detached requests outstanding).
                _ => {}
            }
            // A client tool call (or a deferred approval) waits for the
            // caller, who can only answer a parked run: park once what is ready is delivered
            // (so that calls made together park together), also in an
            // `awaitResults` call.
            if (self.bridge.has_client_calls() || self.bridge.has_deferred_approvals())
                && !self.bridge.has_ready()
            {
                return self.park(env).await;
            }
            if self.bridge.has_yield() {
                if self.await_results {
                    // A required cell cannot hand control back to the
                    // model: its yields resolve at once.
                    self.bridge.release_yields();
                } else if !self.bridge.awaiting_approval() {
                    // (A cell does not park while a call of it waits for
                    // an approval.)
                    return self.park(env).await;
                }
            }

            let batch = if self.await_results {
                // Waiting on tools pauses the clock of a required cell, up
                // to the host's bound on such waits in all.
                let bound = Duration::from_millis(env.runs.limits.max_await_results_ms());
                let allowance = bound.saturating_sub(self.awaited);
                let waiting_since = process_nanos();
                let batch = tokio::select! {
                    batch = self.bridge.next_settlement(Some(Instant::now() + allowance)) => batch,
                    () = self.cancel.cancelled() => return self.aborted(env).await,
                };
                let waited = process_nanos().saturating_sub(waiting_since);
                self.awaited += Duration::from_nanos(waited);
                let deadline = &mut self.store.data_mut().deadline_ns;
                *deadline = deadline.saturating_add(waited);
                if batch.is_none() {
                    let ending = Ending::Failed {
                        code: ErrorCode::Timeout,
                        phase: FailurePhase::Guest,
                        error: format!(
                            "{}: this awaitResults call waited {} ms for tool results, the most the host allows (max_await_results_ms)",
                            crate::Error::Timeout,
                            bound.as_millis()
                        ),
                    };
                    return self.end(env, ending).await;
                }
                batch
            } else {
                // Woken when a call starts or stops waiting for an approval
                // (registered before the state is read, so no change is
                // missed).
                let clock = self.bridge.approval_clock();
                let changed = clock.as_ref().map(|c| c.changed.notified());
                tokio::pin!(changed);
                if let Some(notified) = changed.as_mut().as_pin_mut() {
                    notified.enable();
                }
                // While a call waits for its approval the cell's clock is
                // paused: it waits without a park deadline, and the time it
                // is blocked so is given back to it — up to the host's
                // bound on paused waits of one call, after which the clock
                // runs (and the cell may park) as usual.
                let bound = Duration::from_millis(env.runs.limits.max_await_results_ms());
                let awaiting = self.bridge.awaiting_approval() && self.awaited < bound;
                let park_at = self.park_at(env);
                if !awaiting && Instant::now() >= park_at {
                    None
                } else {
                    let until = if awaiting {
                        Some(Instant::now() + (bound - self.awaited))
                    } else {
                        Some(park_at)
                    };
                    let approval_changed = async {
                        match changed.as_mut().as_pin_mut() {
                            Some(notified) => notified.await,
                            None => std::future::pending().await,
                        }
                    };
                    let blocked_since = process_nanos();
                    let batch = tokio::select! {
                        batch = self.bridge.next_settlement(until) => batch,
                        () = approval_changed => Some(None),
                        () = self.cancel.cancelled() => return self.aborted(env).await,
                        // The runtime shuts down: park now (unless a call
                        // waits for an approval, which cannot park).
                        () = env.runs.draining.cancelled(), if !awaiting => None,
                    };
                    if awaiting {
                        let blocked = process_nanos().saturating_sub(blocked_since);
                        self.awaited += Duration::from_nanos(blocked);
                        let deadline = &mut self.store.data_mut().deadline_ns;
                        *deadline = deadline.saturating_add(blocked);
                        // The bound ran out while blocked: go on as usual.
                        batch.or(Some(None))
                    } else {
                        batch
                    }
                }
            };
            match batch {
                Some(None) => status = Ok(json),
                Some(Some(settlement)) => {
                    let guest_started = Instant::now();
                    status = self
                        .exports
                        .settle(&mut self.store, &settlement.delivery_json())
                        .await;
                    env.stats.guest_since(guest_started);
                }
                None => return self.park(env).await,
            }
        }
    }

    /// Ends a cell cancelled while it waits on host work `aborted`: first
    /// its pending calls reject with the contract's bridge-closed error,
    /// and the guest runs what that triggers (a `catch` or `finally` that
    /// emits output, which is kept) — within [`CLOSE_FUEL`] and the
    /// deadline, with the cancel not checked, so that a cell cannot delay
    /// its own abort for long; then the cell ends whatever the guest did.
    async fn aborted(mut self, env: &CellEnv<'_>) -> CellResult {
        let rejections = self.bridge.close();
        let left = self.store.get_fuel().unwrap_or(0);
        let budget = left.min(CLOSE_FUEL);
        if !rejections.is_empty() && self.store.set_fuel(budget).is_ok() {
            let cancel = std::mem::take(&mut self.store.data_mut().cancel);
            let guest_started = Instant::now();
            for rejection in rejections {
                if self
                    .exports
                    .settle(&mut self.store, &rejection.delivery_json())
                    .await
                    .is_err()
                {
                    break;
                }
            }
            env.stats.guest_since(guest_started);
            self.store.data_mut().cancel = cancel;
            let spent = budget.saturating_sub(self.store.get_fuel().unwrap_or(0));
            let _ = self.store.set_fuel(left.saturating_sub(spent));
            // Requests the guest made meanwhile are never dispatched.
            let state = self.store.data_mut();
            state.requests.clear();
            state.cancels.clear();
        }
        self.end(env, aborted_ending()).await
    }
}

/// Most fuel a cancelled cell may spend on the bridge-closed rejections of
/// its pending calls (about 10 ms of guest work): what its `catch` and
/// `finally` code runs before the cell ends `aborted`. Unit: Wasmtime
/// fuel; scope: one cancelled call.
const CLOSE_FUEL: u64 = 20_000_000;
