//! Catalog / Tool Search benchmarks: a synthetic catalog of 10,000 tools.
//!
//! Run with `cargo bench --bench catalog`.
//!
//! Targets (issue 4): index build ≤ 50 ms, one query ≤ 100 µs median.
//!
//! - `catalog_build_10k`: `Catalog::builder()...build()` — tokenization of every
//!   document, hint rendering, policy/shadowing, BM25 index.
//! - `index_build_10k`: `SearchIndexBuilder` over pre-tokenized documents.
//! - `query_10k/*`: one `Catalog::search` (default limit 8).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use quickcell_catalog::{
    tokenize, Catalog, IndexDoc, SearchIndexBuilder, SearchOptions, Source, ToolSpec,
};
use serde_json::json;
use std::hint::black_box;

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

fn benches(c: &mut Criterion) {
    let n = 10_000;
    let specs = synthetic_specs(n);
    // Timed: policy, order, shadowing, MCP identifiers, tokenizing every
    // document and building the BM25 index (hints are rendered lazily).
    c.bench_function("catalog_build_10k", |b| {
        b.iter_batched(
            || specs.clone(),
            |s| black_box(build(s)),
            BatchSize::LargeInput,
        )
    });
    let docs: Vec<IndexDoc> = (0..n)
        .map(|i| {
            let s = spec(i);
            IndexDoc {
                id: format!("host:core:{}", s.name),
                name: s.name.clone(),
                mcp: false,
                tokens: tokenize(&format!(
                    "{} host:core:{} {}",
                    s.name, s.name, s.description
                )),
            }
        })
        .collect();
    // Timed: interning pre-tokenized documents, postings, exact-name map,
    // id collation ranks.
    c.bench_function("index_build_10k", |b| {
        b.iter_with_large_drop(|| {
            let mut builder = SearchIndexBuilder::with_capacity(docs.len());
            for d in &docs {
                builder.add_tokens(
                    d.id.clone(),
                    &d.name,
                    d.mcp,
                    d.tokens.iter().map(String::as_str),
                );
            }
            black_box(builder.finish())
        })
    });
    let catalog = build(specs);
    for q in [
        "create an invoice",
        "look up the latest payment status",
        "get_issue_42",
        "scheduling reminders",
    ] {
        c.bench_function(&format!("query_10k/{q}"), |b| {
            b.iter(|| black_box(catalog.search(black_box(q), SearchOptions::default()).len()))
        });
    }
}

criterion_group!(catalog_benches, benches);
criterion_main!(catalog_benches);
