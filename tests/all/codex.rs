//! `quickcell codex-host` driven over pipes as Codex drives it: framed
//! JSON (a `u32` little-endian length, then the payload), the messages of
//! the Codex code-mode host protocol v1 in the shapes of the reference's
//! `host_tests.rs`.

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `quickcell codex-host` and the frames it sends.
struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    frames: mpsc::Receiver<Value>,
}

impl Host {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// `quickcell codex-host ARGS`.
    fn start_with(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_quickcell"))
            .arg("codex-host")
            .args(args)
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, frames) = mpsc::channel();
        std::thread::spawn(move || loop {
            let mut prefix = [0u8; 4];
            if stdout.read_exact(&mut prefix).is_err() {
                return;
            }
            let mut payload = vec![0u8; u32::from_le_bytes(prefix) as usize];
            if stdout.read_exact(&mut payload).is_err() {
                return;
            }
            let frame = serde_json::from_slice(&payload)
                .unwrap_or_else(|e| panic!("a frame that is not JSON ({e}): {payload:?}"));
            if tx.send(frame).is_err() {
                return;
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            frames,
        }
    }

    /// A host past the handshake, with `session-1` open.
    fn ready() -> Self {
        Self::ready_with(&[])
    }

    /// [`Host::ready`] with `quickcell codex-host ARGS`.
    fn ready_with(args: &[&str]) -> Self {
        let mut host = Self::start_with(args);
        host.send(&hello(
            &[1],
            &[],
            &["session-cell-execution-resource-limits"],
        ));
        assert_eq!(host.recv()["type"], "connection/ready");
        host.send(&request(
            1,
            json!({"method": "session/open", "sessionId": "session-1"}),
        ));
        assert_eq!(
            host.recv(),
            json!({"type": "operation/response", "id": 1, "result": {"status": "ok", "value": {"type": "session/ready", "sessionId": "session-1"}}})
        );
        host
    }

    fn send_bytes(&mut self, payload: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin
            .write_all(&(payload.len() as u32).to_le_bytes())
            .unwrap();
        stdin.write_all(payload).unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: &Value) {
        self.send_bytes(message.to_string().as_bytes());
    }

    fn recv(&self) -> Value {
        self.frames
            .recv_timeout(Duration::from_secs(30))
            .expect("a frame from the host within 30 s")
    }

    /// Whether the host sends nothing for `within`.
    fn quiet(&self, within: Duration) -> bool {
        self.frames.recv_timeout(within).is_err()
    }

    /// Closes stdin; the exit status.
    fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < until, "the host exits when stdin closes");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hello(versions: &[u32], required: &[&str], optional: &[&str]) -> Value {
    json!({"type": "connection/hello", "supportedVersions": versions, "requiredCapabilities": required, "optionalCapabilities": optional})
}

fn request(id: i64, request: Value) -> Value {
    json!({"type": "operation/request", "id": id, "request": request})
}

/// A `session/execute` of `source` in `session-1` with `tools`.
fn execute(id: i64, source: &str, tools: Value, yield_time_ms: u64) -> Value {
    request(
        id,
        json!({
            "method": "session/execute",
            "sessionId": "session-1",
            "request": {
                "tool_call_id": "call-1",
                "enabled_tools": tools,
                "source": source,
                "yield_time_ms": yield_time_ms,
                "max_output_tokens": null,
            },
        }),
    )
}

/// One nested tool, `lookup`, of the given kind.
fn lookup_tool(kind: &str) -> Value {
    json!([{
        "name": "lookup",
        "tool_name": {"name": "lookup", "namespace": "mcp__sample__"},
        "description": "Looks things up",
        "kind": kind,
        "input_schema": {"type": "object"},
        "output_schema": null,
    }])
}

fn started(id: i64, cell: &str) -> Value {
    json!({"type": "operation/response", "id": id, "result": {"status": "ok", "value": {"type": "execution/started", "cellId": cell}}})
}

fn closed(cell: &str) -> Value {
    json!({"type": "cell/closed", "sessionId": "session-1", "cellId": cell})
}

#[test]
fn the_handshake_accepts_version_1_and_refuses_what_it_cannot_do() {
    let mut host = Host::start();
    host.send(&hello(
        &[1, 2],
        &[],
        &[
            "session-cell-execution-resource-limits",
            "dual-websocket-v1",
        ],
    ));
    assert_eq!(
        host.recv(),
        json!({"type": "connection/ready", "selectedVersion": 1, "capabilities": ["session-cell-execution-resource-limits"]})
    );
    assert!(host.close().success());

    let refusals = [
        (
            hello(&[2], &[], &[]),
            json!({"type": "noCompatibleVersion", "supportedVersions": [1]}),
        ),
        (
            hello(&[1], &["dual-websocket-v1"], &[]),
            json!({"type": "missingRequiredCapability", "capability": "dual-websocket-v1"}),
        ),
        (
            request(1, json!({"method": "session/open", "sessionId": "s"})),
            json!({"type": "invalidHello", "message": "first message must be connection/hello"}),
        ),
    ];
    for (first, reason) in refusals {
        let mut host = Host::start();
        host.send(&first);
        assert_eq!(
            host.recv(),
            json!({"type": "connection/rejected", "reason": reason})
        );
        assert!(host.close().success());
    }
    // A hello with a field the protocol does not have is refused too.
    let mut host = Host::start();
    let mut extra = hello(&[1], &[], &[]);
    extra["extra"] = json!(true);
    host.send(&extra);
    let rejected = host.recv();
    assert_eq!(rejected["reason"]["type"], "invalidHello", "{rejected}");
    assert!(
        rejected["reason"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `extra`"),
        "{rejected}"
    );
}

#[test]
fn an_execute_runs_to_its_result_and_closes_the_cell() {
    let mut host = Host::ready();
    let sent = Instant::now();
    host.send(&execute(
        2,
        "text('hello'); text(1 + 1); const kept = 3;",
        json!([]),
        10_000,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    assert_eq!(
        host.recv(),
        json!({"type": "execute/initialResponse", "id": 2, "result": {"status": "ok", "value": {"Result": {
            "cell_id": "1",
            "content_items": [{"type": "input_text", "text": "hello"}, {"type": "input_text", "text": "2"}],
            "error_text": null,
        }}}})
    );
    eprintln!("round trip of a trivial execute: {:?}", sent.elapsed());
    assert_eq!(host.recv(), closed("1"));
    // A thrown error is the result's error text; exit() ends it well.
    host.send(&execute(
        3,
        "text('a'); throw new Error('boom')",
        json!([]),
        10_000,
    ));
    assert_eq!(host.recv(), started(3, "2"));
    let failed = host.recv();
    let result = &failed["result"]["value"]["Result"];
    assert_eq!(
        result["content_items"],
        json!([{"type": "input_text", "text": "a"}])
    );
    assert!(
        result["error_text"].as_str().unwrap().contains("boom"),
        "{failed}"
    );
    assert_eq!(host.recv(), closed("2"));
    host.send(&execute(
        4,
        "text('before'); exit(); text('after')",
        json!([]),
        10_000,
    ));
    assert_eq!(host.recv(), started(4, "3"));
    assert_eq!(
        host.recv()["result"]["value"]["Result"],
        json!({"cell_id": "3", "content_items": [{"type": "input_text", "text": "before"}], "error_text": null})
    );
    assert_eq!(host.recv(), closed("3"));
    assert!(host.close().success());
}

#[test]
fn a_nested_tool_call_goes_to_the_client_and_its_answer_resumes_the_cell() {
    let mut host = Host::ready();
    let sent = Instant::now();
    host.send(&execute(
        2,
        "const r = await tools.lookup({q: 1}); text(JSON.stringify(r)); text(ALL_TOOLS[0].name);",
        lookup_tool("function"),
        10_000,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    let delegated = host.recv();
    assert_eq!(delegated["type"], "delegate/request", "{delegated}");
    assert_eq!(delegated["sessionId"], "session-1");
    let invocation = &delegated["request"]["invocation"];
    assert_eq!(delegated["request"]["type"], "tool/invoke");
    assert_eq!(invocation["cell_id"], "1");
    assert_eq!(
        invocation["tool_name"],
        json!({"name": "lookup", "namespace": "mcp__sample__"})
    );
    assert_eq!(invocation["tool_kind"], "function");
    assert_eq!(invocation["input"], json!({"q": 1}));
    assert!(invocation["runtime_tool_call_id"].is_string());
    let id = delegated["id"].as_i64().unwrap();
    host.send(&json!({"type": "delegate/response", "id": id, "result": {"status": "ok", "value": {"type": "tool/result", "result": {"answer": 42}}}}));
    assert_eq!(
        host.recv()["result"]["value"]["Result"],
        json!({"cell_id": "1", "content_items": [
            {"type": "input_text", "text": "{\"answer\":42}"},
            {"type": "input_text", "text": "lookup"},
        ], "error_text": null})
    );
    eprintln!(
        "round trip of one delegated tool call: {:?}",
        sent.elapsed()
    );
    assert_eq!(host.recv(), closed("1"));
    // A failed call rejects with its message, a string.
    host.send(&execute(
        3,
        "try { await tools.lookup('x') } catch (e) { text(typeof e + ': ' + e) }",
        lookup_tool("freeform"),
        10_000,
    ));
    assert_eq!(host.recv(), started(3, "2"));
    let delegated = host.recv();
    assert_eq!(delegated["request"]["invocation"]["input"], "x");
    let id = delegated["id"].as_i64().unwrap();
    host.send(&json!({"type": "delegate/response", "id": id, "result": {"status": "error", "message": "delegate failed"}}));
    let text = host.recv()["result"]["value"]["Result"]["content_items"][0]["text"].clone();
    assert!(
        text.as_str().unwrap().starts_with("string: ")
            && text.as_str().unwrap().contains("delegate failed"),
        "{text}"
    );
    assert_eq!(host.recv(), closed("2"));
}

#[test]
fn a_cell_waiting_on_a_tool_yields_and_terminate_withdraws_its_call() {
    let mut host = Host::ready();
    host.send(&execute(
        2,
        "text('asked'); await tools.lookup({}); text('never');",
        lookup_tool("function"),
        300,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    let delegated = host.recv();
    let delegate_id = delegated["id"].as_i64().unwrap();
    assert_eq!(
        host.recv(),
        json!({"type": "execute/initialResponse", "id": 2, "result": {"status": "ok", "value": {"Yielded": {
            "cell_id": "1", "content_items": [{"type": "input_text", "text": "asked"}],
        }}}})
    );
    // A wait with nothing new yields again, empty.
    host.send(&request(3, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "1", "yield_time_ms": 100}})));
    assert_eq!(
        host.recv()["result"]["value"],
        json!({"type": "wait/completed", "outcome": {"LiveCell": {"Yielded": {"cell_id": "1", "content_items": []}}}})
    );
    host.send(&request(
        4,
        json!({"method": "session/terminate", "sessionId": "session-1", "cellId": "1"}),
    ));
    assert_eq!(
        host.recv(),
        json!({"type": "delegate/cancel", "id": delegate_id})
    );
    assert_eq!(
        host.recv(),
        json!({"type": "operation/response", "id": 4, "result": {"status": "ok", "value": {"type": "wait/completed", "outcome": {"LiveCell": {"Terminated": {"cell_id": "1", "content_items": []}}}}}})
    );
    assert_eq!(host.recv(), closed("1"));
    // The cell is gone.
    host.send(&request(5, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "1", "yield_time_ms": 100}})));
    assert_eq!(
        host.recv()["result"]["value"]["outcome"],
        json!({"MissingCell": {"Result": {"cell_id": "1", "content_items": [], "error_text": "exec cell 1 not found"}}})
    );
    // A late answer to the withdrawn call harms nothing.
    host.send(&json!({"type": "delegate/response", "id": delegate_id, "result": {"status": "ok", "value": {"type": "tool/result", "result": 1}}}));
    host.send(&execute(6, "text('still here')", json!([]), 10_000));
    assert_eq!(host.recv(), started(6, "2"));
    assert_eq!(
        host.recv()["result"]["value"]["Result"]["content_items"],
        json!([{"type": "input_text", "text": "still here"}])
    );
}

#[test]
fn bad_input_gets_an_error_and_the_connection_goes_on() {
    let mut host = Host::ready();
    // Not JSON at all: logged, nothing sent.
    host.send_bytes(b"{not json");
    assert!(host.quiet(Duration::from_millis(300)));
    // A request with an unknown field: an error response for its id.
    host.send(&request(
        2,
        json!({"method": "session/open", "sessionId": "session-2", "color": "red"}),
    ));
    let refused = host.recv();
    assert_eq!(refused["id"], 2);
    assert_eq!(refused["result"]["status"], "error");
    assert!(
        refused["result"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `color`"),
        "{refused}"
    );
    // An unknown method, an unknown session, a reused session id.
    host.send(&request(
        3,
        json!({"method": "session/dance", "sessionId": "session-1"}),
    ));
    assert_eq!(host.recv()["result"]["status"], "error");
    host.send(&request(
        4,
        json!({"method": "session/shutdown", "sessionId": "nope"}),
    ));
    assert_eq!(
        host.recv()["result"],
        json!({"status": "error", "message": "unknown code-mode session nope"})
    );
    host.send(&request(
        5,
        json!({"method": "session/open", "sessionId": "session-1"}),
    ));
    assert_eq!(
        host.recv()["result"],
        json!({"status": "error", "message": "code-mode session ID `session-1` was reused"})
    );
    // Session ids: 256 bytes are taken, 257 refused.
    host.send(&request(
        8,
        json!({"method": "session/open", "sessionId": "s".repeat(256)}),
    ));
    assert_eq!(host.recv()["result"]["status"], "ok");
    host.send(&request(
        9,
        json!({"method": "session/open", "sessionId": "s".repeat(257)}),
    ));
    assert_eq!(
        host.recv()["result"],
        json!({"status": "error", "message": "sessionId is over 256 bytes"})
    );
    // A delegate answer nobody asked for: ignored.
    host.send(&json!({"type": "delegate/response", "id": 999, "result": {"status": "ok", "value": {"type": "notification/delivered"}}}));
    // The session still works; shutdown closes its cells first.
    host.send(&execute(
        6,
        "await tools.lookup({})",
        lookup_tool("function"),
        100,
    ));
    assert_eq!(host.recv(), started(6, "1"));
    assert_eq!(host.recv()["type"], "delegate/request");
    assert_eq!(host.recv()["type"], "execute/initialResponse");
    host.send(&request(
        7,
        json!({"method": "session/shutdown", "sessionId": "session-1"}),
    ));
    let mut rest = vec![host.recv(), host.recv(), host.recv()];
    rest.retain(|m| m["type"] != "delegate/cancel");
    if rest.len() < 2 {
        rest.push(host.recv());
    }
    assert_eq!(rest[0], closed("1"));
    assert_eq!(
        rest[1],
        json!({"type": "operation/response", "id": 7, "result": {"status": "ok", "value": {"type": "session/closed", "sessionId": "session-1"}}})
    );
    assert!(host.close().success());
}

#[test]
fn the_codex_profile_stores_values_notifies_and_yields() {
    let mut host = Host::ready();
    host.send(&execute(
        2,
        "await store('k', {n: 1}); text('stored')",
        json!([]),
        10_000,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    assert_eq!(
        host.recv()["result"]["value"]["Result"]["error_text"],
        Value::Null
    );
    assert_eq!(host.recv(), closed("1"));
    host.send(&execute(
        3,
        "text(JSON.stringify(await load('k'))); await notify('halfway'); await yield_control(); text('done')",
        json!([]),
        10_000,
    ));
    assert_eq!(host.recv(), started(3, "2"));
    let notified = host.recv();
    assert_eq!(
        notified["request"],
        json!({"type": "notification/send", "callId": "call-1", "cellId": "2", "text": "halfway"})
    );
    let id = notified["id"].as_i64().unwrap();
    host.send(&json!({"type": "delegate/response", "id": id, "result": {"status": "ok", "value": {"type": "notification/delivered"}}}));
    assert_eq!(
        host.recv()["result"]["value"],
        json!({"Yielded": {"cell_id": "2", "content_items": [{"type": "input_text", "text": "{\"n\":1}"}]}})
    );
    host.send(&request(4, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "2", "yield_time_ms": 10000}})));
    assert_eq!(
        host.recv()["result"]["value"]["outcome"],
        json!({"LiveCell": {"Result": {"cell_id": "2", "content_items": [{"type": "input_text", "text": "done"}], "error_text": null}}})
    );
    assert_eq!(host.recv(), closed("2"));
}

/// Codex starts `codex-code-mode-host` with no arguments: quickcell linked
/// under that name serves the protocol.
#[test]
fn quickcell_run_as_codex_code_mode_host_serves_the_protocol() {
    let dir = std::env::temp_dir().join(format!("quickcell-codex-link-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("codex-code-mode-host");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_quickcell"), &link).unwrap();
    let mut child = Command::new(&link)
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let payload = hello(&[1], &[], &[]).to_string();
    {
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(&(payload.len() as u32).to_le_bytes())
            .unwrap();
        stdin.write_all(payload.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout[4..]).unwrap(),
        json!({"type": "connection/ready", "selectedVersion": 1, "capabilities": []})
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// With `--scope`, sessions outlive their host: a cell waiting on a nested
/// tool when its host is killed (SIGKILL), or when Codex closes stdin, is
/// answered by the next host that opens the session again — its parked run
/// resumes, the call goes out again, and the execute never runs twice.
#[test]
fn a_scoped_session_outlives_its_host() {
    let dir =
        std::env::temp_dir().join(format!("quickcell-codex-durable-{}", uuid::Uuid::new_v4()));
    let state = dir.join("state");
    let args = ["--scope", "team", "--state-dir", state.to_str().unwrap()];
    let source =
        "text('started'); const r = await tools.lookup({q: 1}); text('answer ' + r.answer);";
    for ending in ["SIGKILL", "stdin closed"] {
        let mut first = Host::ready_with(&args);
        let cell = if ending == "SIGKILL" { "1" } else { "3" };
        first.send(&execute(2, source, lookup_tool("function"), 200));
        assert_eq!(first.recv(), started(2, cell));
        assert_eq!(first.recv()["request"]["type"], "tool/invoke");
        assert_eq!(
            first.recv()["result"]["value"]["Yielded"]["content_items"],
            json!([{"type": "input_text", "text": "started"}])
        );
        if ending == "SIGKILL" {
            first.child.kill().unwrap();
            first.child.wait().unwrap();
        } else {
            assert!(first.close().success(), "{ending}");
        }

        let mut second = Host::ready_with(&args);
        second.send(&request(3, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": cell, "yield_time_ms": 20000}})));
        let delegated = second.recv();
        assert_eq!(
            delegated["type"], "delegate/request",
            "{ending}: {delegated}"
        );
        let invocation = &delegated["request"]["invocation"];
        assert_eq!(invocation["cell_id"], cell);
        assert_eq!(
            invocation["tool_name"],
            json!({"name": "lookup", "namespace": "mcp__sample__"})
        );
        assert_eq!(invocation["input"], json!({"q": 1}));
        let id = delegated["id"].as_i64().unwrap();
        second.send(&json!({"type": "delegate/response", "id": id, "result": {"status": "ok", "value": {"type": "tool/result", "result": {"answer": 42}}}}));
        // Only what came after the call: `started` is not written again.
        assert_eq!(
            second.recv()["result"]["value"]["outcome"],
            json!({"LiveCell": {"Result": {"cell_id": cell, "content_items": [{"type": "input_text", "text": "answer 42"}], "error_text": null}}}),
            "{ending}"
        );
        assert_eq!(second.recv(), closed(cell));
        // The session numbers its cells on.
        let next = if ending == "SIGKILL" { "2" } else { "4" };
        second.send(&execute(4, "text('next')", json!([]), 10_000));
        assert_eq!(second.recv(), started(4, next));
        assert_eq!(second.recv()["type"], "execute/initialResponse");
        assert_eq!(second.recv(), closed(next));
        assert!(second.close().success());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// As in Codex, a timer still pending when the source ends does not keep
/// the cell alive (quickcell's own timers would), and neither does a
/// nested tool call nobody awaits.
#[test]
fn pending_timers_and_unawaited_calls_do_not_keep_a_codex_cell_alive() {
    let mut host = Host::ready();
    host.send(&execute(
        2,
        "setTimeout(() => text('late'), 60000); const t = setTimeout(() => text('cleared'), 10); clearTimeout(t); await new Promise((r) => setTimeout(r, 10)); text('done')",
        json!([]),
        30_000,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    assert_eq!(
        host.recv()["result"]["value"]["Result"],
        json!({"cell_id": "1", "content_items": [{"type": "input_text", "text": "done"}], "error_text": null})
    );
    assert_eq!(host.recv(), closed("1"));
    host.send(&execute(
        3,
        "tools.lookup({}); text('done')",
        lookup_tool("function"),
        30_000,
    ));
    assert_eq!(host.recv(), started(3, "2"));
    // The call goes out (Codex would send it too), and the cell ends
    // without its answer.
    assert_eq!(host.recv()["request"]["type"], "tool/invoke");
    assert_eq!(
        host.recv()["result"]["value"]["Result"],
        json!({"cell_id": "2", "content_items": [{"type": "input_text", "text": "done"}], "error_text": null})
    );
    assert_eq!(host.recv(), closed("2"));
}

/// A `// @exec:` pragma left in the source (Codex strips it) sets the
/// yield time; a bad one is refused as Codex refuses it.
#[test]
fn a_pragma_left_in_the_source_sets_the_yield_time() {
    let mut host = Host::ready();
    host.send(&execute(
        2,
        "// @exec: {\"yield_time_ms\": 100}\ntext('waiting'); await tools.lookup({});",
        lookup_tool("function"),
        60_000,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    assert_eq!(host.recv()["type"], "delegate/request");
    // Yielded after 100 ms, not the request's 60 s.
    assert_eq!(
        host.recv()["result"]["value"]["Yielded"]["content_items"],
        json!([{"type": "input_text", "text": "waiting"}])
    );
    host.send(&execute(
        3,
        "// @exec: {\"yield\": 1}\ntext(1)",
        json!([]),
        10_000,
    ));
    assert_eq!(
        host.recv()["result"],
        json!({"status": "error", "message": "exec pragma only supports `yield_time_ms` and `max_output_tokens`; got `yield`"})
    );
}

/// Two hosts on one PostgreSQL store, the same scope: a cell host A
/// started, parked on a nested tool, is answered through host B while A
/// still runs, and B's cell numbering goes on from A's.
#[test]
fn a_scoped_session_moves_between_hosts_on_one_postgres_store() {
    let url = quickcell::testing::postgres_database();
    let key = std::env::temp_dir().join(format!("quickcell-codex-key-{}", uuid::Uuid::new_v4()));
    std::fs::write(&key, uuid::Uuid::new_v4().simple().to_string()).unwrap();
    let args = [
        "--scope",
        "shared",
        "--state-url",
        url.as_str(),
        "--state-key-file",
        key.to_str().unwrap(),
    ];
    let mut a = Host::ready_with(&args);
    a.send(&execute(
        2,
        "await store('k', 'from A'); text('on A'); const r = await tools.lookup({}); text(r + ' ' + await load('k'));",
        lookup_tool("function"),
        200,
    ));
    assert_eq!(a.recv(), started(2, "1"));
    assert_eq!(a.recv()["type"], "delegate/request");
    assert_eq!(a.recv()["type"], "execute/initialResponse");

    let mut b = Host::ready_with(&args);
    b.send(&request(3, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "1", "yield_time_ms": 20000}})));
    let delegated = b.recv();
    assert_eq!(
        delegated["request"]["invocation"]["cell_id"], "1",
        "{delegated}"
    );
    let id = delegated["id"].as_i64().unwrap();
    b.send(&json!({"type": "delegate/response", "id": id, "result": {"status": "ok", "value": {"type": "tool/result", "result": "answered on B"}}}));
    assert_eq!(
        b.recv()["result"]["value"]["outcome"],
        json!({"LiveCell": {"Result": {"cell_id": "1", "content_items": [{"type": "input_text", "text": "answered on B from A"}], "error_text": null}}})
    );
    assert_eq!(b.recv(), closed("1"));
    b.send(&execute(4, "text('second')", json!([]), 10_000));
    assert_eq!(b.recv(), started(4, "2"));
    drop(a);
    std::fs::remove_file(&key).ok();
}

/// `session/terminate` while the execute's first observation still waits
/// (what Codex sends when a turn is interrupted): the call is withdrawn,
/// the execute's initial response comes before the cell's one
/// `cell/closed`, and the terminate is answered.
#[test]
fn terminate_during_the_first_observation_keeps_the_order() {
    let mut host = Host::ready();
    host.send(&execute(
        2,
        "text('a'); await tools.lookup({})",
        lookup_tool("function"),
        30_000,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    let delegate_id = host.recv()["id"].as_i64().unwrap();
    host.send(&request(
        3,
        json!({"method": "session/terminate", "sessionId": "session-1", "cellId": "1"}),
    ));
    let frames: Vec<Value> = (0..4).map(|_| host.recv()).collect();
    let at = |pred: &dyn Fn(&Value) -> bool| frames.iter().position(pred);
    let cancel = at(&|f| f["type"] == "delegate/cancel").expect("delegate/cancel");
    assert_eq!(frames[cancel]["id"], delegate_id);
    let initial = at(&|f| f["type"] == "execute/initialResponse").expect("initial response");
    let closed_at = at(&|f| f["type"] == "cell/closed").expect("cell/closed");
    let answered =
        at(&|f| f["type"] == "operation/response" && f["id"] == 3).expect("terminate answered");
    assert!(initial < closed_at, "{frames:?}");
    assert_eq!(
        frames[initial]["result"]["value"]["Terminated"]["content_items"],
        json!([{"type": "input_text", "text": "a"}]),
        "{frames:?}"
    );
    assert_eq!(frames[answered]["result"]["status"], "ok", "{frames:?}");
    // Exactly one cell/closed.
    assert!(host.quiet(Duration::from_millis(300)));
}

/// Output can pass for an image only when the profile's `image()` wrote
/// it, and a tool description with U+2028 breaks nothing.
#[test]
fn only_image_makes_images_and_descriptions_stay_strings() {
    let mut host = Host::ready();
    let tools = json!([{
        "name": "odd",
        "tool_name": {"name": "odd", "namespace": null},
        "description": "line\u{2028}text('injected')//\u{2029}end",
        "kind": "function",
        "input_schema": null,
        "output_schema": null,
    }]);
    host.send(&execute(
        2,
        "json({'codex:image': {type: 'image', image_url: 'data:x', detail: 'bogus'}}); image('data:image/png;base64,AA', 'low'); text(ALL_TOOLS[0].description.length > 0)",
        tools,
        10_000,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    let items = host.recv()["result"]["value"]["Result"]["content_items"].clone();
    assert_eq!(items[0]["type"], "input_text", "{items}");
    assert_eq!(
        items[1],
        json!({"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"})
    );
    assert_eq!(items[2], json!({"type": "input_text", "text": "true"}));
    assert_eq!(
        items.as_array().unwrap().len(),
        3,
        "nothing injected: {items}"
    );
}

/// A client that sends requests but never reads: the host's queue fills,
/// and after the write stall the host closes the connection and exits
/// rather than waiting forever.
#[test]
fn a_client_that_stops_reading_is_let_go() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .arg("codex-host")
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    // Written from a thread of its own: once the host lets the client go,
    // the writes fail. Stdin stays open: only the stall ends the
    // connection.
    std::thread::spawn(move || {
        let mut stdin = stdin;
        let mut frame = |message: Value| -> std::io::Result<()> {
            let payload = message.to_string();
            stdin.write_all(&(payload.len() as u32).to_le_bytes())?;
            stdin.write_all(payload.as_bytes())
        };
        frame(hello(&[1], &[], &[]))?;
        // Big error replies (each names the unknown field) fill the pipe
        // and the host's queue: nobody reads stdout.
        let field = "f".repeat(60_000);
        for id in 1..400 {
            let mut open = request(
                id,
                json!({"method": "session/open", "sessionId": format!("s{id}")}),
            );
            open["request"][field.as_str()] = json!(1);
            frame(open)?;
        }
        std::thread::sleep(Duration::from_secs(120));
        std::io::Result::Ok(())
    });
    let until = Instant::now() + Duration::from_secs(100);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < until, "the host let the stalled client go");
        std::thread::sleep(Duration::from_millis(100));
    }
}
