//! Suspension of a bridge: what a snapshot keeps of it
//! ([`Bridge::parked_state`]) and the bridge rebuilt from that in a host
//! that does not hold its running requests ([`Bridge::restore`]; see the
//! module docs of `bridge`, "Suspension").

use super::*;

impl Bridge {
    /// Rebuilds the bridge of a parked cell in a host that does not hold
    /// its running requests (see the module docs). `recorded` are
    /// settlements the parking host stored after the checkpoint.
    pub(crate) fn restore(
        tools: Arc<CellTools>,
        max_in_flight: usize,
        restart_safe: bool,
        state: BridgeState,
        recorded: Vec<Settlement>,
        drainers: Option<Drainers>,
    ) -> Self {
        let mut bridge = Self::new(tools, max_in_flight, restart_safe);
        bridge.dispatch_started = state.dispatch_started;
        if !state.store_writes.is_empty() {
            bridge.session_store = Some(CellSessionStore::restored(state.store_writes));
        }
        bridge.ready = state.ready.into();
        bridge.yields = state.yields;
        let mut outstanding = state.outstanding;
        for settlement in recorded {
            if outstanding.remove(&settlement.id).is_some() {
                bridge.ready.push_back(settlement);
            }
        }
        let now = unix_ms();
        for (id, request) in outstanding {
            // Yields, client tool calls and deferred approvals wait for the
            // caller wherever the run resumes.
            if bridge.yields.contains(&id)
                || request.method == CLIENT_TOOL_METHOD
                || request.method == super::APPROVAL_METHOD
            {
                bridge.outstanding.insert(id, request);
                continue;
            }
            // A host ran it when the cell parked: its settlement is awaited
            // from the store while that host is alive.
            if let (Some(host), Some(_)) = (&request.drained_by, &drainers) {
                bridge.remote.insert(id, host.clone());
                bridge.outstanding.insert(id, request);
                continue;
            }
            bridge.rerun_or_unknown(id, request, now);
        }
        bridge.remote_source = drainers;
        bridge.await_remote();
        // Dispatch starts with the caller's next `collect_finished`, after
        // it has set the reply inbox.
        bridge
    }

    /// Starts the task that awaits the requests other hosts drain, when
    /// there are any and it is not running.
    pub(super) fn await_remote(&mut self) {
        let Some(source) = &self.remote_source else {
            return;
        };
        if self.remote.is_empty() || self.remote_task.is_some() {
            return;
        }
        let task = self.in_flight.spawn(remote::await_settlements(
            source.store.clone(),
            source.key.clone(),
            source.run_id.clone(),
            self.remote.clone(),
        ));
        self.remote_task = Some(task.id());
    }

    /// The restart rule for request `id`, whose host ended: a request not
    /// started yet, or replay-safe, is queued again (a timer for the time
    /// it has left at `now`); another settles with an unknown effect.
    pub(super) fn rerun_or_unknown(&mut self, id: u64, mut request: Outstanding, now: u64) {
        {
            if request.started && !request.replay_safe {
                self.ready.push_back(err(id, EFFECT_UNKNOWN, "tool_error"));
                return;
            }
            request.drained_by = None;
            let args_json = match request.due_unix_ms {
                Some(due) => Arc::from(format!("{{\"ms\":{}}}", due.saturating_sub(now))),
                None => request.args_json.clone(),
            };
            self.queued.push_back(BridgeRequest {
                id,
                method: request.method.clone(),
                args_json,
                oversized_args: None,
                over_outstanding_cap: false,
            });
            self.outstanding.insert(id, request);
        }
    }

    /// What the snapshot keeps of this bridge. `host`, when the store has
    /// hosts to tell apart, is this host's id: the tool calls it runs are
    /// named as drained by it.
    pub(crate) fn parked_state(&self, host: Option<&str>) -> BridgeState {
        let mut outstanding = self.outstanding.clone();
        if let Some(host) = host {
            for (id, request) in &mut outstanding {
                if request.started
                    && is_host_tool_work(&request.method)
                    && !self.remote.contains_key(id)
                {
                    request.drained_by = Some(host.to_string());
                }
            }
        }
        BridgeState {
            outstanding,
            ready: self.ready.iter().cloned().collect(),
            yields: self.yields.clone(),
            dispatch_started: self.dispatch_started,
            store_writes: self
                .session_store
                .as_ref()
                .map(|store| store.buffered().writes().clone())
                .unwrap_or_default(),
        }
    }

    /// Marks the cell parked (its queued requests wait for the `wait` that
    /// resumes it) or resumed.
    pub(crate) fn set_parked(&mut self, parked: bool) {
        self.parked = parked;
    }
}
