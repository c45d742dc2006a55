//! Bridge benchmarks: cells calling a no-op Rust tool.
//!
//! - `bridge_1_call` vs `exec_trivial` (in `benches/exec.rs`): one round trip
//!   host → guest → host plus a cell;
//! - `bridge_100_sequential`: 100 awaited calls in one cell; the per-call
//!   round trip is (this − `bridge_1_call`) / 99;
//! - `bridge_promise_all_100`: 100 calls awaited together;
//! - `bridge_round_trip`: one round trip host → guest → host, as the paired
//!   difference (100 sequential − 1 call) / 99 within each iteration.
//!
//! - `mcp_1_call`, `mcp_10_sequential`: the same through a downstream MCP
//!   server over stdio (`fixtures/mcp/server.py`, Python `mcp` SDK; skipped
//!   when `scripts/setup-tests` has not installed `.venv-mcp`). Most of this is
//!   the Python server's own time.
//!
//! Run with `cargo bench --bench bridge`.

use criterion::{criterion_group, criterion_main, Criterion};
use quickcell::tools::{async_trait, CancelSignal, Tool, ToolError};
use quickcell::{ExecInput, Runtime, ToolRegistry};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Noop;

#[async_trait]
impl Tool for Noop {
    fn name(&self) -> &str {
        "noop"
    }
    fn description(&self) -> &str {
        "Does nothing"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, _args: Value, _cancel: CancelSignal) -> Result<Value, ToolError> {
        Ok(Value::Null)
    }
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut registry = ToolRegistry::new();
    registry.add(Arc::new(Noop)).unwrap();
    let runtime = rt
        .block_on(Runtime::builder().tools(registry).build())
        .unwrap();
    let cells = [
        ("bridge_1_call", "await noop({}); return 1"),
        (
            "bridge_100_sequential",
            "for (let i = 0; i < 100; i++) await noop({}); return 1",
        ),
        (
            "bridge_promise_all_100",
            "await Promise.all(Array.from({length: 100}, () => noop({}))); return 1",
        ),
    ];
    for (name, code) in cells {
        let check = rt.block_on(runtime.exec(ExecInput::new("bench", code)));
        assert_eq!(check.status(), "completed", "{}", check.to_json());
        eprintln!("{name}: fuel {}", check.telemetry().fuel_used);
        c.bench_function(name, |b| {
            b.iter(|| rt.block_on(runtime.exec(ExecInput::new("bench", code))))
        });
    }
    // One round trip, measured as a paired difference: each iteration runs
    // the 1-call and the 100-call cell back to back and counts
    // (t100 - t1) / 99, so the cell's own cost cancels and both halves see
    // the same machine state.
    let (one, hundred) = (cells[0].1, cells[1].1);
    c.bench_function("bridge_round_trip", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                rt.block_on(runtime.exec(ExecInput::new("bench", one)));
                let t1 = t.elapsed();
                let t = Instant::now();
                rt.block_on(runtime.exec(ExecInput::new("bench", hundred)));
                total += t.elapsed().saturating_sub(t1) / 99;
            }
            total
        })
    });
}

fn mcp_benches(c: &mut Criterion) {
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv-mcp/bin/python");
    if !std::path::Path::new(python).exists() {
        eprintln!("mcp benches skipped: run scripts/setup-tests to install .venv-mcp");
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = quickcell::McpServerConfig::stdio(
        "accounting",
        python,
        &[concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/mcp/server.py"
        )],
    );
    let runtime = rt
        .block_on(Runtime::builder().mcp_servers(vec![server]).build())
        .unwrap();
    let cells = [
        (
            "mcp_1_call",
            "await MCP.accounting.echo({message: 'x'}); return 1",
        ),
        (
            "mcp_10_sequential",
            "for (let i = 0; i < 10; i++) await MCP.accounting.echo({message: 'x'}); return 1",
        ),
    ];
    for (name, code) in cells {
        let check = rt.block_on(runtime.exec(ExecInput::new("bench", code)));
        assert_eq!(check.status(), "completed", "{}", check.to_json());
        c.bench_function(name, |b| {
            b.iter(|| rt.block_on(runtime.exec(ExecInput::new("bench", code))))
        });
    }
}

criterion_group!(bridge, benches, mcp_benches);
criterion_main!(bridge);
