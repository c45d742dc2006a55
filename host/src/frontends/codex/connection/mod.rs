//! One Codex connection: the handshake, then sessions, cells and reverse
//! tool calls, until the client closes its end.

use super::frame::{read_frame, write_frame, Frame};
use super::wire::*;
use super::{
    CodexLimits, CODEX_PROTOCOL_VERSION, RESOURCE_LIMITS_CAPABILITY, YIELD_OBSERVATION_CAPABILITY,
};
use crate::{Owner, Runtime};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

mod cell;
mod source;

use cell::*;
use source::*;

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
    options: super::CodexOptions,
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
        scope: options.scope,
        report_duration: options.report_host_duration,
        yield_observation: AtomicBool::new(false),
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
    /// Whether runtime responses carry `code_mode_host_duration_ns`.
    report_duration: bool,
    /// The client offered `yield-observation`: `operation/yield` ends an
    /// observation early.
    yield_observation: AtomicBool,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The latest session ids opened on this connection, which may not be
    /// opened again (at most `max_recent_sessions`).
    opened: Mutex<RecentIds>,
    /// Operations in flight, by request id.
    operations: Mutex<HashMap<i64, Operation>>,
    /// Reverse calls awaiting the client's answer.
    delegates: Mutex<HashMap<i64, oneshot::Sender<WireResult<DelegateResponse>>>>,
    next_delegate: AtomicI64,
    /// Cancelled when the client has gone: observations end, no session
    /// opens.
    closed: CancellationToken,
}

/// How the client controls an operation in flight.
#[derive(Clone, Default)]
struct Operation {
    /// `operation/cancel`.
    cancel: CancellationToken,
    /// `operation/yield`: its observation ends now, the cell going on.
    yield_now: CancellationToken,
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
    /// Each cell's memory limit (`maxHeapSizeBytes`), when the session
    /// sets one: the runtime's limit applies when lower.
    max_heap: Option<u64>,
    cells: Mutex<HashMap<String, Arc<Cell>>>,
    next_cell: AtomicI64,
    /// Set (under `cells`) when the session ends: no cell starts after.
    closing: std::sync::atomic::AtomicBool,
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
        let known = [RESOURCE_LIMITS_CAPABILITY, YIELD_OBSERVATION_CAPABILITY];
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
        self.yield_observation.store(
            capabilities
                .iter()
                .any(|c| c == YIELD_OBSERVATION_CAPABILITY),
            Ordering::SeqCst,
        );
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
                    let received = Instant::now();
                    let operation = Operation::default();
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
                            operations.insert(id, operation.clone());
                            None
                        }
                    };
                    if let Some(message) = refused {
                        self.send(error_response(id, &message)).await;
                        continue;
                    }
                    let connection = self.clone();
                    tokio::spawn(async move {
                        connection.operate(id, request, operation, received).await;
                        lock(&connection.operations).remove(&id);
                    });
                }
                Ok(ClientMessage::Cancel { id }) => {
                    if let Some(operation) = lock(&self.operations).get(&id) {
                        operation.cancel.cancel();
                    }
                }
                Ok(ClientMessage::Yield { id }) => {
                    if !self.yield_observation.load(Ordering::SeqCst) {
                        tracing::warn!(
                            id,
                            "a Codex operation/yield without the yield-observation capability was ignored"
                        );
                    } else if let Some(operation) = lock(&self.operations).get(&id) {
                        operation.yield_now.cancel();
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

    async fn operate(
        self: &Arc<Self>,
        id: i64,
        request: HostRequest,
        operation: Operation,
        received: Instant,
    ) {
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
            } => {
                return self
                    .execute(id, &session_id, cell_id, request, operation, received)
                    .await
            }
            HostRequest::Wait {
                session_id,
                request,
            } => self.wait(&session_id, request, operation, received).await,
            HostRequest::Terminate {
                session_id,
                cell_id,
            } => self.terminate(&session_id, &cell_id, received).await,
            HostRequest::Shutdown { session_id } => self
                .shutdown(&session_id)
                .await
                .map(|r| (r, After::default())),
        };
        let (result, after) = match reply {
            Ok((value, after)) => (
                WireResult::Ok {
                    value: self.timed_response(value, received),
                },
                after,
            ),
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

    /// A runtime response as this connection reports it: with the host's
    /// duration since `received`, or without (Codex up to 0.151).
    fn timed(&self, response: RuntimeResponse, received: Instant) -> RuntimeResponse {
        if self.report_duration {
            response.timed(received)
        } else {
            response.untimed()
        }
    }

    /// [`Connection::timed`] for the runtime response a wait or terminate
    /// answers with.
    fn timed_response(&self, value: HostResponse, received: Instant) -> HostResponse {
        match value {
            HostResponse::WaitCompleted { outcome } => HostResponse::WaitCompleted {
                outcome: match outcome {
                    WaitOutcome::LiveCell(r) => WaitOutcome::LiveCell(self.timed(r, received)),
                    WaitOutcome::MissingCell(r) => {
                        WaitOutcome::MissingCell(self.timed(r, received))
                    }
                },
            },
            other => other,
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
            if bytes < crate::MIN_CELL_MEMORY_LIMIT_BYTES {
                return Err(format!(
                    "invalid code-mode session execution limits: maxHeapSizeBytes {bytes} is below the {} bytes a cell needs",
                    crate::MIN_CELL_MEMORY_LIMIT_BYTES
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
            max_heap: limits.max_heap_size_bytes,
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
        operation: Operation,
        received: Instant,
    ) {
        // The session's stored values, for the profile's synchronous `load`.
        let values = match self.session(session_id) {
            Ok(session) => self.runtime.session_values(&session.owner.session).await,
            Err(_) => Ok(Vec::new()),
        };
        let started = (|| {
            let session = self.session(session_id)?;
            let values = values.map_err(|e| format!("cannot read the session's values: {e}"))?;
            if operation.cancel.is_cancelled() {
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
            let mut input = cell_input(&request, &session.owner, &marker, &values)?;
            if let Some(bytes) = session.max_heap {
                input = input.with_memory_limit(bytes);
            }
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
        let (response, ended) = observe(&cell, yield_for, &self.closed, &operation.yield_now).await;
        self.send(HostMessage::InitialResponse {
            id,
            result: WireResult::Ok {
                value: self.timed(response, received),
            },
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
        operation: Operation,
        received: Instant,
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
        let observed = observe_claimed(&cell, yield_for, &operation.cancel, &operation.yield_now)
            .await
            .map(|(response, ended)| (response.buffered(ended_at(&cell), received), ended));
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
        received: Instant,
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
        let (items, end, ended) = {
            let mut output = lock(&cell.output);
            (
                std::mem::take(&mut output.items),
                output.end.clone(),
                output.ended_at,
            )
        };
        let response = match end {
            Some(End::Result(error_text)) => {
                RuntimeResponse::result(cell.id.clone(), items, error_text)
                    .buffered(ended, received)
            }
            _ => RuntimeResponse::terminated(cell.id.clone(), items),
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
        for (_, operation) in lock(&self.operations).drain() {
            operation.cancel.cancel();
        }
        lock(&self.delegates).clear();
    }
}

fn missing(cell_id: &str) -> HostResponse {
    HostResponse::WaitCompleted {
        outcome: WaitOutcome::MissingCell(RuntimeResponse::result(
            cell_id.to_string(),
            Vec::new(),
            Some(format!("exec cell {cell_id} not found")),
        )),
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
