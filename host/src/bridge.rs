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
//! `describe {callable}`, `sleep {ms}`, `yield {reason}`.
//! Settlements (host → guest): `{"id":N,"ok":true,"value":..}` or
//! `{"id":N,"ok":false,"error":{"message":..,"code":..}}`.
//!
//! Until suspension exists, `yield` settles at once and requests still
//! running at the call's deadline end the cell with `timeout`.

use crate::abi::BridgeRequest;
use crate::tools::{ToolErrorCode, ToolSet};
use quickcell_catalog::{Catalog, CatalogError, Projection};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
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
    /// Callable names of the tool globals, sorted (`catalog.all()` order).
    pub callable_names: Vec<String>,
    /// JSON array of the handles' metadata, in the same order.
    pub metas_json: String,
}

impl CellTools {
    pub(crate) fn new(catalog: Catalog, tools: ToolSet) -> Self {
        let projection = catalog.callable_projection();
        let metas = catalog.guest_all(&projection);
        let callable_names = metas.iter().map(|m| m.callable_name.clone()).collect();
        let metas_json = serde_json::to_string(&metas).expect("metadata serializes");
        Self {
            catalog: Arc::new(catalog),
            projection: Arc::new(projection),
            tools,
            callable_names,
            metas_json,
        }
    }
}

/// The bridge state of one call.
pub(crate) struct Bridge {
    tools: Arc<CellTools>,
    max_in_flight: usize,
    in_flight: JoinSet<Value>,
    tokens: HashMap<u64, CancellationToken>,
    queued: VecDeque<BridgeRequest>,
    ready: Vec<Value>,
    /// Whether any request was accepted for dispatch.
    pub dispatch_started: bool,
}

fn ok(id: u64, value: Value) -> Value {
    json!({ "id": id, "ok": true, "value": value })
}

fn err(id: u64, message: impl Into<String>, code: &str) -> Value {
    json!({ "id": id, "ok": false, "error": { "message": message.into(), "code": code } })
}

fn catalog_err(id: u64, e: CatalogError) -> Value {
    let code = e.code().unwrap_or("invalid_input");
    err(id, e.message, code)
}

impl Bridge {
    pub(crate) fn new(tools: Arc<CellTools>, max_in_flight: usize) -> Self {
        Self {
            tools,
            max_in_flight: max_in_flight.max(1),
            in_flight: JoinSet::new(),
            tokens: HashMap::new(),
            queued: VecDeque::new(),
            ready: Vec::new(),
            dispatch_started: false,
        }
    }

    /// Accepts a batch of new requests. Fails with the contract's queue
    /// message when the batch would overflow the queue; nothing of the batch
    /// is dispatched then.
    pub(crate) fn accept(&mut self, batch: Vec<BridgeRequest>) -> Result<(), String> {
        if batch.is_empty() {
            return Ok(());
        }
        let outstanding = self.in_flight.len() + self.queued.len() + batch.len();
        if outstanding > self.max_in_flight + MAX_QUEUED_REQUESTS {
            return Err(format!(
                "code mode bridge queue limit exceeded ({MAX_QUEUED_REQUESTS} ordinary requests queued; {} in-flight slots). Await smaller batches before creating more tool calls or timers.",
                self.max_in_flight
            ));
        }
        self.dispatch_started = true;
        self.queued.extend(batch);
        self.pump();
        Ok(())
    }

    /// Stops requests the guest no longer needs (cleared timers).
    pub(crate) fn cancel(&mut self, ids: Vec<u64>) {
        for id in ids {
            if let Some(token) = self.tokens.get(&id) {
                token.cancel();
            } else if let Some(pos) = self.queued.iter().position(|r| r.id == id) {
                self.queued.remove(pos);
                self.ready.push(ok(id, Value::Null));
            }
        }
    }

    /// Whether any request is still outstanding.
    pub(crate) fn has_work(&self) -> bool {
        !self.in_flight.is_empty() || !self.queued.is_empty() || !self.ready.is_empty()
    }

    fn pump(&mut self) {
        while self.in_flight.len() < self.max_in_flight {
            let Some(request) = self.queued.pop_front() else {
                break;
            };
            self.start(request);
        }
    }

    fn start(&mut self, request: BridgeRequest) {
        let id = request.id;
        if let Some(size) = request.oversized_args {
            self.ready.push(err(
                id,
                format!(
                    "the arguments of this call are {size} bytes of JSON; the bridge accepts at most {} bytes. Pass less data.",
                    crate::abi::MAX_REQUEST_ARGS_BYTES
                ),
                "invalid_input",
            ));
            return;
        }
        let args: Value = match serde_json::from_str(&request.args_json) {
            Ok(v) => v,
            Err(e) => {
                self.ready.push(err(
                    id,
                    format!("malformed bridge request: {e}"),
                    "invalid_input",
                ));
                return;
            }
        };
        let tools = &self.tools;
        match request.method.as_str() {
            "search" => {
                let query = args["query"].as_str().unwrap_or("");
                let limit = args.get("limit").filter(|v| !v.is_null());
                let metas = tools.catalog.guest_search(&tools.projection, query, limit);
                self.ready
                    .push(ok(id, serde_json::to_value(metas).unwrap_or(Value::Null)));
            }
            "describe" => {
                let callable = args["callable"].as_str().unwrap_or("");
                self.ready.push(
                    match tools.catalog.guest_describe(&tools.projection, callable) {
                        Ok(v) => ok(id, v),
                        Err(e) => catalog_err(id, e),
                    },
                );
            }
            "yield" => self.ready.push(ok(id, Value::Null)),
            "sleep" => {
                let ms = match args["ms"].as_f64() {
                    Some(ms) if ms.is_finite() && ms >= 0.0 => (ms as u64).min(MAX_SLEEP_MS),
                    _ => {
                        self.ready.push(err(
                            id,
                            "setTimeout delay must be a non-negative finite number.",
                            "invalid_input",
                        ));
                        return;
                    }
                };
                let token = CancellationToken::new();
                self.tokens.insert(id, token.clone());
                self.in_flight.spawn(async move {
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(ms)) => {}
                        _ = token.cancelled() => {}
                    }
                    ok(id, Value::Null)
                });
            }
            "callValue" => {
                let callable = args["callable"].as_str().unwrap_or("");
                let input = args.get("input");
                let prepared =
                    match tools
                        .catalog
                        .guest_prepare_call(&tools.projection, callable, input)
                    {
                        Ok(p) => p,
                        Err(e) => {
                            self.ready.push(catalog_err(id, e));
                            return;
                        }
                    };
                let Some(tool) = tools.tools.get(&prepared.tool_name).cloned() else {
                    self.ready.push(err(
                        id,
                        format!("Unknown catalog function: {callable}."),
                        "invalid_input",
                    ));
                    return;
                };
                let token = CancellationToken::new();
                self.tokens.insert(id, token.clone());
                let catalog = tools.catalog.clone();
                let call = async move {
                    let name = prepared.display_name.clone();
                    match tool.call(prepared.arguments, token).await {
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
                // The inner task isolates a panicking tool: its settlement
                // becomes a tool error and the host keeps serving.
                self.in_flight.spawn(async move {
                    match tokio::spawn(call).await {
                        Ok(settlement) => settlement,
                        Err(_) => err(
                            id,
                            "the tool failed unexpectedly (it panicked)",
                            "tool_error",
                        ),
                    }
                });
            }
            other => self.ready.push(err(
                id,
                format!("unknown bridge method `{other}`"),
                "invalid_input",
            )),
        }
    }

    /// Waits for the next settlements: everything already settled, or the
    /// first request to settle, whichever comes first. `None` when the
    /// deadline passes first.
    pub(crate) async fn next_batch(&mut self, deadline: Instant) -> Option<Vec<Value>> {
        if self.ready.is_empty() {
            let deadline = tokio::time::Instant::from_std(deadline);
            tokio::select! {
                joined = self.in_flight.join_next() => {
                    if let Some(result) = joined {
                        self.settled(result);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return None,
            }
        }
        while let Some(result) = self.in_flight.try_join_next() {
            self.settled(result);
        }
        self.pump();
        Some(std::mem::take(&mut self.ready))
    }

    fn settled(&mut self, result: Result<Value, tokio::task::JoinError>) {
        match result {
            Ok(settlement) => {
                if let Some(id) = settlement["id"].as_u64() {
                    self.tokens.remove(&id);
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
