//! Benchmarks of the foundation: a fresh trivial cell through the library,
//! a generated 1,000-line program, and (reported, not timed) the fuel the
//! trivial cell consumes.
//!
//! Run with `cargo bench --bench exec`. The whole-process figure
//! (`quickcell exec --code 'return 1'` with a warm module cache) is measured
//! with `hyperfine` as described in the README.

use criterion::{criterion_group, criterion_main, Criterion};
use quickcell::{ExecInput, Limits, Runtime};

fn generated_program(lines: usize) -> String {
    let mut src = String::from("let acc = 0;\n");
    for i in 0..lines - 2 {
        src.push_str(&format!("acc = (acc + {i} * 3) % 1000003;\n"));
    }
    src.push_str("return acc;\n");
    src
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
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
