//! The catalog as the runtime and the CLI expose it.

use crate::{runtime, value};
use quickcell::{Config, ExecInput, Limits, Runtime, ToolRegistry};
use serde_json::Value;
use std::process::Command;

fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

#[tokio::test]
async fn telemetry_counts_the_configured_tools() {
    let config = Config::parse(&format!(
        "[workspace]\nroot = {:?}\n[[tools]]\nname = \"echo_args\"\ndescription = \"Echo the arguments\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}]\n",
        fixtures().display().to_string(),
        fixtures().join("tools/echo_args.sh").display().to_string()
    ))
    .unwrap();
    let registry = ToolRegistry::from_config(&config).unwrap();
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    let r = rt.exec(ExecInput::new("t", "return 1")).await;
    assert_eq!(value(&r), 1);
    let t = r.telemetry();
    assert_eq!(t.catalog.catalog_size, 5);
    assert_eq!(t.catalog.sources.host, 5);
    assert_eq!(t.catalog.counter_scope, rt.catalog().counter_scope());
    // A runtime without tools has an empty catalog of its own.
    let empty = runtime(Limits::default()).await;
    let r = empty.exec(ExecInput::new("t", "return 1")).await;
    assert_eq!(r.telemetry().catalog.catalog_size, 0);
    assert_ne!(r.telemetry().catalog.counter_scope, t.catalog.counter_scope);
}

#[test]
fn duplicate_tool_names_are_rejected() {
    let config = Config::parse(
        "[[tools]]\nname = \"a\"\ndescription = \"x\"\ninput_schema = { type = \"object\" }\ncommand = [\"/bin/true\"]\n[[tools]]\nname = \"a\"\ndescription = \"y\"\ninput_schema = { type = \"object\" }\ncommand = [\"/bin/true\"]\n",
    );
    let err = match config {
        Err(e) => e.to_string(),
        Ok(c) => ToolRegistry::from_config(&c).unwrap_err().to_string(),
    };
    assert!(err.contains('a'), "{err}");
}

#[test]
fn cli_search_ranks_workspace_tools() {
    let out = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(["search", "read a file", "--limit", "2", "--workspace"])
        .arg(fixtures())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hits = v["results"][0]["hits"].as_array().unwrap();
    assert!(hits.len() <= 2);
    assert_eq!(hits[0]["name"], "read");
    assert!(hits[0]["input"].as_str().unwrap().contains("path"));
}

/// `quickcell search` takes the default and cap of the search it stands
/// for: a cell's (`[limits]`), or Tool Search's once `[tool_search]` turns
/// it on. Obeyed: the configured default; violated: a `--limit` over the
/// cap gets the cap.
#[test]
fn cli_search_obeys_the_configured_search_limits() {
    let dir = std::env::temp_dir().join(format!("quickcell-search-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let tools: String = (0..12)
        .map(|i| {
            format!(
                "[[tools]]\nname = \"ledger_entry_{i}\"\ndescription = \"Post a ledger entry\"\n\
                 input_schema = {{ type = \"object\" }}\ncommand = [\"/bin/true\"]\n"
            )
        })
        .collect();
    let hits = |config: &str, limit: Option<&str>| -> usize {
        let cfg = dir.join("search.toml");
        std::fs::write(&cfg, format!("{config}\n{tools}")).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
        command
            .args(["search", "ledger entry", "--config"])
            .arg(&cfg);
        if let Some(limit) = limit {
            command.args(["--limit", limit]);
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["results"][0]["hits"].as_array().unwrap().len()
    };
    assert_eq!(hits("", None), 8, "the default default");
    assert_eq!(hits("[limits]\nsearch_default_limit = 5", None), 5);
    assert_eq!(hits("[limits]\nmax_search_limit = 6", Some("11")), 6);
    assert_eq!(hits("[limits]\nmax_search_limit = 6", Some("4")), 4);
    assert_eq!(hits("[tool_search]\nsearch_default_limit = 3", None), 3);
    assert_eq!(
        hits("[tool_search]\nlean = true", Some("11")),
        10,
        "the lean profile's cap"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cli_tools_prints_the_directory() {
    let dir = std::env::temp_dir().join(format!("quickcell-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("tools.toml");
    std::fs::write(
        &cfg,
        "[[tools]]\nname = \"weather\"\ndescription = \"Current weather for a city\"\ninput_schema = { type = \"object\" }\ncommand = [\"/bin/true\"]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(["tools", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("Available deferred-schema tools:"),
        "{text}"
    );
    assert!(
        text.contains("- weather (commands): Current weather for a city"),
        "{text}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(["tools"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        "Available deferred-schema tools: none."
    );
}

/// `catalog.search` in a cell takes its default and cap from `[limits]`
/// (`search_default_limit`, `max_search_limit`; defaults 8 and 50), not
/// from Tool Search's (8 and 20). Obeyed: asking for 50 of 60 matching
/// tools gives 50; violated: asking for more gives the cap, and a lowered
/// cap and default are obeyed.
#[tokio::test]
async fn catalog_search_in_cells_obeys_the_search_limits() {
    let tools: Vec<_> = (0..60)
        .map(|i| crate::bridge::t(&format!("ledger_entry_{i}"), "Post a ledger entry"))
        .collect();
    let counts = "return [(await catalog.search('ledger entry')).length, \
                  (await catalog.search('ledger entry', {limit: 50})).length, \
                  (await catalog.search('ledger entry', {limit: 500})).length, \
                  (await catalog.search('ledger entry', {limit: 3})).length];";
    let (rt, _) = crate::bridge::runtime_with(tools, Limits::default()).await;
    let result = rt.exec(ExecInput::new("search limits", counts)).await;
    assert_eq!(crate::value(&result), serde_json::json!([8, 50, 50, 3]));

    let tools: Vec<_> = (0..60)
        .map(|i| crate::bridge::t(&format!("ledger_entry_{i}"), "Post a ledger entry"))
        .collect();
    let lowered = Limits::default()
        .with_max_search_limit(10)
        .with_search_default_limit(4);
    let (rt, _) = crate::bridge::runtime_with(tools, lowered).await;
    let result = rt.exec(ExecInput::new("search limits", counts)).await;
    assert_eq!(crate::value(&result), serde_json::json!([4, 10, 10, 3]));
}
