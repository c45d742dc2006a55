//! Catalog-level tests: the examples of tool-search.md §12 and contract.md
//! §13 example 2, policy on every surface, trust rules, counters, batch
//! limits, directory and quick index budgets, `API.read`.

mod entries;
mod guest;
mod perf;
mod policy;
mod prompt;
mod ranking;
mod structured;
mod trust;

use crate::*;
use serde_json::json;

fn ranking_catalog() -> Catalog {
    Catalog::builder()
        .core(ToolSpec::new(
            "web_search",
            "Search the web for current information",
        ))
        .core(ToolSpec::new("read_file", "Read a file from disk"))
        .core(ToolSpec::new("cron_create", "Schedule a recurring task"))
        .core(ToolSpec::new(
            "spreadsheet_open",
            "Open a spreadsheet document",
        ))
        .core(
            ToolSpec::new("issue_create", "Open a new issue").with_input_schema(json!({
                "type": "object",
                "properties": {"repository": {"type": "string", "description": "Target repository"}}
            })),
        )
        .build()
}

fn names(entries: &[&Entry]) -> Vec<String> {
    entries.iter().map(|e| e.name().to_string()).collect()
}

fn search(c: &Catalog, q: &str) -> Vec<String> {
    names(&c.search(q, SearchOptions::default()))
}
