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
    // A 2026-07-28 request opens no session: the full table does not stop it.
    let listed = modern_call(port, TOKEN, "tools/list", serde_json::json!({}), false);
    assert!(listed["result"]["tools"].is_array(), "{listed}");
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

/// A 2026-07-28 request to `serve --http` (no `initialize`, no session):
/// `server/discover` and `tools/list` carry `[mcp]`'s cache hints, a
/// version the server does not speak gets `-32022` naming those it does,
/// and a 2025-11-25 session's `tools/list` carries no hints.
#[test]
fn a_2026_07_28_request_gets_cache_hints_and_unknown_versions_are_named() {
    let (_server, port) = start("[mcp]\ntools_ttl_ms = 1234\ncache_scope = \"private\"");
    let modern = |method: &str, version: &str| {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {}}}});
        post(
            port,
            &[
                &bearer(),
                &format!("MCP-Protocol-Version: {version}"),
                &format!("Mcp-Method: {method}"),
            ],
            &body.to_string(),
        )
    };
    let discovered = modern("server/discover", "2026-07-28");
    assert_eq!(discovered.status, 200, "{}", discovered.body);
    let result = &rpc_message(&discovered)["result"];
    assert_eq!(result["ttlMs"], 1234, "{result}");
    assert_eq!(result["cacheScope"], "private", "{result}");
    let versions = result["supportedVersions"].as_array().unwrap();
    assert!(versions.contains(&Value::from("2026-07-28")), "{result}");
    assert!(versions.contains(&Value::from("2025-11-25")), "{result}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "quickcell"
    );
    let listed = modern("tools/list", "2026-07-28");
    let result = &rpc_message(&listed)["result"];
    assert_eq!(
        (result["ttlMs"].clone(), result["cacheScope"].clone()),
        (Value::from(1234), Value::from("private")),
        "{result}"
    );
    let names: Vec<&str> = result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["exec", "wait"]);
    let unknown = modern("server/discover", "2031-01-01");
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    let error = &rpc_message(&unknown)["error"];
    assert_eq!(error["code"], -32022, "{error}");
    assert_eq!(error["data"]["requested"], "2031-01-01", "{error}");
    assert!(error["data"]["supported"]
        .as_array()
        .unwrap()
        .contains(&Value::from("2026-07-28")));
    // A 2025-11-25 session: no hints.
    let init = post(port, &[&bearer()], INITIALIZE);
    let session = format!("Mcp-Session-Id: {}", init.header("mcp-session-id").unwrap());
    post(
        port,
        &[&bearer(), &session],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    let listed = post(
        port,
        &[&bearer(), &session],
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    );
    let result = &rpc_message(&listed)["result"];
    assert!(result["tools"].is_array(), "{result}");
    assert_eq!(result.get("ttlMs"), None, "{result}");
}

/// A `tools/call` of MCP 2026-07-28 as `token`'s principal on `port`, with
/// the Tasks extension declared when `tasks`; the JSON-RPC message.
fn modern_call(port: u16, token: &str, method: &str, params: Value, tasks: bool) -> Value {
    let capabilities = if tasks {
        serde_json::json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        serde_json::json!({})
    };
    modern_request(port, token, method, params, capabilities)
}

/// A request of MCP 2026-07-28 as `token`'s principal on `port`, declaring
/// the client capabilities `capabilities`; the JSON-RPC message.
fn modern_request(
    port: u16,
    token: &str,
    method: &str,
    params: Value,
    capabilities: Value,
) -> Value {
    let mut params = params;
    params["_meta"] = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities});
    let name = params["name"]
        .as_str()
        .or(params["taskId"].as_str())
        .map(|n| format!("Mcp-Name: {n}"));
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
    let mut headers = vec![
        format!("Authorization: Bearer {token}"),
        "MCP-Protocol-Version: 2026-07-28".to_string(),
        format!("Mcp-Method: {method}"),
    ];
    headers.extend(name);
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    rpc_message(&post(port, &headers, &body.to_string()))
}

/// Polls `tasks/get` until the task is no longer `working` (at most 30 s).
fn task_end(port: u16, token: &str, task: &str) -> Value {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = modern_call(
            port,
            token,
            "tasks/get",
            serde_json::json!({"taskId": task}),
            true,
        );
        if got["result"]["status"] != "working" {
            return got;
        }
        assert!(std::time::Instant::now() < until, "still working: {got}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The Tasks extension of MCP 2026-07-28: an `exec` whose cell parks is a
/// task the server drives to its end; `tasks/get` reports it from either
/// of two hosts sharing the state, `tasks/cancel` cancels one; a cell that
/// ends at once answers its result; ids of other principals, unknown ids
/// and clients without the extension are refused as the extension says.
#[test]
fn an_exec_that_parks_is_a_task_any_host_reports() {
    let (dir, hosts) = principal_hosts("quickcell-tasks", "alice token-a\nbob token-b\n", 2);
    let (a, b) = (hosts[0].1, hosts[1].1);
    let exec =
        |code: &str| serde_json::json!({"name": "exec", "arguments": {"title": "t", "code": code}});
    // A cell that parks: a task.
    let created = modern_call(
        a,
        "token-a",
        "tools/call",
        exec("await new Promise((r) => setTimeout(r, 300)); await yield_control(); return 'task done';"),
        true,
    );
    let result = &created["result"];
    assert_eq!(result["resultType"], "task", "{created}");
    assert_eq!(result["status"], "working", "{created}");
    assert_eq!(result["ttlMs"], 3_600_000, "{created}");
    assert!(
        result["createdAt"].as_str().unwrap().ends_with('Z'),
        "{created}"
    );
    let task = result["taskId"].as_str().unwrap().to_string();
    // The other host knows it at once, and reports its end.
    let ended = task_end(b, "token-a", &task);
    assert_eq!(ended["result"]["status"], "completed", "{ended}");
    assert_eq!(ended["result"]["resultType"], "complete", "{ended}");
    assert_eq!(
        ended["result"]["result"]["structuredContent"]["value"], "task done",
        "{ended}"
    );
    // Another principal, an unknown id: -32602; no extension: -32021.
    for (token, id) in [("token-b", task.as_str()), ("token-a", "run-nope")] {
        let refused = modern_call(
            a,
            token,
            "tasks/get",
            serde_json::json!({"taskId": id}),
            true,
        );
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
    }
    let undeclared = modern_call(
        a,
        "token-a",
        "tasks/get",
        serde_json::json!({"taskId": task}),
        false,
    );
    assert_eq!(undeclared["error"]["code"], -32021, "{undeclared}");
    // A cell that ends within the call: its result, no task.
    let at_once = modern_call(a, "token-a", "tools/call", exec("return 1 + 1;"), true);
    assert_eq!(
        at_once["result"]["structuredContent"]["value"], 2,
        "{at_once}"
    );
    // Without the extension, a cell that parks answers `waiting`.
    let waiting = modern_call(
        a,
        "token-a",
        "tools/call",
        exec("await yield_control(); return 3;"),
        false,
    );
    assert_eq!(
        waiting["result"]["structuredContent"]["status"], "waiting",
        "{waiting}"
    );
    // Cancel: acknowledged, the task is cancelled, a second cancel too.
    let long = modern_call(
        a,
        "token-a",
        "tools/call",
        exec("await new Promise((r) => setTimeout(r, 60000)); return 'never';"),
        true,
    );
    let long = long["result"]["taskId"].as_str().unwrap().to_string();
    for port in [b, a] {
        let ack = modern_call(
            port,
            "token-a",
            "tasks/cancel",
            serde_json::json!({"taskId": long}),
            true,
        );
        assert!(ack["result"].is_object(), "{ack}");
    }
    let cancelled = modern_call(
        a,
        "token-a",
        "tasks/get",
        serde_json::json!({"taskId": long}),
        true,
    );
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A task outlives the host that drives it: host A stops (SIGTERM parks
/// the cell), and host B's `tasks/get` takes the run over and reports its
/// end.
#[test]
fn a_task_outlives_its_host() {
    let (dir, mut hosts) = principal_hosts("quickcell-task-restart", "alice token-a\n", 2);
    let (b_server, b) = hosts.pop().unwrap();
    let (mut a_server, a) = hosts.pop().unwrap();
    let created = modern_call(
        a,
        "token-a",
        "tools/call",
        serde_json::json!({"name": "exec", "arguments": {"title": "t", "code": "await yield_control(); await new Promise((r) => setTimeout(r, 1500)); return 'finished on B';"}}),
        true,
    );
    let task = created["result"]["taskId"].as_str().unwrap().to_string();
    let status = Command::new("kill")
        .args(["-TERM", &a_server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(a_server.exits(), "host A exits on SIGTERM");
    let ended = task_end(b, "token-a", &task);
    assert_eq!(ended["result"]["status"], "completed", "{ended}");
    assert_eq!(
        ended["result"]["result"]["structuredContent"]["value"], "finished on B",
        "{ended}"
    );
    drop(b_server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[mcp] task_ttl_ms`: a task lives that long from its creation; then
/// `tasks/get` knows it no more (and its run is cancelled).
#[test]
fn a_task_expires_after_its_ttl() {
    let (_server, port) = start("[mcp]\ntask_ttl_ms = 1000");
    let created = modern_call(
        port,
        TOKEN,
        "tools/call",
        serde_json::json!({"name": "exec", "arguments": {"title": "t", "code": "await new Promise((r) => setTimeout(r, 60000));"}}),
        true,
    );
    assert_eq!(created["result"]["ttlMs"], 1000, "{created}");
    let task = created["result"]["taskId"].as_str().unwrap().to_string();
    let live = modern_call(
        port,
        TOKEN,
        "tasks/get",
        serde_json::json!({"taskId": task}),
        true,
    );
    assert_eq!(live["result"]["status"], "working", "{live}");
    std::thread::sleep(Duration::from_millis(1_300));
    let gone = modern_call(
        port,
        TOKEN,
        "tasks/get",
        serde_json::json!({"taskId": task}),
        true,
    );
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    // Its run went with it.
    let waited = modern_call(
        port,
        TOKEN,
        "tools/call",
        serde_json::json!({"name": "wait", "arguments": {"runId": task}}),
        false,
    );
    assert_eq!(
        waited["result"]["structuredContent"]["error"], "code mode run is unavailable or expired.",
        "{waited}"
    );
}

/// More tasks than a principal's share of running cells (4 by default)
/// all finish: a driver refused for the share tries again later.
#[test]
fn tasks_beyond_the_running_share_all_finish() {
    let (_server, port) = start("");
    let tasks: Vec<(i64, String)> = (0..8)
        .map(|i| {
            let created = modern_call(
                port,
                TOKEN,
                "tools/call",
                serde_json::json!({"name": "exec", "arguments": {"title": "t", "code": format!("for (let k = 0; k < 5; k++) await yield_control(); return {i};")}}),
                true,
            );
            (i, created["result"]["taskId"].as_str().unwrap().to_string())
        })
        .collect();
    for (i, task) in tasks {
        let ended = task_end(port, TOKEN, &task);
        assert_eq!(
            ended["result"]["result"]["structuredContent"]["value"], i,
            "{ended}"
        );
    }
}

/// A 2025-11-25 MCP session opened with one principal's token refuses
/// calls made with another's (its runs and values are the opener's).
#[test]
fn an_mcp_session_refuses_another_principal_s_token() {
    let (dir, hosts) =
        principal_hosts("quickcell-session-owner", "alice token-a\nbob token-b\n", 1);
    let port = hosts[0].1;
    let alice = "Authorization: Bearer token-a";
    let init = post(port, &[alice], INITIALIZE);
    let session = format!("Mcp-Session-Id: {}", init.header("mcp-session-id").unwrap());
    post(
        port,
        &[alice, &session],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"exec","arguments":{"title":"t","code":"return 5"}}}"#;
    let own = rpc_message(&post(port, &[alice, &session], call));
    assert_eq!(own["result"]["structuredContent"]["value"], 5, "{own}");
    let other = rpc_message(&post(
        port,
        &["Authorization: Bearer token-b", &session],
        call,
    ));
    assert_eq!(other["error"]["code"], -32600, "{other}");
    assert!(
        other["error"]["message"]
            .as_str()
            .unwrap()
            .contains("another principal's token"),
        "{other}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// MCP 2026-07-28: a client that closes the connection of a plain (not
/// task) `tools/call` cancels it — the cell is aborted and its `store`
/// writes are discarded; the same call left to finish commits them.
#[test]
fn closing_a_2026_07_28_request_cancels_its_cell() {
    let (_server, port) = start("");
    let exec = |code: &str| {
        serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "exec", "arguments": {"title": "t", "code": code},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string()
    };
    let headers = [
        bearer(),
        "MCP-Protocol-Version: 2026-07-28".to_string(),
        "Mcp-Method: tools/call".to_string(),
        "Mcp-Name: exec".to_string(),
    ];
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let slow = |key: &str| {
        exec(&format!(
            "await new Promise((r) => setTimeout(r, 1500)); await store('{key}', 1); return 1;"
        ))
    };
    // Left to finish: committed.
    let done = rpc_message(&post(port, &headers, &slow("kept")));
    assert_eq!(done["result"]["structuredContent"]["value"], 1, "{done}");
    // Closed after 300 ms: cancelled.
    {
        let body = slow("dropped");
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}",
            body.len()
        );
        for header in &headers {
            head.push_str("\r\n");
            head.push_str(header);
        }
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .write_all(format!("{head}\r\n\r\n{body}").as_bytes())
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(stream);
    }
    std::thread::sleep(Duration::from_millis(2_500));
    let read = rpc_message(&post(
        port,
        &headers,
        &exec("return [(await load('kept')) ?? 'none', (await load('dropped')) ?? 'none'];"),
    ));
    assert_eq!(
        read["result"]["structuredContent"]["value"],
        serde_json::json!([1, "none"]),
        "{read}"
    );
}

/// `count` `serve --http` hosts sharing one state directory (SQLite) and
/// an auth token file of `tokens` (`PRINCIPAL TOKEN` lines); the scratch
/// directory and each host with its port.
fn principal_hosts(
    name: &str,
    tokens: &str,
    count: usize,
) -> (std::path::PathBuf, Vec<(HttpServer, u16)>) {
    principal_hosts_with(name, tokens, count, None)
}

/// [`principal_hosts`] with a configuration file (its text; `RUNS` in it
/// is replaced by the path of the scratch directory's `runs` file).
fn principal_hosts_with(
    name: &str,
    tokens: &str,
    count: usize,
    config: Option<&str>,
) -> (std::path::PathBuf, Vec<(HttpServer, u16)>) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokens"), tokens).unwrap();
    if let Some(config) = config {
        let runs = dir.join("runs").display().to_string();
        std::fs::write(dir.join("quickcell.toml"), config.replace("RUNS", &runs)).unwrap();
    }
    let hosts = (0..count)
        .map(|_| {
            let mut chosen = 0;
            let server = HttpServer::spawn(|port| {
                chosen = port;
                let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
                command
                    .current_dir(&dir)
                    .args(["serve", "--http", &format!("127.0.0.1:{port}")])
                    .args(["--auth-token-file", "tokens", "--state-dir", "state"]);
                if config.is_some() {
                    command.args(["--config", "quickcell.toml"]);
                }
                command
            });
            (server, chosen)
        })
        .collect();
    (dir, hosts)
}

/// A configuration whose `nap` tool (which counts its runs in `RUNS`)
/// needs an approval.
const APPROVED_NAP: &str = concat!(
    "[[tools]]\nname = \"nap\"\ndescription = \"Naps\"\ninput_schema = { type = \"object\" }\ncommand = [\"",
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/tools/nap.sh\", \"RUNS\", \"0\"]\n[policy]\napprove = [\"nap\"]\n"
);

/// A cell that calls `nap` and reports what it got.
const NAP_CALL: &str =
    "try { return await nap({x: 1}) } catch (e) { return {code: e.code, message: e.message} }";

fn nap_runs(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("runs"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// The client capabilities of a 2026-07-28 client that answers form
/// elicitations (and, with `tasks`, takes tasks).
fn elicits(tasks: bool) -> Value {
    let mut capabilities = serde_json::json!({"elicitation": {"form": {}}});
    if tasks {
        capabilities["extensions"] = serde_json::json!({"io.modelcontextprotocol/tasks": {}});
    }
    capabilities
}

/// MCP 2026-07-28 approvals are multi round-trip requests: a call that
/// needs one parks the cell and `tools/call` answers `input_required` with
/// a form elicitation and a signed `requestState`. The retry with the
/// answer resumes the run on another host sharing the store, exactly once:
/// the tool runs once, a replay is refused, and so are a state presented
/// by another principal, with other arguments, or altered. A decline
/// rejects the call; a client without elicitation is never asked (the
/// call is denied).
#[test]
fn an_approval_is_an_input_required_round_trip_answered_once_on_any_host() {
    let (dir, hosts) = principal_hosts_with(
        "quickcell-mrtr",
        "alice token-a\nbob token-b\n",
        2,
        Some(APPROVED_NAP),
    );
    let (a, b) = (hosts[0].1, hosts[1].1);
    let exec = serde_json::json!({"name": "exec", "arguments": {"title": "nap", "code": NAP_CALL}});
    let asked = modern_request(a, "token-a", "tools/call", exec.clone(), elicits(false));
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{asked}");
    let (key, request) = requests.iter().next().unwrap();
    assert!(key.starts_with("approve-"), "{key}");
    assert_eq!(request["method"], "elicitation/create", "{asked}");
    let message = request["params"]["message"].as_str().unwrap();
    assert!(
        message.contains("call nap (policy approve = \"nap\") with these arguments: {\"x\":1}"),
        "{message}"
    );
    assert_eq!(
        request["params"]["requestedSchema"]["properties"]["approve"]["type"],
        "boolean"
    );
    let state = result["requestState"].as_str().unwrap().to_string();
    assert_eq!(nap_runs(&dir), 0, "nothing ran before the answer");
    let accept = serde_json::json!({key: {"action": "accept", "content": {"approve": true}}});
    let retry = |port: u16, token: &str, arguments: &Value, state: &str| {
        let mut params = serde_json::json!({"name": "exec", "arguments": arguments});
        params["inputResponses"] = accept.clone();
        params["requestState"] = Value::from(state);
        modern_request(port, token, "tools/call", params, elicits(false))
    };
    let arguments = &exec["arguments"];
    // Another principal, other arguments, an altered state: refused, and
    // the run stays as it was.
    let mut altered = state.clone();
    altered.pop();
    for (token, args, state) in [
        ("token-b", arguments.clone(), state.as_str()),
        (
            "token-a",
            serde_json::json!({"title": "nap", "code": "return 1"}),
            state.as_str(),
        ),
        ("token-a", arguments.clone(), altered.as_str()),
    ] {
        let refused = retry(b, token, &args, state);
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
    }
    assert_eq!(nap_runs(&dir), 0);
    // The answer, on the other host: the run resumes there and the call runs.
    let done = retry(b, "token-a", arguments, &state);
    assert_eq!(
        done["result"]["structuredContent"]["value"],
        serde_json::json!({"napped": {"x": 1}}),
        "{done}"
    );
    assert_eq!(nap_runs(&dir), 1);
    // A replay, on either host: refused; the tool does not run again.
    for port in [a, b] {
        let replayed = retry(port, "token-a", arguments, &state);
        assert_eq!(replayed["error"]["code"], -32602, "{replayed}");
        assert!(
            replayed["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("requestState was used already"),
            "{replayed}"
        );
    }
    assert_eq!(nap_runs(&dir), 1);
    // A decline rejects the call with its tool_error.
    let asked = modern_request(a, "token-a", "tools/call", exec.clone(), elicits(false));
    let key = asked["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let mut params = exec.clone();
    params["inputResponses"] = serde_json::json!({key: {"action": "decline"}});
    params["requestState"] = asked["result"]["requestState"].clone();
    let declined = modern_request(b, "token-a", "tools/call", params, elicits(false));
    assert_eq!(
        declined["result"]["structuredContent"]["value"]["message"],
        "Calling nap was declined by the approver (policy approve = \"nap\"): the user declined it",
        "{declined}"
    );
    // No elicitation declared: the call is denied, nobody is asked.
    let denied = modern_request(a, "token-a", "tools/call", exec, serde_json::json!({}));
    let message = denied["result"]["structuredContent"]["value"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("has no way to ask for one"), "{denied}");
    assert_eq!(nap_runs(&dir), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under the Tasks extension an approval makes the task `input_required`:
/// `tasks/get` carries the elicitation, `tasks/update` on another host
/// answers it, the task completes with the call's result, and a second
/// update changes nothing.
#[test]
fn a_task_asks_for_its_approval_and_tasks_update_answers_it() {
    let (dir, hosts) = principal_hosts_with(
        "quickcell-task-approval",
        "alice token-a\n",
        2,
        Some(APPROVED_NAP),
    );
    let ports = [hosts[0].1, hosts[1].1];
    // Several rounds, the hosts swapping roles: the host that created the
    // task polls it right after the other one answered, taking the run
    // over as the answer is applied; the answer is applied once.
    for round in 0..4 {
        let (a, b) = (ports[round % 2], ports[(round + 1) % 2]);
        let created = modern_request(
            a,
            "token-a",
            "tools/call",
            serde_json::json!({"name": "exec", "arguments": {"title": "nap", "code": NAP_CALL}}),
            elicits(true),
        );
        assert_eq!(created["result"]["resultType"], "task", "{created}");
        assert_eq!(created["result"]["status"], "input_required", "{created}");
        let task = created["result"]["taskId"].as_str().unwrap().to_string();
        let got = modern_request(
            b,
            "token-a",
            "tasks/get",
            serde_json::json!({"taskId": task}),
            elicits(true),
        );
        assert_eq!(got["result"]["status"], "input_required", "{got}");
        let requests = got["result"]["inputRequests"].as_object().unwrap();
        let (key, request) = requests.iter().next().unwrap();
        assert_eq!(request["method"], "elicitation/create", "{got}");
        assert_eq!(nap_runs(&dir), round);
        let update = serde_json::json!({"taskId": task, "inputResponses": {
            key: {"action": "accept", "content": {"approve": true}}, "unknown": {}}});
        let ack = modern_request(b, "token-a", "tasks/update", update.clone(), elicits(true));
        assert!(ack["result"].is_object(), "{ack}");
        let ended = task_end(a, "token-a", &task);
        assert_eq!(ended["result"]["status"], "completed", "{ended}");
        assert_eq!(
            ended["result"]["result"]["structuredContent"]["value"],
            serde_json::json!({"napped": {"x": 1}}),
            "{ended}"
        );
        // Answered already: acknowledged, nothing runs again.
        let again = modern_request(a, "token-a", "tasks/update", update, elicits(true));
        assert!(again["result"].is_object(), "{again}");
        assert_eq!(nap_runs(&dir), round + 1);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
