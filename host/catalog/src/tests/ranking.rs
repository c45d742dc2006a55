//! Ranking: the examples of tool-search.md §12, limits, stopword-named tools.

use super::{names, ranking_catalog, search};
use crate::*;

#[test]
fn example_1_recall_on_r() {
    let c = ranking_catalog();
    assert!(search(&c, "scheduling").contains(&"cron_create".to_string()));
    assert!(search(&c, "reminder").contains(&"cron_create".to_string()));
    assert_eq!(search(&c, "look up the price")[0], "web_search");
    assert_eq!(search(&c, "look up the price"), ["web_search"]);
    assert_eq!(search(&c, "repository"), ["issue_create"]);
    let read = search(&c, "read");
    assert!(read.contains(&"read_file".to_string()));
    assert!(!read.contains(&"spreadsheet_open".to_string()));
    assert!(search(&c, "価格を調べて").is_empty());
    assert!(search(&c, "the and with").is_empty());
    assert!(search(&c, "").is_empty());
}

#[test]
fn example_2_exact_name_first() {
    let c = Catalog::builder()
        .core(ToolSpec::new("issue_create", "Create an issue"))
        .core(ToolSpec::new(
            "notes",
            "Notes about issue_create and other tools",
        ))
        .build();
    assert_eq!(search(&c, "issue_create")[0], "issue_create");
    // Also by catalog id, case-insensitively.
    assert_eq!(search(&c, "HOST:CORE:NOTES")[0], "notes");
}

#[test]
fn limit_one_with_single_exact_candidate() {
    let c = ranking_catalog();
    let hits = c.search(
        "Read_File",
        SearchOptions {
            limit: Some(1),
            ..SearchOptions::default()
        },
    );
    assert_eq!(names(&hits), ["read_file"]);
}

#[test]
fn limits_are_clamped() {
    let mut b = Catalog::builder();
    for i in 0..30 {
        b = b.core(ToolSpec::new(format!("widget_{i:02}"), "widget tool"));
    }
    let c = b.build();
    let n = |limit: Option<i64>| {
        c.search(
            "widget",
            SearchOptions {
                limit,
                ..SearchOptions::default()
            },
        )
        .len()
    };
    assert_eq!(n(None), 8);
    assert_eq!(n(Some(0)), 1);
    assert_eq!(n(Some(-5)), 1);
    assert_eq!(n(Some(3)), 3);
    assert_eq!(n(Some(500)), 20);
    // Equal scores: ids ascending.
    let hits = c.search("widget", SearchOptions::default());
    assert_eq!(hits[0].name(), "widget_00");
    assert_eq!(hits[7].name(), "widget_07");
}

#[test]
fn stopword_named_catalog_tools() {
    let c = Catalog::builder()
        .core(ToolSpec::new("do", "Perform an action"))
        .core(ToolSpec::new("other", "Something else"))
        .mcp("srv", ToolSpec::new("DO", "Remote action"))
        .build();
    // Only the exact-name rule can match; unscored exact hits keep index
    // (catalog) order.
    assert_eq!(search(&c, " DO "), ["do", "DO"]);
    let hits = c.search(
        "do",
        SearchOptions {
            include_mcp: false,
            limit: Some(1),
            ..SearchOptions::default()
        },
    );
    assert_eq!(names(&hits), ["do"]);
    assert!(search(&c, "the").is_empty());
    // The Code Mode shortcut finds the global too.
    let p = c.callable_projection();
    assert_eq!(
        c.guest_search(&p, "do", None)[0].callable_name.len(),
        "do_".len() + 8
    );
}
