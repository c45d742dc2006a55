//! Deterministic fuel (operations.md §4.1): a cell's `fuelUsed` depends on
//! its source, its tool results and the order in which they are delivered
//! — not on how the results batch, how long the tools take, whether the
//! cell parks, or which process runs it.

use crate::value;
use quickcell::tools::{async_trait, CancelSignal, Tool, ToolError};
use quickcell::{CellResult, ExecInput, Limits, Runtime, ToolRegistry, WaitInput};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `slow`: answers `{"ok": true}` to every call after the next latency of
/// its schedule (in milliseconds, repeated from the start when it runs
/// out), so only the timing differs between runs.
struct Slow {
    latencies_ms: Vec<u64>,
    calls: AtomicUsize,
}

#[async_trait]
impl Tool for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    fn description(&self) -> &str {
        "Answers after a while"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _args: Value, _cancel: CancelSignal) -> Result<Value, ToolError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let ms = self.latencies_ms[n % self.latencies_ms.len()];
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Ok(json!({"ok": true}))
    }
}

async fn runtime(latencies_ms: &[u64], limits: Limits) -> Runtime {
    let mut registry = ToolRegistry::new();
    registry
        .add(Arc::new(Slow {
            latencies_ms: latencies_ms.to_vec(),
            calls: AtomicUsize::new(0),
        }))
        .unwrap();
    Runtime::builder()
        .limits(limits)
        .tools(registry)
        .build()
        .await
        .unwrap()
}

/// Runs `code` to completion, resuming every park; returns the value and
/// the fuel of each call (the `exec`, then each `wait`).
async fn run_to_end(rt: &Runtime, input: ExecInput) -> (Value, Vec<u64>) {
    let mut r = rt.exec(input).await;
    let mut fuel = vec![r.telemetry().fuel_used];
    while let CellResult::Waiting(w) = &r {
        let id = w.run_id.clone();
        r = rt.wait(WaitInput::new(id)).await;
        fuel.push(r.telemetry().fuel_used);
    }
    (value(&r), fuel)
}

/// Work between the calls: enough new heap (over 1 MiB of objects that
/// refer to themselves, so only the collector frees them) that the guest
/// collects garbage when the cell next waits.
const CHURN: &str = r#"
    const churn = (n) => {
        let head = null;
        for (let i = 0; i < n; i++) { const o = {i, s: "v" + i, next: head}; o.self = o; head = o; }
        let sum = 0;
        for (let o = head; o; o = o.next) sum += o.i;
        return sum;
    };
"#;

fn sequential() -> String {
    format!(
        "{CHURN} let total = 0; for (let i = 0; i < 3; i++) {{ await slow({{}}); total += churn(20000); }} return total;"
    )
}

/// Calls made together. The cell keeps busy after starting the first
/// three, so with short latencies their results are all ready when it
/// next waits (they used to reach the guest in one batch); with long ones
/// each arrives on its own.
fn together() -> String {
    format!(
        "{CHURN} const ps = [slow({{}}), slow({{}}), slow({{}})]; const busy = churn(40000); const rs = await Promise.all(ps); const more = await Promise.all([slow({{}}), slow({{}})]); return [rs.length + more.length, busy];"
    )
}

/// The same cell under different tool latencies spends the same fuel,
/// whether its calls run one after another or together, and whether the
/// results are ready at once or one by one. The latencies keep the order
/// in which the results arrive (the order is an input of the fuel count:
/// a guest reacts to what settles first).
#[tokio::test]
async fn fuel_does_not_depend_on_tool_latency() {
    let schedules: [&[u64]; 4] = [
        &[0, 10, 20, 0, 10],
        &[150, 250, 350, 150, 250],
        &[1, 2, 300, 50, 100],
        &[40, 60, 80, 0, 60],
    ];
    for code in [sequential(), together()] {
        let mut seen = Vec::new();
        for schedule in schedules {
            let rt = runtime(schedule, Limits::default()).await;
            let (v, fuel) = run_to_end(&rt, ExecInput::new("latency", code.as_str())).await;
            assert_eq!(fuel.len(), 1, "the cell completes inline");
            seen.push((v, fuel[0]));
        }
        assert!(
            seen.windows(2).all(|w| w[0] == w[1]),
            "fuel varies with latency for {code}: {seen:?}"
        );
    }
}

/// A cell that parks while its tools run and is resumed spends, over its
/// `exec` and `wait`s, exactly the fuel it spends completing inline: the
/// checkpoint, the restore and the reseed charge nothing and change
/// nothing the cell later pays for.
#[tokio::test]
async fn parked_and_resumed_costs_what_inline_costs() {
    for code in [sequential(), together()] {
        let rt = runtime(&[0], Limits::default()).await;
        let (inline_value, inline) = run_to_end(&rt, ExecInput::new("inline", code.as_str())).await;
        assert_eq!(inline.len(), 1);

        // Each call outlasts the cell's park point (timeout 2 s, parked
        // 250 ms before it), so the cell parks on every call; the timeout
        // leaves the cell's own work (a few hundred ms on a loaded machine)
        // far from it.
        let rt = runtime(&[2500], Limits::default().with_timeout_ms(2000)).await;
        let (parked_value, parked) = run_to_end(&rt, ExecInput::new("parked", code.as_str())).await;
        assert!(parked.len() >= 3, "parks more than once: {parked:?}");
        assert_eq!(parked_value, inline_value);
        assert_eq!(
            parked.iter().sum::<u64>(),
            inline[0],
            "exec + waits {parked:?} against inline {inline:?}"
        );
    }
}

/// A `yield_control()` parks the cell; in a required cell (`awaitResults`)
/// it resolves at once. Both spend the same fuel in all.
#[tokio::test]
async fn a_yield_parked_costs_what_a_yield_resolved_inline_costs() {
    let code = format!(
        "{CHURN} const a = churn(30000); await yield_control(); const b = churn(30000); await yield_control(); return a + b;"
    );
    let rt = runtime(&[0], Limits::default()).await;
    let (parked_value, parked) = run_to_end(&rt, ExecInput::new("yields", code.as_str())).await;
    assert_eq!(parked.len(), 3);
    let mut required = ExecInput::new("required", code.as_str());
    required.await_results = true;
    let (inline_value, inline) = run_to_end(&rt, required).await;
    assert_eq!(inline.len(), 1);
    assert_eq!(parked_value, inline_value);
    assert_eq!(parked.iter().sum::<u64>(), inline[0]);
}

/// Two processes: one parks the cell, another resumes it; a third runs it
/// inline (`awaitResults`). The totals are equal, and a cell run in two
/// processes spends the same fuel in each.
#[test]
fn fuel_is_the_same_across_processes() {
    let dir = std::env::temp_dir().join(format!("quickcell-fuel-{}", uuid::Uuid::new_v4()));
    let state = dir.join("state");
    let state = state.to_str().unwrap();
    let code =
        format!("{CHURN} const a = churn(25000); await yield_control(); return a + churn(100);");
    let run = crate::quickcell;

    let (status, parked, _) = run(&["exec", "--state-dir", state, "--code", &code]);
    assert_eq!(status, 3, "exit status 3: waiting; {parked}");
    assert_eq!(parked["status"], "waiting", "{parked}");
    let run_id = parked["runId"].as_str().unwrap();
    let (status, resumed, _) = run(&["wait", "--state-dir", state, run_id]);
    assert_eq!(status, 0, "{resumed}");
    assert_eq!(resumed["status"], "completed", "{resumed}");
    let fuel = |v: &Value| v["telemetry"]["fuelUsed"].as_u64().unwrap();

    let input = json!({"title": "inline", "code": code, "awaitResults": true}).to_string();
    let mut inline = Vec::new();
    for _ in 0..2 {
        let (status, v, _) = run(&["exec", "--state-dir", state, "--input", &input]);
        assert_eq!(status, 0, "{v}");
        assert_eq!(v["value"], resumed["value"]);
        inline.push(fuel(&v));
    }
    assert_eq!(inline[0], inline[1], "two processes, one cell");
    assert_eq!(fuel(&parked) + fuel(&resumed), inline[0]);
    let _ = std::fs::remove_dir_all(dir);
}

/// `gated`: answers `{"n": n}` once the test opens gate `n`, then reports
/// that it answered, so a test decides the order in which calls finish.
struct Gated {
    gates: Vec<Arc<tokio::sync::Notify>>,
    answered: tokio::sync::mpsc::UnboundedSender<u64>,
}

#[async_trait]
impl Tool for Gated {
    fn name(&self) -> &str {
        "gated"
    }
    fn description(&self) -> &str {
        "Answers when the test opens its gate"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"n": {"type": "integer"}}})
    }
    async fn call(&self, args: Value, _cancel: CancelSignal) -> Result<Value, ToolError> {
        let n = args["n"].as_u64().unwrap_or(0);
        self.gates[n as usize].notified().await;
        let _ = self.answered.send(n);
        Ok(json!({"n": n}))
    }
}

/// Settlements that are ready together reach the guest in request order,
/// whatever order the tools finished in (operations.md §4.1): the cell
/// parks at `yield_control()` with three calls running, they finish in
/// every order while it is parked, and the `wait` that resumes it spends
/// the same fuel and returns the same value each time.
#[tokio::test]
async fn settlements_ready_together_are_delivered_in_request_order() {
    let code = format!(
        "{CHURN} const ps = [gated({{n: 0}}), gated({{n: 1}}), gated({{n: 2}})]; \
         const seen = []; ps.forEach((p) => p.then((r) => seen.push(r.n))); \
         await yield_control(); const rs = await Promise.all(ps); \
         return {{seen, rs: rs.map((r) => r.n), busy: churn(5000)}};"
    );
    let orders: [[usize; 3]; 4] = [[0, 1, 2], [2, 1, 0], [1, 0, 2], [2, 0, 1]];
    let mut seen = Vec::new();
    for order in orders {
        let gates: Vec<_> = (0..3)
            .map(|_| Arc::new(tokio::sync::Notify::new()))
            .collect();
        let (answered, mut answers) = tokio::sync::mpsc::unbounded_channel();
        let mut registry = ToolRegistry::new();
        registry
            .add(Arc::new(Gated {
                gates: gates.clone(),
                answered,
            }))
            .unwrap();
        let rt = Runtime::builder().tools(registry).build().await.unwrap();
        let parked = rt.exec(ExecInput::new("order", code.as_str())).await;
        let CellResult::Waiting(w) = &parked else {
            panic!("parks at yield_control: {}", value(&parked));
        };
        let run_id = w.run_id.clone();
        for n in order {
            gates[n].notify_one();
            assert_eq!(answers.recv().await, Some(n as u64));
        }
        // The tools answered; their settlements land in the parked run's
        // bridge as soon as this (single-threaded) test yields.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let done = rt.wait(WaitInput::new(run_id)).await;
        let v = value(&done);
        assert_eq!(v["seen"], json!([0, 1, 2]), "{v}");
        seen.push((
            order,
            parked.telemetry().fuel_used,
            done.telemetry().fuel_used,
        ));
    }
    // (finish order, exec fuel, wait fuel), for the record.
    eprintln!("{seen:?}");
    assert!(
        seen.windows(2)
            .all(|w| w[0].1 == w[1].1 && w[0].2 == w[1].2),
        "fuel varies with the order the tools finished in: {seen:?}"
    );
}
