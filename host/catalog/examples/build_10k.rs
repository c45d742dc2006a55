//! Timing of `Catalog` construction on the synthetic 10k-tool catalog of
//! `benches/catalog.rs` (same generator), for machines where the criterion
//! bench cannot be built.
//!
//! `cargo run --release -p quickcell-catalog --example build_10k [rounds]`
//!
//! Prints the median, min and max wall time of the build (the catalog is
//! dropped outside the measurement, like criterion's `iter_batched`).

use quickcell_catalog::{Catalog, SearchOptions, Source, ToolSpec};
use serde_json::json;
use std::hint::black_box;
use std::time::Instant;

const VERBS: [&str; 16] = [
    "get", "list", "create", "update", "delete", "search", "send", "read", "write", "sync",
    "export", "import", "schedule", "fetch", "archive", "render",
];
const NOUNS: [&str; 24] = [
    "issue",
    "invoice",
    "file",
    "message",
    "calendar",
    "event",
    "user",
    "repository",
    "ticket",
    "report",
    "document",
    "image",
    "contact",
    "order",
    "payment",
    "task",
    "note",
    "page",
    "folder",
    "comment",
    "label",
    "channel",
    "project",
    "webhook",
];
const WORDS: [&str; 24] = [
    "quickly",
    "records",
    "account",
    "workspace",
    "remote",
    "local",
    "archived",
    "recent",
    "shared",
    "team",
    "status",
    "history",
    "metadata",
    "summary",
    "details",
    "batch",
    "current",
    "cached",
    "external",
    "internal",
    "public",
    "private",
    "draft",
    "pending",
];

fn spec(i: usize) -> ToolSpec {
    let verb = VERBS[i % VERBS.len()];
    let noun = NOUNS[(i / VERBS.len()) % NOUNS.len()];
    let name = format!("{verb}_{noun}_{i}");
    let description = format!(
        "{} the {noun} {} for the {} {} and returns {} {}.",
        verb,
        WORDS[i % 24],
        WORDS[(i * 7) % 24],
        WORDS[(i * 13) % 24],
        WORDS[(i * 5) % 24],
        WORDS[(i * 11) % 24]
    );
    ToolSpec::new(name, description).with_input_schema(json!({
        "type": "object",
        "required": ["id"],
        "properties": {
            "id": {"type": "string", "description": format!("The {noun} id")},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Maximum results"},
            "mode": {"enum": ["fast", "full"], "description": format!("{} mode", WORDS[(i * 3) % 24])}
        }
    }))
}

/// 10,000 tool definitions: 8,000 core, 1,500 MCP on 10 servers, 500 client.
fn synthetic_specs(n: usize) -> Vec<(Source, ToolSpec)> {
    (0..n)
        .map(|i| {
            let source = match i % 20 {
                0..=15 => Source::Core,
                16..=18 => Source::Mcp {
                    server: format!("server{}", i % 10),
                },
                _ => Source::Client,
            };
            (source, spec(i))
        })
        .collect()
}

fn build(specs: Vec<(Source, ToolSpec)>) -> Catalog {
    let mut b = Catalog::builder();
    for (source, spec) in specs {
        b = b.tool(source, spec);
    }
    b.build()
}

/// Nanoseconds this thread has spent on a CPU (robust on a busy machine);
/// 0 where `/proc/thread-self/schedstat` is unavailable.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30);
    let specs = synthetic_specs(10_000);
    let mut wall = Vec::with_capacity(rounds);
    let mut cpu = Vec::with_capacity(rounds);
    let mut keep = Vec::new();
    for _ in 0..rounds {
        let input = specs.clone();
        let (t0, c0) = (Instant::now(), cpu_ns());
        let c = black_box(build(input));
        wall.push(t0.elapsed().as_secs_f64() * 1e3);
        cpu.push((cpu_ns() - c0) as f64 / 1e6);
        keep.push(c); // dropped outside the measurement
        if keep.len() > 2 {
            keep.remove(0);
        }
    }
    wall.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    println!(
        "catalog_build_10k: median wall {:.2} ms (min {:.2}, max {:.2}), median on-CPU {:.2} ms (min {:.2}), {rounds} rounds",
        wall[rounds / 2],
        wall[0],
        wall[rounds - 1],
        cpu[rounds / 2],
        cpu[0]
    );
    let c = keep.pop().expect("a catalog");
    for q in [
        "create an invoice",
        "look up the latest payment status",
        "get_issue_42",
        "scheduling reminders",
    ] {
        let n = 2_000;
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            black_box(c.search(black_box(q), SearchOptions::default()).len());
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        samples.sort_by(f64::total_cmp);
        println!("query {q:?}: median {:.1} µs", samples[n / 2]);
    }
}
