//! Resuming a parked cell: decode its snapshot into a fresh instance,
//! rebuild its bridge and deliver what settled while it was parked.

use super::*;

/// Restores a claimed run into a fresh instance and delivers what settled
/// while it was parked. Returns the cell and the guest's status.
pub(super) async fn restore(
    env: &CellEnv<'_>,
    run_id: &str,
    claimed: crate::store::Claimed,
    live: Option<Bridge>,
    cancel: CancelOn,
    input: &WaitInput,
) -> Result<(LiveCell, wasmtime::Result<String>), CellResult> {
    let unusable = |e: String| {
        CellResult::Failed(Failed {
            exact: Default::default(),
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
    // Decrypted and authenticated before anything of it is decoded.
    let mut claimed = claimed;
    let stored = std::mem::take(&mut claimed.snapshot);
    let opened = match env.state_key {
        Some(key) => key
            .open(run_id, &input.owner, claimed.generation, stored)
            .map_err(unusable)?,
        None => stored,
    };
    let snapshot = match snapshot::decode(&opened, env.shared.image_key(), ceiling) {
        Ok(snapshot) => snapshot,
        // Taken by another guest build, or by this build pre-initialized
        // otherwise, or in another format: a host of the quickcell that
        // parked it can still resume it, so it stays parked as it was.
        Err(e @ (SnapshotError::ForeignGuest | SnapshotError::UnknownVersion(_))) => {
            if let Some(bridge) = live {
                hand_back(env, run_id, claimed.generation, bridge);
            }
            let parked = snapshot::guest_build(&opened).ok().map(hex);
            return Err(incompatible(
                run_id,
                parked.as_deref(),
                &e,
                (env.telemetry)(),
            ));
        }
        Err(e) => return Err(unusable(e.to_string())),
    };
    let host: HostState = serde_json::from_slice(&snapshot.host_state)
        .map_err(|e| unusable(format!("unreadable host state: {e}")))?;
    if host.run_id != run_id {
        return Err(unusable(format!(
            "it belongs to run {}, not {run_id}",
            host.run_id
        )));
    }
    if host.agent_run != input.owner.agent_run || host.session != input.owner.session {
        return Err(unusable("it names another owner than its run".into()));
    }
    // Answers to calls the run does not wait on change nothing: the run
    // stays parked as it was.
    let checked = crate::bridge::check_answers(&host.bridge, &input.tool_results).and_then(|()| {
        crate::bridge::check_approval_answers(&host.bridge, &input.approval_answers)
    });
    if let Err(message) = checked {
        if let Some(bridge) = live {
            hand_back(env, run_id, claimed.generation, bridge);
        }
        return Err(input_failure(message, (env.telemetry)()));
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
    let (mut store, exports, fuel_start) = match instantiate(
        env,
        output_cap,
        clock_offset,
        deadline,
    )
    .await
    {
        Ok(instance) => instance,
        Err(failure) => {
            // The run stays parked (the `wait` unclaims it): so does its
            // bridge, whose calls keep running and being recorded.
            let stays_parked = matches!(&failure, CellResult::Failed(f) if f.code == ErrorCode::RuntimeUnavailable);
            if let (Some(bridge), true) = (live, stays_parked) {
                hand_back(env, run_id, claimed.generation, bridge);
            }
            return Err(failure);
        }
    };
    store.data_mut().cancel = cancel.clone();
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
            exact: Default::default(),
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
    if let Err(e) = env
        .shared
        .restore_pages(snapshot, memory.data_mut(&mut store))
    {
        return Err(unusable(e.to_string()));
    }
    let sp = Val::I32(stack_pointer as i32);
    if let Err(e) = exports.stack_pointer.set(&mut store, sp) {
        return Err(unusable(format!("cannot set the stack pointer: {e}")));
    }
    store.data_mut().last_request_id = host.last_request_id;
    // A fresh seed for `Math.random`, so that no two resumes of one
    // snapshot repeat a random sequence. Written, not passed in a guest
    // call: restoring runs no guest code, so it consumes no fuel.
    let random_state = env.shared.random_state;
    let seed = rand_seed().to_le_bytes();
    memory.data_mut(&mut store)[random_state..random_state + seed.len()].copy_from_slice(&seed);
    stats::RESTORE_NANOS.store(
        restore_started.elapsed().as_nanos() as u64,
        Ordering::Relaxed,
    );
    // The wait's tools: the runtime's, the cell's declared client tools
    // and the wait's policy. A live bridge of this process takes them over.
    let tools = env
        .tools_for_cells
        .for_cell(
            env.tools,
            &host.client_tools,
            input.controls().policy.as_ref(),
        )
        .await;
    let mut bridge = match live {
        Some(mut bridge) => {
            bridge.set_tools(tools.clone());
            bridge
        }
        None => {
            let recorded = claimed
                .settlements
                .iter()
                .map(|(id, stored)| crate::bridge::recorded(env.state_key, run_id, *id, stored))
                .collect();
            let drainers = drainers(env, run_id, &host.bridge);
            Bridge::restore(
                tools.clone(),
                env.limits.max_pending_tool_calls() as usize,
                host.restart_safe,
                host.bridge,
                recorded,
                drainers,
            )
            .with_reply_inbox(env.limits.reply_inbox_bytes())
            .with_session(SessionAccess {
                state: env.store.clone(),
                owner: Owner {
                    agent_run: host.agent_run.clone(),
                    session: host.session.clone(),
                },
            })
        }
    };
    bridge.set_progress(input.controls().progress.clone());
    // Tools it could call before may be gone now (another policy).
    bridge.set_catalog_changed(
        !host.catalog_digest.is_empty() && host.catalog_digest != tools.digest,
    );
    let owner = Owner {
        agent_run: host.agent_run.clone(),
        session: host.session.clone(),
    };
    bridge.set_approvals(approvals(env, input.controls(), &owner));
    bridge.answer_client_calls(&input.tool_results);
    bridge.answer_approvals(&input.approval_answers);
    let tool_calls_before = bridge.tool_calls_started();
    bridge.release_yields();
    bridge.collect_finished();
    let guest_started = Instant::now();
    let status = match bridge.take_ready() {
        Some(settlement) => {
            exports
                .settle(&mut store, &settlement.delivery_json())
                .await
        }
        // Asking the guest would cost fuel (and allocate) that the cell,
        // had it not parked, would not have spent.
        None if host.guest_finished == Some(false) => {
            Ok(crate::guest_abi::PENDING_STATUS.to_string())
        }
        None => exports.status(&mut store).await,
    };
    env.stats.guest_since(guest_started);
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
        awaited: Duration::ZERO,
        slot: None,
        fuel_start,
        cancel,
        tool_calls_before,
        guest_finished: host.guest_finished.unwrap_or(false),
        lease: Some(claimed.lease),
    };
    Ok((cell, status))
}

/// Where the requests of the run that hosts drain are awaited, when its
/// snapshot names any.
fn drainers(
    env: &CellEnv<'_>,
    run_id: &str,
    bridge: &crate::bridge::BridgeState,
) -> Option<crate::bridge::Drainers> {
    bridge
        .outstanding
        .values()
        .any(|request| request.drained_by.is_some())
        .then(|| crate::bridge::Drainers {
            store: env.store.clone(),
            run_id: run_id.to_string(),
            key: env.state_key.cloned(),
        })
}

/// Puts the live bridge of a run that stays parked back to draining, as
/// it was (the store keeps the run's own expiry; the drainer's is at most
/// one TTL from now).
fn hand_back(env: &CellEnv<'_>, run_id: &str, generation: u64, bridge: Bridge) {
    let ttl_ms = env.limits.snapshot_ttl_seconds().saturating_mul(1000);
    env.runs
        .keep_live(run_id, generation, unix_ms().saturating_add(ttl_ms), bridge);
}

/// Lowercase hex of a hash.
fn hex(bytes: [u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the README tells operators what to do with runs parked by
/// another build.
const UPGRADING: &str = "README.md, \"Upgrading with runs parked\"";

/// The `snapshot_incompatible` failure of a `wait` on `run_id`, parked by
/// guest build `parked` (`None`: not named, a snapshot format from before
/// builds were named) when this host refused it: at the claim (the run's
/// record names another build; `why` is then `ForeignGuest`) or at
/// decoding (`why` is the decoder's refusal). The run stays parked.
pub(crate) fn incompatible(
    run_id: &str,
    parked: Option<&str>,
    why: &SnapshotError,
    telemetry: Telemetry,
) -> CellResult {
    let ours = crate::guest_build();
    let error = match (parked, why) {
        (_, SnapshotError::UnknownVersion(version)) => format!(
            "code mode snapshot is incompatible with this host: run {run_id} was parked by \
             another quickcell (snapshot format {version}; this host reads formats {} to {}), \
             whose guest build it does not name; this host carries guest build {ours}. The run \
             stays parked: resume it on a host of the quickcell that parked it, or drain parked \
             runs before upgrading ({UPGRADING}).",
            snapshot::IN_PLACE_FORMAT_VERSION,
            snapshot::FORMAT_VERSION
        ),
        (Some(parked), _) if parked == ours => format!(
            "code mode snapshot is incompatible with this host: run {run_id} was parked by \
             guest build {parked}, which this host carries too, but pre-initialized otherwise \
             (another quickcell version). The run stays parked: resume it on a host of the \
             quickcell that parked it, or drain parked runs before upgrading ({UPGRADING})."
        ),
        (parked, _) => format!(
            "code mode snapshot is incompatible with this host: run {run_id} was parked by \
             guest build {}; this host carries guest build {ours}. The run stays parked: resume \
             it on a host with guest build {0}, or drain parked runs before upgrading \
             ({UPGRADING}).",
            parked.unwrap_or("(not named)")
        ),
    };
    CellResult::Failed(Failed {
        exact: Default::default(),
        mcp_outage: Default::default(),
        untrusted_source: None,
        error,
        code: ErrorCode::SnapshotIncompatible,
        output: Vec::new(),
        telemetry,
        failure_phase: FailurePhase::Host,
        // The run dispatched its bridge requests before it parked.
        bridge_dispatch_started: true,
        replay_safe: None,
    })
}
