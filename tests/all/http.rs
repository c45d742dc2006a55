//! The HTTP front end of `quickcell serve --http` (operations.md §2): the
//! bearer token, `Origin` / `Host` checks before the body is read, and the
//! body, session and idle caps. Requests are raw HTTP/1.1 over TCP, so a
//! test can send headers that promise a body it never sends.

use crate::mcp::HttpServer;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

const TOKEN: &str = "s3cret-token-for-tests";

/// A scratch directory with a token file and a config holding `http`.
fn scratch(http: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("quickcell-http-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), format!("{TOKEN}\n")).unwrap();
    let config = dir.join("quickcell.toml");
    std::fs::write(&config, format!("[http]\n{http}\n")).unwrap();
    (dir, config)
}

/// `quickcell serve --http` on a free loopback port with the token file,
/// the workspace tools serving this repository.
fn start(http: &str) -> (HttpServer, u16) {
    let (dir, config) = scratch(http);
    let mut chosen = 0;
    let server = HttpServer::spawn(|port| {
        chosen = port;
        let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
        command
            .args(["serve", "--http", &format!("127.0.0.1:{port}")])
            .arg("--config")
            .arg(&config)
            .arg("--auth-token-file")
            .arg(dir.join("token"))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--workspace")
            .arg(env!("CARGO_MANIFEST_DIR"));
        command
    });
    (server, chosen)
}

/// One HTTP response: status, headers (lower-case names) and body text.
pub(crate) struct Response {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC error code of the body (JSON, or one SSE `data:` line).
    fn rpc_error_code(&self) -> Option<i64> {
        let json = self
            .body
            .lines()
            .find_map(|l| l.strip_prefix("data:"))
            .unwrap_or(&self.body);
        let value: Value = serde_json::from_str(json.trim()).ok()?;
        value["error"]["code"].as_i64()
    }
}

/// Sends `head` (request line and headers, without the blank line) and
/// `body`, and reads the response. The server must answer within ten
/// seconds even when `body` is shorter than the declared length.
pub(crate) fn send(port: u16, head: &str, body: &[u8]) -> Response {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(format!("{head}\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                // Enough for the checks: the head and the start of the body.
                if raw.len() > 64 * 1024 {
                    break;
                }
            }
            Err(e) if raw.is_empty() => panic!("no response within ten seconds: {e}"),
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Response {
        status,
        headers,
        body: body.to_string(),
    }
}

pub(crate) const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// A POST to `/mcp` with `extra` headers and `body`.
pub(crate) fn post(port: u16, extra: &[&str], body: &str) -> Response {
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}",
        body.len()
    );
    for header in extra {
        head.push_str("\r\n");
        head.push_str(header);
    }
    send(port, &head, body.as_bytes())
}

fn bearer() -> String {
    format!("Authorization: Bearer {TOKEN}")
}

#[test]
fn requests_without_the_token_get_401_before_the_body_is_read() {
    let (_server, port) = start("");
    // Declares 50 MB and sends nothing: answered at once.
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: 50000000"
    );
    let r = send(port, &head, b"");
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    assert_eq!(r.rpc_error_code(), Some(-32001), "{}", r.body);
    let r = post(port, &["Authorization: Bearer wrong"], INITIALIZE);
    assert_eq!(r.status, 401);
    assert!(r.header("mcp-session-id").is_none());
    // With the token: served.
    let r = post(port, &[&bearer()], INITIALIZE);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("mcp-session-id").is_some());
}

#[test]
fn foreign_origins_and_hosts_get_403_before_the_body_is_read() {
    let (_server, port) = start("allowed_origins = [\"https://app.example\"]");
    let declared = |origin: &str, host: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\n{origin}Content-Type: application/json\r\n{}\r\nContent-Length: 50000000",
            bearer()
        )
    };
    let local = format!("127.0.0.1:{port}");
    let r = send(
        port,
        &declared("Origin: http://evil.example\r\n", &local),
        b"",
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.rpc_error_code(), Some(-32600));
    let r = send(port, &declared("", &format!("evil.example:{port}")), b"");
    assert_eq!(r.status, 403, "{}", r.body);
    // Loopback and configured origins pass.
    for origin in [
        format!("http://localhost:{port}"),
        "https://app.example".to_string(),
    ] {
        let r = post(port, &[&bearer(), &format!("Origin: {origin}")], INITIALIZE);
        assert_eq!(r.status, 200, "{origin}: {}", r.body);
    }
}

#[test]
fn bodies_over_the_cap_get_413() {
    let (_server, port) = start("max_body_bytes = 4096");
    // Declared too large: refused before reading.
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n{}\r\nContent-Length: 5000",
        bearer()
    );
    let r = send(port, &head, b"");
    assert_eq!(r.status, 413, "{}", r.body);
    // Chunked, no length declared: refused while reading.
    let chunk = "x".repeat(3000);
    let body = format!(
        "{:x}\r\n{chunk}\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len(),
        chunk.len()
    );
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{}\r\nTransfer-Encoding: chunked",
        bearer()
    );
    let r = send(port, &head, body.as_bytes());
    assert_eq!(r.status, 413, "{}", r.body);
    // At the cap: served.
    let padded = format!("{}{}", INITIALIZE, " ".repeat(4096 - INITIALIZE.len()));
    let r = post(port, &[&bearer()], &padded);
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn sessions_over_the_cap_get_503_and_idle_ones_close() {
    let (_server, port) = start("max_sessions = 2\nsession_idle_seconds = 2");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = post(port, &[&bearer()], INITIALIZE);
        assert_eq!(r.status, 200, "{}", r.body);
        ids.push(r.header("mcp-session-id").unwrap().to_string());
    }
    let r = post(port, &[&bearer()], INITIALIZE);
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("Too many open MCP sessions"), "{}", r.body);
    // Open sessions are unaffected.
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let r = post(
        port,
        &[&bearer(), &format!("Mcp-Session-Id: {}", ids[0])],
        ping,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // After the idle lifetime the sessions are closed and their slots free:
    // a new session is refused until then, and opens as soon as one is.
    let started = std::time::Instant::now();
    loop {
        let r = post(port, &[&bearer()], INITIALIZE);
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no session slot freed within 20 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "a slot freed before the sessions were idle for long"
    );
    let r = post(
        port,
        &[&bearer(), &format!("Mcp-Session-Id: {}", ids[1])],
        ping,
    );
    assert_eq!(r.status, 404, "an idle session is gone: {}", r.body);
}

#[test]
fn a_non_loopback_bind_without_a_token_is_refused_at_startup() {
    let out = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(["serve", "--http", "0.0.0.0:0"])
        .env_remove("QUICKCELL_AUTH_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without authentication"), "{stderr}");
    // With a token from the environment it starts (and answers 401 to a
    // request without the token).
    let mut chosen = 0;
    let _server = HttpServer::spawn(|port| {
        chosen = port;
        let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
        command
            .args(["serve", "--http", &format!("0.0.0.0:{port}")])
            .env("QUICKCELL_AUTH_TOKEN", TOKEN)
            .arg("--state-dir")
            .arg(std::env::temp_dir().join(format!("quickcell-http-{}", uuid::Uuid::new_v4())));
        command
    });
    let r = post(chosen, &[], INITIALIZE);
    assert_eq!(r.status, 401);
    let r = post(chosen, &[&bearer()], INITIALIZE);
    assert_eq!(r.status, 200, "{}", r.body);
}

/// The `data:` JSON-RPC message of an SSE (or plain JSON) response body.
pub(crate) fn rpc_message(response: &Response) -> Value {
    let json = response
        .body
        .lines()
        .find_map(|l| l.strip_prefix("data:").filter(|d| d.contains("jsonrpc")))
        .unwrap_or(&response.body);
    serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {}", response.body))
}

/// The value of the exposition line that starts with `series ` (a metric
/// name with its labels as rendered).
pub(crate) fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

/// `GET /metrics`: Prometheus text behind the server's token, counting
/// what the MCP calls did.
#[test]
fn metrics_are_served_behind_the_token_and_count_the_calls() {
    let (_server, port) = start("");
    let get_metrics = |extra: &str| {
        send(
            port,
            &format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}{extra}"),
            b"",
        )
    };
    let refused = get_metrics("");
    assert_eq!(refused.status, 401);
    assert!(!refused.body.contains("quickcell_"), "{}", refused.body);

    let init = post(port, &[&bearer()], INITIALIZE);
    let session = format!("Mcp-Session-Id: {}", init.header("mcp-session-id").unwrap());
    post(
        port,
        &[&bearer(), &session],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    let mut fuel = 0;
    let cells = [
        "return 1",
        "await yield_control(); return 2",
        "throw new Error('no')",
        "const r = await read({path: 'README.md', limit: 1}); return r.kind",
    ];
    for (id, code) in cells.iter().enumerate() {
        let call = serde_json::json!({"jsonrpc": "2.0", "id": id + 2, "method": "tools/call",
            "params": {"name": "exec", "arguments": {"title": "metrics", "code": code}}});
        let r = post(port, &[&bearer(), &session], &call.to_string());
        let message = rpc_message(&r);
        let result = &message["result"]["structuredContent"];
        fuel += result["telemetry"]["fuelUsed"]
            .as_u64()
            .unwrap_or_else(|| panic!("{message}"));
    }

    let r = get_metrics(&format!("\r\n{}", bearer()));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let m = &r.body;
    let calls = |labels: &str| sample(m, &format!("quickcell_calls_total{{{labels}}}"));
    assert_eq!(calls(r#"kind="exec",status="completed""#), Some(2.0), "{m}");
    assert_eq!(calls(r#"kind="exec",status="waiting""#), Some(1.0), "{m}");
    assert_eq!(
        calls(r#"kind="exec",status="failed",code="internal_error""#),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        sample(m, r#"quickcell_fuel_total{kind="exec"}"#),
        Some(fuel as f64)
    );
    assert_eq!(sample(m, "quickcell_cells_running"), Some(0.0), "{m}");
    assert_eq!(sample(m, "quickcell_cells_parked"), Some(1.0), "{m}");
    assert_eq!(
        sample(m, "quickcell_snapshot_bytes_count"),
        Some(1.0),
        "{m}"
    );
    assert!(sample(m, "quickcell_snapshot_bytes_sum").unwrap() > 0.0);
    let tool = r#"source="host",outcome="ok""#;
    assert_eq!(
        sample(m, &format!("quickcell_tool_call_seconds_count{{{tool}}}")),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        sample(
            m,
            &format!("quickcell_tool_call_seconds_bucket{{{tool},le=\"+Inf\"}}")
        ),
        Some(1.0),
        "{m}"
    );
    assert!(m.contains("# HELP quickcell_cells_parked "), "{m}");
    assert!(
        m.contains("# TYPE quickcell_tool_call_seconds histogram"),
        "{m}"
    );
}
