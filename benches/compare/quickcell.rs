//! The quickcell side of the side-by-side comparison with quickjs-wasi (see
//! `benches/compare/README.md`): create a runtime, evaluate a cell until it
//! awaits a slow tool, snapshot it, restore it and finish it. Prints one
//! JSON line in the same shape as `quickjs-wasi.mjs`.
//!
//! Run with `cargo bench --profile dev --bench compare` (`ITERATIONS`,
//! default 50). Not part of CI.
//!
//! How the steps map onto quickcell:
//! - `create` = `Runtime::builder().tools(..).build()` with the process's
//!   engine already loaded (as quickjs-wasi's module is compiled before the
//!   loop); instances are created per call, inside `evaluate` and
//!   `restore`.
//! - `evaluate` = `exec` until it returns `waiting`, minus the checkpoint
//!   and the state-store write. The cell starts the tool call and then
//!   `await yield_control()`, so it parks at once with the call in flight
//!   (quickcell would otherwise park only near its deadline).
//! - `snapshot` = the checkpoint: GC, page diff, XOR deltas, zstd, header.
//!   `persist_us` (the SQLite write, in memory here) is reported apart.
//!   `snapshot_bytes` is the compressed snapshot.
//! - `restore` = decode and verify, fresh instance, page writes, stack
//!   pointer, reseed.
//! - `finish` = the tool's answer `{ok: true, n: 42}` is released, then
//!   `wait` (minus `restore`) delivers it and runs the cell to its value,
//!   which must be 1042.
//! - `loop` = `exec` of [`LOOP_CELL`], a 1e6-iteration loop, with fuel
//!   metering on (quickcell's default): interpreter speed under metering.

use quickcell::testing::last_suspend_stats;
use quickcell::tools::{async_trait, CancelSignal, Tool, ToolError};
use quickcell::{ExecInput, Runtime, ToolRegistry, WaitInput};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

const CELL: &str = r#"const big = Array.from({length: 1000}, (_, i) => ({i, s: "x" + i}));
const pending = slowTool({q: "hi"});
await yield_control();
const r = await pending;
return r.n + big.length;"#;

/// The `loop` step's cell; its value must be [`LOOP_VALUE`].
const LOOP_CELL: &str = "let s = 0; for (let i = 0; i < 1e6; i++) s += i; return s;";
const LOOP_VALUE: u64 = 499_999_500_000;

/// Answers `{ok: true, n: 42}` once released.
struct SlowTool(Arc<Notify>);

#[async_trait]
impl Tool for SlowTool {
    fn name(&self) -> &str {
        "slowTool"
    }
    fn description(&self) -> &str {
        "Answers when the benchmark releases it"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _args: Value, _cancel: CancelSignal) -> Result<Value, ToolError> {
        self.0.notified().await;
        Ok(json!({"ok": true, "n": 42}))
    }
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // `cargo test --benches` probes; there is nothing to list.
    }
    let iterations: usize = std::env::var("ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let release = Arc::new(Notify::new());
    let registry = || {
        let mut registry = ToolRegistry::new();
        registry.add(Arc::new(SlowTool(release.clone()))).unwrap();
        registry
    };
    // Load the engine once (module cache), outside every step.
    rt.block_on(Runtime::builder().build()).unwrap();
    let mut steps: [Vec<Duration>; 7] = Default::default();
    let mut snapshot_bytes = 0;
    for _ in 0..iterations {
        rt.block_on(async {
            let t = Instant::now();
            let runtime = Runtime::builder().tools(registry()).build().await.unwrap();
            let create = t.elapsed();
            let t = Instant::now();
            let parked = runtime.exec(ExecInput::new("compare", CELL)).await;
            let exec_total = t.elapsed();
            let run_id = parked
                .run_id()
                .unwrap_or_else(|| panic!("expected waiting: {}", parked.to_json()))
                .to_string();
            let parked_stats = last_suspend_stats();
            release.notify_one();
            let t = Instant::now();
            let done = runtime.wait(WaitInput::new(run_id)).await;
            let wait_total = t.elapsed();
            let restored = last_suspend_stats();
            assert_eq!(done.into_value().unwrap(), json!(1042));
            snapshot_bytes = parked_stats.snapshot_bytes;
            steps[0].push(create);
            steps[1]
                .push(exec_total.saturating_sub(parked_stats.checkpoint + parked_stats.persist));
            steps[2].push(parked_stats.checkpoint);
            steps[3].push(restored.restore);
            steps[4].push(wait_total.saturating_sub(restored.restore));
            steps[5].push(parked_stats.persist);
        });
    }
    // The loops run after the scenario, not inside its iterations: 60 ms of
    // interpreter loop evicts the runtime's code and data from the caches,
    // and a `create` right after one measured that cold start (~125 µs
    // instead of ~20 µs), not the builder.
    let runtime = rt
        .block_on(Runtime::builder().tools(registry()).build())
        .unwrap();
    for _ in 0..iterations {
        rt.block_on(async {
            let t = Instant::now();
            let looped = runtime.exec(ExecInput::new("compare", LOOP_CELL)).await;
            steps[6].push(t.elapsed());
            assert_eq!(looped.into_value().unwrap(), json!(LOOP_VALUE));
        });
    }
    let [create, evaluate, snapshot, restore, finish, persist, looped] = steps.map(median);
    println!(
        "{}",
        json!({
            "engine": "quickcell",
            "version": env!("CARGO_PKG_VERSION"),
            "iterations": iterations,
            "median_us": {"create": create, "evaluate": evaluate, "snapshot": snapshot, "restore": restore, "finish": finish, "loop": looped},
            "persist_us": persist,
            "snapshot_bytes": snapshot_bytes,
        })
    );
}
