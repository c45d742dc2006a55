//! The transports: stdio, and streamable HTTP behind its guard.

use std::{
    future::Future,
    net::SocketAddr,
    sync::{atomic::Ordering, Arc},
    time::Duration,
};
use tokio_util::sync::CancellationToken;

use anyhow::Context as _;
use axum::{
    body::Body,
    http::{header, Method, Request, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::{
    model::{
        ClientJsonRpcMessage, ClientRequest, ErrorCode, GetMeta as _, ProtocolVersion,
        ServerJsonRpcMessage,
    },
    service::ServerInitializeError,
    transport::{
        async_rw::AsyncRwTransport, streamable_http_server::session::local::LocalSessionManager,
        StreamableHttpServerConfig, StreamableHttpService, Transport,
    },
    RoleServer, ServiceExt as _,
};
use serde_json::{json, Value};

use super::{new_session_id, CellService, McpServer, ServeMode};
/// How the HTTP front end is guarded (operations.md §2): its caps and the
/// bearer token every request must carry.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Body, session and idle caps, and the accepted origins and hosts.
    pub limits: crate::config::HttpLimits,
    /// The token (`Authorization: Bearer <token>`) of the principal
    /// [`DEFAULT_PRINCIPAL`]; `None` (and no [`HttpOptions::principals`])
    /// serves without authentication, which only a loopback address may
    /// do.
    pub auth_token: Option<String>,
    /// More principals, each `(name, token)`: a request is its token's
    /// principal, which owns the runs it parks under MCP 2026-07-28.
    pub principals: Vec<(String, String)>,
    /// How MCP 2026-07-28 requests are answered (`[mcp]`; its
    /// `principal` is for stdio and not used here).
    pub mcp: crate::McpOptions,
    /// Cancel it to stop the server: it accepts no more connections and
    /// returns once the open ones have closed (cancel the runtime's cells
    /// or park them first: [`crate::Runtime::shutdown`]).
    pub shutdown: CancellationToken,
}

impl HttpOptions {
    /// Why serving on `addr` with these options is refused: a non-loopback
    /// address without a token would be reachable by others unauthenticated.
    pub fn refusal(&self, addr: SocketAddr) -> Option<String> {
        (self.auth_token.is_none() && self.principals.is_empty() && !addr.ip().is_loopback()).then(|| format!(
            "refusing to serve on {addr} without authentication: a non-loopback address is reachable by others. Give a token with --auth-token-file FILE (or QUICKCELL_AUTH_TOKEN), or bind a loopback address such as 127.0.0.1"
        ))
    }

    /// Reads the token from `file` (surrounding whitespace removed).
    ///
    /// # Errors
    ///
    /// When the file cannot be read or holds no token.
    pub fn token_from_file(path: &std::path::Path) -> Result<String, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the auth token file {}: {e}", path.display()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!("the auth token file {} is empty", path.display()));
        }
        Ok(token.to_string())
    }

    /// These options with the tokens of an auth token file: one token
    /// alone (the principal [`DEFAULT_PRINCIPAL`]), or lines of `PRINCIPAL
    /// TOKEN` (blank lines and `#` comments skipped), at most
    /// [`MAX_PRINCIPALS`].
    ///
    /// # Errors
    ///
    /// When the file cannot be read, holds no token, a line has more than
    /// two words, a principal is not 1–64 of `A-Za-z0-9._-` or comes
    /// twice, or a token is used twice.
    pub fn with_token_file(mut self, path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the auth token file {}: {e}", path.display()))?;
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .map(|(n, l)| (n + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let place = |n: usize| format!("{} line {n}", path.display());
        match lines.as_slice() {
            [] => return Err(format!("the auth token file {} is empty", path.display())),
            [(_, line)] if !line.contains(char::is_whitespace) => {
                self.auth_token = Some(line.to_string());
                return Ok(self);
            }
            _ => {}
        }
        if lines.len() > MAX_PRINCIPALS {
            return Err(format!(
                "the auth token file {} names {} principals; at most {MAX_PRINCIPALS}",
                path.display(),
                lines.len()
            ));
        }
        let mut principals: Vec<(String, String)> = Vec::new();
        for (n, line) in lines {
            let words: Vec<&str> = line.split_whitespace().collect();
            let [name, token] = words.as_slice() else {
                return Err(format!(
                    "{}: expected `PRINCIPAL TOKEN`, got {} words",
                    place(n),
                    words.len()
                ));
            };
            if !valid_principal(name) {
                return Err(format!(
                    "{}: the principal `{name}` must be 1 to 64 of A-Z a-z 0-9 . _ -",
                    place(n)
                ));
            }
            if principals.iter().any(|(p, _)| p == name) {
                return Err(format!("{}: the principal `{name}` comes twice", place(n)));
            }
            if principals.iter().any(|(_, t)| t == token) {
                return Err(format!("{}: a token is used twice", place(n)));
            }
            principals.push((name.to_string(), token.to_string()));
        }
        self.principals = principals;
        Ok(self)
    }
}

/// The principal of the single token of [`HttpOptions::auth_token`].
pub const DEFAULT_PRINCIPAL: &str = "default";

/// The principal of requests to a server without tokens (loopback only).
pub const LOCAL_PRINCIPAL: &str = "local";

/// Most principals an auth token file may name.
pub const MAX_PRINCIPALS: usize = 1024;

use crate::config::valid_principal;

/// The authenticated principal of an HTTP request, put in its extensions
/// by the guard.
#[derive(Debug, Clone)]
pub(crate) struct Principal(pub(crate) Arc<str>);

/// Serves MCP over stdin/stdout until the client closes stdin or `shutdown`
/// is cancelled. The connection is one MCP session with one session id.
pub(crate) async fn serve_stdio<S: CellService>(
    service: Arc<S>,
    mode: ServeMode,
    options: crate::McpOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let server = McpServer::new(
        service.clone(),
        mode,
        None,
        Arc::new(options),
        Arc::default(),
    );
    let session = server.session.clone();
    tracing::debug!(%session, "serving MCP over stdio");
    let (stdin, stdout) = rmcp::transport::stdio();
    let eof = CancellationToken::new();
    let transport = LenientStart {
        inner: AsyncRwTransport::new_server(stdin, stdout),
        started: false,
        eof: eof.clone(),
    };
    // Closing stdin ends the session at once: rmcp would first give the
    // requests in flight five seconds to finish, and a client that closes
    // stdin often kills the server soon after, before it could cancel
    // anything (a killed server leaves its tools' process groups behind).
    let closer = tokio::spawn({
        let (service, session) = (service.clone(), session.clone());
        async move {
            eof.cancelled().await;
            service.close_session(&session).await;
        }
    });
    let running = match server.serve(transport).await {
        Ok(running) => running,
        // The client left before opening a session: nothing to serve.
        Err(ServerInitializeError::ConnectionClosed(_)) => {
            tracing::debug!(%session, "stdin closed before the MCP handshake");
            return Ok(());
        }
        Err(error) => return Err(anyhow::anyhow!("MCP stdio handshake failed: {error}")),
    };
    let cancel = running.cancellation_token();
    let stopped = shutdown.clone();
    let stopper = tokio::spawn(async move {
        stopped.cancelled().await;
        cancel.cancel();
    });
    let reason = running
        .waiting()
        .await
        .context("the MCP stdio service stopped abnormally")?;
    stopper.abort();
    tracing::debug!(%session, ?reason, "MCP stdio connection closed");
    // The session is released before the process goes on (the handler's
    // drop does the same, in the background).
    closer.abort();
    service.close_session(&session).await;
    Ok(())
}

/// A transport that drops the notifications and responses a client sends
/// before its first lifecycle-opening request: rmcp's handshake would end
/// the connection on them.
struct LenientStart<T> {
    inner: T,
    /// Whether a request that opens the lifecycle has gone through.
    started: bool,
    /// Cancelled when the client closes its end.
    eof: CancellationToken,
}

/// Whether rmcp's handshake, meeting `request`, starts serving: `initialize`,
/// or a request other than `ping` and `server/discover` that carries the
/// 2026-07-28 per-request metadata.
fn opens_lifecycle(request: &ClientRequest) -> bool {
    match request {
        ClientRequest::InitializeRequest(_) => true,
        ClientRequest::PingRequest(_) | ClientRequest::DiscoverRequest(_) => false,
        other => other
            .get_meta()
            .missing_required_keys(&ProtocolVersion::V_2026_07_28)
            .is_empty(),
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for LenientStart<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let Some(message) = self.inner.receive().await else {
                self.eof.cancel();
                return None;
            };
            if !self.started {
                let ClientJsonRpcMessage::Request(request) = &message else {
                    tracing::debug!("ignoring a notification or response before the MCP handshake");
                    continue;
                };
                self.started = opens_lifecycle(&request.request);
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Serves streamable HTTP MCP at `addr`, path `/mcp`, until the process is
/// killed. Each MCP session gets its own session id; requests made without a
/// session (protocol 2026-07-28) share one id drawn here.
///
/// Every request passes [`guard`] first: the bearer token, then `Host` and
/// `Origin`, then the body and session caps — all before the body is read.
///
/// # Errors
///
/// When `addr` is not a loopback address and no token is set (refused
/// before binding), or when the address cannot be bound.
pub(crate) async fn serve_http<S: CellService>(
    service: Arc<S>,
    addr: SocketAddr,
    mode: ServeMode,
    options: HttpOptions,
) -> anyhow::Result<()> {
    if let Some(refusal) = options.refusal(addr) {
        anyhow::bail!(refusal);
    }
    let limits = options.limits.clone();
    let sessionless = new_session_id();
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(Duration::from_secs(limits.session_idle_seconds()));
    let sessions = Arc::new(sessions);
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(limits.max_body_bytes() as usize);
    // rmcp checks `Host` again (it accepts loopback names only, unless told
    // more); the guard has already refused everything else.
    let ip = addr.ip();
    if !ip.is_loopback() && !ip.is_unspecified() {
        config.allowed_hosts.push(ip.to_string());
    }
    config
        .allowed_hosts
        .extend(limits.allowed_hosts().iter().cloned());
    if ip.is_unspecified() {
        // Bound to every interface: the guard decides which names pass.
        config.allowed_hosts.clear();
    }
    let metrics_service = service.clone();
    let mcp_options = Arc::new(options.mcp.clone());
    let drivers = Arc::new(super::tasks::TaskDrivers::default());
    let mcp = StreamableHttpService::new(
        move || {
            Ok(McpServer::new(
                service.clone(),
                mode,
                Some(sessionless.clone()),
                mcp_options.clone(),
                drivers.clone(),
            ))
        },
        sessions.clone(),
        config,
    );
    let guard_state = Arc::new(Guard {
        tokens: options
            .auth_token
            .iter()
            .map(|t| (Arc::<str>::from(DEFAULT_PRINCIPAL), token_digest(t)))
            .chain(
                options
                    .principals
                    .iter()
                    .map(|(name, t)| (Arc::<str>::from(name.as_str()), token_digest(t))),
            )
            .collect(),
        limits,
        bind: addr,
        sessions,
        opening: std::sync::atomic::AtomicUsize::new(0),
    });
    let app = axum::Router::new()
        .route_service("/mcp", mcp)
        .route_layer(axum::middleware::from_fn_with_state(
            guard_state.clone(),
            reject_malformed_json_rpc,
        ))
        // Behind the guard (token, Host, Origin) like `/mcp`.
        .route(
            "/metrics",
            axum::routing::get(move || render_metrics(metrics_service.clone())),
        )
        .layer(axum::middleware::from_fn_with_state(guard_state, guard));
    // Installed before the first cell runs, so its gauges start at zero.
    let _ = prometheus();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr().unwrap_or(addr);
    tracing::info!(%local, "serving MCP over streamable HTTP at http://{local}/mcp");
    axum::serve(listener, app)
        .with_graceful_shutdown(options.shutdown.cancelled_owned())
        .await
        .context("the MCP HTTP server stopped")
}

/// How often the Prometheus recorder's upkeep runs (it folds histogram
/// samples into their buckets, so unscraped samples do not pile up).
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder, installed as the global `metrics`
/// recorder on first use (with the histograms' buckets and the metrics'
/// descriptions, and a thread for its upkeep). `None` when another
/// recorder was installed first (an embedder's): the metrics then go there.
fn prometheus() -> Option<&'static metrics_exporter_prometheus::PrometheusHandle> {
    use crate::instruments as i;
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    static HANDLE: std::sync::OnceLock<Option<metrics_exporter_prometheus::PrometheusHandle>> =
        std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(i::TOOL_CALL_SECONDS.into()),
                    i::TOOL_CALL_SECONDS_BUCKETS,
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(i::SNAPSHOT_BYTES.into()),
                        i::SNAPSHOT_BYTES_BUCKETS,
                    )
                })
                .and_then(PrometheusBuilder::install_recorder);
            let handle = match handle {
                Ok(handle) => handle,
                Err(e) => {
                    tracing::warn!(error = %e, "GET /metrics is off: another metrics recorder is installed");
                    return None;
                }
            };
            i::describe();
            let upkeep = handle.clone();
            let _ = std::thread::Builder::new()
                .name("quickcell-metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(METRICS_UPKEEP_INTERVAL);
                    upkeep.run_upkeep();
                });
            Some(handle)
        })
        .as_ref()
}

/// `GET /metrics`: the Prometheus text exposition of the host's metrics
/// ([`crate::instruments`]).
async fn render_metrics<S: CellService>(service: Arc<S>) -> Response {
    let Some(handle) = prometheus() else {
        return (
            StatusCode::NOT_FOUND,
            "metrics go to the metrics recorder this process installed, not to /metrics\n",
        )
            .into_response();
    };
    service.refresh_gauges().await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

/// How long a request body may take to arrive once its headers are in.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What [`guard`] checks requests against.
struct Guard {
    /// Each principal with the SHA-256 of its bearer token (compared in
    /// constant time); none: no authentication.
    tokens: Vec<(Arc<str>, [u8; 32])>,
    limits: crate::config::HttpLimits,
    /// The address the server is bound to (its name is an accepted `Host`).
    bind: SocketAddr,
    sessions: Arc<LocalSessionManager>,
    /// Requests without a session id in progress (each may open one).
    opening: std::sync::atomic::AtomicUsize,
}

fn token_digest(token: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes()).into()
}

impl Guard {
    /// Whether the request carries the token (always, when none is set).
    /// The request's principal, when it is authorized.
    fn authorized(&self, request: &Request<Body>) -> Option<Arc<str>> {
        if self.tokens.is_empty() {
            return Some(LOCAL_PRINCIPAL.into());
        }
        // The scheme is case-insensitive (RFC 9110 §11.1).
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token)?;
        // Digests have one length, and every byte of every one is compared.
        let given = token_digest(given.trim());
        let mut found = None;
        for (principal, expected) in &self.tokens {
            let differs = given
                .iter()
                .zip(expected.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if differs == 0 {
                found = Some(principal.clone());
            }
        }
        found
    }

    /// Whether the `Host` header names this server: a loopback name, the
    /// bound address, or a configured host (with or without a port).
    fn host_allowed(&self, request: &Request<Body>) -> bool {
        let Some(host) = request.headers().get(header::HOST) else {
            // Without `Host` (HTTP/1.0) there is no name to rebind.
            return true;
        };
        let Ok(host) = host.to_str() else {
            return false;
        };
        let name = host_name(host);
        let bound = match self.bind.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        is_loopback_name(name)
            || name.eq_ignore_ascii_case(&bound)
            || self.limits.allowed_hosts().iter().any(|allowed| {
                allowed.eq_ignore_ascii_case(host) || allowed.eq_ignore_ascii_case(name)
            })
    }

    /// Whether the `Origin` header, if any, is a loopback origin or a
    /// configured one.
    fn origin_allowed(&self, request: &Request<Body>) -> bool {
        let Some(origin) = request.headers().get(header::ORIGIN) else {
            return true;
        };
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        if self
            .limits
            .allowed_origins()
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(origin))
        {
            return true;
        }
        let Some(rest) = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
        else {
            return false;
        };
        !rest.contains('/') && is_loopback_name(host_name(rest))
    }
}

/// The host part of a `Host` header or origin authority (`[::1]:8080` →
/// `[::1]`, `localhost:80` → `localhost`).
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    authority.split(':').next().unwrap_or(authority)
}

fn is_loopback_name(name: &str) -> bool {
    name.eq_ignore_ascii_case("localhost")
        || name == "[::1]"
        || name.eq_ignore_ascii_case("[0:0:0:0:0:0:0:1]")
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The outermost check of every HTTP request, in this order and before the
/// body is read: the bearer token (HTTP 401), `Host` and `Origin` (HTTP
/// 403, DNS-rebinding protection), a declared body over the cap (HTTP 413),
/// and a new session over the session cap (HTTP 503). Each answer is a
/// JSON-RPC error; nothing of the request reaches a session.
async fn guard(
    axum::extract::State(guard): axum::extract::State<Arc<Guard>>,
    mut request: Request<Body>,
    next: Next,
) -> Response {
    let Some(principal) = guard.authorized(&request) else {
        let mut response = json_rpc_error(
            StatusCode::UNAUTHORIZED,
            Value::Null,
            ErrorCode(-32001),
            "Unauthorized: send `Authorization: Bearer <token>` with the server's token".into(),
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer"),
        );
        return response;
    };
    request.extensions_mut().insert(Principal(principal));
    if !guard.host_allowed(&request) {
        return json_rpc_error(
            StatusCode::FORBIDDEN,
            Value::Null,
            ErrorCode::INVALID_REQUEST,
            "Forbidden: the Host header does not name this server (add it to [http] allowed_hosts)"
                .into(),
        );
    }
    if !guard.origin_allowed(&request) {
        return json_rpc_error(
            StatusCode::FORBIDDEN,
            Value::Null,
            ErrorCode::INVALID_REQUEST,
            "Forbidden: requests from this Origin are not accepted (add it to [http] allowed_origins)".into(),
        );
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > guard.limits.max_body_bytes()) {
        return body_too_large(guard.limits.max_body_bytes(), "declared by Content-Length");
    }
    // A request of 2026-07-28 or later opens no session (it names its
    // version in `MCP-Protocol-Version`, which it must): it does not count.
    let stateless = request
        .headers()
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v >= "2026-07-28");
    let new_session = request.method() == Method::POST
        && !stateless
        && !request.headers().contains_key("mcp-session-id");
    if new_session {
        // Requests that may be creating a session right now count too, so
        // concurrent `initialize`s cannot overshoot the cap.
        let opening = guard.opening.fetch_add(1, Ordering::AcqRel);
        let _opening = Opening(&guard.opening);
        let open = guard.sessions.sessions.read().await.len();
        if (open + opening) as u64 >= guard.limits.max_sessions() {
            return json_rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                Value::Null,
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "Too many open MCP sessions ({open}; at most {}). Close an unused session or try again later; open sessions are unaffected.",
                    guard.limits.max_sessions()
                ),
            );
        }
        return next.run(request).await;
    }
    next.run(request).await
}

/// One request that may be opening a session; counted down on drop.
struct Opening<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// HTTP 413 with a JSON-RPC error.
fn body_too_large(max: u64, how: &str) -> Response {
    json_rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        Value::Null,
        ErrorCode::INVALID_REQUEST,
        format!("Invalid request: body over {max} bytes ({how})"),
    )
}

/// A JSON-RPC error response for request `id` (`null` when unknown), sent
/// with HTTP `status`.
fn json_rpc_error(status: StatusCode, id: Value, code: ErrorCode, message: String) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code.0, "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Answers a POST whose body is not a JSON-RPC message with a JSON-RPC error
/// (rmcp would answer with plain text), and passes everything else on.
async fn reject_malformed_json_rpc(
    axum::extract::State(guard): axum::extract::State<Arc<Guard>>,
    request: Request<Body>,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let max = guard.limits.max_body_bytes();
    let (parts, body) = request.into_parts();
    // A client that declares a body and never sends it does not hold the
    // connection (and its buffer) for ever.
    let read = tokio::time::timeout(BODY_READ_TIMEOUT, axum::body::to_bytes(body, max as usize));
    let bytes = match read.await {
        Ok(Ok(bytes)) => bytes,
        // Over the limit (or unreadable, when the client is likely gone).
        Ok(Err(error)) => return body_too_large(max, &format!("or unreadable: {error}")),
        Err(_) => {
            return json_rpc_error(
                StatusCode::REQUEST_TIMEOUT,
                Value::Null,
                ErrorCode::INVALID_REQUEST,
                format!(
                    "Invalid request: the body did not arrive within {} seconds",
                    BODY_READ_TIMEOUT.as_secs()
                ),
            )
        }
    };
    if let Err(error) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        return match serde_json::from_slice::<Value>(&bytes) {
            Err(error) => json_rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                ErrorCode::PARSE_ERROR,
                format!("Parse error: {error}"),
            ),
            Ok(value) => {
                let id = match value.get("id") {
                    Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
                    _ => Value::Null,
                };
                json_rpc_error(
                    StatusCode::BAD_REQUEST,
                    id,
                    ErrorCode::INVALID_REQUEST,
                    format!("Invalid request: {error}"),
                )
            }
        };
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<HttpOptions, String> {
        let path = std::env::temp_dir().join(format!("quickcell-tokens-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, text).unwrap();
        let parsed = HttpOptions::default().with_token_file(&path);
        let _ = std::fs::remove_file(&path);
        parsed.map_err(|e| e.rsplit(": ").next().unwrap_or_default().to_string())
    }

    #[test]
    fn a_token_file_holds_one_token_or_named_principals() {
        let one = parse("  s3cret \n").unwrap();
        assert_eq!(one.auth_token.as_deref(), Some("s3cret"));
        assert!(one.principals.is_empty());
        let many = parse("# principal token\n\nalice a-token\nbob.2 b-token\n").unwrap();
        assert_eq!(many.auth_token, None);
        assert_eq!(
            many.principals,
            [
                ("alice".to_string(), "a-token".to_string()),
                ("bob.2".to_string(), "b-token".to_string())
            ]
        );
        for (text, error) in [
            ("", "is empty"),
            ("# only a comment\n", "is empty"),
            ("alice a b\n", "got 3 words"),
            ("alice\nbob b\n", "got 1 words"),
            ("al/ice a\n", "must be 1 to 64 of A-Z a-z 0-9 . _ -"),
            ("alice a\nalice b\n", "comes twice"),
            ("alice a\nbob a\n", "a token is used twice"),
        ] {
            let got = parse(text).unwrap_err();
            assert!(got.contains(error), "{text:?}: {got}");
        }
        let too_many: String = (0..=MAX_PRINCIPALS)
            .map(|i| format!("p{i} t{i}\n"))
            .collect();
        assert!(parse(&too_many).unwrap_err().contains("at most 1024"));
        let most: String = (0..MAX_PRINCIPALS)
            .map(|i| format!("p{i} t{i}\n"))
            .collect();
        assert_eq!(parse(&most).unwrap().principals.len(), MAX_PRINCIPALS);
    }
}
