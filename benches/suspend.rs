//! Suspension benchmarks: checkpoint and restore of parked cells.
//!
//! Each cell starts a tool call, then yields, so it parks with the call in
//! flight; `wait` restores it and finishes. `checkpoint_*` and `restore_*`
//! time only those steps (criterion's `iter_custom` with the timings the
//! runtime records for its latest checkpoint and restore):
//!
//! - checkpoint = garbage collection + memory diff against the
//!   pre-initialized image + zstd; `persist` (the state-store write) is
//!   reported separately on stderr;
//! - restore = snapshot decode and checks + fresh instance + page writes +
//!   stack pointer + reseed.
//!
//! `exec_to_waiting` and `wait_to_completed` time whole calls with the
//! in-memory state store; `sqlite_park_resume/*` and
//! `sqlite_20mb_park_resume/*` the same calls (one-tool and 20 MB cells)
//! with the SQLite store in a scratch state directory (what the CLI and
//! `serve` use), `postgres_park_resume/*` and `postgres_20mb_park_resume/*`
//! with the PostgreSQL store (a throwaway local cluster).
//! `postgres_settlement_wake` times what a host waiting for another
//! host's tool call pays once the call settles: host A records the
//! settlement (insert, `NOTIFY`), host B's watch wakes on its `LISTEN`
//! connection, and B reads the settlement. Run with
//! `cargo bench --bench suspend`.

use criterion::{criterion_group, criterion_main, Criterion};
use quickcell::testing::last_suspend_stats;
use quickcell::tools::{async_trait, CancelSignal, Tool, ToolError};
use quickcell::{ExecInput, Limits, Runtime, ToolRegistry, WaitInput};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// A tool that answers `{ok: true, n: 42}`.
struct SlowTool;

#[async_trait]
impl Tool for SlowTool {
    fn name(&self) -> &str {
        "slowTool"
    }
    fn description(&self) -> &str {
        "Answers after a while"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _args: Value, _cancel: CancelSignal) -> Result<Value, ToolError> {
        Ok(json!({"ok": true, "n": 42}))
    }
}

const ONE_TOOL: &str =
    "const p = slowTool({q: 'hi'}); await yield_control(); const r = await p; return r.n;";

/// About 20 MB of live objects (80,000 small records; the changed-page
/// payload is printed).
const HEAVY: &str = "const big = Array.from({length: 80000}, (_, i) => ({i, s: 'item ' + i, t: [i, i + 1]})); const p = slowTool({q: 'hi'}); await yield_control(); const r = await p; return r.n + big.length;";

/// Limits that let the 20 MB cell park.
fn bench_limits() -> Limits {
    Limits::default()
        .with_max_snapshot_bytes(256 << 20)
        .with_memory_limit_bytes(256 << 20)
}

/// The Tokio runtime the benchmarks drive and a registry with `slowTool`.
fn setup() -> (tokio::runtime::Runtime, ToolRegistry) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut registry = ToolRegistry::new();
    registry.add(Arc::new(SlowTool)).unwrap();
    (rt, registry)
}

fn benches(c: &mut Criterion) {
    let (rt, registry) = setup();
    let runtime = rt
        .block_on(
            Runtime::builder()
                .tools(registry)
                .limits(bench_limits())
                .build(),
        )
        .unwrap();
    // One park and resume; returns the stats of both.
    let cycle = |code: &str| {
        rt.block_on(async {
            let parked = runtime.exec(ExecInput::new("bench", code)).await;
            let run_id = parked
                .run_id()
                .unwrap_or_else(|| panic!("expected waiting: {}", parked.to_json()))
                .to_string();
            let parked_stats = last_suspend_stats();
            let done = runtime.wait(WaitInput::new(run_id)).await;
            assert_eq!(done.status(), "completed", "{}", done.to_json());
            let mut stats = last_suspend_stats();
            stats.checkpoint = parked_stats.checkpoint;
            stats.collect = parked_stats.collect;
            stats.persist = parked_stats.persist;
            stats.snapshot_bytes = parked_stats.snapshot_bytes;
            stats.payload_bytes = parked_stats.payload_bytes;
            stats
        })
    };
    for (name, code, samples) in [("one_tool", ONE_TOOL, 100), ("20mb", HEAVY, 10)] {
        let s = cycle(code);
        eprintln!(
            "{name}: snapshot {} bytes compressed from {} bytes of changed pages; checkpoint {:?} of which GC {:?}; persist {:?}",
            s.snapshot_bytes, s.payload_bytes, s.checkpoint, s.collect, s.persist
        );
        let mut group = c.benchmark_group(format!("suspend_{name}"));
        group.sample_size(samples);
        group.bench_function("checkpoint", |b| {
            b.iter_custom(|iters| (0..iters).map(|_| cycle(code).checkpoint).sum::<Duration>())
        });
        group.bench_function("restore", |b| {
            b.iter_custom(|iters| (0..iters).map(|_| cycle(code).restore).sum::<Duration>())
        });
        group.finish();
    }
    c.bench_function("exec_to_waiting", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                rt.block_on(async {
                    let start = std::time::Instant::now();
                    let parked = runtime.exec(ExecInput::new("bench", ONE_TOOL)).await;
                    total += start.elapsed();
                    let id = parked.run_id().unwrap().to_string();
                    runtime.wait(WaitInput::new(id)).await;
                });
            }
            total
        })
    });
    c.bench_function("wait_to_completed", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                rt.block_on(async {
                    let parked = runtime.exec(ExecInput::new("bench", ONE_TOOL)).await;
                    let id = parked.run_id().unwrap().to_string();
                    let start = std::time::Instant::now();
                    runtime.wait(WaitInput::new(id)).await;
                    total += start.elapsed();
                });
            }
            total
        })
    });
}

/// Whole park and resume calls of the one-tool cell and of the 20 MB cell
/// with a persistent state store built by `build` (`prefix` names it).
fn store_benches(c: &mut Criterion, prefix: &str, build: quickcell::RuntimeBuilder) {
    let (rt, registry) = setup();
    let runtime = rt
        .block_on(build.tools(registry).limits(bench_limits()).build())
        .unwrap();
    // Parks, then resumes; returns the time of the resume when
    // `timed_wait`, else of the park.
    let call = |code: &str, timed_wait: bool| {
        rt.block_on(async {
            let start = std::time::Instant::now();
            let parked = runtime.exec(ExecInput::new("bench", code)).await;
            let parking = start.elapsed();
            let id = parked.run_id().expect("waiting").to_string();
            runtime.settle_parked_tool_calls().await;
            let start = std::time::Instant::now();
            let done = runtime.wait(WaitInput::new(id)).await;
            let resuming = start.elapsed();
            assert_eq!(done.status(), "completed", "{}", done.to_json());
            if timed_wait {
                resuming
            } else {
                parking
            }
        })
    };
    for (cell, code, samples) in [("", ONE_TOOL, 100), ("20mb_", HEAVY, 10)] {
        let mut group = c.benchmark_group(format!("{prefix}{cell}park_resume"));
        group.sample_size(samples);
        group.bench_function("exec_to_waiting", |b| {
            b.iter_custom(|iters| (0..iters).map(|_| call(code, false)).sum::<Duration>())
        });
        group.bench_function("wait_to_completed", |b| {
            b.iter_custom(|iters| (0..iters).map(|_| call(code, true)).sum::<Duration>())
        });
        group.finish();
    }
}

/// The SQLite state store in a scratch state directory.
fn sqlite_benches(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("quickcell-bench-state-{}", std::process::id()));
    store_benches(c, "sqlite_", Runtime::builder().state_dir(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The PostgreSQL state store in a fresh database of a throwaway cluster
/// (`QUICKCELL_TEST_POSTGRES_URL`, or one started for the run).
#[cfg(feature = "postgres")]
fn postgres_benches(c: &mut Criterion) {
    let url = quickcell::testing::postgres_database();
    let key = quickcell::StateKey::new(&[7; 32]).unwrap();
    store_benches(
        c,
        "postgres_",
        Runtime::builder().state_url(url).state_key(key),
    );

    settlement_wake(c, &quickcell::testing::postgres_database());
}

/// Host A records a settlement of a run host B watches; B wakes and reads
/// it (two stores on one database: two hosts).
#[cfg(feature = "postgres")]
fn settlement_wake(c: &mut Criterion, url: &str) {
    use quickcell::store::{HostStore as _, Owner, ParkedRun, PostgresStateStore, RunStore as _};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (a, b, mut watch) = rt.block_on(async {
        let a = PostgresStateStore::connect(url).await.unwrap();
        let b = PostgresStateStore::connect(url).await.unwrap();
        let run = ParkedRun {
            run_id: "cm_bench".into(),
            owner: Owner::default(),
            generation: 1,
            expires_at_ms: u64::MAX / 4,
            snapshot: vec![1],
            lease: None,
            regrant: false,
            awaiting: Vec::new(),
            guest_build: quickcell::guest_build().to_string(),
        };
        a.park(run).await.unwrap();
        let watch = b.watch_settlements("cm_bench").await.unwrap();
        (a, b, watch)
    });
    let mut id = 0u64;
    c.bench_function("postgres_settlement_wake", |bench| {
        bench.iter(|| {
            id += 1;
            rt.block_on(async {
                a.record_settlement("cm_bench", id, "{}").await.unwrap();
                watch.changed().await;
                let read = b.recorded_settlements("cm_bench", &[id]).await.unwrap();
                assert_eq!(read.len(), 1);
            })
        })
    });
}

#[cfg(not(feature = "postgres"))]
fn postgres_benches(_: &mut Criterion) {}

criterion_group!(suspend, benches, sqlite_benches, postgres_benches);
criterion_main!(suspend);
