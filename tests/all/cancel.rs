//! Cancelling parked runs (operations.md §3.1): `Runtime::cancel`,
//! `wait {runId, cancel: true}` and `quickcell cancel`.

use crate::{failed, value, waiting};
use quickcell::{
    CancellationToken, CellResult, Config, ErrorCode, ExecInput, FailurePhase, HostLimits, Limits,
    Owner, Runtime, ToolRegistry, WaitInput,
};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A runtime with the command tool `pid_nap` (writes its pid to `pid_file`,
/// then sleeps 30 s) and room for one parked run; cells park after 300 ms.
async fn napping_runtime(pid_file: &std::path::Path) -> Runtime {
    napping_runtime_with(pid_file, 300).await
}

/// [`napping_runtime`] with cells that run `timeout_ms` before parking.
async fn napping_runtime_with(pid_file: &std::path::Path, timeout_ms: u64) -> Runtime {
    napping_builder(pid_file, timeout_ms).build().await.unwrap()
}

/// The builder of [`napping_runtime_with`].
fn napping_builder(pid_file: &std::path::Path, timeout_ms: u64) -> quickcell::RuntimeBuilder {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools/pid_nap.sh");
    let config = Config::parse(&format!(
        "[[tools]]\nname = \"pid_nap\"\ndescription = \"Naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"30\"]\ntimeout_ms = 60000\n",
        script.display().to_string(),
        pid_file.display().to_string(),
    ))
    .unwrap();
    Runtime::builder()
        .limits(Limits::default().with_timeout_ms(timeout_ms))
        .host_limits(HostLimits::default().with_max_suspended_runs(1))
        .tools(ToolRegistry::from_config(&config).unwrap())
}

/// Whether process `pid` still exists (and is not a zombie).
pub(crate) fn alive(pid: i32) -> bool {
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
        let (status, v, _) = crate::quickcell(args);
        (status, v)
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

/// A scratch directory and the pid file of `pid_nap` in it.
fn scratch(what: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("quickcell-{what}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("pid");
    (dir, pid_file)
}

/// The pid `pid_nap` wrote, once it has written it.
async fn napping_pid(pid_file: &std::path::Path) -> i32 {
    let written = || std::fs::read_to_string(pid_file).is_ok_and(|pid| pid.ends_with('\n'));
    eventually(Duration::from_secs(20), "the tool started", written).await;
    let pid = std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid));
    pid
}

/// A running cell cancelled through its token while it waits on a command
/// tool: `aborted` (phase host) with the output it emitted, the tool's
/// process is gone, its store writes are discarded and its slot is free.
#[tokio::test]
async fn cancelling_a_running_cell_keeps_its_output_and_kills_its_tool() {
    let (dir, pid_file) = scratch("cancel-running");
    let rt = Arc::new(napping_runtime_with(&pid_file, 60_000).await);
    let token = CancellationToken::new();
    let owner = Owner {
        agent_run: "a".into(),
        session: "s".into(),
    };
    let call = tokio::spawn({
        let (rt, token, owner) = (rt.clone(), token.clone(), owner.clone());
        async move {
            rt.exec(
                ExecInput::new(
                    "nap",
                    "text('started'); await store('k', 1); return await pid_nap({});",
                )
                .with_owner(owner)
                .with_cancel(token),
            )
            .await
        }
    });
    let pid = napping_pid(&pid_file).await;
    token.cancel();
    let r = call.await.unwrap();
    let f = failed(&r);
    assert_eq!(
        (f.code, f.failure_phase, f.error.as_str()),
        (
            ErrorCode::Aborted,
            FailurePhase::Host,
            "code mode execution aborted"
        )
    );
    assert_eq!(
        serde_json::to_value(&f.output).unwrap(),
        json!([{"type": "text", "text": "started"}])
    );
    eventually(
        Duration::from_secs(10),
        "the tool's process is gone",
        || !alive(pid),
    )
    .await;
    // The write was discarded; the one slot is free for a cell that parks.
    let r = rt
        .exec(
            ExecInput::new("load", "await yield_control(); return await load('k')")
                .with_owner(owner.clone()),
        )
        .await;
    let id = waiting(&r).run_id.clone();
    assert_eq!(
        value(&rt.wait(WaitInput::new(id).with_owner(owner)).await),
        json!(null)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Guest code that never yields to the host is stopped at its next fuel
/// slice; a token cancelled before the call aborts it before any guest
/// code runs.
#[tokio::test]
async fn cancelling_stops_a_busy_loop_and_a_cancelled_token_runs_nothing() {
    let rt = Arc::new(crate::runtime(Limits::default().with_timeout_ms(60_000)).await);
    let token = CancellationToken::new();
    let call = tokio::spawn({
        let (rt, token) = (rt.clone(), token.clone());
        async move {
            rt.exec(ExecInput::new("spin", "text('spinning'); while (true) {}").with_cancel(token))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    token.cancel();
    let r = call.await.unwrap();
    assert_eq!(failed(&r).code, ErrorCode::Aborted);
    assert_eq!(
        serde_json::to_value(&failed(&r).output).unwrap(),
        json!([{"type": "text", "text": "spinning"}])
    );

    let r = rt
        .exec(ExecInput::new("never", "text('ran'); return 1").with_cancel(token))
        .await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::Aborted);
    assert!(f.output.is_empty() && !f.bridge_dispatch_started);
}

/// A `wait` cancelled while the resumed cell runs ends `aborted` and
/// removes the run: a later `wait` gets the unknown-run error.
#[tokio::test]
async fn cancelling_a_wait_removes_the_run() {
    let (dir, pid_file) = scratch("cancel-wait");
    let rt = Arc::new(napping_runtime_with(&pid_file, 60_000).await);
    let r = rt
        .exec(ExecInput::new(
            "park",
            "await yield_control(); text('resumed'); return await pid_nap({})",
        ))
        .await;
    let id = waiting(&r).run_id.clone();
    let token = CancellationToken::new();
    let call = tokio::spawn({
        let (rt, token, id) = (rt.clone(), token.clone(), id.clone());
        async move { rt.wait(WaitInput::new(id).with_cancel(token)).await }
    });
    let pid = napping_pid(&pid_file).await;
    token.cancel();
    let r = call.await.unwrap();
    assert_eq!(failed(&r).code, ErrorCode::Aborted);
    assert_eq!(
        serde_json::to_value(&failed(&r).output).unwrap(),
        json!([{"type": "text", "text": "resumed"}])
    );
    eventually(
        Duration::from_secs(10),
        "the tool's process is gone",
        || !alive(pid),
    )
    .await;
    let r = rt.wait(WaitInput::new(id)).await;
    assert_eq!(failed(&r).error, "code mode run is unavailable or expired.");
    std::fs::remove_dir_all(&dir).ok();
}

/// Closing a session cancels its running cell, removes its parked run
/// (whose tool is killed), and deletes its values and saved results;
/// another session keeps all of its own.
#[tokio::test]
async fn closing_a_session_cancels_its_cells_and_releases_what_it_holds() {
    let (dir, _) = scratch("close-session");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tools/pid_nap.sh");
    let tool = |name: &str| {
        format!(
            "[[tools]]\nname = \"{name}\"\ndescription = \"Naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{script:?}, {:?}, \"30\"]\ntimeout_ms = 60000\n",
            dir.join(name).display().to_string()
        )
    };
    let config = Config::parse(&format!("{}{}", tool("nap_parked"), tool("nap_running"))).unwrap();
    let rt = Arc::new(
        Runtime::builder()
            .limits(Limits::default().with_timeout_ms(1_000))
            .tools(ToolRegistry::from_config(&config).unwrap())
            .build()
            .await
            .unwrap(),
    );
    let owner = |session: &str| Owner {
        agent_run: session.into(),
        session: session.into(),
    };
    let (alice, bob) = (owner("alice"), owner("bob"));
    let mut saved = Vec::new();
    for who in [&alice, &bob] {
        let r = rt
            .exec(
                ExecInput::new(
                    "keep",
                    "await store('k', 1); return (await results.save({ big: 'x'.repeat(10) })).id",
                )
                .with_owner(who.clone()),
            )
            .await;
        assert!(matches!(r, CellResult::Completed(_)), "{r:?}");
        saved.push(value(&r).as_str().unwrap().to_string());
    }
    let load = |id: &str| {
        format!("try {{ return [await load('k'), (await results.load({id:?})).big] }} catch (e) {{ return [await load('k'), String(e.message)] }}")
    };
    let parked = rt
        .exec(ExecInput::new("park", "return await nap_parked({})").with_owner(alice.clone()))
        .await;
    let parked_id = waiting(&parked).run_id.clone();
    let bobs = rt
        .exec(ExecInput::new("park", "await yield_control(); return 'bob'").with_owner(bob.clone()))
        .await;
    let bobs_id = waiting(&bobs).run_id.clone();
    let parked_pid = napping_pid(&dir.join("nap_parked")).await;
    // A running cell of alice: awaitResults keeps the call open.
    let running = tokio::spawn({
        let (rt, alice) = (rt.clone(), alice.clone());
        async move {
            rt.exec_json_as(
                Some(alice),
                &json!({"title": "run", "code": "text('on'); return await nap_running({})", "awaitResults": true}),
            )
            .await
        }
    });
    let running_pid = napping_pid(&dir.join("nap_running")).await;

    let closed = rt.close_session(&alice).await.unwrap();
    assert_eq!(
        (
            closed.cancelled_cells,
            closed.removed_runs,
            closed.removed_values,
            closed.removed_results
        ),
        (1, 1, 1, 1)
    );
    let r = running.await.unwrap();
    assert_eq!(failed(&r).code, ErrorCode::Aborted);
    assert_eq!(
        serde_json::to_value(&failed(&r).output).unwrap(),
        json!([{"type": "text", "text": "on"}])
    );
    for pid in [parked_pid, running_pid] {
        eventually(
            Duration::from_secs(10),
            "the tools' processes are gone",
            || !alive(pid),
        )
        .await;
    }
    let r = rt
        .wait(WaitInput::new(&parked_id).with_owner(alice.clone()))
        .await;
    assert_eq!(failed(&r).error, "code mode run is unavailable or expired.");
    let r = rt
        .exec(ExecInput::new("read", load(&saved[0])).with_owner(alice.clone()))
        .await;
    let v = value(&r);
    assert_eq!(v[0], json!(null));
    assert!(v[1].as_str().is_some_and(|e| e != "xxxxxxxxxx"), "{v}");
    // Bob keeps his run, his value and his result.
    assert_eq!(
        value(
            &rt.wait(WaitInput::new(bobs_id).with_owner(bob.clone()))
                .await
        ),
        json!("bob")
    );
    let r = rt
        .exec(ExecInput::new("read", load(&saved[1])).with_owner(bob.clone()))
        .await;
    assert_eq!(value(&r), json!([1, "xxxxxxxxxx"]));
    // A new cell of the closed session runs as usual.
    let r = rt
        .exec(ExecInput::new("again", "return 2").with_owner(alice))
        .await;
    assert_eq!(value(&r), json!(2));
    std::fs::remove_dir_all(&dir).ok();
}

/// `Runtime::cancel` of a run that a `wait` of this runtime is resuming
/// ends that `wait` (`aborted`, its tool's process gone, the run removed)
/// and returns `aborted` itself.
#[tokio::test]
async fn cancelling_a_run_being_resumed_ends_the_wait() {
    let (dir, pid_file) = scratch("cancel-resuming");
    let rt = Arc::new(napping_runtime_with(&pid_file, 60_000).await);
    let (id, resuming) = park_then_resume(&rt).await;
    let pid = napping_pid(&pid_file).await;
    let r = rt.cancel(&id, &Owner::default()).await;
    assert_eq!(failed(&r).code, ErrorCode::Aborted);
    let r = resuming.await.unwrap();
    assert_eq!(failed(&r).code, ErrorCode::Aborted);
    eventually(
        Duration::from_secs(10),
        "the tool's process is gone",
        || !alive(pid),
    )
    .await;
    let r = rt.wait(WaitInput::new(id)).await;
    assert_eq!(failed(&r).error, "code mode run is unavailable or expired.");
    std::fs::remove_dir_all(&dir).ok();
}

/// A cell cancelled while it waits on a tool: its pending call rejects
/// with the contract's bridge-closed error, which the cell's `catch` sees
/// (its output is kept), and the cell still ends `aborted`; a cell that
/// answers the rejection with an endless loop cannot hold its abort off
/// (its close work is capped in fuel).
#[tokio::test]
async fn a_cancelled_cells_pending_calls_reject_with_the_bridge_closed_error() {
    let (dir, pid_file) = scratch("cancel-closed");
    let rt = Arc::new(napping_runtime_with(&pid_file, 60_000).await);
    for (code, output) in [
        (
            "try { return await pid_nap({}); } catch (e) { text('caught: ' + e.message); throw e; }",
            json!([{"type": "text", "text": "caught: Code Mode tool canceled, expired, or owner lost; start a new run."}]),
        ),
        (
            "try { return await pid_nap({}); } finally { text('finally'); while (true) {} }",
            json!([{"type": "text", "text": "finally"}]),
        ),
    ] {
        let _ = std::fs::remove_file(&pid_file);
        let token = CancellationToken::new();
        let call = tokio::spawn({
            let (rt, token) = (rt.clone(), token.clone());
            async move {
                rt.exec(ExecInput::new("nap", code).with_cancel(token))
                    .await
            }
        });
        let pid = napping_pid(&pid_file).await;
        token.cancel();
        let r = call.await.unwrap();
        let f = failed(&r);
        assert_eq!(
            (f.code, f.error.as_str()),
            (ErrorCode::Aborted, "code mode execution aborted"),
            "{code}"
        );
        assert_eq!(serde_json::to_value(&f.output).unwrap(), output, "{code}");
        eventually(
            Duration::from_secs(10),
            "the tool's process is gone",
            || !alive(pid),
        )
        .await;
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Two runtimes over one SQLite state directory: two hosts of one machine
/// (each with its own connection and run registry, as two processes).
async fn two_napping_hosts(
    dir: &std::path::Path,
    pid_file: &std::path::Path,
    timeout_ms: u64,
) -> (Arc<Runtime>, Arc<Runtime>) {
    let host = async || {
        Arc::new(
            napping_builder(pid_file, timeout_ms)
                .state_dir(dir.join("state"))
                .build()
                .await
                .unwrap(),
        )
    };
    (host().await, host().await)
}

/// A cancel on host B of a run a `wait` on host A is resuming (same
/// SQLite store): B answers `aborted`, A's `wait` ends `aborted` (not with
/// the tool's value, which would come after 30 s), A's tool process is
/// gone, and the run is gone for both.
#[tokio::test]
async fn a_cancel_on_another_host_ends_the_wait_resuming_the_run() {
    let (dir, pid_file) = scratch("cancel-remote-wait");
    let (a, b) = two_napping_hosts(&dir, &pid_file, 60_000).await;
    let (id, resuming) = park_then_resume(&a).await;
    let pid = napping_pid(&pid_file).await;
    let cancelled = Instant::now();
    let r = b.cancel(&id, &Owner::default()).await;
    let f = failed(&r);
    assert_eq!(
        (f.code, f.error.as_str()),
        (ErrorCode::Aborted, "code mode execution aborted")
    );
    let r = resuming.await.unwrap();
    // A figure, not a bound: the poll interval is 250 ms.
    eprintln!(
        "A's wait ended {:?} after B's cancel began",
        cancelled.elapsed()
    );
    assert_eq!(failed(&r).code, ErrorCode::Aborted, "{}", r.to_json());
    eventually(
        Duration::from_secs(10),
        "the tool's process is gone",
        || !alive(pid),
    )
    .await;
    for host in [&a, &b] {
        let r = host.wait(WaitInput::new(id.clone())).await;
        assert_eq!(failed(&r).error, "code mode run is unavailable or expired.");
    }
    // A cancel of another session's run is refused and records nothing.
    std::fs::remove_file(&pid_file).unwrap();
    let (id, resuming) = park_then_resume(&a).await;
    napping_pid(&pid_file).await;
    let stranger = Owner {
        session: "stranger".into(),
        ..Owner::default()
    };
    let r = b.cancel(&id, &stranger).await;
    assert_eq!(
        failed(&r).error,
        "code mode run belongs to a different session."
    );
    // The run's own session ends it.
    assert_eq!(
        failed(&b.cancel(&id, &Owner::default()).await).code,
        ErrorCode::Aborted
    );
    assert_eq!(failed(&resuming.await.unwrap()).code, ErrorCode::Aborted);
    std::fs::remove_dir_all(&dir).ok();
}

/// A run parked on host A while its tool call still runs there, cancelled
/// on host B: A learns of it from the store and kills the tool's process
/// (a 30 s nap) at once, not at the call's end.
#[tokio::test]
async fn a_cancel_on_another_host_kills_the_tool_calls_its_parking_host_drains() {
    let (dir, pid_file) = scratch("cancel-remote-drain");
    let (a, b) = two_napping_hosts(&dir, &pid_file, 300).await;
    let r = a
        .exec(ExecInput::new("nap", "return await pid_nap({})"))
        .await;
    let id = waiting(&r).run_id.clone();
    let pid = napping_pid(&pid_file).await;
    let r = b.cancel(&id, &Owner::default()).await;
    assert_eq!(failed(&r).code, ErrorCode::Aborted);
    eventually(
        Duration::from_secs(10),
        "A killed the tool's process",
        || !alive(pid),
    )
    .await;
    let r = a.wait(WaitInput::new(id)).await;
    assert_eq!(failed(&r).error, "code mode run is unavailable or expired.");
    std::fs::remove_dir_all(&dir).ok();
}

/// Parks a cell on `rt` at `yield_control()` and starts the `wait` that
/// resumes it there and runs `pid_nap` (its result, when it ends): the
/// run id and that `wait`.
async fn park_then_resume(rt: &Arc<Runtime>) -> (String, tokio::task::JoinHandle<CellResult>) {
    let r = rt
        .exec(ExecInput::new(
            "park",
            "await yield_control(); return await pid_nap({})",
        ))
        .await;
    let id = waiting(&r).run_id.clone();
    let resuming = tokio::spawn({
        let (rt, id) = (rt.clone(), id.clone());
        async move { rt.wait(WaitInput::new(id)).await }
    });
    (id, resuming)
}
