//! Timing run for the performance targets (ignored by default).

use crate::*;
use serde_json::json;

/// Timing run for the performance targets (10,000 tools: index build
/// ≤ 50 ms, one query ≤ 100 µs median). Run with
/// `cargo test --release -p quickcell-catalog -- --ignored --nocapture perf_10k`.
/// Reports wall time and process CPU time (the latter is robust on a busy
/// machine). The criterion benchmark is `benches/catalog.rs`.
#[test]
#[ignore]
fn perf_10k() {
    use std::time::Instant;
    fn cpu_ticks() -> u64 {
        // utime + stime of this process, in clock ticks (usually 10 ms).
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let rest = stat.rsplit_once(')').map_or("", |x| x.1);
        let f: Vec<&str> = rest.split_whitespace().collect();
        f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
    }
    let verbs = [
        "get", "list", "create", "update", "delete", "search", "send", "read",
    ];
    let nouns = [
        "issue", "invoice", "file", "message", "calendar", "event", "user", "payment",
    ];
    let words = [
        "recent", "shared", "team", "status", "history", "summary", "details", "batch",
    ];
    let specs: Vec<(Source, ToolSpec)> = (0..10_000)
        .map(|i| {
            let (v, n) = (verbs[i % 8], nouns[(i / 8) % 8]);
            let spec = ToolSpec::new(
                format!("{v}_{n}_{i}"),
                format!(
                    "{v} the {n} {} for the {} and returns {}.",
                    words[i % 8],
                    words[(i * 3) % 8],
                    words[(i * 5) % 8]
                ),
            )
            .with_input_schema(json!({"type":"object","required":["id"],"properties":{
                "id":{"type":"string","description":format!("The {n} id")},
                "limit":{"type":"integer","minimum":1,"description":"Maximum results"}}}));
            let source = match i % 20 {
                0..=15 => Source::Core,
                16..=18 => Source::Mcp {
                    server: format!("server{}", i % 10),
                },
                _ => Source::Client,
            };
            (source, spec)
        })
        .collect();
    let build = |specs: Vec<(Source, ToolSpec)>| {
        let mut b = Catalog::builder();
        for (s, t) in specs {
            b = b.tool(s, t);
        }
        b.build()
    };
    let rounds = 20;
    let mut wall = Vec::new();
    let mut cpu = 0;
    let mut last = None;
    for _ in 0..rounds {
        let input = specs.clone();
        let (t0, c0) = (Instant::now(), cpu_ticks());
        let c = build(input);
        wall.push(t0.elapsed().as_secs_f64() * 1e3);
        cpu += cpu_ticks() - c0;
        last = Some(c); // dropped outside the measurement
    }
    wall.sort_by(f64::total_cmp);
    let c = last.unwrap();
    println!(
        "catalog build (10k): median wall {:.1} ms, mean CPU {:.1} ms",
        wall[rounds / 2],
        cpu as f64 * 10.0 / rounds as f64
    );
    for q in [
        "create an invoice",
        "look up the latest payment status",
        "get_issue_42",
        "scheduling reminders",
    ] {
        let n = 2_000;
        let mut samples = Vec::with_capacity(n);
        let c0 = cpu_ticks();
        let t_all = Instant::now();
        for _ in 0..n {
            let t0 = Instant::now();
            std::hint::black_box(c.search(q, SearchOptions::default()).len());
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        let total = t_all.elapsed().as_secs_f64();
        let cpu_us = (cpu_ticks() - c0) as f64 * 10_000.0 / n as f64;
        samples.sort_by(f64::total_cmp);
        println!(
            "query {q:?}: median wall {:.1} µs, mean wall {:.1} µs, mean CPU {:.1} µs",
            samples[n / 2],
            total * 1e6 / n as f64,
            cpu_us
        );
    }
}
