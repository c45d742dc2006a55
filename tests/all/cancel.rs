//! Cancelling parked runs (operations.md §3.1): `Runtime::cancel`,
//! `wait {runId, cancel: true}` and `quickcell cancel`.

use crate::{failed, value, waiting};
use quickcell::{
    Config, ErrorCode, ExecInput, FailurePhase, HostLimits, Limits, Owner, Runtime, ToolRegistry,
    WaitInput,
};
use serde_json::json;
use std::time::{Duration, Instant};

/// A runtime with the command tool `pid_nap` (writes its pid to `pid_file`,
/// then sleeps 30 s) and room for one parked run.
async fn napping_runtime(pid_file: &std::path::Path) -> Runtime {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools/pid_nap.sh");
    let config = Config::parse(&format!(
        "[[tools]]\nname = \"pid_nap\"\ndescription = \"Naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"30\"]\ntimeout_ms = 60000\n",
        script.display().to_string(),
        pid_file.display().to_string(),
    ))
    .unwrap();
    Runtime::builder()
        .limits(Limits::default().with_timeout_ms(300))
        .host_limits(HostLimits::default().with_max_suspended_runs(1))
        .tools(ToolRegistry::from_config(&config).unwrap())
        .build()
        .await
        .unwrap()
}

/// Whether process `pid` still exists (and is not a zombie).
fn alive(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state is the field after the parenthesized command name.
    let state = status
        .rsplit(')')
        .next()
        .unwrap_or("")
        .trim_start()
        .chars()
        .next();
    matches!(state, Some(s) if s != 'Z')
}

/// Waits until `done` holds, polling; fails naming `what` after `within`.
async fn eventually(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A parked run with a command tool still running is cancelled: the result
/// is `aborted` once, the tool's process is gone, the slot is free for the
/// next run, and a later `wait` or `cancel` gets the unknown-run error.
#[tokio::test]
async fn cancelling_a_parked_run_kills_its_tool_and_frees_its_slot() {
    let dir = std::env::temp_dir().join(format!("quickcell-cancel-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("pid");
    let rt = napping_runtime(&pid_file).await;
    let r = rt
        .exec(ExecInput::new(
            "nap",
            "text('started'); return await pid_nap({});",
        ))
        .await;
    let run_id = waiting(&r).run_id.clone();
    let pid_written = || std::fs::read_to_string(&pid_file).is_ok_and(|pid| pid.ends_with('\n'));
    eventually(Duration::from_secs(20), "the tool started", pid_written).await;
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid));
    // The one slot is taken: another cell that parks is refused.
    let refused = rt
        .exec(ExecInput::new("second", "await yield_control(); return 2"))
        .await;
    assert!(
        failed(&refused).error.contains("too many suspended"),
        "{}",
        failed(&refused).error
    );

    let r = rt.cancel(&run_id, &Owner::default()).await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::Aborted);
    assert_eq!(f.error, "code mode execution aborted");
    assert_eq!(f.failure_phase, FailurePhase::Host);
    eventually(
        Duration::from_secs(10),
        "the tool's process is gone",
        || !alive(pid),
    )
    .await;
    // The slot is free.
    let second = rt
        .exec(ExecInput::new("second", "await yield_control(); return 2"))
        .await;
    let second_id = waiting(&second).run_id.clone();
    assert_eq!(value(&rt.wait(WaitInput::new(second_id)).await), json!(2));
    // Aborted once: the run is gone.
    for r in [
        rt.wait(WaitInput::new(run_id.clone())).await,
        rt.cancel(&run_id, &Owner::default()).await,
    ] {
        assert_eq!(failed(&r).error, "code mode run is unavailable or expired.");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `wait {runId, cancel: true}`: only a boolean, only by the run's
/// session; a refused cancel leaves the run intact.
#[tokio::test]
async fn wait_with_cancel_abandons_the_run_of_its_own_session_only() {
    let rt = crate::runtime(Limits::default()).await;
    let alice = Owner {
        agent_run: String::new(),
        session: "alice".into(),
    };
    let bob = Owner {
        agent_run: String::new(),
        session: "bob".into(),
    };
    let r = rt
        .exec(
            ExecInput::new("park", "await yield_control(); return 'resumed'")
                .with_owner(alice.clone()),
        )
        .await;
    let id = waiting(&r).run_id.clone();
    let r = rt.wait_json(&json!({"runId": id, "cancel": "yes"})).await;
    assert_eq!(failed(&r).error, "cancel must be a boolean.");
    let r = rt.cancel(&id, &bob).await;
    assert_eq!(
        failed(&r).error,
        "code mode run belongs to a different session."
    );
    // Intact: alice cancels it with wait {cancel: true}.
    let r = rt
        .wait_json_as(Some(alice.clone()), &json!({"runId": id, "cancel": true}))
        .await;
    assert_eq!(failed(&r).code, ErrorCode::Aborted);
    let r = rt.wait(WaitInput::new(&id).with_owner(alice)).await;
    assert_eq!(failed(&r).error, "code mode run is unavailable or expired.");
    // `cancel: false` is an ordinary wait.
    let r = rt
        .exec(ExecInput::new(
            "park",
            "await yield_control(); return 'resumed'",
        ))
        .await;
    let id = waiting(&r).run_id.clone();
    let r = rt.wait_json(&json!({"runId": id, "cancel": false})).await;
    assert_eq!(value(&r), json!("resumed"));
}

/// `quickcell cancel RUNID` in another process: exit 0 with the aborted
/// result; after it, `wait` exits 1 with the unknown-run error, and a
/// second cancel exits 1.
#[test]
fn quickcell_cancel_removes_a_run_parked_by_another_process() {
    let dir = std::env::temp_dir().join(format!("quickcell-cancel-cli-{}", uuid::Uuid::new_v4()));
    let state = dir.join("state");
    let state = state.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_quickcell"))
            .args(args)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        (out.status.code().unwrap(), v)
    };
    let (status, v) = run(&[
        "exec",
        "--state-dir",
        state,
        "--code",
        "await yield_control(); return 1",
    ]);
    assert_eq!(status, 3, "{v}");
    let id = v["runId"].as_str().unwrap().to_string();
    let (status, v) = run(&["cancel", "--state-dir", state, "--session", "other", &id]);
    assert_eq!(
        (status, v["error"].clone()),
        (1, json!("code mode run belongs to a different session."))
    );
    let (status, v) = run(&["cancel", "--state-dir", state, &id]);
    assert_eq!((status, v["code"].clone()), (0, json!("aborted")), "{v}");
    let (status, v) = run(&["wait", "--state-dir", state, &id]);
    assert_eq!(
        (status, v["error"].clone()),
        (1, json!("code mode run is unavailable or expired."))
    );
    let (status, _) = run(&["cancel", "--state-dir", state, &id]);
    assert_eq!(status, 1);
    std::fs::remove_dir_all(&dir).ok();
}
