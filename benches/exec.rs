//! Benchmarks of the foundation: a fresh trivial cell through the library,
//! the same cell over a catalog of 1,000 tools (what a catalog costs every
//! cell's start), the same cell declaring a client tool (its own catalog,
//! built or cached), a generated 1,000-line program, and (reported, not
//! timed) the fuel they consume.
//!
//! Run with `cargo bench --bench exec`. The whole-process figure
//! (`quickcell exec --code 'return 1'` with a warm module cache) is measured
//! with `hyperfine` as described in the README.

use criterion::{criterion_group, criterion_main, Criterion};
use quickcell::tools::{async_trait, CancelSignal, Tool, ToolError};
use quickcell::{ExecInput, Limits, Runtime, ToolRegistry};
use serde_json::{json, Value};
use std::sync::Arc;

/// A catalog entry that is never called.
struct Listed(String);

#[async_trait]
impl Tool for Listed {
    fn name(&self) -> &str {
        &self.0
    }
    fn description(&self) -> &str {
        "Looks up one record of the benchmark's catalog by its id"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"id": {"type": "string"}}})
    }
    async fn call(&self, _args: Value, _cancel: CancelSignal) -> Result<Value, ToolError> {
        Ok(Value::Null)
    }
}

fn generated_program(lines: usize) -> String {
    let mut src = String::from("let acc = 0;\n");
    for i in 0..lines - 2 {
        src.push_str(&format!("acc = (acc + {i} * 3) % 1000003;\n"));
    }
    src.push_str("return acc;\n");
    src
}

fn benches(c: &mut Criterion) {
    // Multi-threaded, as the CLI and the MCP server run: background work
    // (the standby instance, releasing a finished cell) runs on the worker
    // while the benchmark's thread runs the next cell.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let runtime = rt
        .block_on(Runtime::builder().limits(Limits::default()).build())
        .unwrap();

    let trivial = rt.block_on(runtime.exec(ExecInput::new("bench", "return 1+1")));
    eprintln!(
        "fuel used by `return 1+1`: {}",
        trivial.telemetry().fuel_used
    );

    c.bench_function("exec_trivial_cell", |b| {
        b.iter(|| rt.block_on(runtime.exec(ExecInput::new("bench", "return 1+1"))))
    });

    let mut registry = ToolRegistry::new();
    for i in 0..1_000 {
        registry
            .add(Arc::new(Listed(format!("lookup_{i}"))))
            .unwrap();
    }
    let cataloged = rt
        .block_on(Runtime::builder().tools(registry).build())
        .unwrap();
    let over_catalog = rt.block_on(cataloged.exec(ExecInput::new("bench", "return 1+1")));
    eprintln!(
        "fuel used by `return 1+1` over 1,000 tools: {}",
        over_catalog.telemetry().fuel_used
    );
    c.bench_function("exec_trivial_cell_1000_tools", |b| {
        b.iter(|| rt.block_on(cataloged.exec(ExecInput::new("bench", "return 1+1"))))
    });

    // A cell that declares a client tool over the same catalog: the first
    // call indexes a catalog for it; later ones with the same declaration
    // reuse it. Each iteration declares a fresh name (a build) or the
    // same one (the cache).
    let declared = |name: &str| {
        ExecInput::new("bench", "return 1+1").with_client_tools(vec![
            quickcell::ClientToolSpec::new(name, "Ask the user", json!({"type": "object"})),
        ])
    };
    let mut fresh = 0u64;
    c.bench_function("exec_client_tool_1000_tools_built", |b| {
        b.iter(|| {
            fresh += 1;
            rt.block_on(cataloged.exec(declared(&format!("ask_{fresh}"))))
        })
    });
    c.bench_function("exec_client_tool_1000_tools_cached", |b| {
        b.iter(|| rt.block_on(cataloged.exec(declared("ask_user"))))
    });

    let program = generated_program(1_000);
    let big = rt.block_on(runtime.exec(ExecInput::new("bench", program.clone())));
    eprintln!(
        "fuel used by the 1,000-line program: {}",
        big.telemetry().fuel_used
    );
    c.bench_function("exec_1000_line_program", |b| {
        b.iter(|| rt.block_on(runtime.exec(ExecInput::new("bench", program.clone()))))
    });
}

criterion_group!(exec, benches);
criterion_main!(exec);
