//! Many hosts, one state (operations.md §5): `quickcell` processes in
//! separate working directories sharing one PostgreSQL database (a
//! throwaway PostgreSQL 15 cluster, `quickcell::testing::postgres_database`).

use serde_json::Value;
use std::process::{Command, Stdio};

/// A scratch working directory of its own (no `.quickcell` shared).
fn workdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("quickcell-host-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A state key file of 32 random bytes (hex) named `name`, shared by the
/// hosts of a test.
fn key_file(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("quickcell-key-{name}-{}", uuid::Uuid::new_v4()));
    std::fs::write(&path, uuid::Uuid::new_v4().simple().to_string()).unwrap();
    path
}

/// `quickcell ARGS` in `dir` with `QUICKCELL_STATE_URL=url` and the state
/// key `key`: exit status and stdout as JSON (stderr as a string when
/// stdout is empty).
fn host_with_key(
    dir: &std::path::Path,
    url: &str,
    key: &std::path::Path,
    args: &[&str],
) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .current_dir(dir)
        .args(args)
        .arg("--state-key-file")
        .arg(key)
        .env("QUICKCELL_STATE_URL", url)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&out.stderr).into_owned())),
    )
}

/// The hosts of most tests: one key for all.
fn host(dir: &std::path::Path, url: &str, args: &[&str]) -> (i32, Value) {
    static KEY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    host_with_key(dir, url, KEY.get_or_init(|| key_file("shared")), args)
}

/// A run parked by one host is resumed by another in another directory;
/// session values and the usage ledger are the database's.
#[test]
fn a_run_parked_on_one_host_resumes_on_another() {
    let url = quickcell::testing::postgres_database();
    let (a, b) = (workdir(), workdir());
    let (status, parked) = host(
        &a,
        &url,
        &[
            "exec",
            "--code",
            "await store('greeting', 'hello'); text('parked on A'); await yield_control(); return (await load('greeting')) + ' from B';",
        ],
    );
    assert_eq!(status, 3, "{parked}");
    let run_id = parked["runId"].as_str().unwrap();
    let (status, resumed) = host(&b, &url, &["wait", run_id]);
    assert_eq!(status, 0, "{resumed}");
    assert_eq!(resumed["value"], "hello from B");
    // Resumed once: the run is gone for everyone.
    let (status, again) = host(&a, &url, &["wait", run_id]);
    assert_eq!(status, 1, "{again}");
    // The store writes of A's cell were committed to the database.
    let (_, read) = host(
        &b,
        &url,
        &["exec", "--code", "return await load('greeting')"],
    );
    assert_eq!(read["value"], "hello");
    // Neither directory holds a SQLite store.
    assert!(!a.join(".quickcell").exists() && !b.join(".quickcell").exists());
    // One ledger: A's exec, B's wait, A's refused wait, B's exec.
    let (status, usage) = host(&a, &url, &["usage", "--json"]);
    assert_eq!(status, 0, "{usage}");
    assert_eq!(usage["calls"], 4, "{usage}");
    let fuel = |v: &Value| v["telemetry"]["fuelUsed"].as_u64().unwrap();
    assert_eq!(
        usage["fuel"].as_u64().unwrap(),
        fuel(&parked) + fuel(&resumed) + fuel(&again) + fuel(&read)
    );
}

/// Two hosts `wait` the same run at once: exactly one resumes it.
#[test]
fn concurrent_waits_on_two_hosts_resume_a_run_once() {
    let url = quickcell::testing::postgres_database();
    for round in 0..3 {
        let (a, b) = (workdir(), workdir());
        let key = key_file("concurrent");
        let (status, parked) = host_with_key(
            &a,
            &url,
            &key,
            &["exec", "--code", "await yield_control(); return 'resumed';"],
        );
        assert_eq!(status, 3, "{parked}");
        let run_id = parked["runId"].as_str().unwrap();
        let waits: Vec<_> = [&a, &b]
            .iter()
            .map(|dir| {
                Command::new(env!("CARGO_BIN_EXE_quickcell"))
                    .current_dir(dir)
                    .args(["wait", run_id])
                    .arg("--state-key-file")
                    .arg(&key)
                    .env("QUICKCELL_STATE_URL", &url)
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let results: Vec<Value> = waits
            .into_iter()
            .map(|child| {
                let out = child.wait_with_output().unwrap();
                serde_json::from_slice(&out.stdout).unwrap()
            })
            .collect();
        let completed = results
            .iter()
            .filter(|r| r["status"] == "completed")
            .count();
        assert_eq!(completed, 1, "round {round}: {results:?}");
        let refused = results.iter().find(|r| r["status"] == "failed").unwrap();
        let error = refused["error"].as_str().unwrap();
        // Refused while the winner holds it, or once it has finished it.
        assert!(
            error == "code mode run is already being resumed."
                || error == "code mode run is unavailable or expired.",
            "{error}"
        );
    }
}

/// A state URL that is not PostgreSQL is a usage error; an unreachable
/// database fails the call with the store named, and nothing runs.
#[test]
fn bad_state_urls_are_refused() {
    let dir = workdir();
    let (status, out) = host(&dir, "mysql://db/q", &["exec", "--code", "return 1"]);
    assert_eq!(status, 2, "{out}");
    assert!(
        out.to_string().contains("must be a postgres:// URL"),
        "{out}"
    );
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/none");
    let (status, out) = host(&dir, &url, &["exec", "--code", "return 1"]);
    assert_eq!(status, 1, "{out}");
    assert!(
        out.to_string()
            .contains("cannot open the PostgreSQL state store"),
        "{out}"
    );
}

/// Snapshots are authenticated: without a key PostgreSQL is refused; a
/// snapshot written under another key, altered in the database, or moved
/// to another run's row fails that run alone with `internal_error`.
#[test]
fn snapshots_are_authenticated_by_the_state_key() {
    let url = quickcell::testing::postgres_database();
    let dir = workdir();
    let out = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .current_dir(&dir)
        .args(["exec", "--code", "return 1"])
        .env("QUICKCELL_STATE_URL", &url)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("needs a state key"), "{stderr}");

    let (ours, theirs) = (key_file("ours"), key_file("theirs"));
    let park = |key: &std::path::Path| {
        let (status, parked) = host_with_key(
            &dir,
            &url,
            key,
            &["exec", "--code", "await yield_control(); return 'ok';"],
        );
        assert_eq!(status, 3, "{parked}");
        parked["runId"].as_str().unwrap().to_string()
    };
    let refused = |key: &std::path::Path, run_id: &str| {
        let (status, out) = host_with_key(&dir, &url, key, &["wait", run_id]);
        assert_eq!(status, 1, "{out}");
        assert_eq!(out["code"], "internal_error", "{out}");
        assert!(
            out["error"]
                .as_str()
                .unwrap()
                .contains("authentication tag does not verify"),
            "{out}"
        );
    };
    // Another key.
    let run = park(&theirs);
    refused(&ours, &run);
    // Altered in the database.
    let psql = |sql: &str| psql_at(&url, sql);
    let run = park(&ours);
    // Byte 40 flipped (XOR 0xff): always a change.
    psql(&format!(
        "UPDATE runs SET snapshot = set_byte(snapshot, 39, get_byte(snapshot, 39) # 255) WHERE run_id = '{run}'"
    ));
    refused(&ours, &run);
    // Moved to another run's row.
    let (first, second) = (park(&ours), park(&ours));
    psql(&format!(
        "UPDATE runs SET snapshot = (SELECT snapshot FROM runs WHERE run_id = '{first}') WHERE run_id = '{second}'"
    ));
    refused(&ours, &second);
    // The other run is untouched.
    let (status, out) = host_with_key(&dir, &url, &ours, &["wait", &first]);
    assert_eq!(
        (status, out["value"].clone()),
        (0, Value::from("ok")),
        "{out}"
    );
}

/// Two `serve --http` hosts sharing one database park 1,000 runs between
/// them (500 each, through MCP); each host's `/metrics` counts all 1,000
/// and its memory is reported. Runs are resumed on the host that holds
/// their MCP session.
#[test]
fn a_thousand_runs_parked_across_two_serving_hosts() {
    use crate::http::{post, rpc_message, sample, send, INITIALIZE};
    let url = quickcell::testing::postgres_database();
    let dir = workdir();
    let token = "t0k3n-for-two-hosts";
    std::fs::write(dir.join("token"), token).unwrap();
    std::fs::write(
        dir.join("quickcell.toml"),
        "[host]\nmax_suspended_runs = 2000\nmax_suspended_runs_per_session = 1000\n",
    )
    .unwrap();
    let key = key_file("serve");
    let hosts: Vec<(crate::mcp::HttpServer, u16)> = (0..2)
        .map(|_| {
            let mut chosen = 0;
            let server = crate::mcp::HttpServer::spawn(|port| {
                chosen = port;
                let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
                command
                    .current_dir(&dir)
                    .args(["serve", "--http", &format!("127.0.0.1:{port}")])
                    .args(["--config", "quickcell.toml", "--auth-token-file", "token"])
                    .arg("--state-key-file")
                    .arg(&key)
                    .env("QUICKCELL_STATE_URL", &url);
                command
            });
            (server, chosen)
        })
        .collect();
    let bearer = format!("Authorization: Bearer {token}");
    let mut parked_ids = Vec::new();
    for (_, port) in &hosts {
        let port = *port;
        let init = post(port, &[&bearer], INITIALIZE);
        let session = format!("Mcp-Session-Id: {}", init.header("mcp-session-id").unwrap());
        post(
            port,
            &[&bearer, &session],
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        let call = |id: usize, name: &str, arguments: Value| {
            let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}});
            let message = rpc_message(&post(port, &[&bearer, &session], &body.to_string()));
            message["result"]["structuredContent"].clone()
        };
        for i in 0..500 {
            let r = call(
                i + 2,
                "exec",
                serde_json::json!({"title": "park", "code": format!("await yield_control(); return {i};")}),
            );
            assert_eq!(r["status"], "waiting", "{r}");
            parked_ids.push(r["runId"].as_str().unwrap().to_string());
        }
        // One of this host's runs resumes in its session.
        let r = call(
            1000,
            "wait",
            serde_json::json!({"runId": parked_ids.pop().unwrap()}),
        );
        assert_eq!(r["value"], 499, "{r}");
        let r = call(
            1001,
            "exec",
            serde_json::json!({"title": "park", "code": "await yield_control(); return 500;"}),
        );
        parked_ids.push(r["runId"].as_str().unwrap().to_string());
    }
    assert_eq!(parked_ids.len(), 1000);
    for (server, port) in &hosts {
        let m = send(
            *port,
            &format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{bearer}"),
            b"",
        );
        assert_eq!(
            sample(&m.body, "quickcell_cells_parked"),
            Some(1000.0),
            "{}",
            m.body
        );
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
        let rss_kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        eprintln!(
            "host on port {port}: RSS {} MiB with 500 of the 1,000 parked runs its own",
            rss_kb / 1024
        );
        assert!(rss_kb < 1 << 20, "RSS {rss_kb} KiB");
    }
    let out = Command::new("psql")
        .args([
            url.as_str(),
            "-qAtc",
            "SELECT COUNT(*), pg_size_pretty(SUM(octet_length(snapshot))) FROM runs",
        ])
        .output()
        .unwrap();
    eprintln!(
        "database: runs, snapshot bytes: {}",
        String::from_utf8_lossy(&out.stdout).trim()
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("1000|"));
}

/// `kill -9` of the host resuming a run, once it holds the claim: the
/// claim holds until its deadline (another host is told the run is being
/// resumed), then a restart-safe run is resumed by another host from its
/// last park, while any other run is unavailable (it may have run once
/// already).
#[test]
fn a_run_whose_host_died_mid_wait_resumes_elsewhere_after_the_lease() {
    let url = quickcell::testing::postgres_database();
    let (a, b) = (workdir(), workdir());
    for dir in [&a, &b] {
        std::fs::write(dir.join("quickcell.toml"), "[limits]\ntimeout_ms = 2000\n").unwrap();
    }
    let key = key_file("lease");
    let code =
        "await yield_control(); await new Promise((r) => setTimeout(r, 1500)); return 'done';";
    let run = |dir: &std::path::Path, args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", "quickcell.toml"]);
        host_with_key(dir, &url, &key, &all)
    };
    for restart_safe in [true, false] {
        let input =
            serde_json::json!({"title": "lease", "code": code, "restartSafe": restart_safe});
        let (status, parked) = run(&a, &["exec", "--input", &input.to_string()]);
        assert_eq!(status, 3, "{parked}");
        let run_id = parked["runId"].as_str().unwrap().to_string();
        // Host A resumes it and dies in the middle.
        let mut dying = Command::new(env!("CARGO_BIN_EXE_quickcell"))
            .current_dir(&a)
            .args([
                "wait",
                &run_id,
                "--config",
                "quickcell.toml",
                "--state-key-file",
            ])
            .arg(&key)
            .env("QUICKCELL_STATE_URL", &url)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Killed once it holds the claim (and is running the cell).
        let claimed_by_a = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let out = Command::new("psql")
                .args([
                    url.as_str(),
                    "-qAtc",
                    &format!("SELECT state FROM runs WHERE run_id = '{run_id}'"),
                ])
                .output()
                .unwrap();
            if String::from_utf8_lossy(&out.stdout).trim() == "resuming" {
                break;
            }
            assert!(
                std::time::Instant::now() < claimed_by_a,
                "host A never claimed the run"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        dying.kill().unwrap();
        dying.wait().unwrap();
        let (_, busy) = run(&b, &["wait", &run_id]);
        assert!(
            busy["error"]
                .as_str()
                .unwrap_or("")
                .contains("already being resumed"),
            "the lease holds: {busy}"
        );
        // After the lease (the call's timeout + 2 s), host B.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut last = loop {
            std::thread::sleep(std::time::Duration::from_millis(500));
            let (_, r) = run(&b, &["wait", &run_id]);
            let still_held = r["error"]
                .as_str()
                .unwrap_or("")
                .contains("already being resumed");
            if !still_held || std::time::Instant::now() > deadline {
                break r;
            }
        };
        if restart_safe {
            while last["status"] == "waiting" {
                last = run(&b, &["wait", &run_id]).1;
            }
            assert_eq!(last["value"], "done", "{last}");
        } else {
            assert_eq!(last["code"], "invalid_input", "{last}");
            assert!(
                last["error"]
                    .as_str()
                    .unwrap()
                    .contains("unavailable or expired"),
                "{last}"
            );
        }
    }
}

/// A directory for a host whose cells run `timeout_ms` before they park,
/// with the command tool `count_nap` (counts its runs in `counter`, naps
/// `nap_s` seconds, returns `{runs, input}`).
fn counting_host(
    timeout_ms: u64,
    counter: &std::path::Path,
    nap_s: u32,
    replay_safe: bool,
) -> std::path::PathBuf {
    let dir = workdir();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools/count_nap.sh");
    std::fs::write(
        dir.join("quickcell.toml"),
        format!(
            "[limits]\ntimeout_ms = {timeout_ms}\n\n[[tools]]\nname = \"count_nap\"\ndescription = \"Counts and naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"{nap_s}\"]\nreplay_safe = {replay_safe}\ntimeout_ms = 60000\n",
            script.display().to_string(),
            counter.display().to_string(),
        ),
    )
    .unwrap();
    dir
}

/// `quickcell ARGS --config quickcell.toml` in `dir`, started: its stdout
/// piped.
fn spawn_host(
    dir: &std::path::Path,
    url: &str,
    key: &std::path::Path,
    args: &[&str],
) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .current_dir(dir)
        .args(args)
        .args(["--config", "quickcell.toml", "--state-key-file"])
        .arg(key)
        .env("QUICKCELL_STATE_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// An `exec` of `code` started on the host in `dir`: the process (which
/// stays to drain the run's tool calls), and the run it parked.
fn park_on(
    dir: &std::path::Path,
    url: &str,
    key: &std::path::Path,
    code: &str,
) -> (std::process::Child, String) {
    let mut parking = spawn_host(dir, url, key, &["exec", "--code", code]);
    let parked = first_line(&mut parking);
    assert_eq!(parked["status"], "waiting", "{parked}");
    (parking, parked["runId"].as_str().unwrap().to_string())
}

/// `quickcell wait RUN --config quickcell.toml` on the host in `dir`.
fn wait_on(dir: &std::path::Path, url: &str, key: &std::path::Path, run_id: &str) -> (i32, Value) {
    host_with_key(
        dir,
        url,
        key,
        &["wait", run_id, "--config", "quickcell.toml"],
    )
}

/// The first line a host printed, as JSON (the parked result of an `exec`
/// whose process then stays to drain its tool calls).
fn first_line(child: &mut std::process::Child) -> Value {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

/// A fresh file for `count_nap` to count its runs in.
fn counter_file() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("quickcell-count-{}", uuid::Uuid::new_v4()))
}

/// Runs the tool counted in `counter`.
fn runs(counter: &std::path::Path) -> usize {
    std::fs::read_to_string(counter)
        .unwrap_or_default()
        .lines()
        .count()
}

/// A run parked on host A while its tool call still runs there is resumed
/// on host B: B does not run the call again (replay-safe or not) but waits
/// for the settlement A records, woken by `NOTIFY`, and completes with it.
#[test]
fn a_host_resuming_a_run_waits_for_the_calls_its_parking_host_runs() {
    let url = quickcell::testing::postgres_database();
    let key = key_file("drain");
    for replay_safe in [false, true] {
        let counter = counter_file();
        let a = counting_host(500, &counter, 3, replay_safe);
        let b = counting_host(30_000, &counter, 3, replay_safe);
        let (mut parking, run_id) = park_on(&a, &url, &key, "return await count_nap({})");
        let run_id = run_id.as_str();
        // A still runs the call (its process drains it before it exits).
        let (status, resumed) = wait_on(&b, &url, &key, run_id);
        assert_eq!(status, 0, "replay_safe {replay_safe}: {resumed}");
        assert_eq!(
            resumed["value"]["runs"], 1,
            "the call ran once, on A: {resumed}"
        );
        assert_eq!(
            parking.wait().unwrap().code(),
            Some(3),
            "A exits as its exec did, waiting"
        );
        assert_eq!(runs(&counter), 1);
        // B's usage record counts no tool call of its own.
        let (_, usage) = host_with_key(&b, &url, &key, &["usage", "--json", "--records", "100"]);
        let records = usage["records"].as_array().unwrap();
        let waited = records
            .iter()
            .find(|r| r["runId"] == run_id && r["kind"] == "wait")
            .unwrap_or_else(|| panic!("{usage}"));
        assert_eq!(waited["toolCalls"], 0, "{waited}");
        let _ = std::fs::remove_file(&counter);
    }
}

/// Many calls still running on the parking host are awaited together: the
/// resuming host gets every one of them, and none runs twice.
#[test]
fn a_host_resuming_a_run_awaits_many_calls_of_its_parking_host() {
    let url = quickcell::testing::postgres_database();
    let key = key_file("many");
    let counter = counter_file();
    let a = counting_host(500, &counter, 2, false);
    let b = counting_host(30_000, &counter, 2, false);
    let code = "const calls = []; for (let i = 0; i < 12; i++) calls.push(count_nap({i})); return (await Promise.all(calls)).map((r) => r.input.i);";
    let (mut parking, run_id) = park_on(&a, &url, &key, code);
    let run_id = run_id.as_str();
    let (status, resumed) = wait_on(&b, &url, &key, run_id);
    assert_eq!(status, 0, "{resumed}");
    assert_eq!(
        resumed["value"],
        serde_json::json!([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    );
    assert_eq!(parking.wait().unwrap().code(), Some(3));
    assert_eq!(runs(&counter), 12, "each call ran once");
    let _ = std::fs::remove_file(&counter);
}

/// A run resumed elsewhere and parked again while the call still runs on
/// the host that first parked it: the newer snapshot still awaits that
/// host's call, whose drainer outlives its own generation's expiry (the
/// run now expires later), and a third `wait` gets the result, the call
/// having run once.
#[test]
fn a_call_drained_across_a_second_park_elsewhere_is_delivered_once() {
    let url = quickcell::testing::postgres_database();
    let key = key_file("repark");
    let counter = counter_file();
    // A: parks after 0.5 s; its run would expire after 3 s; the call takes 6 s.
    let a = counting_host(500, &counter, 6, false);
    let ttl = "[limits]\nsnapshot_ttl_seconds = 3\n";
    let config = std::fs::read_to_string(a.join("quickcell.toml")).unwrap();
    std::fs::write(
        a.join("quickcell.toml"),
        config.replacen("[limits]\n", ttl, 1),
    )
    .unwrap();
    // B: waits 1 s, then parks again (an hour's expiry); C: waits 30 s.
    let b = counting_host(1_000, &counter, 6, false);
    let c = counting_host(30_000, &counter, 6, false);
    let (mut parking, run_id) = park_on(&a, &url, &key, "return await count_nap({})");
    let run_id = run_id.as_str();
    let (status, again) = wait_on(&b, &url, &key, run_id);
    assert_eq!(
        status, 3,
        "B parks it again, still awaiting A's call: {again}"
    );
    let (status, resumed) = wait_on(&c, &url, &key, run_id);
    assert_eq!(status, 0, "{resumed}");
    assert_eq!(resumed["value"]["runs"], 1, "{resumed}");
    assert_eq!(parking.wait().unwrap().code(), Some(3));
    assert_eq!(runs(&counter), 1);
    let _ = std::fs::remove_file(&counter);
}

/// When the host that parked a run dies (`kill -9`) while another host
/// waits for its tool call, the waiting host applies the restart rule once
/// the dead host's announcement lapses: a replay-safe call runs again
/// there, another settles with an unknown effect.
#[test]
fn a_host_waiting_on_a_dead_hosts_call_applies_the_restart_rule() {
    let url = quickcell::testing::postgres_database();
    let key = key_file("orphan");
    for replay_safe in [true, false] {
        let counter = counter_file();
        let a = counting_host(500, &counter, 30, replay_safe);
        let b = counting_host(30_000, &counter, 1, replay_safe);
        let (mut parking, run_id) = park_on(
            &a,
            &url,
            &key,
            "try { return (await count_nap({})).runs; } catch (e) { return String(e.message); }",
        );
        let run_id = run_id.as_str();
        let waiting = spawn_host(&b, &url, &key, &["wait", run_id]);
        parking.kill().unwrap();
        parking.wait().unwrap();
        let out = waiting.wait_with_output().unwrap();
        let resumed: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(resumed["status"], "completed", "{resumed}");
        if replay_safe {
            assert_eq!(resumed["value"], 2, "run again on B: {resumed}");
            assert_eq!(runs(&counter), 2);
        } else {
            let message = resumed["value"].as_str().unwrap();
            assert!(message.contains("its effect is unknown"), "{message}");
            assert_eq!(runs(&counter), 1);
        }
        let _ = std::fs::remove_file(&counter);
    }
}

/// The settlements a host records for a parked run are sealed with the
/// state key: the database holds no tool result in the clear, and one
/// altered there is refused (the cell gets an error, not the altered value).
#[test]
fn recorded_settlements_are_sealed() {
    let url = quickcell::testing::postgres_database();
    let key = key_file("sealed");
    let counter = counter_file();
    let a = counting_host(300, &counter, 1, false);
    let psql = |sql: &str| psql_at(&url, sql);
    let code = "try { return await count_nap({secret: 'tenant-secret-42'}); } catch (e) { return e.message; }";
    let mut parked_ids = Vec::new();
    for _ in 0..2 {
        // The exec process parks the run, then records the settlement
        // before it exits.
        let (status, parked) = host_with_key(
            &a,
            &url,
            &key,
            &["exec", "--code", code, "--config", "quickcell.toml"],
        );
        assert_eq!(status, 3, "{parked}");
        parked_ids.push(parked["runId"].as_str().unwrap().to_string());
    }
    let stored = psql("SELECT string_agg(settlement, ' ') FROM settlements");
    assert!(!stored.is_empty(), "both settlements are recorded");
    // (`-` is not in base64's alphabet: no sealed text holds it.)
    assert!(!stored.contains("tenant-secret-42"), "{stored}");
    // Altered in the database: the second run's settlement is refused.
    psql(&format!(
        "UPDATE settlements SET settlement = overlay(settlement placing (CASE WHEN substr(settlement, 40, 1) = 'A' THEN 'B' ELSE 'A' END) from 40 for 1) WHERE run_id = '{}'",
        parked_ids[1]
    ));
    let (status, intact) = host_with_key(
        &a,
        &url,
        &key,
        &["wait", &parked_ids[0], "--config", "quickcell.toml"],
    );
    assert_eq!(status, 0, "{intact}");
    assert_eq!(
        intact["value"]["input"]["secret"], "tenant-secret-42",
        "{intact}"
    );
    let (status, altered) = host_with_key(
        &a,
        &url,
        &key,
        &["wait", &parked_ids[1], "--config", "quickcell.toml"],
    );
    assert_eq!(status, 0, "{altered}");
    let message = altered["value"].as_str().unwrap_or_default();
    assert!(message.contains("refused"), "{altered}");
    assert_eq!(runs(&counter), 2, "neither call ran again");
    let _ = std::fs::remove_file(&counter);
}

/// `NOTIFY` reaches other hosts: a settlement one store (another pool, as
/// another host) records for a parked run wakes the watch another store
/// holds on that run. The store's watch has no fallback of its own (the
/// bridge's 10 s re-read is another layer), so without the notification
/// it would never wake and this test would time out; a settlement of
/// another run does not wake it.
#[tokio::test]
async fn a_recorded_settlement_wakes_another_stores_watch_by_notify() {
    use quickcell::store::{HostStore, ParkedRun, PostgresStateStore, RunStore};
    let url = quickcell::testing::postgres_database();
    let recorder = PostgresStateStore::connect(&url).await.unwrap();
    let watcher = PostgresStateStore::connect(&url).await.unwrap();
    let park = |run_id: &str| ParkedRun {
        run_id: run_id.to_string(),
        owner: quickcell::Owner::default(),
        generation: 1,
        expires_at_ms: u64::MAX / 2,
        snapshot: vec![1, 2, 3],
        lease: None,
        regrant: false,
        awaiting: vec![7],
        guest_build: quickcell::guest_build().to_string(),
    };
    recorder.park(park("cm_watched")).await.unwrap();
    recorder.park(park("cm_other")).await.unwrap();
    let mut watch = watcher.watch_settlements("cm_watched").await.unwrap();
    // The LISTEN connection, once it listens, wakes every watch once (to
    // read again what it may have missed while connecting): taken first.
    tokio::time::timeout(std::time::Duration::from_secs(5), watch.changed())
        .await
        .expect("the connection's wake");
    assert!(recorder
        .record_settlement("cm_other", 7, "{}")
        .await
        .unwrap());
    let woken = tokio::time::timeout(std::time::Duration::from_millis(500), watch.changed()).await;
    assert!(woken.is_err(), "another run's settlement does not wake it");
    assert!(recorder
        .record_settlement("cm_watched", 7, "{}")
        .await
        .unwrap());
    tokio::time::timeout(std::time::Duration::from_secs(30), watch.changed())
        .await
        .expect("woken by NOTIFY");
    let recorded = watcher
        .recorded_settlements("cm_watched", &[7])
        .await
        .unwrap();
    assert_eq!(recorded, vec![(7, "{}".to_string())]);
}

/// A directory for a host whose cells run `timeout_ms` before they park,
/// with the command tool `pid_nap` (writes its pid to `pid_file`, then
/// naps 60 s).
fn napping_host(timeout_ms: u64, pid_file: &std::path::Path) -> std::path::PathBuf {
    let dir = workdir();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools/pid_nap.sh");
    std::fs::write(
        dir.join("quickcell.toml"),
        format!(
            "[limits]\ntimeout_ms = {timeout_ms}\n\n[[tools]]\nname = \"pid_nap\"\ndescription = \"Naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"60\"]\ntimeout_ms = 90000\n",
            script.display().to_string(),
            pid_file.display().to_string(),
        ),
    )
    .unwrap();
    dir
}

/// `quickcell cancel` on host B takes effect on host A, which holds the
/// run (operations.md §3.1, one PostgreSQL store): a `wait` A is resuming
/// ends `aborted` (not with the tool's value, 60 s later) and its tool's
/// process is gone; a run A parked while its tool call still runs there
/// has that call's process killed, and A's `exec` process exits.
#[test]
fn a_cancel_on_one_host_takes_effect_on_the_host_holding_the_run() {
    use crate::cancel::alive;
    use crate::mcp_control::{eventually, pid_written};
    let url = quickcell::testing::postgres_database();
    let key = key_file("cancel");
    let pid_file = std::env::temp_dir().join(format!("quickcell-pid-{}", uuid::Uuid::new_v4()));
    let b = napping_host(60_000, &pid_file);
    let cancel_on_b = |run_id: &str| {
        let (status, cancelled) = host_with_key(
            &b,
            &url,
            &key,
            &["cancel", run_id, "--config", "quickcell.toml"],
        );
        assert_eq!(
            (status, &cancelled["code"]),
            (0, &Value::from("aborted")),
            "{cancelled}"
        );
    };

    // A `wait` on A resumes the run and runs the tool.
    let a = napping_host(60_000, &pid_file);
    let (mut parking, run_id) = park_on(
        &a,
        &url,
        &key,
        "await yield_control(); return await pid_nap({})",
    );
    assert_eq!(parking.wait().unwrap().code(), Some(3));
    let resuming = spawn_host(&a, &url, &key, &["wait", &run_id]);
    let pid = pid_written(&pid_file);
    let cancelled = std::time::Instant::now();
    cancel_on_b(&run_id);
    let out = resuming.wait_with_output().unwrap();
    // A figure, not a bound (it includes B's process start).
    eprintln!(
        "A's wait ended {:?} after B's `quickcell cancel` started",
        cancelled.elapsed()
    );
    let ended: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(ended["code"], "aborted", "{ended}");
    eventually("A's tool process is gone", || !alive(pid));
    let (status, gone) = wait_on(&b, &url, &key, &run_id);
    assert_eq!(
        (status, &gone["error"]),
        (1, &Value::from("code mode run is unavailable or expired."))
    );

    // A parks the run while its tool call runs, and stays to drain it.
    std::fs::remove_file(&pid_file).unwrap();
    let a = napping_host(500, &pid_file);
    let (mut parking, run_id) = park_on(&a, &url, &key, "return await pid_nap({})");
    let pid = pid_written(&pid_file);
    cancel_on_b(&run_id);
    eventually("A killed its tool's process", || !alive(pid));
    assert_eq!(
        parking.wait().unwrap().code(),
        Some(3),
        "A exits as its exec did"
    );
    let _ = std::fs::remove_file(&pid_file);
}

/// MCP 2026-07-28 over HTTP has no sessions: a run belongs to the
/// principal whose token parked it. Two `serve --http` hosts share one
/// database: a run parked through host A resumes through host B, for the
/// same principal, with a request that names nothing but its run id; for
/// another principal it does not exist.
#[test]
fn a_2026_07_28_run_parked_on_one_host_resumes_on_another_for_its_principal_only() {
    use crate::http::{post, rpc_message};
    let url = quickcell::testing::postgres_database();
    let dir = workdir();
    std::fs::write(
        dir.join("tokens"),
        "# principal token\nalice t0k3n-of-alice\nmallory t0k3n-of-mallory\n",
    )
    .unwrap();
    let key = key_file("modern");
    let hosts: Vec<(crate::mcp::HttpServer, u16)> = (0..2)
        .map(|_| {
            let mut chosen = 0;
            let server = crate::mcp::HttpServer::spawn(|port| {
                chosen = port;
                let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
                command
                    .current_dir(&dir)
                    .args(["serve", "--http", &format!("127.0.0.1:{port}")])
                    .args(["--auth-token-file", "tokens"])
                    .arg("--state-key-file")
                    .arg(&key)
                    .env("QUICKCELL_STATE_URL", &url);
                command
            });
            (server, chosen)
        })
        .collect();
    let call = |port: u16, token: &str, id: u64, name: &str, arguments: Value| {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}});
        let response = post(
            port,
            &[
                &format!("Authorization: Bearer {token}"),
                "MCP-Protocol-Version: 2026-07-28",
                "Mcp-Method: tools/call",
                &format!("Mcp-Name: {name}"),
            ],
            &body.to_string(),
        );
        assert_eq!(response.status, 200, "{}", response.body);
        assert_eq!(response.header("mcp-session-id"), None);
        rpc_message(&response)["result"]["structuredContent"].clone()
    };
    let (a, b) = (hosts[0].1, hosts[1].1);
    let parked = call(
        a,
        "t0k3n-of-alice",
        1,
        "exec",
        serde_json::json!({"title": "park", "code": "await yield_control(); return 'resumed elsewhere';"}),
    );
    assert_eq!(parked["status"], "waiting", "{parked}");
    let run = parked["runId"].as_str().unwrap().to_string();
    // Another principal, on either host: no such run (nothing leaks).
    for port in [a, b] {
        let refused = call(
            port,
            "t0k3n-of-mallory",
            2,
            "wait",
            serde_json::json!({"runId": run}),
        );
        assert_eq!(refused["status"], "failed", "{refused}");
        assert_eq!(refused["code"], "invalid_input", "{refused}");
        assert_eq!(
            refused["error"], "code mode run is unavailable or expired.",
            "{refused}"
        );
    }
    // Its principal, on the other host.
    let done = call(
        b,
        "t0k3n-of-alice",
        3,
        "wait",
        serde_json::json!({"runId": run}),
    );
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["value"], "resumed elsewhere", "{done}");
}

/// Hosts of two guest builds share one database (an upgrade in
/// progress): a `wait` on a host of another build than the run's is
/// refused with `snapshot_incompatible`, naming both, and leaves the row
/// as it was; a host of the run's build resumes it. Another build is
/// played by rewriting the row's `guest_build`.
#[test]
fn a_run_of_another_guest_build_stays_parked_for_a_host_of_its_build() {
    let url = quickcell::testing::postgres_database();
    let (a, b) = (workdir(), workdir());
    let psql = |sql: &str| psql_at(&url, sql);
    let (status, parked) = host(
        &a,
        &url,
        &["exec", "--code", "await yield_control(); return 'resumed';"],
    );
    assert_eq!(status, 3, "{parked}");
    let run = parked["runId"].as_str().unwrap().to_string();
    let ours = quickcell::guest_build();
    let row = format!(
        "SELECT state, generation, lease, guest_build, md5(snapshot) FROM runs WHERE run_id = '{run}'"
    );
    assert!(psql(&row).contains(ours), "the row names the build");
    let other = "ab".repeat(32);
    psql(&format!(
        "UPDATE runs SET guest_build = '{other}' WHERE run_id = '{run}'"
    ));
    let before = psql(&row);
    let (status, refused) = host(&b, &url, &["wait", &run]);
    assert_eq!(
        (status, &refused["code"]),
        (1, &Value::from("snapshot_incompatible")),
        "{refused}"
    );
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains(&format!(
            "was parked by guest build {other}; this host carries guest build {ours}"
        )),
        "{error}"
    );
    assert_eq!(psql(&row), before, "the run is untouched");
    // A host of its build.
    psql(&format!(
        "UPDATE runs SET guest_build = '{ours}' WHERE run_id = '{run}'"
    ));
    let (status, resumed) = host(&b, &url, &["wait", &run]);
    assert_eq!(
        (status, resumed["value"].clone()),
        (0, Value::from("resumed")),
        "{resumed}"
    );
}

/// Runs one SQL statement with `psql` against `url` and returns its
/// unaligned, trimmed output; a failing statement fails the test.
fn psql_at(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-qAtc", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
