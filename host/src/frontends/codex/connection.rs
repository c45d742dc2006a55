//! One Codex connection: the handshake, then sessions, cells and reverse
//! tool calls, until the client closes its end.

use super::frame::{read_frame, write_frame, Frame};
use super::wire::*;
use super::{CodexLimits, CODEX_PROTOCOL_VERSION, RESOURCE_LIMITS_CAPABILITY};
use crate::{CellResult, ClientToolResult, ClientToolSpec, ErrorCode, ExecInput, Owner, Runtime};
use crate::{WaitInput, WaitReason};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_util::sync::CancellationToken;

/// The profile's source; its last line, `})(`, is completed with the
/// cell's tool table and output marker.
const PROFILE_JS: &str = include_str!("profile.js");

/// The client tool that carries `notify()`.
const NOTIFY_TOOL: &str = "__codex_notify";

/// The client tool the profile calls when the source ends with nested tool
/// calls nobody awaits: the host discards them (answers them with `null`,
/// sending nothing), as Codex does.
const END_TOOL: &str = "__codex_end";

/// Frames queued for the client at most; a client that stops reading
/// holds its cells, not the host's memory.
const OUTGOING_FRAMES: usize = 128;

/// How long a frame may wait for room in a full queue before the client
/// is taken for gone.
const WRITE_STALL: Duration = Duration::from_secs(10);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves one connection until the client closes it.
pub(crate) async fn serve(
    runtime: Arc<Runtime>,
    limits: CodexLimits,
    scope: Option<String>,
    mut reader: impl AsyncRead + Unpin,
    mut writer: impl AsyncWrite + Unpin + Send + 'static,
) -> std::io::Result<()> {
    let (out, mut queue) = mpsc::channel::<HostMessage>(OUTGOING_FRAMES);
    let writing = tokio::spawn(async move {
        while let Some(message) = queue.recv().await {
            if let Some(payload) = encode(&message) {
                write_frame(&mut writer, &payload).await?;
            }
        }
        std::io::Result::Ok(())
    });
    let connection = Arc::new(Connection {
        runtime,
        limits,
        out,
        id: uuid::Uuid::new_v4().simple().to_string(),
        scope,
        sessions: Mutex::default(),
        opened: Mutex::default(),
        operations: Mutex::default(),
        delegates: Mutex::default(),
        next_delegate: AtomicI64::new(1),
        closed: CancellationToken::new(),
    });
    let read = async {
        if connection.handshake(&mut reader).await? {
            connection.clone().serve_frames(&mut reader).await?;
        }
        std::io::Result::Ok(())
    };
    let result = read.await;
    connection.close_all().await;
    drop(connection);
    // Frames still queued go out, unless the client stopped reading.
    let written = match tokio::time::timeout(WRITE_STALL, writing).await {
        Ok(joined) => joined.unwrap_or(Ok(())),
        Err(_) => Ok(()),
    };
    result.and(written)
}

/// A frame's JSON; a message too large for a frame becomes its error
/// reply (responses) or is dropped (logged).
fn encode(message: &HostMessage) -> Option<Vec<u8>> {
    let payload = serde_json::to_vec(message).ok()?;
    if payload.len() <= super::MAX_CODEX_FRAME_BYTES {
        return Some(payload);
    }
    let error = |what: &str| {
        format!(
            "code-mode {what} exceeds the IPC frame limit: {} bytes",
            payload.len()
        )
    };
    let replaced = match message {
        HostMessage::Response { id, .. } => HostMessage::Response {
            id: *id,
            result: WireResult::Err {
                message: error("host response"),
            },
        },
        HostMessage::InitialResponse { id, .. } => HostMessage::InitialResponse {
            id: *id,
            result: WireResult::Err {
                message: error("initial response"),
            },
        },
        _ => {
            tracing::warn!(
                bytes = payload.len(),
                "a Codex host message over the frame limit is dropped"
            );
            return None;
        }
    };
    serde_json::to_vec(&replaced).ok()
}

/// A bounded set of ids, forgetting the oldest.
#[derive(Default)]
struct RecentIds {
    ids: HashSet<String>,
    order: std::collections::VecDeque<String>,
}

impl RecentIds {
    /// Adds `id`; `false` when it is already there.
    fn insert(&mut self, id: &str, most: usize) -> bool {
        if self.ids.contains(id) {
            return false;
        }
        if self.order.len() >= most {
            if let Some(oldest) = self.order.pop_front() {
                self.ids.remove(&oldest);
            }
        }
        self.ids.insert(id.to_string());
        self.order.push_back(id.to_string());
        true
    }
}

struct Connection {
    runtime: Arc<Runtime>,
    limits: CodexLimits,
    out: mpsc::Sender<HostMessage>,
    /// Scopes this connection's sessions in the state store when it has
    /// no `scope`.
    id: String,
    /// The namespace of its sessions in the state store, which a restarted
    /// host shares (`None`: the sessions end with the connection).
    scope: Option<String>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The latest session ids opened on this connection, which may not be
    /// opened again (at most `max_recent_sessions`).
    opened: Mutex<RecentIds>,
    /// Operations in flight, by request id, with their cancel tokens.
    operations: Mutex<HashMap<i64, CancellationToken>>,
    /// Reverse calls awaiting the client's answer.
    delegates: Mutex<HashMap<i64, oneshot::Sender<WireResult<DelegateResponse>>>>,
    next_delegate: AtomicI64,
    /// Cancelled when the client has gone: observations end, no session
    /// opens.
    closed: CancellationToken,
}

/// What follows a response: the observation it ends, and the cell it
/// closes (its end delivered).
#[derive(Default)]
struct After {
    release: Option<Arc<Cell>>,
    close: Option<(Arc<Session>, String)>,
}

struct Session {
    id: String,
    owner: Owner,
    /// With a scope: the session-store key of the records that let a
    /// restarted host resume the session's cells.
    records: Option<String>,
    max_yield: Option<Duration>,
    cells: Mutex<HashMap<String, Arc<Cell>>>,
    next_cell: AtomicI64,
    /// Set (under `cells`) when the session ends: no cell starts after.
    closing: std::sync::atomic::AtomicBool,
}

/// A cell's output and end, as its observers see them.
#[derive(Default)]
struct CellOutput {
    items: Vec<ContentItem>,
    /// `Some` once the cell ended: its error text (`None`: success), or
    /// `Terminated`.
    end: Option<End>,
    /// The guest yielded since the last delivery.
    yielded: bool,
    /// An observer (the execute's first, or a wait) is waiting.
    observed: bool,
}

#[derive(Clone)]
enum End {
    Result(Option<String>),
    Terminated,
}

struct Cell {
    id: String,
    output: Mutex<CellOutput>,
    changed: Notify,
    /// Terminates the cell.
    terminate: CancellationToken,
    /// Its driver's end.
    driven: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The cell is parked, waiting on the client's answers.
    parked: std::sync::atomic::AtomicBool,
    /// The key the profile's `image()` / `audio()` output carries: random,
    /// so that no other output of the cell can pass for one.
    marker: String,
}

/// What a record keeps of a nested tool: what `tool/invoke` echoes.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct ToolRef {
    tool_name: ToolName,
    kind: ToolKind,
}

/// A parked cell's record (scoped hosts): enough to resume it elsewhere.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct CellRecord {
    run: String,
    call: String,
    tools: Vec<ToolRef>,
    marker: String,
}

/// How a driver starts.
enum Start {
    Exec(Box<ExecInput>),
    Resume(String),
}

impl Cell {
    fn new(id: String, marker: String) -> Arc<Self> {
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
    /// Queues a frame for the client. A client that has not taken a frame
    /// for [`WRITE_STALL`] while the queue is full is gone: the connection
    /// closes (as the reference host does), and nothing waits on it.
    async fn send(&self, message: HostMessage) {
        if self.closed.is_cancelled() {
            return;
        }
        match tokio::time::timeout(WRITE_STALL, self.out.send(message)).await {
            Ok(_) => {}
            Err(_) => {
                tracing::warn!(
                    "the Codex client has not read for {WRITE_STALL:?}; closing the connection"
                );
                self.closed.cancel();
            }
        }
    }

    /// Answers the client's hello; whether the connection goes on.
    async fn handshake(&self, reader: &mut (impl AsyncRead + Unpin)) -> std::io::Result<bool> {
        let reject = |reason| HostMessage::Rejected { reason };
        let payload = match read_frame(reader).await? {
            Frame::End => return Ok(false),
            Frame::TooLarge(n) => {
                self.send(reject(RejectReason::InvalidHello {
                    message: format!("the hello frame is {n} bytes, over the limit"),
                }))
                .await;
                return Ok(false);
            }
            Frame::Payload(payload) => payload,
        };
        let hello = match serde_json::from_slice::<ClientMessage>(&payload) {
            Ok(ClientMessage::Hello {
                supported_versions,
                required_capabilities,
                optional_capabilities,
            }) => (
                supported_versions,
                required_capabilities,
                optional_capabilities,
            ),
            Ok(_) => {
                self.send(reject(RejectReason::InvalidHello {
                    message: "first message must be connection/hello".into(),
                }))
                .await;
                return Ok(false);
            }
            Err(e) => {
                self.send(reject(RejectReason::InvalidHello {
                    message: format!("invalid connection/hello: {e}"),
                }))
                .await;
                return Ok(false);
            }
        };
        let (versions, required, optional) = hello;
        if !versions.contains(&CODEX_PROTOCOL_VERSION) {
            self.send(reject(RejectReason::NoCompatibleVersion {
                supported_versions: vec![CODEX_PROTOCOL_VERSION],
            }))
            .await;
            return Ok(false);
        }
        let known = [RESOURCE_LIMITS_CAPABILITY];
        let mut missing: Vec<&String> = required
            .iter()
            .filter(|c| !known.contains(&c.as_str()))
            .collect();
        missing.sort();
        if let Some(capability) = missing.first() {
            self.send(reject(RejectReason::MissingRequiredCapability {
                capability: (*capability).clone(),
            }))
            .await;
            return Ok(false);
        }
        let mut capabilities: Vec<String> = required
            .iter()
            .chain(&optional)
            .filter(|c| known.contains(&c.as_str()))
            .cloned()
            .collect();
        capabilities.sort();
        capabilities.dedup();
        self.send(HostMessage::Ready {
            selected_version: CODEX_PROTOCOL_VERSION,
            capabilities,
        })
        .await;
        Ok(true)
    }

    /// Reads and dispatches frames until the client closes its end.
    async fn serve_frames(
        self: Arc<Self>,
        reader: &mut (impl AsyncRead + Unpin),
    ) -> std::io::Result<()> {
        loop {
            let frame = tokio::select! {
                frame = read_frame(reader) => frame?,
                () = self.closed.cancelled() => return Ok(()),
            };
            let payload = match frame {
                Frame::End => return Ok(()),
                Frame::TooLarge(n) => {
                    tracing::warn!(bytes = n, "a Codex client frame over the limit was skipped");
                    continue;
                }
                Frame::Payload(payload) => payload,
            };
            match serde_json::from_slice::<ClientMessage>(&payload) {
                Ok(ClientMessage::Request { id, request }) => {
                    let token = CancellationToken::new();
                    let refused = {
                        let mut operations = lock(&self.operations);
                        if operations.contains_key(&id) {
                            // The request in flight under this id answers
                            // it; a second response would be one too many.
                            tracing::warn!(
                                id,
                                "a Codex request reusing an id in flight was ignored"
                            );
                            continue;
                        } else if operations.len() >= self.limits.max_in_flight {
                            Some(format!(
                                "code-mode host has too many in-flight requests ({})",
                                self.limits.max_in_flight
                            ))
                        } else {
                            operations.insert(id, token.clone());
                            None
                        }
                    };
                    if let Some(message) = refused {
                        self.send(error_response(id, &message)).await;
                        continue;
                    }
                    let connection = self.clone();
                    tokio::spawn(async move {
                        connection.operate(id, request, token).await;
                        lock(&connection.operations).remove(&id);
                    });
                }
                Ok(ClientMessage::Cancel { id }) => {
                    if let Some(token) = lock(&self.operations).get(&id) {
                        token.cancel();
                    }
                }
                Ok(ClientMessage::DelegateResponse { id, result }) => {
                    match lock(&self.delegates).remove(&id) {
                        Some(answer) => {
                            let _ = answer.send(result);
                        }
                        None => tracing::warn!(
                            id,
                            "a Codex delegate response for an unknown id was ignored"
                        ),
                    }
                }
                Ok(ClientMessage::Hello { .. }) => {
                    tracing::warn!("a second Codex connection/hello was ignored");
                }
                Err(e) => self.refuse(&payload, e).await,
            }
        }
    }

    /// Answers a frame that does not decode: an operation request gets an
    /// error response naming what is wrong; anything else is logged.
    async fn refuse(&self, payload: &[u8], error: serde_json::Error) {
        let raw: Option<Value> = serde_json::from_slice(payload).ok();
        let request_id = raw
            .as_ref()
            .filter(|v| v["type"] == "operation/request")
            .and_then(|v| v["id"].as_i64());
        match request_id {
            Some(id) if !lock(&self.operations).contains_key(&id) => {
                self.send(error_response(
                    id,
                    &format!("invalid code-mode request: {error}"),
                ))
                .await;
                return;
            }
            _ => {}
        }
        // A delegate answer that does not decode fails its call.
        let delegate_id = raw
            .as_ref()
            .filter(|v| v["type"] == "delegate/response")
            .and_then(|v| v["id"].as_i64());
        if let Some(answer) = delegate_id.and_then(|id| lock(&self.delegates).remove(&id)) {
            let _ = answer.send(WireResult::Err {
                message: format!("invalid code-mode delegate response: {error}"),
            });
            return;
        }
        tracing::warn!(error = %error, "an invalid Codex client frame was ignored");
    }

    async fn operate(self: &Arc<Self>, id: i64, request: HostRequest, token: CancellationToken) {
        let session_id = request.session_id().to_string();
        if session_id.trim().is_empty() {
            return self
                .send(error_response(id, "sessionId must not be empty"))
                .await;
        }
        if session_id.len() > super::MAX_CODEX_ID_BYTES {
            let message = format!("sessionId is over {} bytes", super::MAX_CODEX_ID_BYTES);
            return self.send(error_response(id, &message)).await;
        }
        let reply = match request {
            HostRequest::OpenSession {
                session_id,
                cell_execution_limits,
            } => self
                .open(session_id, cell_execution_limits.unwrap_or_default())
                .await
                .map(|r| (r, After::default())),
            HostRequest::Execute {
                session_id,
                cell_id,
                request,
            } => return self.execute(id, &session_id, cell_id, request, token).await,
            HostRequest::Wait {
                session_id,
                request,
            } => self.wait(&session_id, request, token).await,
            HostRequest::Terminate {
                session_id,
                cell_id,
            } => self.terminate(&session_id, &cell_id).await,
            HostRequest::Shutdown { session_id } => self
                .shutdown(&session_id)
                .await
                .map(|r| (r, After::default())),
        };
        let (result, after) = match reply {
            Ok((value, after)) => (WireResult::Ok { value }, after),
            Err(message) => (WireResult::Err { message }, After::default()),
        };
        self.send(HostMessage::Response { id, result }).await;
        // A cell whose end that response delivered is closed after it.
        if let Some(cell) = after.release {
            release(&cell);
        }
        if let Some((session, cell_id)) = after.close {
            self.close_cell(&session, &cell_id).await;
        }
    }

    fn session(&self, id: &str) -> Result<Arc<Session>, String> {
        lock(&self.sessions)
            .get(id)
            .cloned()
            .ok_or_else(|| format!("unknown code-mode session {id}"))
    }

    async fn open(
        &self,
        session_id: String,
        limits: CellExecutionLimits,
    ) -> Result<HostResponse, String> {
        if self.closed.is_cancelled() {
            return Err("code-mode host is shutting down".into());
        }
        if lock(&self.sessions).len() >= self.limits.max_sessions {
            return Err(format!(
                "code-mode host has too many open sessions ({})",
                self.limits.max_sessions
            ));
        }
        if let Some(bytes) = limits.max_heap_size_bytes {
            let most = self.runtime.limits().memory_limit_bytes();
            if bytes < most {
                return Err(format!(
                    "invalid code-mode session execution limits: maxHeapSizeBytes {bytes} is below this host's per-cell memory limit ({most} bytes), which it cannot lower per session"
                ));
            }
        }
        if !lock(&self.opened).insert(&session_id, self.limits.max_recent_sessions) {
            return Err(format!("code-mode session ID `{session_id}` was reused"));
        }
        let (owner, records) = match &self.scope {
            Some(scope) => (
                Owner {
                    agent_run: format!("codex:{scope}"),
                    session: format!("codex:{scope}:{session_id}"),
                },
                Some(format!("codex-cells:{scope}:{session_id}")),
            ),
            None => (
                Owner {
                    agent_run: format!("codex-{}", self.id),
                    session: format!("codex-{}-{session_id}", self.id),
                },
                None,
            ),
        };
        // A scoped session goes on numbering its cells where it left off.
        let next_cell = match &records {
            Some(records) => self
                .runtime
                .session_value(records, "next")
                .await
                .map_err(|e| format!("cannot read the session's records: {e}"))?
                .and_then(|v| v.as_i64())
                .unwrap_or(1),
            None => 1,
        };
        if self.closed.is_cancelled() {
            return Err("code-mode host is shutting down".into());
        }
        let session = Arc::new(Session {
            owner,
            records,
            id: session_id.clone(),
            max_yield: limits.max_yield_time_ms.map(Duration::from_millis),
            cells: Mutex::default(),
            next_cell: AtomicI64::new(next_cell),
            closing: Default::default(),
        });
        lock(&self.sessions).insert(session_id.clone(), session);
        Ok(HostResponse::SessionReady { session_id })
    }

    async fn execute(
        self: &Arc<Self>,
        id: i64,
        session_id: &str,
        cell_id: Option<String>,
        request: ExecuteRequest,
        token: CancellationToken,
    ) {
        let started = (|| {
            let session = self.session(session_id)?;
            if token.is_cancelled() {
                return Err("code-mode request cancelled".to_string());
            }
            if request.max_output_tokens.is_some_and(|n| n < 0) {
                return Err(
                    "invalid code-mode execute request: max_output_tokens must not be negative"
                        .into(),
                );
            }
            let pragma = exec_pragma(&request.source)?;
            let marker = format!("codex:{}", uuid::Uuid::new_v4().simple());
            let input = cell_input(&request, &session.owner, &marker)?;
            // Counted one session at a time (no two locks held): cells
            // starting at once may pass the bound by the few in between.
            let sessions: Vec<Arc<Session>> = lock(&self.sessions).values().cloned().collect();
            let live: usize = sessions.iter().map(|s| lock(&s.cells).len()).sum();
            if live >= self.limits.max_active_cells {
                return Err("code-mode host has too many active cells".to_string());
            }
            if cell_id
                .as_ref()
                .is_some_and(|id| id.trim().is_empty() || id.len() > super::MAX_CODEX_ID_BYTES)
            {
                return Err(format!(
                    "cellId must be 1 to {} bytes",
                    super::MAX_CODEX_ID_BYTES
                ));
            }
            Ok((session, input, pragma, marker))
        })();
        let (session, input, pragma, marker) = match started {
            Ok(started) => started,
            Err(message) => return self.send(error_response(id, &message)).await,
        };
        // A number is taken, and (scoped) recorded, before the cell is seen.
        let cell_id = match cell_id {
            Some(cell_id) => cell_id,
            None => {
                let number = session.next_cell.fetch_add(1, Ordering::Relaxed);
                if let Some(records) = &session.records {
                    let written = self
                        .runtime
                        .set_session_values(
                            records,
                            vec![("next".into(), Some((number + 1).into()))],
                        )
                        .await;
                    if let Err(e) = written {
                        let message = format!("cannot write the session's records: {e}");
                        return self.send(error_response(id, &message)).await;
                    }
                }
                number.to_string()
            }
        };
        let admitted = {
            let mut cells = lock(&session.cells);
            if session.closing.load(Ordering::SeqCst) {
                Err("code mode session is shutting down".to_string())
            } else {
                match cells.entry(cell_id.clone()) {
                    std::collections::hash_map::Entry::Occupied(_) => Err(format!(
                        "exec cell {cell_id} is already live in this session"
                    )),
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        // Its first observer is this call's: claimed before
                        // any wait can see the cell.
                        let cell = Cell::new(cell_id, marker);
                        lock(&cell.output).observed = true;
                        slot.insert(cell.clone());
                        Ok(cell)
                    }
                }
            }
        };
        let cell = match admitted {
            Ok(cell) => cell,
            Err(message) => return self.send(error_response(id, &message)).await,
        };
        self.send(HostMessage::Response {
            id,
            result: WireResult::Ok {
                value: HostResponse::ExecutionStarted {
                    cell_id: cell.id.clone(),
                },
            },
        })
        .await;
        let tools: Vec<ToolRef> = request
            .enabled_tools
            .iter()
            .map(|t| ToolRef {
                tool_name: t.tool_name.clone(),
                kind: t.kind,
            })
            .collect();
        let driver = tokio::spawn(self.clone().drive(
            session.clone(),
            cell.clone(),
            Start::Exec(Box::new(input)),
            request.tool_call_id.clone(),
            Arc::new(tools),
        ));
        *lock(&cell.driven) = Some(driver);
        // A pragma the client left in the source speaks for the model.
        let yield_for = yield_time(
            pragma.yield_time_ms.or(request.yield_time_ms),
            session.max_yield,
        );
        let (response, ended) = observe(&cell, yield_for, &self.closed).await;
        self.send(HostMessage::InitialResponse {
            id,
            result: WireResult::Ok { value: response },
        })
        .await;
        release(&cell);
        if ended {
            self.close_cell(&session, &cell.id).await;
        }
    }

    async fn wait(
        self: &Arc<Self>,
        session_id: &str,
        request: WaitRequest,
        token: CancellationToken,
    ) -> Result<(HostResponse, After), String> {
        let session = self.session(session_id)?;
        let Some(cell) = self.cell(&session, &request.cell_id).await else {
            return Ok((missing(&request.cell_id), After::default()));
        };
        {
            let mut output = lock(&cell.output);
            if output.observed {
                return Err(format!(
                    "exec cell {} already has an active observer",
                    request.cell_id
                ));
            }
            output.observed = true;
        }
        let yield_for = yield_time(Some(request.yield_time_ms), session.max_yield);
        let observed = observe_claimed(&cell, yield_for, &token).await;
        let Some((response, ended)) = observed else {
            return Err("code-mode request cancelled".to_string());
        };
        Ok((
            HostResponse::WaitCompleted {
                outcome: WaitOutcome::LiveCell(response),
            },
            After {
                close: ended.then(|| (session.clone(), cell.id.clone())),
                release: Some(cell),
            },
        ))
    }

    async fn terminate(
        self: &Arc<Self>,
        session_id: &str,
        cell_id: &str,
    ) -> Result<(HostResponse, After), String> {
        let session = self.session(session_id)?;
        let Some(cell) = self.cell(&session, cell_id).await else {
            return Ok((missing(cell_id), After::default()));
        };
        cell.terminate.cancel();
        let driver = lock(&cell.driven).take();
        if let Some(driver) = driver {
            let _ = driver.await;
        }
        // An observer delivers the end first (and closes the cell).
        observers_done(&cell).await;
        let (items, end) = {
            let mut output = lock(&cell.output);
            (std::mem::take(&mut output.items), output.end.clone())
        };
        let response = match end {
            Some(End::Result(error_text)) => RuntimeResponse::Result {
                cell_id: cell.id.clone(),
                content_items: items,
                error_text,
            },
            _ => RuntimeResponse::Terminated {
                cell_id: cell.id.clone(),
                content_items: items,
            },
        };
        Ok((
            HostResponse::WaitCompleted {
                outcome: WaitOutcome::LiveCell(response),
            },
            After {
                release: None,
                close: Some((session.clone(), cell.id.clone())),
            },
        ))
    }

    async fn shutdown(&self, session_id: &str) -> Result<HostResponse, String> {
        let session = lock(&self.sessions)
            .remove(session_id)
            .ok_or_else(|| format!("unknown code-mode session {session_id}"))?;
        self.end_session(&session).await;
        Ok(HostResponse::SessionClosed {
            session_id: session_id.to_string(),
        })
    }

    /// Terminates a session's cells (each gets `cell/closed`) and drops
    /// what it stored.
    async fn end_session(&self, session: &Session) {
        let cells: Vec<Arc<Cell>> = {
            let mut cells = lock(&session.cells);
            session.closing.store(true, Ordering::SeqCst);
            cells.drain().map(|(_, c)| c).collect()
        };
        for cell in &cells {
            cell.terminate.cancel();
        }
        for cell in cells {
            let driver = lock(&cell.driven).take();
            if let Some(driver) = driver {
                let _ = driver.await;
            }
            // Its observer's response goes out before its `cell/closed`.
            observers_done(&cell).await;
            self.send(HostMessage::CellClosed {
                session_id: session.id.clone(),
                cell_id: cell.id.clone(),
            })
            .await;
        }
        if let Err(e) = self.runtime.close_session(&session.owner).await {
            tracing::warn!(session = %session.id, error = %e, "cannot release a Codex session's state");
        }
        if let Some(records) = &session.records {
            let owner = Owner {
                agent_run: session.owner.agent_run.clone(),
                session: records.clone(),
            };
            if let Err(e) = self.runtime.close_session(&owner).await {
                tracing::warn!(session = %session.id, error = %e, "cannot delete a Codex session's records");
            }
        }
    }

    /// Leaves a scoped session for a later host: its cells parked on the
    /// client's answers stay parked (their drivers stop without answering);
    /// a cell still computing is terminated, as it has no snapshot to
    /// resume.
    async fn leave_session(&self, session: &Session) {
        let cells: Vec<Arc<Cell>> = {
            let mut cells = lock(&session.cells);
            session.closing.store(true, Ordering::SeqCst);
            cells.drain().map(|(_, c)| c).collect()
        };
        for cell in cells {
            let driver = lock(&cell.driven).take();
            let Some(driver) = driver else { continue };
            if cell.parked.load(Ordering::SeqCst) {
                driver.abort();
            } else {
                cell.terminate.cancel();
            }
            let _ = driver.await;
        }
    }

    /// Deletes a cell's record (scoped sessions), once it has ended.
    async fn forget_record(&self, session: &Session, cell_id: &str) {
        if let Some(records) = &session.records {
            let deleted = self
                .runtime
                .set_session_values(records, vec![(format!("cell:{cell_id}"), None)])
                .await;
            if let Err(e) = deleted {
                tracing::warn!(cell = cell_id, error = %e, "cannot delete a Codex cell's record");
            }
        }
    }

    /// The live cell `cell_id` of `session`, or (scoped sessions) the one
    /// a record names, resumed from its parked run: it goes on where the
    /// host that parked it stopped, without running its execute again.
    async fn cell(self: &Arc<Self>, session: &Arc<Session>, cell_id: &str) -> Option<Arc<Cell>> {
        if cell_id.len() > super::MAX_CODEX_ID_BYTES {
            return None;
        }
        if let Some(cell) = lock(&session.cells).get(cell_id).cloned() {
            return Some(cell);
        }
        let records = session.records.as_ref()?;
        let record = self
            .runtime
            .session_value(records, &format!("cell:{cell_id}"))
            .await
            .ok()
            .flatten()?;
        let record: CellRecord = serde_json::from_value(record).ok()?;
        let cell = {
            let mut cells = lock(&session.cells);
            if let Some(cell) = cells.get(cell_id) {
                return Some(cell.clone());
            }
            let cell = Cell::new(cell_id.to_string(), record.marker.clone());
            cells.insert(cell_id.to_string(), cell.clone());
            cell
        };
        let driver = tokio::spawn(self.clone().drive(
            session.clone(),
            cell.clone(),
            Start::Resume(record.run),
            record.call,
            Arc::new(record.tools),
        ));
        *lock(&cell.driven) = Some(driver);
        Some(cell)
    }

    /// Sends `cell/closed` once the cell is forgotten.
    async fn close_cell(&self, session: &Session, cell_id: &str) {
        if lock(&session.cells).remove(cell_id).is_some() {
            self.send(HostMessage::CellClosed {
                session_id: session.id.clone(),
                cell_id: cell_id.to_string(),
            })
            .await;
        }
    }

    /// The client went away: every session ends.
    async fn close_all(&self) {
        self.closed.cancel();
        let sessions: Vec<Arc<Session>> = lock(&self.sessions).drain().map(|(_, s)| s).collect();
        for session in sessions {
            if session.records.is_some() {
                self.leave_session(&session).await;
            } else {
                self.end_session(&session).await;
            }
        }
        for (_, token) in lock(&self.operations).drain() {
            token.cancel();
        }
        lock(&self.delegates).clear();
    }

    /// Runs a cell to its end: each time it parks on calls the client runs
    /// (its nested tools, `notify`), those go out as delegate requests, and
    /// the run resumes from its snapshot with the answers.
    async fn drive(
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
            let mut answering = tokio::task::JoinSet::new();
            for (index, call) in calls.into_iter().enumerate() {
                if call.tool.as_deref() == Some(END_TOOL) {
                    answering.spawn(async move {
                        (index, ClientToolResult::value(call.id, Value::Null))
                    });
                    continue;
                }
                // Past the end, a nested call nobody awaits is sent (the
                // tool runs, as in Codex) but not waited for; Codex
                // withdraws it when the cell closes.
                let fire = ended && call.tool.as_deref() != Some(NOTIFY_TOOL);
                let (connection, session, cell) = (self.clone(), session.clone(), cell.clone());
                let (tool_call_id, tools) = (tool_call_id.clone(), tools.clone());
                answering.spawn(async move {
                    let answer = connection
                        .delegate(&session, &cell, &call, &tool_call_id, &tools, fire)
                        .await;
                    (index, answer)
                });
            }
            let mut answers: Vec<(usize, ClientToolResult)> = answering.join_all().await;
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

    /// Sends one parked call to the client and waits for its answer (or
    /// the cell's termination, which withdraws it).
    async fn delegate(
        &self,
        session: &Session,
        cell: &Cell,
        call: &crate::PendingToolCall,
        tool_call_id: &str,
        tools: &[ToolRef],
        fire: bool,
    ) -> ClientToolResult {
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
                return ClientToolResult::error(
                    call.id.clone(),
                    format!("unknown nested tool {tool}"),
                );
            };
            DelegateRequest::InvokeTool {
                invocation: NestedToolCall {
                    cell_id: cell.id.clone(),
                    runtime_tool_call_id: call.id.clone(),
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
            return ClientToolResult::value(call.id.clone(), Value::Null);
        }
        let (answer, answered) = oneshot::channel();
        {
            let mut delegates = lock(&self.delegates);
            if delegates.len() >= self.limits.max_pending_delegates {
                return ClientToolResult::error(
                    call.id.clone(),
                    format!(
                        "code-mode host exceeded the limit of {} pending delegate calls",
                        self.limits.max_pending_delegates
                    ),
                );
            }
            delegates.insert(id, answer);
        }
        self.send(HostMessage::DelegateRequest {
            id,
            session_id: session.id.clone(),
            request,
        })
        .await;
        tokio::select! {
            answered = answered => match answered {
                Ok(WireResult::Ok { value: DelegateResponse::ToolResult { result } }) if tool != NOTIFY_TOOL => {
                    ClientToolResult::value(call.id.clone(), result)
                }
                Ok(WireResult::Ok { value: DelegateResponse::NotificationDelivered }) if tool == NOTIFY_TOOL => {
                    ClientToolResult::value(call.id.clone(), Value::Null)
                }
                Ok(WireResult::Ok { .. }) => ClientToolResult::error(call.id.clone(), "code-mode client returned an invalid tool result"),
                Ok(WireResult::Err { message }) => ClientToolResult::error(call.id.clone(), message),
                Err(_) => ClientToolResult::error(call.id.clone(), "the code-mode client went away"),
            },
            _ = cell.terminate.cancelled() => {
                if lock(&self.delegates).remove(&id).is_some() {
                    self.send(HostMessage::DelegateCancel { id }).await;
                }
                ClientToolResult::error(call.id.clone(), "the cell was terminated")
            }
        }
    }
}

/// The client tool that carries every nested tool call of a cell
/// (`{tool: <index in enabled_tools>, input}`).
const CALL_TOOL: &str = "__codex_call";

/// Most nested tools one cell may have.
const MAX_NESTED_TOOLS: usize = 1024;

/// Bytes the nested tools' descriptions may take in a cell's source (for
/// `ALL_TOOLS`) in all: each is cut to its share, at most 4 KiB.
const NESTED_DESCRIPTION_BYTES: usize = 96 * 1024;

/// The `exec` input of a Codex cell: the profile in front of the source,
/// its nested tools and `notify` as client tools.
fn cell_input(request: &ExecuteRequest, owner: &Owner, marker: &str) -> Result<ExecInput, String> {
    if request.enabled_tools.len() > MAX_NESTED_TOOLS {
        return Err(format!(
            "quickcell's code-mode host takes at most {MAX_NESTED_TOOLS} nested tools per cell, got {}",
            request.enabled_tools.len()
        ));
    }
    if request.source.len() > crate::MAX_SOURCE_BYTES {
        return Err(format!(
            "invalid code-mode execute request: source is over {} bytes",
            crate::MAX_SOURCE_BYTES
        ));
    }
    let share = (NESTED_DESCRIPTION_BYTES / request.enabled_tools.len().max(1))
        .min(crate::client_tools::MAX_CLIENT_TOOL_DESCRIPTION_BYTES);
    let table: Vec<Value> = request
        .enabled_tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            serde_json::json!({
                "global": normalize_identifier(&tool.name),
                "index": i,
                "description": crate::output::safe_cut_utf8(&tool.description, share),
            })
        })
        .collect();
    let object = serde_json::json!({"type": "object"});
    let specs = vec![
        ClientToolSpec::new(CALL_TOOL, "Calls a nested tool.", object.clone()),
        ClientToolSpec::new(
            NOTIFY_TOOL,
            "Sends a notification to the Codex turn.",
            object.clone(),
        ),
        ClientToolSpec::new(END_TOOL, "Marks the end of the source.", object),
    ];
    // JSON is JavaScript but for U+2028 and U+2029, which end a line in a
    // script: escaped, they stay inside their strings.
    let table = serde_json::to_string(&table)
        .unwrap_or_else(|_| "[]".into())
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    let marker = serde_json::to_string(marker).unwrap_or_default();
    // The source runs in a function of its own, so that its declarations
    // may shadow the profile's globals.
    let code = format!(
        "{PROFILE_JS}{table}, {marker});\nconst __codexMain = async () => {{\n{}\n}};\ntry {{ await __codexMain(); }} catch (__codexError) {{ if (__codexError !== __codexExit) throw __codexError; }} finally {{ __codexEnd(); }}\n",
        request.source
    );
    Ok(
        ExecInput::new(format!("codex {}", request.tool_call_id), code)
            .with_client_tools(specs)
            .with_owner(owner.clone()),
    )
}

/// The values of a first-line `// @exec: {...}` pragma.
#[derive(Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecPragma {
    yield_time_ms: Option<u64>,
    max_output_tokens: Option<u64>,
}

/// Codex strips the pragma before it sends a source; one left in is read
/// here, by Codex's rules (a JSON object of `yield_time_ms` and
/// `max_output_tokens`, non-negative safe integers, followed by source).
/// The line stays in the source: it is a comment.
fn exec_pragma(source: &str) -> Result<ExecPragma, String> {
    const PREFIX: &str = "// @exec:";
    const MAX_SAFE: u64 = (1 << 53) - 1;
    let first = source.lines().next().unwrap_or_default().trim_start();
    let Some(json) = first.strip_prefix(PREFIX) else {
        return Ok(ExecPragma::default());
    };
    if source.lines().skip(1).all(|l| l.trim().is_empty()) {
        return Err("exec pragma must be followed by JavaScript source on subsequent lines".into());
    }
    let value: Value = serde_json::from_str(json.trim())
        .map_err(|e| format!("exec pragma must be valid JSON: {e}"))?;
    if let Some(key) = value.as_object().and_then(|o| {
        o.keys()
            .find(|k| *k != "yield_time_ms" && *k != "max_output_tokens")
    }) {
        return Err(format!(
            "exec pragma only supports `yield_time_ms` and `max_output_tokens`; got `{key}`"
        ));
    }
    let pragma: ExecPragma = serde_json::from_value(value).map_err(|_| {
        "exec pragma must be a JSON object whose values are non-negative safe integers".to_string()
    })?;
    if [pragma.yield_time_ms, pragma.max_output_tokens]
        .iter()
        .flatten()
        .any(|&n| n > MAX_SAFE)
    {
        return Err("exec pragma values must be non-negative safe integers".into());
    }
    Ok(pragma)
}

/// Codex's `normalize_code_mode_identifier`: characters that cannot be in
/// a JavaScript identifier become `_`; an empty name is `_`.
pub(crate) fn normalize_identifier(name: &str) -> String {
    let mut out: String = name
        .chars()
        .enumerate()
        .map(|(i, c)| {
            let ok =
                c.is_ascii_alphabetic() || c == '_' || c == '$' || (i > 0 && c.is_ascii_digit());
            if ok {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// How long an observer waits: the request's yield time (10 s when
/// absent), one more second from 10 s on, capped by the session's
/// `maxYieldTimeMs`.
fn yield_time(requested_ms: Option<u64>, session_max: Option<Duration>) -> Duration {
    let asked = Duration::from_millis(requested_ms.unwrap_or(10_000).min(super::MAX_YIELD_TIME_MS));
    let timeout = if asked >= Duration::from_secs(10) {
        asked + Duration::from_secs(1)
    } else {
        asked
    };
    session_max.map_or(timeout, |max| timeout.min(max))
}

fn missing(cell_id: &str) -> HostResponse {
    HostResponse::WaitCompleted {
        outcome: WaitOutcome::MissingCell(RuntimeResponse::Result {
            cell_id: cell_id.to_string(),
            content_items: Vec::new(),
            error_text: Some(format!("exec cell {cell_id} not found")),
        }),
    }
}

fn error_response(id: i64, message: &str) -> HostMessage {
    HostMessage::Response {
        id,
        result: WireResult::Err {
            message: message.to_string(),
        },
    }
}

/// Adds a result's output entries to the cell's undelivered items.
fn push_output(cell: &Cell, entries: &[Value]) {
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
fn content_item(entry: &Value, marker: &str) -> ContentItem {
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

fn finish(cell: &Cell, end: End) {
    lock(&cell.output).end = Some(end);
    cell.changed.notify_waiters();
}

/// Ends an observation once its response is queued: `terminate` and
/// shutdown wait for it, so that their `cell/closed` comes after.
fn release(cell: &Cell) {
    lock(&cell.output).observed = false;
    cell.changed.notify_waiters();
}

/// Waits until no observer holds the cell (at most 5 s: an observer only
/// queues a response).
async fn observers_done(cell: &Cell) {
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

/// The execute's first observation (the cell was made claimed).
async fn observe(
    cell: &Cell,
    yield_for: Duration,
    cancel: &CancellationToken,
) -> (RuntimeResponse, bool) {
    observe_claimed(cell, yield_for, cancel)
        .await
        .unwrap_or_else(|| {
            (
                RuntimeResponse::Yielded {
                    cell_id: cell.id.clone(),
                    content_items: Vec::new(),
                },
                false,
            )
        })
}

/// Waits until the cell ends, yields, or `yield_for` passes, then takes
/// what it produced since the last delivery; `None` when `cancel` came
/// first (what it produced stays for the next observer). Whether the cell
/// ended.
async fn observe_claimed(
    cell: &Cell,
    yield_for: Duration,
    cancel: &CancellationToken,
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
        None => (
            RuntimeResponse::Yielded {
                cell_id,
                content_items,
            },
            false,
        ),
        Some(End::Result(error_text)) => (
            RuntimeResponse::Result {
                cell_id,
                content_items,
                error_text,
            },
            true,
        ),
        Some(End::Terminated) => (
            RuntimeResponse::Terminated {
                cell_id,
                content_items,
            },
            true,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_ids_refuse_a_repeat_and_forget_the_oldest_past_the_bound() {
        let mut recent = RecentIds::default();
        assert!(recent.insert("a", 2));
        assert!(!recent.insert("a", 2));
        assert!(recent.insert("b", 2));
        assert!(recent.insert("c", 2));
        assert_eq!(recent.order.len(), 2);
        // "a" was forgotten: the bound holds memory, not the rule forever.
        assert!(recent.insert("a", 2));
        assert!(!recent.insert("c", 2));
    }

    #[test]
    fn a_pragma_left_in_the_source_is_read_by_codex_s_rules() {
        assert_eq!(exec_pragma("text(1)"), Ok(ExecPragma::default()));
        assert_eq!(
            exec_pragma("  // @exec: {\"yield_time_ms\": 500}\ntext(1)"),
            Ok(ExecPragma {
                yield_time_ms: Some(500),
                max_output_tokens: None
            })
        );
        for (source, error) in [
            ("// @exec: {}", "must be followed"),
            ("// @exec: {\"color\": 1}\nx", "got `color`"),
            ("// @exec: {oops\nx", "valid JSON"),
            ("// @exec: {\"yield_time_ms\": -1}\nx", "non-negative"),
            (
                "// @exec: {\"yield_time_ms\": 9007199254740992}\nx",
                "safe integers",
            ),
        ] {
            let got = exec_pragma(source).unwrap_err();
            assert!(got.contains(error), "{source}: {got}");
        }
    }

    #[test]
    fn identifiers_are_normalized_as_codex_does() {
        assert_eq!(
            normalize_identifier("mcp__x__get-profile"),
            "mcp__x__get_profile"
        );
        assert_eq!(normalize_identifier("9lives"), "_lives");
        assert_eq!(normalize_identifier(""), "_");
        assert_eq!(normalize_identifier("a$b1"), "a$b1");
    }

    #[test]
    fn yield_times_get_a_grace_second_from_ten_seconds_and_the_session_cap() {
        assert_eq!(yield_time(Some(250), None), Duration::from_millis(250));
        assert_eq!(yield_time(None, None), Duration::from_secs(11));
        assert_eq!(yield_time(Some(30_000), None), Duration::from_secs(31));
        assert_eq!(
            yield_time(Some(30_000), Some(Duration::from_millis(500))),
            Duration::from_millis(500)
        );
        assert_eq!(yield_time(Some(u64::MAX), None), Duration::from_secs(301));
    }
}
