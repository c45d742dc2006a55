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
//! # restartSafe cells
//!
//! In a `restartSafe` cell a call to a tool that is not marked replay-safe
//! is rejected (a catchable error, code `invalid_input`) with the contract's
//! message, and is never dispatched.

use crate::abi::BridgeRequest;
use crate::tools::{Tool, ToolErrorCode, ToolSet};
use quickcell_catalog::{Catalog, CatalogError, Projection, SourceKind};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
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

/// Longest timer a cell may set, in milliseconds (a day).
pub(crate) const MAX_SLEEP_MS: u64 = 86_400_000;

/// What the cell's tools are: the catalog, the callable projection and the
/// implementations.
pub(crate) struct CellTools {
    pub catalog: Arc<Catalog>,
    pub projection: Arc<Projection>,
    pub tools: ToolSet,
    /// MCP tools by catalog id.
    pub mcp_tools: HashMap<String, Arc<dyn Tool>>,
    /// The `MCP` namespace for the guest: per server, its identifier and
    /// its tools' identifiers joined by newlines (identifiers are
    /// alphanumeric), in catalog order. One string per server keeps the
    /// per-cell cost independent of the number of tools.
    pub mcp_layout: Vec<Vec<String>>,
    /// The untrusted source every cell may see (see [`untrusted_in_catalog`]).
    pub untrusted_source: Option<&'static str>,
    /// The catalog's members of the guest's start options, as JSON text
    /// built once: `"toolNames"` (the callable names of the tool globals,
    /// sorted as `catalog.all()` lists them, joined by newlines) and
    /// `"mcpLayout"`.
    pub start_options: String,
    /// JSON array of the handles' metadata, in `toolNames` order.
    pub metas_json: String,
}

impl CellTools {
    /// The implementation a prepared call reaches: MCP tools by catalog id
    /// (their names may repeat across servers and with host tools), the
    /// others by name.
    pub(crate) fn implementation(
        &self,
        prepared: &quickcell_catalog::PreparedCall,
    ) -> Option<Arc<dyn Tool>> {
        match prepared.source {
            SourceKind::Mcp => self.mcp_tools.get(&prepared.id).cloned(),
            _ => self.tools.get(&prepared.tool_name).cloned(),
        }
    }

    pub(crate) fn new(catalog: Catalog, registry: &crate::registry::ToolRegistry) -> Self {
        let projection = catalog.callable_projection();
        let mcp_layout = catalog
            .mcp_servers()
            .iter()
            .map(|server| {
                let tools: Vec<&str> = catalog
                    .mcp_server_entries(server)
                    .filter_map(|e| e.mcp_identifiers().map(|(_, t)| t))
                    .collect();
                vec![server.identifier.clone(), tools.join("\n")]
            })
            .collect();
        let metas = catalog.guest_all(&projection);
        let callable_names: Vec<&str> = metas.iter().map(|m| m.callable_name.as_str()).collect();
        let start_options = format!(
            r#""toolNames":{},"mcpLayout":{}"#,
            serde_json::Value::from(callable_names.join("\n")),
            serde_json::to_string(&mcp_layout).expect("the layout serializes"),
        );
        let metas_json = serde_json::to_string(&metas).expect("metadata serializes");
        let untrusted_source = untrusted_in_catalog(&catalog);
        Self {
            catalog: Arc::new(catalog),
            projection: Arc::new(projection),
            tools: registry.tools().clone(),
            mcp_tools: registry.mcp_tools(),
            mcp_layout,
            untrusted_source,
            start_options,
            metas_json,
        }
    }
}

/// The untrusted source any cell of this catalog may see: `"mcp"` when it
/// has MCP tools, else `"client"` when it has client tools.
fn untrusted_in_catalog(catalog: &Catalog) -> Option<&'static str> {
    let kinds = || catalog.entries().iter().map(|e| e.kind());
    if kinds().any(|k| k == SourceKind::Mcp) {
        Some("mcp")
    } else if kinds().any(|k| k == SourceKind::Client) {
        Some("client")
    } else {
        None
    }
}

/// Largest session-store value, in bytes of compact JSON (contract §8.8).
pub(crate) const MAX_STORE_VALUE_BYTES: usize = 262_144;
/// Largest sum of a session's stored values, in bytes (contract §8.8).
pub(crate) const MAX_STORE_TOTAL_BYTES: usize = 1_048_576;
/// Longest session-store key, in UTF-16 code units (contract §8.8).
pub(crate) const MAX_STORE_KEY_UNITS: usize = 256;

/// Saved results an agent run may hold (contract §8.9).
pub(crate) const MAX_SAVED_RESULTS: usize = 64;
/// Message of a missing or expired saved result.
pub(crate) const RESULT_UNAVAILABLE: &str =
    "Code Mode result is unavailable or expired; fetch fresh data if needed.";
/// Message of a full results store.
pub(crate) const RESULTS_FULL: &str = "Code Mode results capacity exceeded; delete saved references or save a smaller value. Existing references are unchanged.";

/// Message of a restart-safe cell calling a tool that is not replay-safe.
pub(crate) const RESTART_SAFE_UNSAFE_TOOL: &str = "restart-safe code mode cannot call tool surfaces that are not proven replay-safe; use audited read, grep, or find tools.";

/// Message of a restart-safe cell calling an MCP (namespace) tool.
pub(crate) const RESTART_SAFE_NAMESPACE_CALL: &str =
    "restart-safe code mode cannot call namespace tools.";

/// Message of a call whose host ended while it was in flight.
pub(crate) const EFFECT_UNKNOWN: &str = "the host that ran this tool call ended while it was in flight, and the tool is not replay-safe, so it was not run again: its effect is unknown. Check the tool's state before calling it again.";

/// A request that has not settled yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Outstanding {
    pub method: String,
    pub args_json: Arc<str>,
    /// Dispatched to the host (not only queued).
    pub started: bool,
    /// Running it again after a host restart is harmless.
    pub replay_safe: bool,
    /// A timer's due time, in Unix milliseconds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub due_unix_ms: Option<u64>,
}

/// What a parked cell's snapshot keeps of its bridge.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct BridgeState {
    /// Unsettled requests (queued, in flight or yields), by id.
    pub outstanding: BTreeMap<u64, Outstanding>,
    /// Settlements not delivered to the guest yet.
    pub ready: Vec<Settlement>,
    /// Held `yield` requests.
    pub yields: Vec<u64>,
    pub dispatch_started: bool,
    /// Buffered session-store writes (`None` deletes), committed when the
    /// cell completes.
    #[serde(default)]
    pub store_writes: BTreeMap<String, Option<String>>,
}

/// The session and agent run a cell's `store` / `load` / `results` reach.
#[derive(Clone)]
pub(crate) struct SessionAccess {
    pub state: Arc<dyn crate::state::StateStore>,
    pub owner: crate::state::Owner,
}

/// The bridge state of one cell: its requests, queued, running and settled.
pub(crate) struct Bridge {
    tools: Arc<CellTools>,
    max_in_flight: usize,
    restart_safe: bool,
    in_flight: JoinSet<Settlement>,
    tokens: HashMap<u64, CancellationToken>,
    queued: VecDeque<BridgeRequest>,
    ready: Vec<Settlement>,
    yields: Vec<u64>,
    outstanding: BTreeMap<u64, Outstanding>,
    /// Largest settlement value delivered to the guest, in bytes of JSON.
    reply_inbox_bytes: usize,
    session: Option<SessionAccess>,
    store_writes: BTreeMap<String, Option<String>>,
    /// The untrusted provider whose content the cell may see (see
    /// [`untrusted_in_catalog`]).
    untrusted_source: Option<&'static str>,
    /// Whether any request was accepted for dispatch.
    pub dispatch_started: bool,
}

/// Saves `value` as a result of `agent_run` if capacity allows: at most
/// [`MAX_SAVED_RESULTS`] entries and `capacity_bytes` bytes of JSON in all.
/// Returns the descriptor JSON, or the contract's message when full.
pub(crate) fn save_result(
    state: &dyn crate::state::StateStore,
    agent_run: &str,
    value: &Value,
    capacity_bytes: usize,
) -> anyhow::Result<Result<Value, String>> {
    let json = value.to_string();
    let id = format!("result_{}", uuid::Uuid::new_v4());
    if !state.result_save(agent_run, &id, &json, MAX_SAVED_RESULTS, capacity_bytes)? {
        return Ok(Err(RESULTS_FULL.to_string()));
    }
    let described = crate::results_describe::describe(value);
    Ok(Ok(crate::results_describe::descriptor_json(
        &id, &described,
    )))
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Arguments of a `callValue` request.
#[derive(serde::Deserialize)]
struct CallValueArgs {
    callable: String,
    #[serde(default)]
    input: Option<Value>,
}

/// One settled bridge request, as the guest receives it in `cell.settle`:
/// `{"id":N,"ok":true,"value":..}` or
/// `{"id":N,"ok":false,"error":{"message":..,"code":..}}`. Typed, so that
/// building, checking and writing one touches no map (one is made per tool
/// round trip).
///
/// The value is held as JSON text ([`RawValue`]), never as a parsed tree:
/// a reply waits for delivery as the bytes the guest will parse, once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Settlement {
    pub id: u64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<SettlementError>,
}

impl Settlement {
    /// Bytes this settlement takes while it waits for delivery: its value's
    /// JSON, or its error message.
    pub(crate) fn bytes(&self) -> usize {
        self.value.as_ref().map_or(0, |v| v.get().len())
            + self.error.as_ref().map_or(0, |e| e.message.len())
    }
}

/// Why a bridge request failed; the guest makes it an `Error` with `code`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SettlementError {
    pub message: String,
    pub code: String,
}

fn ok(id: u64, value: Value) -> Settlement {
    match serde_json::value::to_raw_value(&value) {
        Ok(raw) => ok_raw(id, raw),
        Err(e) => err(id, format!("the result is not JSON: {e}"), "tool_error"),
    }
}

/// A successful settlement whose value is already JSON text.
fn ok_raw(id: u64, value: Box<RawValue>) -> Settlement {
    Settlement {
        id,
        ok: true,
        value: Some(value),
        error: None,
    }
}

/// `null`, the value of timers, deletes and released yields.
fn ok_null(id: u64) -> Settlement {
    ok(id, Value::Null)
}

fn err(id: u64, message: impl Into<String>, code: &str) -> Settlement {
    Settlement {
        id,
        ok: false,
        value: None,
        error: Some(SettlementError {
            message: message.into(),
            code: code.to_string(),
        }),
    }
}

/// The contract's queue-overflow message.
fn queue_overflow(max_in_flight: usize) -> String {
    format!(
        "code mode bridge queue limit exceeded ({MAX_QUEUED_REQUESTS} ordinary requests queued; {max_in_flight} in-flight slots). Await smaller batches before creating more tool calls or timers."
    )
}

/// The settlement of a request whose arguments are not what its method
/// takes.
fn malformed(id: u64, e: serde_json::Error) -> Settlement {
    err(
        id,
        format!("malformed bridge request: {e}"),
        "invalid_input",
    )
}

fn tool_panicked(id: u64) -> Settlement {
    err(
        id,
        "the tool failed unexpectedly (it panicked)",
        "tool_error",
    )
}

fn catalog_err(id: u64, e: CatalogError) -> Settlement {
    let code = e.code().unwrap_or("invalid_input");
    err(id, e.message, code)
}

impl Bridge {
    pub(crate) fn new(tools: Arc<CellTools>, max_in_flight: usize, restart_safe: bool) -> Self {
        Self {
            max_in_flight: max_in_flight.max(1),
            restart_safe,
            in_flight: JoinSet::new(),
            tokens: HashMap::new(),
            queued: VecDeque::new(),
            ready: Vec::new(),
            yields: Vec::new(),
            outstanding: BTreeMap::new(),
            reply_inbox_bytes: usize::MAX,
            session: None,
            store_writes: BTreeMap::new(),
            // MCP tool identifiers (derived from untrusted names) reach every
            // cell through the `MCP` namespace, client tools' metadata through
            // `catalog.all()`; and a cell of such a runtime may load stored
            // values that came from them.
            untrusted_source: tools.untrusted_source,
            tools,
            dispatch_started: false,
        }
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
        std::mem::take(&mut self.store_writes).into_iter().collect()
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

    /// Rebuilds the bridge of a parked cell in a host that does not hold
    /// its running requests (see the module docs). `recorded` are
    /// settlements the parking host stored after the checkpoint.
    pub(crate) fn restore(
        tools: Arc<CellTools>,
        max_in_flight: usize,
        restart_safe: bool,
        state: BridgeState,
        recorded: Vec<Settlement>,
    ) -> Self {
        let mut bridge = Self::new(tools, max_in_flight, restart_safe);
        bridge.dispatch_started = state.dispatch_started;
        bridge.store_writes = state.store_writes;
        bridge.ready = state.ready;
        bridge.yields = state.yields;
        let mut outstanding = state.outstanding;
        for settlement in recorded {
            if outstanding.remove(&settlement.id).is_some() {
                bridge.ready.push(settlement);
            }
        }
        let now = unix_ms();
        for (id, request) in outstanding {
            if bridge.yields.contains(&id) {
                bridge.outstanding.insert(id, request);
                continue;
            }
            if request.started && !request.replay_safe {
                bridge.ready.push(err(id, EFFECT_UNKNOWN, "tool_error"));
                continue;
            }
            let args_json = match request.due_unix_ms {
                Some(due) => Arc::from(format!("{{\"ms\":{}}}", due.saturating_sub(now))),
                None => request.args_json.clone(),
            };
            bridge.queued.push_back(BridgeRequest {
                id,
                method: request.method.clone(),
                args_json,
                oversized_args: None,
                over_outstanding_cap: false,
            });
            bridge.outstanding.insert(id, request);
        }
        // Dispatch starts with the caller's next `collect_finished`, after
        // it has set the reply inbox.
        bridge
    }

    /// What the snapshot keeps of this bridge.
    pub(crate) fn parked_state(&self) -> BridgeState {
        BridgeState {
            outstanding: self.outstanding.clone(),
            ready: self.ready.clone(),
            yields: self.yields.clone(),
            dispatch_started: self.dispatch_started,
            store_writes: self.store_writes.clone(),
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
            self.ready.push(ok_null(id));
        }
    }

    /// Whether every unsettled request is a `yield`.
    pub(crate) fn only_yields(&self) -> bool {
        self.outstanding.len() == self.yields.len()
    }

    /// Unsettled requests as `(id, method)`, in id order.
    pub(crate) fn pending_calls(&self) -> Vec<(u64, String)> {
        self.outstanding
            .iter()
            .map(|(id, r)| (*id, r.method.clone()))
            .collect()
    }

    /// Whether tool calls (not timers or yields) are queued or running.
    pub(crate) fn has_tool_work(&self) -> bool {
        self.outstanding
            .values()
            .any(|r| r.method != "sleep" && r.method != "yield")
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
            let len = request.args_json.len();
            if request.oversized_args.is_none()
                && held.saturating_add(len) > crate::abi::MAX_OUTSTANDING_ARGS_BYTES
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
                },
            );
        }
        self.pump();
        Ok(())
    }

    /// Fails with the contract's queue message when `new` more requests
    /// would overflow the queue.
    pub(crate) fn check_capacity(&self, new: usize) -> Result<(), String> {
        let outstanding = self.in_flight.len() + self.queued.len() + new;
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
                self.ready.push(ok_null(id));
            }
        }
    }

    /// Whether any request is still outstanding.
    pub(crate) fn has_work(&self) -> bool {
        !self.in_flight.is_empty()
            || !self.queued.is_empty()
            || !self.ready.is_empty()
            || !self.yields.is_empty()
    }

    /// Collects requests that finished since the last look (without
    /// waiting), so they are delivered together with what is ready.
    pub(crate) fn collect_finished(&mut self) {
        while let Some(result) = self.in_flight.try_join_next() {
            self.settled(result);
        }
        self.pump();
    }

    /// Settlements ready for the guest, taken: the oldest ones, as many as
    /// fit the reply inbox in bytes (always at least one). The rest stay
    /// ready for the next batch, so one delivery — and the JSON text built
    /// for it — never holds more than the inbox plus one reply.
    pub(crate) fn take_ready(&mut self) -> Vec<Settlement> {
        let mut bytes = 0usize;
        let fit = self
            .ready
            .iter()
            .take_while(|s| {
                let first = bytes == 0;
                bytes = bytes.saturating_add(s.bytes());
                first || bytes <= self.reply_inbox_bytes
            })
            .count();
        if fit == self.ready.len() {
            return std::mem::take(&mut self.ready);
        }
        let rest = self.ready.split_off(fit);
        std::mem::replace(&mut self.ready, rest)
    }

    /// Bytes of the settlements waiting for delivery.
    fn ready_bytes(&self) -> usize {
        self.ready.iter().map(Settlement::bytes).sum()
    }

    /// Starts queued requests while in-flight slots are free and the
    /// replies waiting for delivery take less than the reply inbox: while
    /// the guest is not taking replies (a parked cell), requests stay
    /// queued instead of piling up more replies on the host.
    fn pump(&mut self) {
        // With nothing waiting, requests always start (whatever the inbox
        // was set to), so a cell can never stall with work queued.
        while self.in_flight.len() < self.max_in_flight
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
        let replay_safe = self.start_request(request);
        if self.ready.len() > ready_before {
            // Settled at once (search, describe, a rejected call).
            self.outstanding.remove(&id);
        } else if let Some(o) = self.outstanding.get_mut(&id) {
            o.started = true;
            o.replay_safe = replay_safe;
        }
    }

    /// Starts one request; returns whether it is replay-safe. A request
    /// that settles at once pushes its settlement to `ready`.
    fn start_request(&mut self, request: BridgeRequest) -> bool {
        let id = request.id;
        if let Some(size) = request.oversized_args {
            let message = if request.over_outstanding_cap {
                format!(
                    "the arguments of this call ({size} bytes of JSON) would make this cell's unsettled calls hold more than {} bytes of arguments. Await earlier calls before making more, or pass less data.",
                    crate::abi::MAX_OUTSTANDING_ARGS_BYTES
                )
            } else {
                format!(
                    "the arguments of this call are {size} bytes of JSON; the bridge accepts at most {} bytes. Pass less data.",
                    crate::abi::MAX_REQUEST_ARGS_BYTES
                )
            };
            self.ready.push(err(id, message, "invalid_input"));
            return true;
        }
        if request.method == "callValue" {
            return self.start_call(id, &request.args_json);
        }
        let args: Value = match serde_json::from_str(&request.args_json) {
            Ok(v) => v,
            Err(e) => {
                self.ready.push(malformed(id, e));
                return true;
            }
        };
        let tools = &self.tools;
        match request.method.as_str() {
            "search" => {
                let query = args["query"].as_str().unwrap_or("");
                let limit = args.get("limit").filter(|v| !v.is_null());
                let metas = tools.catalog.guest_search(&tools.projection, query, limit);
                let settlement = match serde_json::value::to_raw_value(&metas) {
                    Ok(raw) => ok_raw(id, raw),
                    Err(e) => err(
                        id,
                        format!("search results are not JSON: {e}"),
                        "tool_error",
                    ),
                };
                let settlement = self.fit_inbox(settlement, "search");
                self.ready.push(settlement);
                true
            }
            "resultSave" | "resultLoad" | "resultDelete" => {
                let settlement = self.saved_results(id, &request.method, &args);
                let settlement = self.fit_inbox(settlement, &request.method);
                self.ready.push(settlement);
                true
            }
            "storeSet" | "storeGet" => {
                let settlement = self.session_store(id, &request.method, &args);
                self.ready.push(settlement);
                true
            }
            "apiRead" => {
                let path = args["path"].as_str().unwrap_or("");
                let settlement = match tools.catalog.api_read(&tools.projection, path) {
                    Ok(text) => ok(id, Value::String(text)),
                    Err(e) => catalog_err(id, e),
                };
                let settlement = self.fit_inbox(settlement, "apiRead");
                self.ready.push(settlement);
                true
            }
            "mcpApi" => {
                let server = args["server"].as_str().unwrap_or("");
                let method = args["method"].as_str();
                let schema = args["schema"].as_bool().unwrap_or(false);
                let settlement = match tools.catalog.mcp_api(server, method, schema) {
                    Ok(v) => ok(id, v),
                    Err(e) => catalog_err(id, e),
                };
                let settlement = self.fit_inbox(settlement, "mcpApi");
                self.ready.push(settlement);
                true
            }
            "describe" => {
                let callable = args["callable"].as_str().unwrap_or("");
                let settlement = match tools.catalog.guest_describe(&tools.projection, callable) {
                    Ok(v) => ok(id, v),
                    Err(e) => catalog_err(id, e),
                };
                self.ready.push(settlement);
                true
            }
            "sleep" => {
                let ms = match args["ms"].as_f64() {
                    Some(ms) if ms.is_finite() && ms >= 0.0 => (ms as u64).min(MAX_SLEEP_MS),
                    _ => {
                        self.ready.push(err(
                            id,
                            "setTimeout delay must be a non-negative finite number.",
                            "invalid_input",
                        ));
                        return true;
                    }
                };
                if let Some(o) = self.outstanding.get_mut(&id) {
                    o.due_unix_ms = Some(unix_ms().saturating_add(ms));
                }
                let token = CancellationToken::new();
                self.tokens.insert(id, token.clone());
                self.in_flight.spawn(async move {
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(ms)) => {}
                        _ = token.cancelled() => {}
                    }
                    ok_null(id)
                });
                true
            }
            other => {
                self.ready.push(err(
                    id,
                    format!("unknown bridge method `{other}`"),
                    "invalid_input",
                ));
                true
            }
        }
    }

    /// Starts a tool call (`callValue`); returns whether it is replay-safe.
    fn start_call(&mut self, id: u64, args_json: &str) -> bool {
        let tools = &self.tools;
        let CallValueArgs { callable, input } = match serde_json::from_str(args_json) {
            Ok(args) => args,
            Err(e) => {
                self.ready.push(malformed(id, e));
                return true;
            }
        };
        let callable = callable.as_str();
        let prepared = match tools
            .catalog
            .guest_prepare_call(&tools.projection, callable, input)
        {
            Ok(p) => p,
            Err(e) => {
                self.ready.push(catalog_err(id, e));
                return true;
            }
        };
        if prepared.source == SourceKind::Mcp && self.restart_safe {
            self.ready
                .push(err(id, RESTART_SAFE_NAMESPACE_CALL, "invalid_input"));
            return true;
        }
        let tool = tools.implementation(&prepared);
        let Some(tool) = tool else {
            self.ready.push(err(
                id,
                format!("Unknown catalog function: {callable}."),
                "invalid_input",
            ));
            return true;
        };
        // The catalog's mark: only trusted host tools carry it.
        let replay_safe = prepared.replay_safe;
        if self.restart_safe && !replay_safe {
            self.ready
                .push(err(id, RESTART_SAFE_UNSAFE_TOOL, "invalid_input"));
            return true;
        }
        let token = CancellationToken::new();
        let catalog = tools.catalog.clone();
        let call_token = token.clone();
        let call = async move {
            let name = prepared.display_name.clone();
            match tool.call(prepared.arguments, call_token).await {
                Ok(value) => match catalog.check_output(&prepared.id, &name, &value) {
                    Ok(()) => ok(id, value),
                    Err(e) => catalog_err(id, e),
                },
                Err(e) => {
                    let code = match e.code {
                        ToolErrorCode::InvalidInput => "invalid_input",
                        _ => "tool_error",
                    };
                    err(id, e.message, code)
                }
            }
        };
        // A tool that answers without waiting (a lookup, a no-op,
        // anything done in its first poll) settles here, without a
        // task; the guest gets it with this batch.
        let mut call: Pin<Box<dyn Future<Output = Settlement> + Send>> = Box::pin(call);
        let first_poll = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            call.as_mut()
                .poll(&mut Context::from_waker(std::task::Waker::noop()))
        }));
        match first_poll {
            Ok(Poll::Ready(settlement)) => {
                let settlement = self.fit_inbox(settlement, "callValue");
                self.ready.push(settlement);
                return replay_safe;
            }
            Ok(Poll::Pending) => {}
            Err(_) => {
                self.ready.push(tool_panicked(id));
                return replay_safe;
            }
        }
        self.tokens.insert(id, token);
        // The inner task isolates a panicking tool: its settlement
        // becomes a tool error and the host keeps serving.
        self.in_flight.spawn(async move {
            match tokio::spawn(call).await {
                Ok(settlement) => settlement,
                Err(_) => tool_panicked(id),
            }
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

    /// `resultSave {value}`, `resultLoad {id}`, `resultDelete {id}`.
    fn saved_results(&mut self, id: u64, method: &str, args: &Value) -> Settlement {
        let session = match self.session_for("results") {
            Ok(s) => s,
            Err(message) => return err(id, message, "invalid_input"),
        };
        let run = &session.owner.agent_run;
        let unavailable = |e: anyhow::Error| {
            err(
                id,
                format!("the results store is unavailable: {e:#}"),
                "tool_error",
            )
        };
        match method {
            "resultSave" => {
                let value = args.get("value").cloned().unwrap_or(Value::Null);
                match save_result(&*session.state, run, &value, self.reply_inbox_bytes) {
                    Ok(Ok(descriptor)) => ok(id, descriptor),
                    Ok(Err(message)) => err(id, message, "invalid_input"),
                    Err(e) => unavailable(e),
                }
            }
            "resultLoad" => {
                let key = args["id"].as_str().unwrap_or("");
                // The stored text is delivered as it is (checked to be
                // JSON, never parsed into a tree).
                match session.state.result_load(run, key) {
                    Ok(Some(json)) => match RawValue::from_string(json) {
                        Ok(value) => ok_raw(id, value),
                        Err(e) => err(
                            id,
                            format!("a saved result is unreadable: {e}"),
                            "tool_error",
                        ),
                    },
                    Ok(None) => err(id, RESULT_UNAVAILABLE, "invalid_input"),
                    Err(e) => unavailable(e),
                }
            }
            _ => {
                let key = args["id"].as_str().unwrap_or("");
                match session.state.result_delete(run, key) {
                    Ok(true) => ok(id, Value::Bool(true)),
                    Ok(false) => err(id, RESULT_UNAVAILABLE, "invalid_input"),
                    Err(e) => unavailable(e),
                }
            }
        }
    }

    /// `storeSet {key, value | delete}` and `storeGet {key}`.
    fn session_store(&mut self, id: u64, method: &str, args: &Value) -> Settlement {
        let session = match self.session_for("the session store") {
            Ok(s) => s,
            Err(message) => return err(id, message, "invalid_input"),
        };
        let Some(key) = args["key"].as_str() else {
            return err(
                id,
                "store keys must be strings of 1 to 256 characters",
                "store_type",
            );
        };
        let units = key.encode_utf16().count();
        if units == 0 || units > MAX_STORE_KEY_UNITS {
            return err(
                id,
                "store keys must be strings of 1 to 256 characters",
                "store_type",
            );
        }
        let name = &session.owner.session;
        let committed = |k: &str| session.state.store_get(name, k);
        if method == "storeGet" {
            let found = match self.store_writes.get(key) {
                Some(buffered) => Ok(buffered.clone()),
                None => committed(key),
            };
            return match found {
                Ok(Some(json)) => {
                    match RawValue::from_string(format!(r#"{{"found":true,"value":{json}}}"#)) {
                        Ok(value) => ok_raw(id, value),
                        Err(e) => err(
                            id,
                            format!("a stored value is unreadable: {e}"),
                            "tool_error",
                        ),
                    }
                }
                Ok(None) => ok(id, json!({"found": false})),
                Err(e) => err(
                    id,
                    format!("the session store is unavailable: {e:#}"),
                    "tool_error",
                ),
            };
        }
        let value = if args["delete"] == Value::Bool(true) {
            None
        } else {
            Some(args.get("value").unwrap_or(&Value::Null).to_string())
        };
        if let Some(v) = &value {
            if v.len() > MAX_STORE_VALUE_BYTES {
                return err(
                    id,
                    format!("store value is {} bytes of JSON; at most {MAX_STORE_VALUE_BYTES} bytes fit. Nothing was stored.", v.len()),
                    "store_range",
                );
            }
        }
        // The projected total: committed values, with this cell's buffered
        // writes (and this one) in place of what they replace.
        let projected = (|| -> anyhow::Result<usize> {
            let mut total = session.state.store_total_bytes(name)?;
            let mut pending: Vec<(&str, Option<&String>)> = self
                .store_writes
                .iter()
                .filter(|(k, _)| k.as_str() != key)
                .map(|(k, v)| (k.as_str(), v.as_ref()))
                .collect();
            pending.push((key, value.as_ref()));
            for (k, v) in pending {
                total = total.saturating_sub(committed(k)?.map_or(0, |c| c.len()));
                total += v.map_or(0, |v| v.len());
            }
            Ok(total)
        })();
        match projected {
            Ok(total) if total > MAX_STORE_TOTAL_BYTES => err(
                id,
                format!("the session store would hold {total} bytes of values; at most {MAX_STORE_TOTAL_BYTES} bytes fit. Nothing was stored."),
                "store_range",
            ),
            Ok(_) => {
                self.store_writes.insert(key.to_string(), value);
                ok(id, Value::Null)
            }
            Err(e) => err(id, format!("the session store is unavailable: {e:#}"), "tool_error"),
        }
    }

    /// Waits for the next settlements: everything already settled, or the
    /// first request to settle, whichever comes first. `None` when the
    /// deadline passes first.
    /// Without a deadline it waits as long as requests run.
    pub(crate) async fn next_batch(
        &mut self,
        deadline: Option<Instant>,
    ) -> Option<Vec<Settlement>> {
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

    /// Waits until a running request settles; returns the settlements that
    /// became ready meanwhile (they also stay ready for the guest). `None`
    /// when nothing runs.
    pub(crate) async fn next_settlements(&mut self) -> Option<Vec<Settlement>> {
        let before = self.ready.len();
        let joined = self.in_flight.join_next().await?;
        self.settled(joined);
        self.pump();
        Some(self.ready[before..].to_vec())
    }

    fn settled(&mut self, result: Result<Settlement, tokio::task::JoinError>) {
        match result {
            Ok(settlement) => {
                let mut settlement = settlement;
                let id = settlement.id;
                self.tokens.remove(&id);
                if let Some(request) = self.outstanding.remove(&id) {
                    settlement = self.fit_inbox(settlement, &request.method);
                }
                self.ready.push(settlement);
            }
            // Tasks only end this way when aborted, which happens only when
            // the bridge is dropped.
            Err(e) => tracing::error!(error = %e, "a bridge task ended without a settlement"),
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        for token in self.tokens.values() {
            token.cancel();
        }
    }
}
