//! Parking (contract §9.3): checkpoint the cell, store the snapshot and
//! hand its bridge to the run registry.

use super::*;

impl LiveCell {
    /// Checkpoints the cell and parks it (contract §9.3), in a
    /// `checkpoint` span with the run id and the snapshot's size.
    pub(super) async fn park(self, env: &CellEnv<'_>) -> CellResult {
        let span = tracing::info_span!(
            "checkpoint",
            session = %self.owner.session,
            run_id = tracing::field::Empty,
            snapshot_bytes = tracing::field::Empty,
        );
        let result =
            tracing::Instrument::instrument(self.checkpoint_and_park(env), span.clone()).await;
        if let Some(run_id) = result.run_id() {
            span.record("run_id", run_id);
        }
        span.record(
            "snapshot_bytes",
            env.stats.snapshot_bytes.load(Ordering::Relaxed),
        );
        result
    }

    async fn checkpoint_and_park(mut self, env: &CellEnv<'_>) -> CellResult {
        // A cancelled cell ends instead of parking (its run, if it had
        // one, is removed by `end`).
        if self.cancel.is_cancelled() {
            return self.end(env, aborted_ending()).await;
        }
        self.bridge.finish_store_requests().await;
        let checkpoint_started = Instant::now();
        // The checkpoint zeroes the blocks the cell freed so the snapshot
        // holds live data; it runs on fuel of its own (a cell with none
        // left still parks) and costs the cell none. Its work is linear in
        // the blocks the cell freed, which the cell paid for.
        let fuel = self.store.get_fuel().unwrap_or(0);
        let _ = self.store.set_fuel(u64::MAX);
        let checkpointed = self.exports.checkpoint(&mut self.store).await;
        // Set back before anything reads the cell's fuel, also when the
        // checkpoint failed (its ending reports what the cell used).
        let _ = self.store.set_fuel(fuel);
        let block_units = match checkpointed {
            Ok(units) => units,
            Err(err) => {
                let ending = ending_from_trap(err, self.store.data());
                return self.end(env, ending).await;
            }
        };
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
                return self
                    .end(
                        env,
                        Ending::Failed {
                            code: ErrorCode::OutputLimitExceeded,
                            phase: FailurePhase::Host,
                            error: format!("code mode output limit exceeded: {e}"),
                        },
                    )
                    .await
            }
        };
        let delivered_output = fitted.output;
        let delivered_exact = crate::result::ExactText {
            value: None,
            output: fitted.output_exact,
        };
        // The snapshot names this host as the drainer of the tool calls it
        // keeps running, once the store records it alive.
        let drainer = if self.bridge.has_tool_work() {
            match env.store.announce_host().await {
                Ok(host) => host,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot announce this host in the state store; a wait elsewhere will treat its tool calls as ended");
                    None
                }
            }
        } else {
            None
        };
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
            bridge: self.bridge.parked_state(drainer.as_deref()),
            client_tools: self.bridge.declared_client_tools().to_vec(),
            catalog_digest: self.bridge.catalog_digest().to_string(),
            guest_finished: Some(self.guest_finished),
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
            guest_hash: env.shared.image_key(),
            guest_build: crate::engine::guest_hash(),
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
                return self
                    .end(
                        env,
                        Ending::Failed {
                            code,
                            phase: FailurePhase::Host,
                            error,
                        },
                    )
                    .await;
            }
        };
        let ttl_ms = env.limits.snapshot_ttl_seconds().saturating_mul(1000);
        let expires_at_ms = parked_unix_ms.saturating_add(ttl_ms);
        let snapshot = match env.state_key {
            Some(key) => match key.seal(&run_id, &self.owner, host.generation, bytes) {
                Ok(sealed) => sealed,
                Err(e) => {
                    self.store.data_mut().output = output;
                    return self
                        .end(env, host_fault(format!("InternalError: {e}")))
                        .await;
                }
            },
            None => bytes,
        };
        let parked = ParkedRun {
            run_id: run_id.clone(),
            owner: self.owner.clone(),
            generation: host.generation,
            expires_at_ms,
            snapshot,
            lease: self.lease,
            regrant: self.restart_safe,
            awaiting: host.bridge.outstanding.keys().copied().collect(),
            guest_build: crate::guest_build().to_string(),
        };
        stats::SNAPSHOT_BYTES.store(parked.snapshot.len() as u64, Ordering::Relaxed);
        env.stats
            .snapshot_bytes
            .store(parked.snapshot.len() as u64, Ordering::Relaxed);
        self.count_tool_calls(env);
        stats::PAYLOAD_BYTES.store(payload_bytes as u64, Ordering::Relaxed);
        let snapshot_bytes = parked.snapshot.len() as u64;
        let stored = env.store.park(parked).await;
        stats::PERSIST_NANOS.store(checkpointed.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if let Err(e) = stored {
            self.store.data_mut().output = output;
            self.run_id = Some(run_id);
            let error = format!("InternalError: cannot store the parked run: {e:#}");
            return self.end(env, host_fault(error)).await;
        }
        crate::instruments::snapshot_stored(snapshot_bytes);
        // Cancelled while it was being stored (its session closing meanwhile
        // would otherwise miss it): it ends, and `end` removes the run.
        if self.cancel.is_cancelled() {
            self.store.data_mut().output = output;
            self.run_id = Some(run_id);
            return self.end(env, aborted_ending()).await;
        }
        let reason = if self.bridge.has_deferred_approvals() {
            WaitReason::Approval
        } else if self.bridge.has_client_calls() {
            WaitReason::ClientTools
        } else if self.bridge.only_yields() {
            WaitReason::Yield
        } else {
            WaitReason::PendingTools
        };
        let pending_tool_calls = self.bridge.pending_calls();
        let replay_safe = self.replay_safe();
        let untrusted_source = self.bridge.untrusted_source();
        let LiveCell {
            mut bridge,
            store,
            slot,
            ..
        } = self;
        release_in_background(store, None);
        // What settles while parked is counted by the `wait` that
        // delivers it.
        bridge.set_progress(None);
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
            exact: delivered_exact,
            telemetry,
            replay_safe,
        })
    }
}
