//! A cell of a Codex session: its output as observers see it, the driver
//! that runs it through parks and the client's answers, and the
//! observations that deliver what it produced.

use super::source::{CALL_TOOL, END_TOOL, NOTIFY_TOOL};
use super::{lock, Connection, Session};
use crate::frontends::codex::wire::*;
use crate::{CellResult, ClientToolResult, ErrorCode, ExecInput};
use crate::{WaitInput, WaitReason};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;

/// A cell's output and end, as its observers see them.
#[derive(Default)]
pub(super) struct CellOutput {
    pub(super) items: Vec<ContentItem>,
    /// `Some` once the cell ended: its error text (`None`: success), or
    /// `Terminated`.
    pub(super) end: Option<End>,
    /// The guest yielded since the last delivery.
    pub(super) yielded: bool,
    /// An observer (the execute's first, or a wait) is waiting.
    pub(super) observed: bool,
    /// When the cell ended.
    pub(super) ended_at: Option<std::time::Instant>,
}

#[derive(Clone)]
pub(super) enum End {
    Result(Option<String>),
    Terminated,
}

pub(super) struct Cell {
    pub(super) id: String,
    pub(super) output: Mutex<CellOutput>,
    pub(super) changed: Notify,
    /// Terminates the cell.
    pub(super) terminate: CancellationToken,
    /// Its driver's end.
    pub(super) driven: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The cell is parked, waiting on the client's answers.
    pub(super) parked: std::sync::atomic::AtomicBool,
    /// The key the profile's `image()` / `audio()` output carries: random,
    /// so that no other output of the cell can pass for one.
    pub(super) marker: String,
}

/// What a record keeps of a nested tool: what `tool/invoke` echoes.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct ToolRef {
    pub(super) tool_name: ToolName,
    pub(super) kind: ToolKind,
}

/// A parked cell's record (scoped hosts): enough to resume it elsewhere.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct CellRecord {
    pub(super) run: String,
    pub(super) call: String,
    pub(super) tools: Vec<ToolRef>,
    pub(super) marker: String,
}

/// How a driver starts.
pub(super) enum Start {
    Exec(Box<ExecInput>),
    Resume(String),
}

impl Cell {
    pub(super) fn new(id: String, marker: String) -> Arc<Self> {
        Arc::new(Self {
            id,
            marker,
            output: Mutex::default(),
            changed: Notify::new(),
            terminate: CancellationToken::new(),
            driven: Mutex::default(),
            parked: Default::default(),
        })
    }
}

impl Connection {
    /// Runs a cell to its end: each time it parks on calls the client runs
    /// (its nested tools, `notify`), those go out as delegate requests, and
    /// the run resumes from its snapshot with the answers.
    pub(super) async fn drive(
        self: Arc<Self>,
        session: Arc<Session>,
        cell: Arc<Cell>,
        start: Start,
        tool_call_id: String,
        tools: Arc<Vec<ToolRef>>,
    ) {
        let owner = session.owner.clone();
        let mut result = match start {
            Start::Exec(input) => {
                self.runtime
                    .exec(
                        input
                            .with_owner(owner.clone())
                            .with_cancel(cell.terminate.clone()),
                    )
                    .await
            }
            Start::Resume(run_id) => {
                self.runtime
                    .wait(
                        WaitInput::new(run_id)
                            .with_owner(owner.clone())
                            .with_cancel(cell.terminate.clone()),
                    )
                    .await
            }
        };
        loop {
            push_output(&cell, result.output());
            let waiting = match result {
                CellResult::Waiting(waiting) => waiting,
                CellResult::Completed(_) => {
                    self.forget_record(&session, &cell.id).await;
                    return finish(&cell, End::Result(None));
                }
                CellResult::Failed(failed) => {
                    self.forget_record(&session, &cell.id).await;
                    let end = if failed.code == ErrorCode::Aborted && cell.terminate.is_cancelled()
                    {
                        End::Terminated
                    } else {
                        End::Result(Some(failed.error))
                    };
                    return finish(&cell, end);
                }
            };
            if let Some(records) = &session.records {
                let record = CellRecord {
                    run: waiting.run_id.clone(),
                    call: tool_call_id.clone(),
                    tools: tools.to_vec(),
                    marker: cell.marker.clone(),
                };
                let written = self
                    .runtime
                    .set_session_values(
                        records,
                        vec![(
                            format!("cell:{}", cell.id),
                            serde_json::to_value(&record).ok(),
                        )],
                    )
                    .await;
                if let Err(e) = written {
                    tracing::warn!(cell = %cell.id, error = %e, "cannot record a parked Codex cell; a restarted host cannot resume it");
                }
            }
            if waiting.reason == WaitReason::Yield {
                lock(&cell.output).yielded = true;
                cell.changed.notify_waiters();
            }
            let calls: Vec<_> = waiting
                .pending_tool_calls
                .iter()
                .filter(|c| c.method == "clientTool")
                .cloned()
                .collect();
            cell.parked.store(true, Ordering::SeqCst);
            let ended = calls.iter().any(|c| c.tool.as_deref() == Some(END_TOOL));
            // The calls go out in the order the cell made them; their
            // answers are awaited together.
            let mut answering = tokio::task::JoinSet::new();
            for (index, call) in calls.into_iter().enumerate() {
                let delegated = if call.tool.as_deref() == Some(END_TOOL) {
                    Delegated::Answered(ClientToolResult::value(call.id, Value::Null))
                } else {
                    // Past the end, a nested call nobody awaits is sent (the
                    // tool runs, as in Codex) but not waited for; Codex
                    // withdraws it when the cell closes.
                    let fire = ended && call.tool.as_deref() != Some(NOTIFY_TOOL);
                    self.delegate(&session, &cell, &call, &tool_call_id, &tools, fire)
                        .await
                };
                let (connection, cell) = (self.clone(), cell.clone());
                answering.spawn(async move { (index, connection.answer(&cell, delegated).await) });
            }
            // While the client works on them, the run does not expire.
            let mut answers: Vec<(usize, ClientToolResult)> = tokio::select! {
                answers = answering.join_all() => answers,
                never = self.keep_parked(&waiting.run_id, &owner) => match never {},
            };
            answers.sort_by_key(|(index, _)| *index);
            let answers: Vec<ClientToolResult> = answers.into_iter().map(|(_, a)| a).collect();
            cell.parked.store(false, Ordering::SeqCst);
            if cell.terminate.is_cancelled() {
                self.runtime.cancel(&waiting.run_id, &owner).await;
                self.forget_record(&session, &cell.id).await;
                return finish(&cell, End::Terminated);
            }
            result = self
                .runtime
                .wait(
                    WaitInput::new(waiting.run_id.clone())
                        .with_owner(owner.clone())
                        .with_tool_results(answers)
                        .with_cancel(cell.terminate.clone()),
                )
                .await;
        }
    }

    /// Keeps a run parked on the client's answers from expiring: its
    /// expiry moves out by the snapshot TTL at once, then every third of
    /// it (at least every 250 ms). Runs until dropped.
    async fn keep_parked(&self, run_id: &str, owner: &crate::Owner) -> std::convert::Infallible {
        let ttl = Duration::from_secs(self.runtime.limits().snapshot_ttl_seconds());
        let every = (ttl / 3).max(Duration::from_millis(250));
        loop {
            if let Err(e) = self.runtime.keep_parked(run_id, owner).await {
                tracing::warn!(run_id, error = %e, "cannot keep a Codex cell's run parked");
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Sends one parked call to the client (its answer is then awaited
    /// with [`Connection::answer`]).
    pub(super) async fn delegate(
        &self,
        session: &Session,
        cell: &Cell,
        call: &crate::PendingToolCall,
        tool_call_id: &str,
        tools: &[ToolRef],
        fire: bool,
    ) -> Delegated {
        let input = call
            .input
            .as_ref()
            .and_then(|args| args.get("input"))
            .cloned()
            .unwrap_or(Value::Null);
        let tool = call.tool.as_deref().unwrap_or_default();
        let request = if tool == NOTIFY_TOOL {
            DelegateRequest::Notify {
                call_id: tool_call_id.to_string(),
                cell_id: cell.id.clone(),
                text: input.as_str().unwrap_or_default().to_string(),
            }
        } else {
            let index = call
                .input
                .as_ref()
                .and_then(|args| args.get("tool"))
                .and_then(Value::as_u64);
            let definition = (tool == CALL_TOOL)
                .then_some(index)
                .flatten()
                .and_then(|i| tools.get(i as usize));
            let Some(definition) = definition else {
                return Delegated::Answered(ClientToolResult::error(
                    call.id.clone(),
                    format!("unknown nested tool {tool}"),
                ));
            };
            // `tool-N`, as Codex's own host numbers a cell's calls.
            let number = call.id.rsplit(':').next().unwrap_or_default();
            DelegateRequest::InvokeTool {
                invocation: NestedToolCall {
                    cell_id: cell.id.clone(),
                    runtime_tool_call_id: format!("tool-{number}"),
                    tool_name: definition.tool_name.clone(),
                    tool_kind: definition.kind,
                    input: Some(input),
                },
            }
        };
        let id = self.next_delegate.fetch_add(1, Ordering::Relaxed);
        if fire {
            self.send(HostMessage::DelegateRequest {
                id,
                session_id: session.id.clone(),
                request,
            })
            .await;
            return Delegated::Answered(ClientToolResult::value(call.id.clone(), Value::Null));
        }
        let (answer, answered) = oneshot::channel();
        {
            let mut delegates = lock(&self.delegates);
            if delegates.len() >= self.limits.max_pending_delegates {
                return Delegated::Answered(ClientToolResult::error(
                    call.id.clone(),
                    format!(
                        "code-mode host exceeded the limit of {} pending delegate calls",
                        self.limits.max_pending_delegates
                    ),
                ));
            }
            delegates.insert(id, answer);
        }
        self.send(HostMessage::DelegateRequest {
            id,
            session_id: session.id.clone(),
            request,
        })
        .await;
        Delegated::Sent {
            id,
            call_id: call.id.clone(),
            notify: tool == NOTIFY_TOOL,
            answered,
        }
    }

    /// A delegated call's answer: the client's, or (when the cell is
    /// terminated first) an error, the call withdrawn with
    /// `delegate/cancel`.
    pub(super) async fn answer(&self, cell: &Cell, delegated: Delegated) -> ClientToolResult {
        let (id, call_id, notify, answered) = match delegated {
            Delegated::Answered(result) => return result,
            Delegated::Sent {
                id,
                call_id,
                notify,
                answered,
            } => (id, call_id, notify, answered),
        };
        tokio::select! {
            answered = answered => match answered {
                Ok(WireResult::Ok { value: DelegateResponse::ToolResult { result } }) if !notify => {
                    ClientToolResult::value(call_id.clone(), result)
                }
                Ok(WireResult::Ok { value: DelegateResponse::NotificationDelivered }) if notify => {
                    ClientToolResult::value(call_id.clone(), Value::Null)
                }
                Ok(WireResult::Ok { .. }) => ClientToolResult::error(call_id.clone(), "code-mode client returned an invalid tool result"),
                Ok(WireResult::Err { message }) => ClientToolResult::error(call_id.clone(), message),
                Err(_) => ClientToolResult::error(call_id.clone(), "the code-mode client went away"),
            },
            _ = cell.terminate.cancelled() => {
                if lock(&self.delegates).remove(&id).is_some() {
                    self.send(HostMessage::DelegateCancel { id }).await;
                }
                ClientToolResult::error(call_id, "the cell was terminated")
            }
        }
    }
}

/// A parked call as it went to the client.
pub(super) enum Delegated {
    /// Settled without the client (or sent without waiting for it).
    Answered(ClientToolResult),
    /// Sent as delegate request `id`; `answered` gets the client's answer.
    Sent {
        id: i64,
        call_id: String,
        notify: bool,
        answered: oneshot::Receiver<WireResult<DelegateResponse>>,
    },
}

/// How long an observer waits: the request's yield time (10 s when
/// absent), one more second from 10 s on, capped by the session's
/// `maxYieldTimeMs`.
pub(super) fn yield_time(requested_ms: Option<u64>, session_max: Option<Duration>) -> Duration {
    let asked = Duration::from_millis(
        requested_ms
            .unwrap_or(10_000)
            .min(crate::frontends::codex::MAX_YIELD_TIME_MS),
    );
    let timeout = if asked >= Duration::from_secs(10) {
        asked + Duration::from_secs(1)
    } else {
        asked
    };
    session_max.map_or(timeout, |max| timeout.min(max))
}

/// Adds a result's output entries to the cell's undelivered items.
pub(super) fn push_output(cell: &Cell, entries: &[Value]) {
    if entries.is_empty() {
        return;
    }
    let mut output = lock(&cell.output);
    output
        .items
        .extend(entries.iter().map(|e| content_item(e, &cell.marker)));
    drop(output);
    cell.changed.notify_waiters();
}

/// An output entry as a content item: text as text, what the profile's
/// `image()` / `audio()` wrote (under the cell's `marker`) as an image or
/// audio item, other JSON as its compact text.
pub(super) fn content_item(entry: &Value, marker: &str) -> ContentItem {
    if entry["type"] == "text" {
        if let Some(text) = entry["text"].as_str() {
            return ContentItem::InputText {
                text: text.to_string(),
            };
        }
    }
    let value = &entry["value"];
    let media = &value[marker];
    let data_url = |key: &str| media[key].as_str().filter(|u| u.starts_with("data:"));
    match media["type"].as_str() {
        Some("image") => {
            let detail = media["detail"]
                .as_str()
                .filter(|d| ["auto", "low", "high", "original"].contains(d));
            if let (Some(url), Some(detail)) = (data_url("image_url"), detail) {
                return ContentItem::InputImage {
                    image_url: url.to_string(),
                    detail: Some(detail.to_string()),
                };
            }
        }
        Some("audio") => {
            if let Some(url) = data_url("audio_url") {
                return ContentItem::InputAudio {
                    audio_url: url.to_string(),
                };
            }
        }
        _ => {}
    }
    ContentItem::InputText {
        text: value.to_string(),
    }
}

pub(super) fn finish(cell: &Cell, end: End) {
    {
        let mut output = lock(&cell.output);
        output.end = Some(end);
        output.ended_at = Some(std::time::Instant::now());
    }
    cell.changed.notify_waiters();
}

/// When the cell ended, if it has.
pub(super) fn ended_at(cell: &Cell) -> Option<std::time::Instant> {
    lock(&cell.output).ended_at
}

/// Ends an observation once its response is queued: `terminate` and
/// shutdown wait for it, so that their `cell/closed` comes after.
pub(super) fn release(cell: &Cell) {
    lock(&cell.output).observed = false;
    cell.changed.notify_waiters();
}

/// Waits until no observer holds the cell (at most 5 s: an observer only
/// queues a response).
pub(super) async fn observers_done(cell: &Cell) {
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let changed = cell.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if !lock(&cell.output).observed {
            return;
        }
        if tokio::time::timeout_at(until, changed).await.is_err() {
            return;
        }
    }
}

/// The execute's first observation (the cell was made claimed): ends at
/// `yield_now` too.
pub(super) async fn observe(
    cell: &Cell,
    yield_for: Duration,
    cancel: &CancellationToken,
    yield_now: &CancellationToken,
) -> (RuntimeResponse, bool) {
    observe_claimed(cell, yield_for, cancel, yield_now)
        .await
        .unwrap_or_else(|| (RuntimeResponse::yielded(cell.id.clone(), Vec::new()), false))
}

/// Waits until the cell ends, yields, `yield_for` passes or `yield_now`
/// is cancelled (the client's `operation/yield`), then takes what it
/// produced since the last delivery; `None` when `cancel` came first (what
/// it produced stays for the next observer). Whether the cell ended.
pub(super) async fn observe_claimed(
    cell: &Cell,
    yield_for: Duration,
    cancel: &CancellationToken,
    yield_now: &CancellationToken,
) -> Option<(RuntimeResponse, bool)> {
    let until = tokio::time::Instant::now() + yield_for;
    let outcome = loop {
        let changed = cell.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        {
            let output = lock(&cell.output);
            if output.end.is_some() || output.yielded {
                break true;
            }
        }
        tokio::select! {
            _ = &mut changed => {}
            _ = tokio::time::sleep_until(until) => break true,
            _ = yield_now.cancelled() => break true,
            _ = cancel.cancelled() => break false,
        }
    };
    let mut output = lock(&cell.output);
    if !outcome {
        output.observed = false;
        drop(output);
        cell.changed.notify_waiters();
        return None;
    }
    output.yielded = false;
    let content_items = std::mem::take(&mut output.items);
    let cell_id = cell.id.clone();
    Some(match output.end.clone() {
        None => (RuntimeResponse::yielded(cell_id, content_items), false),
        Some(End::Result(error_text)) => (
            RuntimeResponse::result(cell_id, content_items, error_text),
            true,
        ),
        Some(End::Terminated) => (RuntimeResponse::terminated(cell_id, content_items), true),
    })
}
