//! Dispatch of the bridge requests a cell makes: tool calls, catalog search
//! and describe, timers and `yield_control`.
//!
//! Requests the guest queues during one guest run arrive as a batch. At most
//! `maxPendingToolCalls` run at once (tokio tasks); up to
//! [`MAX_QUEUED_REQUESTS`] more wait in order. A batch that would overflow
//! the queue fails the cell with `invalid_input` and dispatches nothing of
//! that batch. Every dispatched request is required until the cell ends:
//! detached calls (`void`, `Promise.race` losers) are drained, never aborted.
//! A tool that panics settles as a tool error; the host keeps running.
//!
//! Request methods (guest → host, JSON arguments):
//! `callValue {callable, input}`, `search {query, limit}`,
//! `describe {callable}`, `apiRead {path}` (`API.read`),
//! `mcpApi {server, method, schema}` (`MCP.<server>.$api`), `sleep {ms}`,
//! `yield {reason}`, and the session-store and saved-results requests.
//! MCP tools are called with `callValue` and their `MCP.<server>.<tool>`
//! callable name.
//! Settlements (host → guest): `{"id":N,"ok":true,"value":..}` or
//! `{"id":N,"ok":false,"error":{"message":..,"code":..}}`.
//!
//! `yield` requests are held, not settled: a pending yield makes the cell
//! park (see the `cell` module), and the yield settles with `undefined` on
//! the next `wait`.
//!
//! # Suspension
//!
//! The bridge remembers every request until it settles ([`Outstanding`]):
//! its method and arguments, whether it was started, whether the tool is
//! replay-safe, and a timer's absolute due time. When the cell parks,
//! [`Bridge::parked_state`] captures this (with settlements not yet
//! delivered) for the snapshot. A `wait` in the same process continues with
//! the same bridge, whose tool calls kept running. A `wait` elsewhere (or
//! after a restart) rebuilds the bridge with [`Bridge::restore`]: requests
//! that never started are queued again; started replay-safe requests are
//! dispatched again (a timer only for the time it had left); a started
//! request that is not replay-safe settles with an error saying that its
//! effect is unknown.
//!
//! With a store other hosts share, the snapshot names the host draining
//! each tool call still running ([`Outstanding::drained_by`]). A restore
//! elsewhere while that host is alive waits for those calls' settlements
//! in the store (the `remote` module) and applies the rule above only once
//! that host has ended.
//!
//! # restartSafe cells
//!
//! In a `restartSafe` cell a call to a tool that is not marked replay-safe
//! is rejected (a catchable error, code `invalid_input`) with the contract's
//! message, and is never dispatched.

mod answered;
mod calls;
mod catalog;
mod remote;
pub(crate) mod results;
mod session_store;
mod settlement;
mod suspend;
mod timers;

use answered::ClientCall;
pub(crate) use answered::{
    check_answers, check_approval_answers, DeferredApproval, APPROVAL_METHOD, CLIENT_TOOL_METHOD,
};
pub(crate) use calls::PERMISSION_CHANGED;
pub(crate) use catalog::{CellTools, ToolsForCells};
use remote::Landed;
pub(crate) use remote::{recorded, Drainers};
pub(crate) use results::save_result;
pub(crate) use settlement::Settlement;

use crate::clock::unix_ms;
use crate::guest_abi::BridgeRequest;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use session_store::CellSessionStore;
use settlement::{err, malformed, ok_null, queue_overflow, tool_panicked};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Ordinary requests that may wait beyond the in-flight cap (contract §6).
pub(crate) const MAX_QUEUED_REQUESTS: usize = 128;

/// Message of a call whose host ended while it was in flight.
pub(crate) const EFFECT_UNKNOWN: &str = "the host that ran this tool call ended while it was in flight, and the tool is not replay-safe, so it was not run again: its effect is unknown. Check the tool's state before calling it again.";

/// Whether `b` is false: a field at its default is left out of a
/// snapshot's host state (every such field reads back as its default).
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// A request that has not settled yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Outstanding {
    pub method: String,
    pub args_json: Arc<str>,
    /// Dispatched to the host (not only queued).
    #[serde(default, skip_serializing_if = "is_false")]
    pub started: bool,
    /// Running it again after a host restart is harmless.
    #[serde(default, skip_serializing_if = "is_false")]
    pub replay_safe: bool,
    /// A timer's due time, in Unix milliseconds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub due_unix_ms: Option<u64>,
    /// The host that runs it while the cell is parked (its id in the
    /// state store), for a host tool call running when the cell parked.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub drained_by: Option<String>,
}

/// What a parked cell's snapshot keeps of its bridge.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct BridgeState {
    /// Unsettled requests (queued, in flight or yields), by id.
    pub outstanding: BTreeMap<u64, Outstanding>,
    /// Settlements not delivered to the guest yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ready: Vec<Settlement>,
    /// Held `yield` requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub yields: Vec<u64>,
    pub dispatch_started: bool,
    /// Buffered session-store writes (`None` deletes), committed when the
    /// cell completes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub store_writes: BTreeMap<String, Option<String>>,
}

/// The session and agent run a cell's `store` / `load` / `results` reach.
#[derive(Clone)]
pub(crate) struct SessionAccess {
    pub state: Arc<dyn crate::store::StateStore>,
    pub owner: crate::store::Owner,
}

/// Whether `method` reaches the state store (the session store or saved
/// results).
fn is_store_request(method: &str) -> bool {
    matches!(
        method,
        "storeGet" | "storeSet" | "resultSave" | "resultLoad" | "resultDelete"
    )
}

/// Whether a request of `method` is a call this host runs for the cell
/// (what a parked run's drainer keeps running): not a timer, a yield, a
/// client tool call, or a session-store or saved-result request (a cell
/// parks only once those have finished).
fn is_host_tool_work(method: &str) -> bool {
    !matches!(
        method,
        "sleep" | "yield" | CLIENT_TOOL_METHOD | APPROVAL_METHOD
    ) && !is_store_request(method)
}

/// How a request starts.
pub(crate) enum Start {
    /// It settled at once.
    Settled(Settlement),
    /// It has work to run.
    Work(Work),
    /// A call of a per-cell client tool: the caller runs it, so it waits
    /// for `wait {toolResults}` (operations.md §3.5).
    Client {
        /// The client tool's name.
        tool: String,
        /// The validated arguments.
        input: Value,
    },
    /// A call whose approval the caller decides in a later `wait`
    /// ([`crate::approval`]): it waits in the records until then.
    Deferred(DeferredApproval),
}

impl Start {
    /// Work that may finish in its first poll, cancelled only with the cell.
    fn work(future: impl Future<Output = Settlement> + Send + 'static) -> Self {
        Start::Work(Work {
            future: Box::pin(future),
            token: None,
            replay_safe: true,
            poll_first: true,
            due_unix_ms: None,
        })
    }
}

/// A request's work.
pub(crate) struct Work {
    pub future: Pin<Box<dyn Future<Output = Settlement> + Send>>,
    /// Cancels it (a cleared timer; every request when the cell ends).
    pub token: Option<CancellationToken>,
    /// Running it again after a host restart is harmless.
    pub replay_safe: bool,
    /// Polled once before it becomes a task, so that work done at once
    /// settles with the current batch.
    pub poll_first: bool,
    /// A timer's due time, in Unix milliseconds.
    pub due_unix_ms: Option<u64>,
}

/// The contract's bridge-closed rejection (contract.md §"errors"): what a
/// cancelled cell's pending calls reject with.
pub(crate) const BRIDGE_CLOSED: &str =
    "Code Mode tool canceled, expired, or owner lost; start a new run.";

/// The bridge state of one cell: its requests, queued, running and settled.
pub(crate) struct Bridge {
    tools: Arc<CellTools>,
    max_in_flight: usize,
    restart_safe: bool,
    in_flight: JoinSet<Landed>,
    /// Requests awaited from the host that drains them, by id.
    remote: BTreeMap<u64, String>,
    /// Where those are awaited.
    remote_source: Option<Drainers>,
    /// The task in `in_flight` awaiting them (one for all), if running.
    remote_task: Option<tokio::task::Id>,
    /// The cell is parked: requests still queued are not started (they
    /// start wherever the run resumes, so that none runs twice).
    parked: bool,
    tokens: HashMap<u64, CancellationToken>,
    queued: VecDeque<BridgeRequest>,
    /// Settlements waiting for delivery, in the order they landed (they
    /// are delivered by request id: [`Bridge::take_ready`]).
    ready: VecDeque<Settlement>,
    yields: Vec<u64>,
    outstanding: BTreeMap<u64, Outstanding>,
    /// Largest settlement value delivered to the guest, in bytes of JSON.
    reply_inbox_bytes: usize,
    session: Option<SessionAccess>,
    /// Made at the cell's first session-store request (most cells make
    /// none), or restored with buffered writes.
    session_store: Option<CellSessionStore>,
    /// The untrusted provider whose content the cell may see (see
    /// [`untrusted_in_catalog`]).
    untrusted_source: Option<&'static str>,
    /// Whether any request was accepted for dispatch.
    pub dispatch_started: bool,
    /// Counts settled tool calls for the call driving the cell.
    progress: Option<crate::progress::Progress>,
    /// Who decides calls that need an approval, when anyone can.
    approvals: Option<crate::approval::Approvals>,
    /// Tool calls (`callValue` requests) started, ever.
    tool_calls_started: u64,
    /// The cell resumed with other tools than it parked with: a call to a
    /// tool that is gone gets [`calls::PERMISSION_CHANGED`].
    catalog_changed: bool,
    /// Calls the caller approved, queued to start without asking again
    /// (not kept across a park: one that parks before it starts is asked
    /// about again).
    approved: std::collections::HashSet<u64>,
}

impl Bridge {
    pub(crate) fn new(tools: Arc<CellTools>, max_in_flight: usize, restart_safe: bool) -> Self {
        Self {
            max_in_flight: max_in_flight.max(1),
            restart_safe,
            in_flight: JoinSet::new(),
            remote: BTreeMap::new(),
            remote_source: None,
            remote_task: None,
            parked: false,
            tokens: HashMap::new(),
            queued: VecDeque::new(),
            ready: VecDeque::new(),
            yields: Vec::new(),
            outstanding: BTreeMap::new(),
            reply_inbox_bytes: usize::MAX,
            session: None,
            session_store: None,
            // MCP tool identifiers (derived from untrusted names) reach every
            // cell through the `MCP` namespace, client tools' metadata through
            // `catalog.all()`; and a cell of such a runtime may load stored
            // values that came from them.
            untrusted_source: tools.untrusted_source,
            tools,
            dispatch_started: false,
            progress: None,
            approvals: None,
            tool_calls_started: 0,
            catalog_changed: false,
            approved: Default::default(),
        }
    }

    /// Tool calls this bridge has started, ever.
    pub(crate) fn tool_calls_started(&self) -> u64 {
        self.tool_calls_started
    }

    /// Uses `tools` for calls from now on (a resumed cell's, which the
    /// wait's policy may have changed).
    pub(crate) fn set_tools(&mut self, tools: Arc<CellTools>) {
        self.tools = tools;
    }

    /// The digest of the tools the cell may call.
    pub(crate) fn catalog_digest(&self) -> &str {
        &self.tools.digest
    }

    /// Marks the cell as resumed under other tools than it parked with.
    pub(crate) fn set_catalog_changed(&mut self, changed: bool) {
        self.catalog_changed = changed;
    }

    /// Asks `approvals` about calls that need an approval from now on
    /// (`None`: they are denied). Calls already waiting keep their
    /// approver.
    pub(crate) fn set_approvals(&mut self, approvals: Option<crate::approval::Approvals>) {
        self.approvals = approvals;
    }

    /// Whether a call of the cell waits for an approval decision now.
    pub(crate) fn awaiting_approval(&self) -> bool {
        self.approvals
            .as_ref()
            .is_some_and(|a| a.clock.is_waiting())
    }

    /// The clock whose changes wake the cell's driver while it waits.
    pub(crate) fn approval_clock(&self) -> Option<Arc<crate::approval::ApprovalClock>> {
        self.approvals.as_ref().map(|a| a.clock.clone())
    }

    /// Counts the tool calls that settle from now on in `progress`
    /// (replacing the handle of an earlier call of the same run).
    pub(crate) fn set_progress(&mut self, progress: Option<crate::progress::Progress>) {
        self.progress = progress;
    }

    /// The client tools declared for the cell.
    pub(crate) fn declared_client_tools(&self) -> &[crate::ClientToolSpec] {
        &self.tools.declared_client_tools
    }

    /// Whether settlements wait for delivery to the guest.
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The untrusted provider whose content the cell may have seen.
    pub(crate) fn untrusted_source(&self) -> Option<&'static str> {
        self.untrusted_source
    }

    /// Gives the cell its session store and saved results.
    pub(crate) fn with_session(mut self, session: SessionAccess) -> Self {
        self.session = Some(session);
        self
    }

    /// The buffered session-store writes, taken (to commit them).
    pub(crate) fn take_store_writes(&mut self) -> Vec<(String, Option<String>)> {
        match &self.session_store {
            Some(store) => store.buffered().take().into_iter().collect(),
            None => Vec::new(),
        }
    }

    /// Caps each settlement value at `bytes` of JSON (the cell's reply
    /// inbox, contract §6: `min(memoryLimitBytes, maxSnapshotBytes)`). A
    /// larger search result rejects with guidance to narrow the query; a
    /// larger tool result rejects with `tool_error`. Neither is cut.
    pub(crate) fn with_reply_inbox(mut self, bytes: usize) -> Self {
        self.reply_inbox_bytes = bytes;
        self
    }

    /// Replaces a successful settlement whose value would overflow the
    /// reply inbox with an error.
    fn fit_inbox(&self, settlement: Settlement, method: &str) -> Settlement {
        // A description and a session value have caps of their own.
        if matches!(method, "describe" | "storeGet" | "storeSet") {
            return settlement;
        }
        let Some(value) = settlement.value.as_ref().filter(|_| settlement.ok) else {
            return settlement;
        };
        let size = value.get().len();
        if size <= self.reply_inbox_bytes {
            return settlement;
        }
        let id = settlement.id;
        let cap = self.reply_inbox_bytes;
        if method == "search" {
            err(
                id,
                format!("catalog.search found more matching tools than the reply inbox holds ({size} bytes of metadata; at most {cap}). Narrow the query or pass a smaller limit."),
                "invalid_input",
            )
        } else {
            err(
                id,
                format!("the result of this call is {size} bytes of JSON; the cell's reply inbox holds at most {cap} bytes. Ask the tool for less data."),
                "tool_error",
            )
        }
    }

    /// Whether a `yield` request is held.
    pub(crate) fn has_yield(&self) -> bool {
        !self.yields.is_empty()
    }

    /// Settles every held `yield` with `undefined`.
    pub(crate) fn release_yields(&mut self) {
        for id in std::mem::take(&mut self.yields) {
            self.outstanding.remove(&id);
            self.ready.push_back(ok_null(id));
        }
    }

    /// Whether every unsettled request is a `yield`.
    pub(crate) fn only_yields(&self) -> bool {
        self.outstanding.len() == self.yields.len()
    }

    /// Unsettled requests as the contract's `pendingToolCalls`, in id
    /// order; a client tool call names its tool and arguments.
    pub(crate) fn pending_calls(&self) -> Vec<crate::result::PendingToolCall> {
        self.outstanding
            .iter()
            .map(|(id, r)| {
                let client = (r.method == CLIENT_TOOL_METHOD)
                    .then(|| serde_json::from_str::<ClientCall>(&r.args_json).ok())
                    .flatten();
                let mut call = crate::result::PendingToolCall::new(
                    format!("bridge:{}:{id}", r.method),
                    r.method.clone(),
                );
                if let Some(ClientCall { tool, input }) = client {
                    call.tool = Some(tool);
                    call.input = Some(input);
                }
                let approval = (r.method == APPROVAL_METHOD)
                    .then(|| serde_json::from_str::<DeferredApproval>(&r.args_json).ok())
                    .flatten();
                if let Some(approval) = approval {
                    call.tool = Some(approval.tool);
                    call.input = Some(serde_json::json!({
                        "pattern": approval.pattern,
                        "arguments": approval.arguments,
                    }));
                }
                call
            })
            .collect()
    }

    /// Whether tool calls this host runs (not timers, yields, client tool
    /// calls, or calls another host drains) are running.
    pub(crate) fn has_tool_work(&self) -> bool {
        self.outstanding.iter().any(|(id, r)| {
            r.started && is_host_tool_work(&r.method) && !self.remote.contains_key(id)
        })
    }

    /// Accepts a batch of new requests. Fails with the contract's queue
    /// message when the batch would overflow the queue; nothing of the batch
    /// is dispatched then.
    ///
    /// `dropped` counts requests of the batch the host did not record (past
    /// `MAX_REQUESTS_PER_GUEST_RUN`); they only count against the queue.
    /// A request whose arguments would make the cell's outstanding requests
    /// hold more than `MAX_OUTSTANDING_ARGS_BYTES` settles at once with a
    /// catchable error instead of being queued.
    pub(crate) fn accept(
        &mut self,
        batch: Vec<BridgeRequest>,
        dropped: usize,
    ) -> Result<(), String> {
        if batch.is_empty() && dropped == 0 {
            return Ok(());
        }
        self.check_capacity(batch.len() + dropped)?;
        if dropped > 0 {
            // Requests the host did not record can never settle; a batch with
            // any overflows the queue however the in-flight cap was set.
            return Err(queue_overflow(self.max_in_flight));
        }
        self.dispatch_started = true;
        let mut held: usize = self.outstanding.values().map(|o| o.args_json.len()).sum();
        for mut request in batch {
            if request.method == APPROVAL_METHOD {
                // Only the bridge makes approval records, from a call that
                // needs one: a guest request naming the method settles as
                // unknown, so no guest can forge an approval question (nor
                // the call an answer would start).
                self.ready.push_back(err(
                    request.id,
                    format!("unknown bridge method `{APPROVAL_METHOD}`"),
                    "invalid_input",
                ));
                continue;
            }
            let len = request.args_json.len();
            if request.oversized_args.is_none()
                && held.saturating_add(len) > crate::guest_abi::MAX_OUTSTANDING_ARGS_BYTES
            {
                request.oversized_args = Some(len);
                request.over_outstanding_cap = true;
                request.args_json = Arc::from("");
            }
            held += request.args_json.len();
            if request.method == "yield" {
                self.yields.push(request.id);
            } else {
                self.queued.push_back(request.clone());
            }
            self.outstanding.insert(
                request.id,
                Outstanding {
                    method: request.method,
                    args_json: request.args_json,
                    started: false,
                    replay_safe: false,
                    due_unix_ms: None,
                    drained_by: None,
                },
            );
        }
        self.pump();
        Ok(())
    }

    /// Fails with the contract's queue message when `new` more requests
    /// would overflow the queue.
    pub(crate) fn check_capacity(&self, new: usize) -> Result<(), String> {
        let outstanding = self.in_flight_count() + self.queued.len() + new;
        if outstanding > self.max_in_flight + MAX_QUEUED_REQUESTS {
            return Err(queue_overflow(self.max_in_flight));
        }
        Ok(())
    }

    /// Stops requests the guest no longer needs (cleared timers).
    pub(crate) fn cancel(&mut self, ids: Vec<u64>) {
        for id in ids {
            if let Some(token) = self.tokens.get(&id) {
                token.cancel();
            } else if let Some(pos) = self.queued.iter().position(|r| r.id == id) {
                self.queued.remove(pos);
                self.outstanding.remove(&id);
                self.ready.push_back(ok_null(id));
            }
        }
    }

    /// Closes the bridge of a cancelled cell: every request still
    /// outstanding is cancelled (a running tool call gets its cancel
    /// signal) and settles with the contract's bridge-closed rejection
    /// (code `aborted`), returned in request order, with the settlements
    /// that were ready and not delivered dropped. Nothing starts after.
    pub(crate) fn close(&mut self) -> Vec<Settlement> {
        for token in self.tokens.values() {
            token.cancel();
        }
        self.parked = true;
        self.queued.clear();
        self.ready.clear();
        self.yields.clear();
        std::mem::take(&mut self.outstanding)
            .into_keys()
            .map(|id| err(id, BRIDGE_CLOSED, "aborted"))
            .collect()
    }

    /// Whether any request is still outstanding.
    pub(crate) fn has_work(&self) -> bool {
        !self.in_flight.is_empty()
            || !self.queued.is_empty()
            || !self.ready.is_empty()
            || !self.yields.is_empty()
            || self.has_client_calls()
            || self.has_deferred_approvals()
    }

    /// Collects requests that finished since the last look (without
    /// waiting), so they are delivered together with what is ready.
    pub(crate) fn collect_finished(&mut self) {
        while let Some(result) = self.in_flight.try_join_next() {
            self.settled(result);
        }
        self.pump();
    }

    /// The ready settlement with the lowest request id, taken.
    ///
    /// Settlements are delivered one per guest call, so the guest's work —
    /// and the fuel it is charged — depends on the order of the
    /// settlements and not on how many happened to be ready at once; and
    /// of the settlements ready together, the one the guest asked for first
    /// goes first, whatever order the tools finished in (operations.md
    /// §4.1). Only settlements that become ready while the guest is taking
    /// others can reach it in an order set by timing (docs/decisions.md,
    /// "Delivery order"). Linear in the ready settlements, which the queue
    /// cap bounds.
    pub(crate) fn take_ready(&mut self) -> Option<Settlement> {
        let (first, _) = self
            .ready
            .iter()
            .enumerate()
            .min_by_key(|(_, settlement)| settlement.id)?;
        self.ready.remove(first)
    }

    /// Bytes of the settlements waiting for delivery.
    fn ready_bytes(&self) -> usize {
        self.ready.iter().map(Settlement::bytes).sum()
    }

    /// Starts queued requests while in-flight slots are free and the
    /// replies waiting for delivery take less than the reply inbox, so
    /// that requests stay queued instead of piling up replies the guest is
    /// not taking. A parked cell starts none: its snapshot records them as
    /// not started, and whichever host resumes it starts them.
    fn pump(&mut self) {
        if self.parked {
            return;
        }
        // With nothing waiting, requests always start (whatever the inbox
        // was set to), so a cell can never stall with work queued.
        while self.in_flight_count() < self.max_in_flight
            && (self.ready.is_empty() || self.ready_bytes() < self.reply_inbox_bytes)
        {
            let Some(request) = self.queued.pop_front() else {
                break;
            };
            self.start(request);
        }
    }

    fn start(&mut self, request: BridgeRequest) {
        let id = request.id;
        let ready_before = self.ready.len();
        let tool_call = (self.progress.is_some() && request.method == "callValue")
            .then(|| calls::callable(&request.args_json));
        let replay_safe = self.start_request(request);
        if self.ready.len() > ready_before {
            // Settled at once (search, describe, a rejected call).
            self.outstanding.remove(&id);
            if let (Some(progress), Some(tool)) = (&self.progress, tool_call) {
                progress.tool_settled(tool.as_deref());
            }
        } else if let Some(o) = self.outstanding.get_mut(&id) {
            o.started = true;
            o.replay_safe = replay_safe;
        }
    }

    /// Starts one request; returns whether it is replay-safe. A request
    /// that settles at once pushes its settlement to `ready`.
    fn start_request(&mut self, request: BridgeRequest) -> bool {
        let id = request.id;
        let method = request.method.as_str();
        let start = if let Some(size) = request.oversized_args {
            let message = if request.over_outstanding_cap {
                format!(
                    "the arguments of this call ({size} bytes of JSON) would make this cell's unsettled calls hold more than {} bytes of arguments. Await earlier calls before making more, or pass less data.",
                    crate::guest_abi::MAX_OUTSTANDING_ARGS_BYTES
                )
            } else {
                format!(
                    "the arguments of this call are {size} bytes of JSON; the bridge accepts at most {} bytes. Pass less data.",
                    crate::guest_abi::MAX_REQUEST_ARGS_BYTES
                )
            };
            Start::Settled(err(id, message, "invalid_input"))
        } else if method == "callValue" {
            self.tool_calls_started += 1;
            calls::start(
                &self.tools,
                calls::CallContext {
                    restart_safe: self.restart_safe,
                    approvals: self.approvals.as_ref(),
                    catalog_changed: self.catalog_changed,
                    approved: self.approved.remove(&id),
                },
                id,
                &request.args_json,
            )
        } else {
            match serde_json::from_str::<Value>(&request.args_json) {
                Err(e) => Start::Settled(malformed(id, e)),
                Ok(args) => self.start_with_args(id, method, args),
            }
        };
        self.begin(id, method, start)
    }

    /// Starts a request other than a tool call, its arguments parsed.
    fn start_with_args(&mut self, id: u64, method: &str, args: Value) -> Start {
        match method {
            m if catalog::is_catalog_request(m) => {
                Start::Settled(catalog::request(&self.tools, id, m, &args))
            }
            "resultSave" | "resultLoad" | "resultDelete" => match self.session_for("results") {
                Ok(session) => Start::work(results::request(
                    session,
                    id,
                    method.to_string(),
                    args,
                    self.reply_inbox_bytes,
                )),
                Err(message) => Start::Settled(err(id, message, "invalid_input")),
            },
            "storeSet" | "storeGet" => match self.session_for("the session store") {
                Ok(session) => Start::work(
                    self.session_store
                        .get_or_insert_with(CellSessionStore::default)
                        .clone()
                        .request(session, id, method.to_string(), args),
                ),
                Err(message) => Start::Settled(err(id, message, "invalid_input")),
            },
            "sleep" => timers::start(id, &args),
            other => Start::Settled(err(
                id,
                format!("unknown bridge method `{other}`"),
                "invalid_input",
            )),
        }
    }

    /// Settles a request at once, or runs its work: polled once here when
    /// it may finish at once (it then settles with this batch, without a
    /// task), else as a task. Returns whether the request is replay-safe.
    fn begin(&mut self, id: u64, method: &str, start: Start) -> bool {
        let work = match start {
            Start::Settled(settlement) => {
                let settlement = self.fit_inbox(settlement, method);
                self.ready.push_back(settlement);
                return true;
            }
            Start::Work(work) => work,
            Start::Client { tool, input } => return self.hold_client_call(id, tool, &input),
            Start::Deferred(approval) => return self.hold_deferred_approval(id, approval),
        };
        let Work {
            mut future,
            token,
            replay_safe,
            poll_first,
            due_unix_ms,
        } = work;
        if let (Some(due), Some(o)) = (due_unix_ms, self.outstanding.get_mut(&id)) {
            o.due_unix_ms = Some(due);
        }
        if !poll_first {
            if let Some(token) = token {
                self.tokens.insert(id, token);
            }
            self.in_flight
                .spawn(async move { Landed::Settled(future.await) });
            return replay_safe;
        }
        let first_poll = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            future
                .as_mut()
                .poll(&mut Context::from_waker(std::task::Waker::noop()))
        }));
        match first_poll {
            Ok(Poll::Ready(settlement)) => {
                let settlement = self.fit_inbox(settlement, method);
                self.ready.push_back(settlement);
                return replay_safe;
            }
            Ok(Poll::Pending) => {}
            Err(_) => {
                self.ready.push_back(tool_panicked(id));
                return replay_safe;
            }
        }
        if let Some(token) = token {
            self.tokens.insert(id, token);
        }
        // The inner task isolates a panicking tool: its settlement
        // becomes a tool error and the host keeps serving.
        self.in_flight.spawn(async move {
            Landed::Settled(match tokio::spawn(future).await {
                Ok(settlement) => settlement,
                Err(_) => tool_panicked(id),
            })
        });
        replay_safe
    }

    /// The session the cell's `store` / `load` reach, or the error a
    /// request gets when there is none.
    fn session_for(&self, what: &str) -> Result<SessionAccess, String> {
        if self.restart_safe {
            return Err(format!(
                "{what} is unavailable in restart-safe code mode: it cannot be replayed safely."
            ));
        }
        match &self.session {
            Some(s) if !s.owner.session.is_empty() || what.starts_with("results") => Ok(s.clone()),
            _ => Err(format!(
                "{what} needs a session: this run has no bound session (set one with --session or Owner::session)."
            )),
        }
    }

    /// Waits for the next settlement to deliver: the oldest ready one, or
    /// else the first request to settle. `Some(None)` when nothing was
    /// running; `None` when the deadline passes first. Without a deadline
    /// it waits as long as requests run.
    pub(crate) async fn next_settlement(
        &mut self,
        deadline: Option<Instant>,
    ) -> Option<Option<Settlement>> {
        if self.ready.is_empty() && !self.in_flight.is_empty() {
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                joined = self.in_flight.join_next() => {
                    if let Some(result) = joined {
                        self.settled(result);
                    }
                }
                _ = sleep => return None,
            }
        }
        while let Some(result) = self.in_flight.try_join_next() {
            self.settled(result);
        }
        self.pump();
        Some(self.take_ready())
    }

    /// Waits until no session-store or saved-result request runs. A cell
    /// parks after them: a session-store write lives in this bridge's
    /// buffer (a snapshot taken while it runs would miss it), and a save
    /// or delete must not run twice when the run resumes elsewhere. They
    /// are local and short; tool calls and timers that settle meanwhile
    /// stay ready for the guest.
    pub(crate) async fn finish_store_requests(&mut self) {
        let running = |b: &Self| {
            b.outstanding
                .values()
                .any(|o| o.started && is_store_request(&o.method))
        };
        while running(self) {
            if self.next_settlements().await.is_none() {
                break;
            }
        }
    }

    /// Waits until a running request settles; returns the settlements that
    /// became ready meanwhile (they also stay ready for the guest). `None`
    /// when nothing runs.
    pub(crate) async fn next_settlements(&mut self) -> Option<Vec<Settlement>> {
        let before = self.ready.len();
        let joined = self.in_flight.join_next().await?;
        self.settled(joined);
        self.pump();
        Some(self.ready.range(before..).cloned().collect())
    }

    fn settled(&mut self, result: Result<Landed, tokio::task::JoinError>) {
        match result {
            Ok(Landed::Remote { settled, orphaned }) => {
                self.remote_task = None;
                for settlement in settled {
                    if self.remote.remove(&settlement.id).is_some() {
                        self.land(settlement);
                    }
                }
                let now = unix_ms();
                for id in orphaned {
                    self.remote.remove(&id);
                    if let Some(request) = self.outstanding.remove(&id) {
                        self.rerun_or_unknown(id, request, now);
                    }
                }
                self.await_remote();
            }
            Ok(Landed::Settled(settlement)) => self.land(settlement),
            // The task awaiting other hosts' requests failed (a store
            // that panicked): they get the restart rule.
            Err(e) if Some(e.id()) == self.remote_task => {
                tracing::error!(error = %e, "the task awaiting other hosts' tool calls failed");
                self.remote_task = None;
                let now = unix_ms();
                for id in std::mem::take(&mut self.remote).into_keys() {
                    if let Some(request) = self.outstanding.remove(&id) {
                        self.rerun_or_unknown(id, request, now);
                    }
                }
            }
            // Other tasks only end this way when aborted, which happens only
            // when the bridge is dropped.
            Err(e) => tracing::error!(error = %e, "a bridge task ended without a settlement"),
        }
    }
}

impl Bridge {
    /// Makes a settlement ready for the guest: its request is no longer
    /// outstanding.
    fn land(&mut self, mut settlement: Settlement) {
        let id = settlement.id;
        self.tokens.remove(&id);
        if let Some(request) = self.outstanding.remove(&id) {
            settlement = self.fit_inbox(settlement, &request.method);
            if let (Some(progress), "callValue") = (&self.progress, &*request.method) {
                progress.tool_settled(calls::callable(&request.args_json).as_deref());
            }
        }
        self.ready.push_back(settlement);
    }

    /// Requests running or awaited: the tasks in flight, counting the
    /// one that awaits other hosts' requests as those requests.
    fn in_flight_count(&self) -> usize {
        self.in_flight
            .len()
            .saturating_sub(usize::from(self.remote_task.is_some()))
            + self.remote.len()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        for token in self.tokens.values() {
            token.cancel();
        }
    }
}
