//! Approvals (operations.md §3.4): an `Approver` decides calls the
//! policy's `approve` list matches — in the library, and in `quickcell
//! serve` through MCP elicitation (the Python SDK's client answers).

use crate::value;
use quickcell::catalog::Policy;
use quickcell::{
    Approval, ApprovalRequest, Approver, CellResult, Config, ExecInput, HostLimits, Limits,
    Runtime, ToolRegistry,
};
use serde_json::json;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Decides after `delay`, recording what it was asked.
struct Scripted {
    decision: Option<Approval>,
    delay: Duration,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Scripted {
    fn new(decision: Option<Approval>, delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            decision,
            delay,
            asked: Mutex::default(),
        })
    }
}

#[async_trait::async_trait]
impl Approver for Scripted {
    async fn decide(&self, request: &ApprovalRequest) -> Approval {
        self.asked.lock().unwrap().push(request.clone());
        tokio::time::sleep(self.delay).await;
        match &self.decision {
            Some(decision) => decision.clone(),
            // Never decides.
            None => std::future::pending().await,
        }
    }
}

/// A runtime whose `nap` tool (appends a line to `<dir>/runs`, then
/// answers) needs an approval.
async fn guarded(
    dir: &std::path::Path,
    limits: Limits,
    host: HostLimits,
    approver: Arc<dyn Approver>,
) -> Runtime {
    let config = Config::parse(&format!(
        "[[tools]]\nname = \"nap\"\ndescription = \"Naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"0\"]\n",
        concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tools/nap.sh"),
        dir.join("runs").display().to_string()
    ))
    .unwrap();
    Runtime::builder()
        .limits(limits)
        .host_limits(host)
        .tools(ToolRegistry::from_config(&config).unwrap())
        .policy(Policy {
            approve: vec!["na*".into()],
            ..Policy::default()
        })
        .approver(approver)
        .build()
        .await
        .unwrap()
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quickcell-approve-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Times the tool ran.
fn runs(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("runs"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

const CALL: &str =
    "try { return await nap({x: 1}) } catch (e) { return {code: e.code, message: e.message} }";

/// Approved: the call runs. The approver sees the tool, the pattern, the
/// arguments preview and the session.
#[tokio::test]
async fn an_approved_call_runs() {
    let dir = scratch();
    let approver = Scripted::new(Some(Approval::Approve), Duration::ZERO);
    let rt = guarded(
        &dir,
        Limits::default(),
        HostLimits::default(),
        approver.clone(),
    )
    .await;
    let r = rt
        .exec(ExecInput::new("nap", CALL).with_owner(quickcell::Owner {
            agent_run: "a".into(),
            session: "s".into(),
        }))
        .await;
    assert_eq!(value(&r), json!({"napped": {"x": 1}}));
    assert_eq!(runs(&dir), 1);
    let asked = approver.asked.lock().unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (
            asked[0].tool.as_str(),
            asked[0].pattern.as_str(),
            asked[0].arguments_preview.as_str(),
            asked[0].session.as_str()
        ),
        ("nap", "na*", r#"{"x":1}"#, "s")
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Declined: a catchable `tool_error` saying so, with the reason; the tool
/// never runs.
#[tokio::test]
async fn a_declined_call_is_a_catchable_tool_error() {
    let dir = scratch();
    let approver = Scripted::new(
        Some(Approval::Decline {
            reason: Some("not today".into()),
        }),
        Duration::ZERO,
    );
    let rt = guarded(&dir, Limits::default(), HostLimits::default(), approver).await;
    let v = value(&rt.exec(ExecInput::new("nap", CALL)).await);
    assert_eq!(v["code"], "tool_error");
    assert_eq!(
        v["message"],
        "Calling nap was declined by the approver (policy approve = \"na*\"): not today"
    );
    assert_eq!(runs(&dir), 0);
    std::fs::remove_dir_all(&dir).ok();
}

/// No decision within `approval_timeout_ms` counts as a decline (violated);
/// a decision within it counts (obeyed).
#[tokio::test]
async fn the_approval_timeout_counts_as_a_decline() {
    let dir = scratch();
    let host = HostLimits::default().with_approval_timeout_ms(300);
    let never = Scripted::new(None, Duration::ZERO);
    let rt = guarded(&dir, Limits::default(), host.clone(), never).await;
    let v = value(&rt.exec(ExecInput::new("nap", CALL)).await);
    assert_eq!(
        v["message"],
        "Calling nap was declined: no approval decision within 300 ms (policy approve = \"na*\"; a timeout counts as a decline)."
    );
    assert_eq!(runs(&dir), 0);
    let prompt = Scripted::new(Some(Approval::Approve), Duration::from_millis(50));
    let rt = guarded(&dir, Limits::default(), host, prompt).await;
    assert_eq!(
        value(&rt.exec(ExecInput::new("nap", CALL)).await),
        json!({"napped": {"x": 1}})
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The cell's clock is paused while a call waits for its decision: a cell
/// with a 400 ms budget whose approver takes 1.5 s neither times out nor
/// parks, and completes.
#[tokio::test]
async fn the_clock_is_paused_while_a_call_waits_for_approval() {
    let dir = scratch();
    let slow = Scripted::new(Some(Approval::Approve), Duration::from_millis(1_500));
    let rt = guarded(
        &dir,
        Limits::default().with_timeout_ms(400),
        HostLimits::default(),
        slow,
    )
    .await;
    let r = rt.exec(ExecInput::new("nap", CALL)).await;
    assert!(matches!(r, CellResult::Completed(_)), "{}", r.to_json());
    assert_eq!(value(&r), json!({"napped": {"x": 1}}));
    std::fs::remove_dir_all(&dir).ok();
}

/// A call's own approver is asked instead of the runtime's.
#[tokio::test]
async fn a_calls_own_approver_wins() {
    let dir = scratch();
    let runtime_approver = Scripted::new(Some(Approval::Approve), Duration::ZERO);
    let rt = guarded(
        &dir,
        Limits::default(),
        HostLimits::default(),
        runtime_approver.clone(),
    )
    .await;
    let own = Scripted::new(Some(Approval::Decline { reason: None }), Duration::ZERO);
    let v = value(
        &rt.exec(ExecInput::new("nap", CALL).with_approver(own.clone()))
            .await,
    );
    assert_eq!(
        v["message"],
        "Calling nap was declined by the approver (policy approve = \"na*\")."
    );
    assert_eq!(
        (
            own.asked.lock().unwrap().len(),
            runtime_approver.asked.lock().unwrap().len()
        ),
        (1, 0)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `quickcell serve` asks the MCP client with elicitation: accepted, the
/// call runs; declined, it is a `tool_error`; a client without elicitation
/// cannot be asked, so the call is denied (fail closed).
#[test]
fn serve_asks_the_mcp_client_with_elicitation() {
    let dir = scratch();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[tools]]\nname = \"nap\"\ndescription = \"Naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"0\"]\n[policy]\napprove = [\"nap\"]\n",
            concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tools/nap.sh"),
            dir.join("runs").display().to_string()
        ),
    )
    .unwrap();
    let serve = |answer: Option<&str>| {
        let mut args: Vec<String> = Vec::new();
        if let Some(answer) = answer {
            args.extend(["--elicit".into(), answer.into()]);
        }
        args.extend([
            "--stdio".into(),
            env!("CARGO_BIN_EXE_quickcell").into(),
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
            "--state-dir".into(),
            dir.join("state").display().to_string(),
        ]);
        let steps =
            json!([{"op": "call_tool", "name": "exec", "args": {"title": "nap", "code": CALL}}]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::mcp::run(steps, &refs)
    };
    // Tool Search's tool_call asks the same way.
    let tools_mode = |answer: Option<&str>| {
        let mut args: Vec<String> = Vec::new();
        if let Some(answer) = answer {
            args.extend(["--elicit".into(), answer.into()]);
        }
        args.extend([
            "--stdio".into(),
            env!("CARGO_BIN_EXE_quickcell").into(),
            "serve".into(),
            "--mode".into(),
            "tools".into(),
            "--config".into(),
            config.display().to_string(),
            "--state-dir".into(),
            dir.join("state").display().to_string(),
        ]);
        let steps = json!([{"op": "call_tool", "name": "tool_call", "args": {"id": "nap", "arguments": {"x": 2}}}]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::mcp::run(steps, &refs)
    };
    let out = tools_mode(Some("accept"));
    assert_eq!(out[0]["op"], "elicitation", "{out:?}");
    assert_eq!(crate::mcp::result(&out[1]), &json!({"napped": {"x": 2}}));
    let out = tools_mode(None);
    assert!(
        out[0]["text"][0]
            .as_str()
            .unwrap()
            .contains("has no way to ask for one"),
        "{out:?}"
    );
    assert_eq!(runs(&dir), 1);
    std::fs::remove_file(dir.join("runs")).unwrap();

    let out = serve(Some("accept"));
    assert_eq!(out[0]["op"], "elicitation", "{out:?}");
    let message = out[0]["message"].as_str().unwrap();
    assert!(
        message.contains("call nap (policy approve = \"nap\") with these arguments: {\"x\":1}"),
        "{message}"
    );
    assert_eq!(
        out[0]["requestedSchema"]["properties"]["approve"]["type"],
        "boolean"
    );
    assert_eq!(
        crate::mcp::result(&out[1])["value"],
        json!({"napped": {"x": 1}})
    );
    assert_eq!(runs(&dir), 1);

    let out = serve(Some("decline"));
    assert_eq!(
        crate::mcp::result(&out[1])["value"]["message"],
        "Calling nap was declined by the approver (policy approve = \"nap\"): the user declined it"
    );
    let out = serve(None);
    let message = crate::mcp::result(&out[0])["value"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("has no way to ask for one"), "{message}");
    assert_eq!(runs(&dir), 1);
    std::fs::remove_dir_all(&dir).ok();
}

/// Deferred approvals (the library's side of MCP's `input_required`): a
/// call that needs an approval parks the cell with reason `approval`,
/// listed in `pendingToolCalls`; the runtime's approver is not asked. A
/// `wait` with no answer parks it again as it was; an answer to a call that
/// is not waiting fails with `invalid_input` and changes nothing; answers
/// start approved calls and reject declined ones; a replayed answer is
/// refused. At most `MAX_PENDING_APPROVALS` calls of a cell wait so
/// (obeyed and violated).
#[tokio::test]
async fn deferred_approvals_park_the_cell_until_the_caller_answers() {
    use quickcell::{ApprovalAnswer, ErrorCode, WaitInput, WaitReason, MAX_PENDING_APPROVALS};
    let dir = scratch();
    let approver = Scripted::new(Some(Approval::Approve), Duration::ZERO);
    let rt = guarded(
        &dir,
        Limits::default(),
        HostLimits::default(),
        approver.clone(),
    )
    .await;
    let two = "return await Promise.allSettled([nap({x: 1}), nap({x: 2})]).then((r) => r.map((s) => s.value ?? s.reason.message));";
    let parked = rt
        .exec(ExecInput::new("two naps", two).with_deferred_approvals())
        .await;
    let CellResult::Waiting(waiting) = parked else {
        panic!("{parked:?}")
    };
    assert_eq!(waiting.reason, WaitReason::Approval);
    let pending = serde_json::to_value(&waiting.pending_tool_calls).unwrap();
    assert_eq!(
        pending,
        json!([
            {"id": "bridge:approval:1", "method": "approval", "tool": "nap", "input": {"pattern": "na*", "arguments": "{\"x\":1}"}},
            {"id": "bridge:approval:2", "method": "approval", "tool": "nap", "input": {"pattern": "na*", "arguments": "{\"x\":2}"}}
        ])
    );
    assert_eq!(runs(&dir), 0);
    let run = waiting.run_id.clone();
    let wait = |answers: Vec<ApprovalAnswer>| {
        WaitInput::new(run.clone())
            .with_deferred_approvals()
            .with_approval_answers(answers)
    };
    // No answer: parked again, as it was.
    let again = rt.wait(wait(Vec::new())).await;
    assert!(
        matches!(&again, CellResult::Waiting(w) if w.reason == WaitReason::Approval && w.pending_tool_calls.len() == 2),
        "{again:?}"
    );
    // An answer to a call that does not wait: refused, nothing changes.
    let wrong = rt
        .wait(wait(vec![ApprovalAnswer::approve("bridge:approval:9")]))
        .await;
    let CellResult::Failed(failed) = &wrong else {
        panic!("{wrong:?}")
    };
    assert_eq!(failed.code, ErrorCode::InvalidInput);
    assert!(
        failed
            .error
            .contains("`bridge:approval:9` is not a call of this run that waits for an approval"),
        "{}",
        failed.error
    );
    // One approved: it starts; the other still waits (the cell parks for
    // it at once, the approved call running meanwhile).
    let one = rt
        .wait(wait(vec![ApprovalAnswer::approve("bridge:approval:1")]))
        .await;
    let CellResult::Waiting(one) = &one else {
        panic!("{one:?}")
    };
    assert_eq!(one.reason, WaitReason::Approval);
    let ids: Vec<&str> = one
        .pending_tool_calls
        .iter()
        .map(|c| c.id.as_str())
        .collect();
    assert!(
        ids == ["bridge:approval:2"] || ids == ["bridge:callValue:1", "bridge:approval:2"],
        "{ids:?}"
    );
    // Replayed: refused.
    let replayed = rt
        .wait(wait(vec![ApprovalAnswer::approve("bridge:approval:1")]))
        .await;
    assert!(
        matches!(&replayed, CellResult::Failed(f) if f.code == ErrorCode::InvalidInput),
        "{replayed:?}"
    );
    // The other declined: the cell ends with both outcomes.
    let done = rt
        .wait(wait(vec![ApprovalAnswer::decline(
            "bridge:approval:2",
            Some("not now".into()),
        )]))
        .await;
    assert_eq!(
        value(&done),
        json!([{"napped": {"x": 1}}, "Calling nap was declined by the approver (policy approve = \"na*\"): not now"])
    );
    assert_eq!(runs(&dir), 1);
    assert!(approver.asked.lock().unwrap().is_empty());
    // The cap: MAX_PENDING_APPROVALS calls wait; one more rejects at once.
    let many = format!(
        "const r = await Promise.allSettled(Array.from({{length: {}}}, (_, i) => nap({{i}}))); return r.filter((s) => s.status === 'rejected').map((s) => s.reason.message);",
        MAX_PENDING_APPROVALS + 1
    );
    let parked = rt
        .exec(ExecInput::new("many", many).with_deferred_approvals())
        .await;
    let CellResult::Waiting(waiting) = parked else {
        panic!("{parked:?}")
    };
    assert_eq!(waiting.pending_tool_calls.len(), MAX_PENDING_APPROVALS);
    let declines = waiting
        .pending_tool_calls
        .iter()
        .map(|c| ApprovalAnswer::decline(c.id.clone(), None))
        .collect();
    let done = rt
        .wait(
            WaitInput::new(waiting.run_id.clone())
                .with_deferred_approvals()
                .with_approval_answers(declines),
        )
        .await;
    let messages = value(&done);
    let messages = messages.as_array().unwrap();
    assert_eq!(messages.len(), MAX_PENDING_APPROVALS + 1);
    assert_eq!(
        messages
            .iter()
            .filter(|m| m.as_str().unwrap().contains("already wait for an approval"))
            .count(),
        1,
        "{messages:?}"
    );
    assert_eq!(runs(&dir), 1);
    std::fs::remove_dir_all(&dir).ok();
}

/// The official Python SDK speaking MCP 2026-07-28 answers an approval as
/// a multi round-trip request: the server's `input_required` reaches its
/// elicitation callback, and its retry resumes the cell. Accepted, the call
/// runs once; declined, it is a `tool_error`; a client without
/// elicitation is never asked (denied).
#[test]
fn the_python_sdk_answers_a_2026_07_28_approval_through_input_required() {
    let dir = scratch();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[tools]]\nname = \"nap\"\ndescription = \"Naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"0\"]\n[policy]\napprove = [\"nap\"]\n",
            concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tools/nap.sh"),
            dir.join("runs").display().to_string()
        ),
    )
    .unwrap();
    let serve = |answer: Option<&str>| {
        let mut args: Vec<String> = vec!["--era".into(), "modern".into()];
        if let Some(answer) = answer {
            args.extend(["--elicit".into(), answer.into()]);
        }
        args.extend([
            "--stdio".into(),
            env!("CARGO_BIN_EXE_quickcell").into(),
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
            "--state-dir".into(),
            dir.join("state").display().to_string(),
        ]);
        let steps = json!([
            {"op": "info"},
            {"op": "call_tool", "name": "exec", "args": {"title": "nap", "code": CALL}}
        ]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::mcp::run(steps, &refs)
    };
    let out = serve(Some("accept"));
    assert_eq!(out[0]["protocolVersion"], "2026-07-28", "{out:?}");
    assert_eq!(out[1]["op"], "elicitation", "{out:?}");
    let message = out[1]["message"].as_str().unwrap();
    assert!(
        message.contains("call nap (policy approve = \"nap\") with these arguments: {\"x\":1}"),
        "{message}"
    );
    assert_eq!(
        crate::mcp::result(&out[2])["value"],
        json!({"napped": {"x": 1}}),
        "{out:?}"
    );
    assert_eq!(runs(&dir), 1);
    let out = serve(Some("decline"));
    assert_eq!(out[1]["op"], "elicitation", "{out:?}");
    assert_eq!(
        crate::mcp::result(&out[2])["value"]["message"],
        "Calling nap was declined by the approver (policy approve = \"nap\"): the user declined it"
    );
    let out = serve(None);
    let message = crate::mcp::result(&out[1])["value"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("has no way to ask for one"), "{message}");
    assert_eq!(runs(&dir), 1);
    std::fs::remove_dir_all(&dir).ok();
}

/// A cell cancelled while its call waits for a decision withdraws it: a
/// late approval never runs the tool.
#[tokio::test]
async fn a_cancelled_cell_never_runs_a_late_approved_call() {
    let dir = scratch();
    let late = Scripted::new(Some(Approval::Approve), Duration::from_millis(800));
    let rt = Arc::new(guarded(&dir, Limits::default(), HostLimits::default(), late.clone()).await);
    let token = quickcell::CancellationToken::new();
    let call = tokio::spawn({
        let (rt, token) = (rt.clone(), token.clone());
        async move {
            rt.exec(ExecInput::new("nap", CALL).with_cancel(token))
                .await
        }
    });
    while late.asked.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    token.cancel();
    let r = call.await.unwrap();
    assert_eq!(crate::failed(&r).code, quickcell::ErrorCode::Aborted);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(runs(&dir), 0);
    std::fs::remove_dir_all(&dir).ok();
}

/// The paused clock is bounded: past `max_await_results_ms` of waiting for
/// decisions in one call, the clock runs again and the cell parks; the
/// approved call's result is delivered by the `wait`.
#[tokio::test]
async fn approval_waits_pause_the_clock_only_up_to_the_bound() {
    let dir = scratch();
    let slow = Scripted::new(Some(Approval::Approve), Duration::from_millis(2_500));
    let rt = guarded(
        &dir,
        Limits::default().with_timeout_ms(400),
        HostLimits::default().with_max_await_results_ms(300),
        slow,
    )
    .await;
    let r = rt.exec(ExecInput::new("nap", CALL)).await;
    let id = crate::waiting(&r).run_id.clone();
    // Resumed after the approval and the tool: the value arrives.
    tokio::time::sleep(Duration::from_millis(2_800)).await;
    let r = rt.wait(quickcell::WaitInput::new(id)).await;
    assert_eq!(value(&r), json!({"napped": {"x": 1}}));
    std::fs::remove_dir_all(&dir).ok();
}
