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
    /// Whether runtime responses carry `code_mode_host_duration_ns`
    /// (checked, then taken out, by [`Host::recv`]).
    durations: bool,
}

impl Host {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// `quickcell codex-host ARGS`.
    fn start_with(args: &[&str]) -> Self {
        let mut all = vec!["codex-host"];
        all.extend_from_slice(args);
        Self::start_program(env!("CARGO_BIN_EXE_quickcell"), &all)
    }

    /// `PROGRAM ARGS`, a code-mode host.
    fn start_program(program: &str, args: &[&str]) -> Self {
        let mut child = Command::new(program)
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
            durations: !args.contains(&"--no-host-duration"),
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

    /// The next frame, its runtime responses' `code_mode_host_duration_ns`
    /// checked (there, a whole number, when the host reports them; absent
    /// otherwise) and taken out.
    fn recv(&self) -> Value {
        let mut frame = self.recv_timed();
        take_durations(&mut frame, self.durations);
        frame
    }

    /// The next frame as the host sent it.
    fn recv_timed(&self) -> Value {
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

/// Takes `code_mode_host_duration_ns` (and a `Result`'s
/// `result_buffered_for_ns`) out of every runtime response in `frame` (an
/// object with `cell_id` and `content_items`), asserting they are there
/// as whole numbers when `expected`, and absent otherwise.
fn take_durations(frame: &mut Value, expected: bool) {
    match frame {
        Value::Object(object) => {
            if object.contains_key("cell_id") && object.contains_key("content_items") {
                let mut fields = vec!["code_mode_host_duration_ns"];
                if object.contains_key("error_text") {
                    fields.push("result_buffered_for_ns");
                }
                for field in fields {
                    let duration = object.remove(field);
                    if expected {
                        assert!(
                            duration.as_ref().is_some_and(Value::is_u64),
                            "a runtime response without {field}: {object:?}"
                        );
                    } else {
                        assert_eq!(duration, None, "an unwanted {field} in {object:?}");
                    }
                }
            }
            object
                .values_mut()
                .for_each(|v| take_durations(v, expected));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| take_durations(v, expected)),
        _ => {}
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
    assert_eq!(invocation["runtime_tool_call_id"], "tool-1");
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
    // `store` and `load` are synchronous, as in Codex; `load` returns a
    // copy; a `__proto__` key is a key.
    host.send(&execute(
        2,
        "store('k', {n: 1}); store('proto', JSON.parse('{\"__proto__\": {\"x\": 1}}')); store('gone', 1); store('gone', undefined); \
         const copy = load('k'); copy.n = 2; text(JSON.stringify([load('k'), load('gone'), typeof load('missing')]))",
        json!([]),
        10_000,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    assert_eq!(
        host.recv()["result"]["value"]["Result"],
        json!({"cell_id": "1", "content_items": [{"type": "input_text", "text": "[{\"n\":1},null,\"undefined\"]"}], "error_text": null})
    );
    assert_eq!(host.recv(), closed("1"));
    host.send(&execute(
        3,
        "text(JSON.stringify(load('k'))); text(Object.keys(load('proto')).join()); await notify('halfway'); await yield_control(); text('done')",
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
        json!({"Yielded": {"cell_id": "2", "content_items": [{"type": "input_text", "text": "{\"n\":1}"}, {"type": "input_text", "text": "__proto__"}]}})
    );
    host.send(&request(4, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "2", "yield_time_ms": 10000}})));
    assert_eq!(
        host.recv()["result"]["value"]["outcome"],
        json!({"LiveCell": {"Result": {"cell_id": "2", "content_items": [{"type": "input_text", "text": "done"}], "error_text": null}}})
    );
    assert_eq!(host.recv(), closed("2"));
    // A write past what loads synchronously (64 Ki characters) is
    // refused at once; nothing is stored.
    host.send(&execute(
        5,
        "text('before'); try { store('k', 'x'.repeat(70000)); } catch (e) { text(e.name + ': ' + e.message); }",
        json!([]),
        10_000,
    ));
    assert_eq!(host.recv(), started(5, "3"));
    let refused = host.recv()["result"]["value"]["Result"].clone();
    assert_eq!(refused["error_text"], Value::Null, "{refused}");
    assert!(
        refused["content_items"][1]["text"]
            .as_str()
            .unwrap_or_default()
            .starts_with("RangeError: store: the session's values would be 70"),
        "{refused}"
    );
    assert_eq!(host.recv(), closed("3"));
    // Keys as quickcell's store takes them.
    host.send(&execute(6, "store('', 1)", json!([]), 10_000));
    assert_eq!(host.recv(), started(6, "4"));
    assert!(host.recv()["result"]["value"]["Result"]["error_text"]
        .as_str()
        .unwrap_or_default()
        .contains("store keys must be strings of 1 to 256 characters"));
    assert_eq!(host.recv(), closed("4"));
    host.send(&execute(
        7,
        "text(JSON.stringify(load('k')))",
        json!([]),
        10_000,
    ));
    assert_eq!(host.recv(), started(7, "5"));
    assert_eq!(
        host.recv()["result"]["value"]["Result"]["content_items"],
        json!([{"type": "input_text", "text": "{\"n\":1}"}])
    );
}

/// Two cells running at once can together store more than loads
/// synchronously: the values past it are named, `load` refuses them with
/// a clear error, and deleting one works.
#[test]
fn values_past_the_synchronous_load_budget_are_refused_by_name() {
    let mut host = Host::ready();
    // Cell 1 stores `a` and waits on a tool; cell 2 stores `b` and ends.
    host.send(&execute(
        2,
        "store('a', 'x'.repeat(40000)); await tools.lookup({});",
        lookup_tool("function"),
        100,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    let delegated = host.recv();
    assert_eq!(delegated["type"], "delegate/request");
    assert!(host.recv()["result"]["value"]["Yielded"].is_object());
    host.send(&execute(
        3,
        "store('b', 'y'.repeat(40000));",
        json!([]),
        10_000,
    ));
    assert_eq!(host.recv(), started(3, "2"));
    assert_eq!(
        host.recv()["result"]["value"]["Result"]["error_text"],
        Value::Null
    );
    assert_eq!(host.recv(), closed("2"));
    host.send(&json!({"type": "delegate/response", "id": delegated["id"], "result": {"status": "ok", "value": {"type": "tool/result", "result": 1}}}));
    host.send(&request(4, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "1", "yield_time_ms": 10_000}})));
    assert_eq!(
        host.recv()["result"]["value"]["outcome"]["LiveCell"]["Result"]["error_text"],
        Value::Null
    );
    assert_eq!(host.recv(), closed("1"));
    // 80,000 characters stored: `a` loads, `b` is named past the budget.
    host.send(&execute(
        5,
        "text(load('a').length); try { load('b'); } catch (e) { text(e.name + ': ' + e.message); } store('b', undefined); text(String(load('b')));",
        json!([]),
        10_000,
    ));
    assert_eq!(host.recv(), started(5, "3"));
    let out = host.recv()["result"]["value"]["Result"].clone();
    let texts: Vec<&str> = out["content_items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["text"].as_str())
        .collect();
    assert_eq!(texts[0], "40000", "{out}");
    assert!(
        texts[1]
            .starts_with("RangeError: load: the stored value \"b\" is past the 65536 characters"),
        "{out}"
    );
    assert_eq!(texts[2], "undefined", "{out}");
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

#[test]
fn runtime_responses_report_the_host_s_duration_unless_told_not_to() {
    // A wait that yields after 300 ms took the host at least that long.
    let mut host = Host::ready();
    host.send(&execute(
        2,
        "await tools.lookup({});",
        lookup_tool("function"),
        100,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    assert_eq!(host.recv()["type"], "delegate/request");
    let initial = host.recv_timed();
    assert!(initial["result"]["value"]["Yielded"]["code_mode_host_duration_ns"].is_u64());
    host.send(&request(3, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "1", "yield_time_ms": 300}})));
    let waited = host.recv_timed();
    let nanos = waited["result"]["value"]["outcome"]["LiveCell"]["Yielded"]
        ["code_mode_host_duration_ns"]
        .as_u64()
        .unwrap();
    assert!(nanos >= 300_000_000, "{nanos} ns");
    // A result delivered while observed was not buffered; one that waited
    // a second for its wait was, at least that long.
    host.send(&execute(4, "text(1)", json!([]), 10_000));
    assert_eq!(host.recv(), started(4, "2"));
    let live = host.recv_timed();
    assert_eq!(
        live["result"]["value"]["Result"]["result_buffered_for_ns"],
        0
    );
    assert_eq!(host.recv(), closed("2"));
    host.send(&execute(
        5,
        "await new Promise((r) => setTimeout(r, 100)); text(2)",
        json!([]),
        0,
    ));
    assert_eq!(host.recv(), started(5, "3"));
    assert!(host.recv()["result"]["value"]["Yielded"].is_object());
    std::thread::sleep(Duration::from_millis(1_500));
    host.send(&request(6, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "3", "yield_time_ms": 10_000}})));
    let buffered = host.recv_timed()["result"]["value"]["outcome"]["LiveCell"]["Result"]
        ["result_buffered_for_ns"]
        .as_u64()
        .unwrap();
    assert!(buffered >= 1_000_000_000, "{buffered} ns");
    // For Codex up to 0.151, which refuses the field: none (`recv` checks).
    let mut host = Host::ready_with(&["--no-host-duration"]);
    host.send(&execute(2, "text(1)", json!([]), 10_000));
    assert_eq!(host.recv(), started(2, "1"));
    assert_eq!(
        host.recv()["result"]["value"],
        json!({"Result": {"cell_id": "1", "content_items": [{"type": "input_text", "text": "1"}], "error_text": null}})
    );
}

#[test]
fn operation_yield_ends_an_observation_and_the_cell_goes_on() {
    let mut host = Host::start();
    host.send(&hello(&[1], &[], &["yield-observation"]));
    assert_eq!(
        host.recv(),
        json!({"type": "connection/ready", "selectedVersion": 1, "capabilities": ["yield-observation"]})
    );
    host.send(&request(
        1,
        json!({"method": "session/open", "sessionId": "session-1"}),
    ));
    assert_eq!(host.recv()["result"]["status"], "ok");
    // The execute would observe for 300 s; the yield ends that at once.
    host.send(&execute(
        2,
        "text('asked'); const got = await tools.lookup({}); text(`got ${got}`);",
        lookup_tool("function"),
        300_000,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    let delegated = host.recv();
    assert_eq!(delegated["type"], "delegate/request");
    host.send(&json!({"type": "operation/yield", "id": 2}));
    assert_eq!(
        host.recv(),
        json!({"type": "execute/initialResponse", "id": 2, "result": {"status": "ok", "value": {"Yielded": {
            "cell_id": "1", "content_items": [{"type": "input_text", "text": "asked"}],
        }}}})
    );
    // So does a wait's.
    host.send(&request(3, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "1", "yield_time_ms": 300_000}})));
    host.send(&json!({"type": "operation/yield", "id": 3}));
    assert_eq!(
        host.recv()["result"]["value"],
        json!({"type": "wait/completed", "outcome": {"LiveCell": {"Yielded": {"cell_id": "1", "content_items": []}}}})
    );
    // The cell went on waiting: the answer completes it.
    host.send(&json!({"type": "delegate/response", "id": delegated["id"], "result": {"status": "ok", "value": {"type": "tool/result", "result": 7}}}));
    host.send(&request(4, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "1", "yield_time_ms": 300_000}})));
    assert_eq!(
        host.recv()["result"]["value"]["outcome"],
        json!({"LiveCell": {"Result": {"cell_id": "1", "content_items": [{"type": "input_text", "text": "got 7"}], "error_text": null}}})
    );
    assert_eq!(host.recv(), closed("1"));
}

#[test]
fn operation_yield_without_the_capability_is_ignored() {
    let mut host = Host::ready();
    host.send(&execute(
        2,
        "await tools.lookup({});",
        lookup_tool("function"),
        1_500,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    assert_eq!(host.recv()["type"], "delegate/request");
    let sent = Instant::now();
    host.send(&json!({"type": "operation/yield", "id": 2}));
    // The observation runs its 1.5 s: the yield did not end it.
    assert_eq!(host.recv()["type"], "execute/initialResponse");
    assert!(sent.elapsed() >= Duration::from_millis(1_000));
}

#[test]
fn cell_execution_limits_cap_the_heap_and_the_yield_of_a_session() {
    let mut host = Host::ready();
    // The heap cap and the yield cap in sessions of their own: a 200 ms
    // yield cap would end the heap test's observation early on a busy
    // machine.
    host.send(&request(
        2,
        json!({"method": "session/open", "sessionId": "small", "cellExecutionLimits": {"maxHeapSizeBytes": 4_194_304}}),
    ));
    assert_eq!(host.recv()["result"]["status"], "ok");
    host.send(&request(
        20,
        json!({"method": "session/open", "sessionId": "brief", "cellExecutionLimits": {"maxYieldTimeMs": 200}}),
    ));
    assert_eq!(host.recv()["result"]["status"], "ok");
    // About 10 MB of objects: over the session's 4 MiB, within the host's
    // own 64 MiB.
    let source =
        "const a = []; for (let i = 0; i < 200000; i++) a.push({i, s: 'x' + i}); text(a.length);";
    let in_session = |id: i64, session: &str, source: &str, yield_time_ms: u64| {
        request(
            id,
            json!({"method": "session/execute", "sessionId": session, "request": {
                "tool_call_id": format!("call-{id}"), "enabled_tools": lookup_tool("function"), "source": source,
                "yield_time_ms": yield_time_ms, "max_output_tokens": null,
            }}),
        )
    };
    host.send(&in_session(3, "small", source, 10_000));
    assert_eq!(host.recv()["type"], "operation/response");
    let response = host.recv();
    let capped = response["result"]["value"]["Result"].clone();
    let error = capped["error_text"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(error.contains("memory"), "{response}");
    assert_eq!(host.recv()["type"], "cell/closed");
    host.send(&in_session(4, "session-1", source, 10_000));
    assert_eq!(host.recv()["type"], "operation/response");
    assert_eq!(
        host.recv()["result"]["value"]["Result"],
        json!({"cell_id": "1", "content_items": [{"type": "input_text", "text": "200000"}], "error_text": null})
    );
    assert_eq!(host.recv()["type"], "cell/closed");
    // The yield cap: a 60 s observation of a parked cell ends at 200 ms.
    host.send(&in_session(5, "brief", "await tools.lookup({});", 60_000));
    assert_eq!(host.recv()["type"], "operation/response");
    assert_eq!(host.recv()["type"], "delegate/request");
    assert!(host.recv()["result"]["value"]["Yielded"].is_object());
    // A heap limit no cell can start under is refused, naming the floor.
    host.send(&request(
        6,
        json!({"method": "session/open", "sessionId": "tiny", "cellExecutionLimits": {"maxHeapSizeBytes": 1000}}),
    ));
    let refused = host.recv();
    assert_eq!(refused["result"]["status"], "error");
    assert!(
        refused["result"]["message"]
            .as_str()
            .unwrap()
            .contains("maxHeapSizeBytes 1000 is below the 1048576 bytes"),
        "{refused}"
    );
}

/// A cell parked on Codex's answer does not expire while the host waits
/// for it: here the answer comes after twice the snapshot TTL.
#[test]
fn a_cell_waiting_on_codex_outlives_the_snapshot_ttl() {
    let dir = std::env::temp_dir().join(format!("quickcell-codex-ttl-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("quickcell.toml");
    std::fs::write(&config, "[limits]\nsnapshot_ttl_seconds = 2\n").unwrap();
    let state = dir.join("state");
    let mut host = Host::ready_with(&[
        "--config",
        config.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    host.send(&execute(
        2,
        "const v = await tools.lookup({}); text(`got ${v}`);",
        lookup_tool("function"),
        100,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    let delegated = host.recv();
    assert_eq!(delegated["type"], "delegate/request");
    assert!(host.recv()["result"]["value"]["Yielded"].is_object());
    std::thread::sleep(Duration::from_secs(5));
    host.send(&json!({"type": "delegate/response", "id": delegated["id"], "result": {"status": "ok", "value": {"type": "tool/result", "result": 7}}}));
    host.send(&request(3, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "1", "yield_time_ms": 20_000}})));
    assert_eq!(
        host.recv()["result"]["value"]["outcome"],
        json!({"LiveCell": {"Result": {"cell_id": "1", "content_items": [{"type": "input_text", "text": "got 7"}], "error_text": null}}})
    );
    drop(host);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Codex CLI itself (from npm, installed by `scripts/setup-tests` into
/// `.npm-codex`) runs a code-mode cell through `quickcell codex-host`: its
/// `exec` tool call goes to quickcell, the cell's nested tool call goes
/// back to Codex and its answer resumes the cell, and the output reaches
/// the model. No model can be reached here, so a scripted stand-in for the
/// Responses API (`fixtures/codex/responses_model.py`) asks for the cell.
#[test]
fn the_codex_cli_runs_its_code_mode_cells_on_quickcell() {
    let package = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/.npm-codex/node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/bin/codex"
    );
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        eprintln!("skipped: the Codex CLI is installed for Linux x86-64 only");
        return;
    }
    assert!(
        std::path::Path::new(package).exists(),
        "{package} is missing: run scripts/setup-tests"
    );
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("codex-cli-{}", uuid::Uuid::new_v4()));
    let (bin, home, work) = (dir.join("bin"), dir.join("home"), dir.join("work"));
    for d in [&bin, &home, &work] {
        std::fs::create_dir_all(d).unwrap();
    }
    // Codex starts the `codex-code-mode-host` next to its own binary.
    let codex = bin.join("codex");
    if std::fs::hard_link(package, &codex).is_err() {
        std::fs::copy(package, &codex).unwrap();
    }
    let host = bin.join("codex-code-mode-host");
    std::fs::write(
        &host,
        format!(
            "#!/bin/sh\nexec '{}' codex-host --state-dir '{}' \"$@\"\n",
            env!("CARGO_BIN_EXE_quickcell"),
            dir.join("state").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&host, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // The model asks for one cell, then ends the turn.
    let cell = "text('typeof catalog: ' + typeof catalog);\nconst goal = await tools.get_goal({});\ntext('goal: ' + JSON.stringify(goal));\nstore('k', 41);\ntext(load('k') + 1);\n";
    let script = dir.join("script.json");
    std::fs::write(
        &script,
        json!([[{"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_exec_1", "name": "exec", "input": cell}]]).to_string(),
    )
    .unwrap();
    let requests = dir.join("requests.jsonl");
    let mut model = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/codex/responses_model.py"
        ))
        .arg(&script)
        .arg(&requests)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(model.stdout.take().unwrap()),
        &mut port,
    )
    .unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model = \"gpt-5.1-codex\"\nmodel_provider = \"scripted\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\nsuppress_unstable_features_warning = true\n\
             [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nwire_api = \"responses\"\nrequires_openai_auth = false\n\
             [features]\ncode_mode = true\ncode_mode_host = true\ncode_mode_host_grpc = false\n",
            port.trim()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let mut run = Command::new(&codex)
        .args(["exec", "--skip-git-repo-check", "run the cell"])
        .env("CODEX_HOME", &home)
        .current_dir(&work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > until {
            let _ = run.kill();
            panic!("codex exec did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "codex exec with one quickcell cell: {:?}",
        started.elapsed()
    );
    let _ = model.kill();
    let _ = model.wait();
    let mut stderr = String::new();
    run.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "codex exec failed: {stderr}");
    // The request after the cell carries its output to the model.
    let log = std::fs::read_to_string(&requests).unwrap();
    let output: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .flat_map(|r| r["body"]["input"].as_array().cloned().unwrap_or_default())
        .filter(|item| {
            item["type"] == "custom_tool_call_output" && item["call_id"] == "call_exec_1"
        })
        .collect();
    let texts: Vec<&str> = output
        .first()
        .unwrap_or_else(|| panic!("no cell output reached the model: {stderr}"))["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|item| item["text"].as_str())
        .collect();
    // `catalog` is quickcell's own global: the cell ran in quickcell.
    assert!(texts.contains(&"typeof catalog: object"), "{texts:?}");
    // The nested tool ran in Codex, and its answer resumed the cell.
    assert!(
        texts.iter().any(|t| t.starts_with("goal: {\"goal\":null")),
        "{texts:?}"
    );
    assert!(texts.contains(&"42"), "{texts:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Codex's gRPC transport (`--listen grpc+stdio://`, its default from
/// about 0.170) is refused with the setting that turns it off.
#[test]
fn codex_s_grpc_transport_is_refused_with_the_setting_that_turns_it_off() {
    let out = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(["codex-host", "--listen", "grpc+stdio://"])
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("set `code_mode_host_grpc = false` under `[features]`"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// Calls a cell makes together go to the client in the order it made
/// them, numbered per cell as Codex's own host numbers them.
#[test]
fn nested_calls_made_together_go_out_in_order() {
    let mut host = Host::ready();
    host.send(&execute(
        2,
        "const r = await Promise.all([1, 2, 3].map((n) => tools.lookup({n}))); text(r.join());",
        lookup_tool("function"),
        10_000,
    ));
    assert_eq!(host.recv(), started(2, "1"));
    let sent: Vec<Value> = (0..3).map(|_| host.recv()).collect();
    let order: Vec<(Value, Value)> = sent
        .iter()
        .map(|d| {
            let invocation = &d["request"]["invocation"];
            (
                invocation["input"]["n"].clone(),
                invocation["runtime_tool_call_id"].clone(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            (json!(1), json!("tool-1")),
            (json!(2), json!("tool-2")),
            (json!(3), json!("tool-3"))
        ]
    );
    // Answered in reverse, each answer still reaches its own call.
    for d in sent.iter().rev() {
        let n = d["request"]["invocation"]["input"]["n"].as_i64().unwrap();
        host.send(&json!({"type": "delegate/response", "id": d["id"], "result": {"status": "ok", "value": {"type": "tool/result", "result": n * 10}}}));
    }
    assert_eq!(
        host.recv()["result"]["value"]["Result"]["content_items"],
        json!([{"type": "input_text", "text": "10,20,30"}])
    );
}

/// The same frames to Codex's own host (`codex-code-mode-host` of the
/// Codex CLI package in `.npm-codex`) and to quickcell get the same
/// answers, timings aside: the handshake, a cell to its result, a nested
/// call answered, a missing cell, a terminate with a call pending, an
/// unknown session, the shutdown.
#[test]
fn quickcell_answers_as_codex_s_own_host_does() {
    let reference = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/.npm-codex/node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/bin/codex-code-mode-host"
    );
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        eprintln!("skipped: the Codex CLI is installed for Linux x86-64 only");
        return;
    }
    assert!(
        std::path::Path::new(reference).exists(),
        "{reference} is missing: run scripts/setup-tests"
    );
    let conversation = |mut host: Host| -> Vec<Value> {
        let mut seen = Vec::new();
        fn take(host: &Host, seen: &mut Vec<Value>, n: usize) {
            for _ in 0..n {
                let mut frame = host.recv_timed();
                normalize(&mut frame);
                seen.push(frame);
            }
        }
        host.send(&hello(
            &[1],
            &[],
            &[
                "session-cell-execution-resource-limits",
                "yield-observation",
            ],
        ));
        take(&host, &mut seen, 1);
        host.send(&request(
            1,
            json!({"method": "session/open", "sessionId": "session-1", "cellExecutionLimits": {"maxYieldTimeMs": 60_000}}),
        ));
        take(&host, &mut seen, 1);
        host.send(&execute(
            2,
            "text('hello'); text(2); text({a: [1]})",
            json!([]),
            10_000,
        ));
        take(&host, &mut seen, 3);
        host.send(&execute(
            3,
            "text('asked'); const v = await tools.lookup({q: 1}); text(`got ${v}`);",
            lookup_tool("function"),
            300,
        ));
        take(&host, &mut seen, 3);
        let delegate_id = seen[seen.len() - 2]["id"].clone();
        host.send(&json!({"type": "delegate/response", "id": delegate_id, "result": {"status": "ok", "value": {"type": "tool/result", "result": 7}}}));
        host.send(&request(4, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "2", "yield_time_ms": 10_000}})));
        take(&host, &mut seen, 2);
        host.send(&request(5, json!({"method": "session/wait", "sessionId": "session-1", "request": {"cell_id": "99", "yield_time_ms": 100}})));
        take(&host, &mut seen, 1);
        host.send(&execute(
            6,
            "await tools.lookup({});",
            lookup_tool("function"),
            200,
        ));
        take(&host, &mut seen, 3);
        host.send(&request(
            7,
            json!({"method": "session/terminate", "sessionId": "session-1", "cellId": "3"}),
        ));
        take(&host, &mut seen, 3);
        host.send(&request(
            8,
            json!({"method": "session/wait", "sessionId": "nobody", "request": {"cell_id": "1", "yield_time_ms": 100}}),
        ));
        take(&host, &mut seen, 1);
        host.send(&request(
            9,
            json!({"method": "session/shutdown", "sessionId": "session-1"}),
        ));
        take(&host, &mut seen, 1);
        seen
    };
    let theirs = conversation(Host::start_program(reference, &[]));
    let ours = conversation(Host::start());
    for (i, (t, o)) in theirs.iter().zip(&ours).enumerate() {
        assert_eq!(o, t, "frame {i} differs from Codex's host");
    }
    assert_eq!(ours.len(), theirs.len());
}

/// A frame with its timings zeroed and error messages blanked (their
/// words differ; where they come is what counts).
fn normalize(frame: &mut Value) {
    match frame {
        Value::Object(object) => {
            for key in ["code_mode_host_duration_ns", "result_buffered_for_ns"] {
                if let Some(v) = object.get_mut(key) {
                    *v = json!(0);
                }
            }
            if object.get("status") == Some(&json!("error")) {
                object.insert("message".into(), json!("…"));
            }
            object.values_mut().for_each(normalize);
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}
