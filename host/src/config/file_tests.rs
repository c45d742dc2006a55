//! Tests of `file.rs`.

use super::*;
use crate::tools::{command_tools, DEFAULT_COMMAND_TIMEOUT_MS};
use serde_json::json;
use std::time::Duration;

/// The `[[tools]]` of `text`, or the message of its problem (without
/// the line).
fn parse(text: &str) -> Result<Vec<CommandToolConfig>, String> {
    super::parse(text)
        .map(|config| config.tools)
        .map_err(|problem| problem.message().to_owned())
}

/// The whole error of `text`, as an operator reads it.
fn error(text: &str) -> String {
    super::parse(text).unwrap_err().to_string()
}

#[test]
fn parses_tool_entries() {
    let tools = parse(
        r#"
        [[tools]]
        name = "weather"
        description = "Weather."
        input_schema = { type = "object", properties = { city = { type = "string" }, days = { type = "integer", maximum = 7 } }, required = ["city"] }
        command = ["weather", "--json"]
        replay_safe = true
        timeout_ms = 5000

        [[tools]]
        name = "json-schema"
        description = ""
        input_schema = '{"type": "object", "properties": {"x": {"type": "number", "minimum": 0.5}}}'
        output_schema = { type = "array" }
        command = ["/bin/x"]
        "#,
    )
    .unwrap();
    assert_eq!(tools.len(), 2);
    let w = &tools[0];
    assert_eq!(w.name, "weather");
    assert_eq!(w.command, ["weather", "--json"]);
    assert!(w.replay_safe);
    assert_eq!(w.timeout(), Duration::from_millis(5000));
    assert_eq!(
        w.input_schema,
        json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 7}}, "required": ["city"]})
    );
    assert_eq!(w.output_schema, None);
    let j = &tools[1];
    assert!(!j.replay_safe);
    assert_eq!(j.timeout_ms, None);
    assert_eq!(
        j.timeout(),
        Duration::from_millis(DEFAULT_COMMAND_TIMEOUT_MS)
    );
    assert_eq!(j.input_schema["properties"]["x"]["minimum"], json!(0.5));
    assert_eq!(j.output_schema, Some(json!({"type": "array"})));
    let built = command_tools(tools).unwrap();
    assert_eq!(built[0].name(), "weather");
    assert!(built[0].replay_safe());
    assert_eq!(built[1].output_schema(), Some(json!({"type": "array"})));
    assert_eq!(parse("tools = []").unwrap(), vec![]);
}

#[test]
fn tool_entry_errors_name_index_and_key() {
    let base = r#"name = "t"
        description = "d"
        input_schema = { type = "object" }
        command = ["x"]"#;
    let entry = |extra: &str| format!("[[tools]]\n{base}\n\n[[tools]]\n{base}\n{extra}");
    let cases: &[(&str, &str)] = &[
        ("cmd = 1", "tools[1]: unknown key `cmd`"),
        (
            "timeout_ms = 0",
            "tools[1]: `timeout_ms`: must be an integer from 1 to 600000",
        ),
        (
            "timeout_ms = 600001",
            "tools[1]: `timeout_ms`: must be an integer from 1 to 600000, got 600001",
        ),
        ("timeout_ms = \"5\"", "tools[1]: `timeout_ms`"),
        (
            "replay_safe = \"yes\"",
            "tools[1]: `replay_safe`: must be a boolean",
        ),
        (
            "output_schema = [1]",
            "tools[1]: `output_schema`: must be a table",
        ),
        (
            "output_schema = '[1]'",
            "tools[1]: `output_schema`: must be a JSON object",
        ),
        (
            "output_schema = '{'",
            "tools[1]: `output_schema`: invalid JSON",
        ),
        (
            "output_schema = { a = { b = 1979-05-27 } }",
            "tools[1]: `output_schema`.a.b: the datetime",
        ),
        (
            "output_schema = { a = [1, nan] }",
            "tools[1]: `output_schema`.a[1]: the float NaN",
        ),
    ];
    for (extra, want) in cases {
        // Renaming avoids the duplicate-name error for the second entry.
        let text = entry(extra).replacen("name = \"t\"", "name = \"u\"", 1);
        let err = parse(&text).unwrap_err();
        assert!(err.starts_with(want), "{extra}: got {err:?}, want {want:?}");
    }
    let err = parse(&entry("")).unwrap_err();
    assert_eq!(err, "tools[1]: `name`: \"t\" is already used by tools[0]");

    let single = |body: &str| parse(&format!("[[tools]]\n{body}")).unwrap_err();
    assert_eq!(
        single("description = \"d\"\ninput_schema = {}\ncommand = [\"x\"]"),
        "tools[0]: missing key `name`"
    );
    assert!(
        single("name = \"t\"\ndescription = \"d\"\ncommand = [\"x\"]")
            .contains("missing key `input_schema`")
    );
    assert!(
        single("name = \"t\"\ndescription = \"d\"\ninput_schema = {}")
            .contains("missing key `command`")
    );
    assert!(
        single("name = \"t\"\ndescription = \"d\"\ninput_schema = {}\ncommand = []")
            .contains("`command`: must be a non-empty array")
    );
    assert!(
        single("name = \"t\"\ndescription = \"d\"\ninput_schema = {}\ncommand = [\"\"]")
            .contains("`command`: the program")
    );
    assert!(
        single("name = \"t\"\ndescription = \"d\"\ninput_schema = {}\ncommand = [1]")
            .contains("`command`: must be an array of strings")
    );
    assert!(
        single("name = \"a b\"\ndescription = \"d\"\ninput_schema = {}\ncommand = [\"x\"]")
            .starts_with("tools[0]: `name`: must be 1-64 characters")
    );
    assert!(
        single("name = \"t\"\ndescription = 5\ninput_schema = {}\ncommand = [\"x\"]")
            .contains("`description`: must be a string")
    );
    assert!(parse("tools = 3")
        .unwrap_err()
        .contains("must be an array of tables"));
    assert_eq!(
        parse("tools = [1]").unwrap_err(),
        "tools[0]: must be a table"
    );
}

#[test]
fn an_unknown_key_in_any_table_names_the_key_and_line() {
    let tool =
        "[[tools]]\nname = \"t\"\ndescription = \"d\"\ninput_schema = {}\ncommand = [\"x\"]\n";
    for (text, want) in [
        ("\n\nlimitz = 1\n", "line 3, column 1: unknown key `limitz`; known keys: limits, host, http, tools, workspace, mcp, policy, tool_search, quotas, telemetry, state"),
        ("[limits]\ntimeout = 5\n", "line 2, column 1: unknown key `limits.timeout`; known keys: timeout_ms, memory_limit_bytes, max_output_bytes, max_snapshot_bytes, max_pending_tool_calls, snapshot_ttl_seconds, search_default_limit, max_search_limit, fuel"),
        ("[host]\nmax_runs = 5\n", "line 2, column 1: unknown key `host.max_runs`; known keys: max_suspended_runs, max_suspended_runs_per_session, max_running_cells_per_session, max_await_results_ms, approval_timeout_ms, drain_timeout_ms"),
        ("[http]\nmax_body = 5\n", "line 2, column 1: unknown key `http.max_body`; known keys: max_body_bytes, max_sessions, session_idle_seconds, allowed_origins, allowed_hosts, auth_token_file"),
        ("[workspace]\nroot = \"/\"\nroots = \"/\"\n", "line 3, column 1: unknown key `workspace.roots`; known keys: root"),
        (&format!("{tool}{tool}replay = true\n")[..], "line 11, column 1: tools[1]: unknown key `replay`; known keys: name, description, input_schema, output_schema, command, replay_safe, timeout_ms"),
        ("[mcp]\nserver = {}\n", "line 2, column 1: unknown key `mcp.server`; known keys: servers, tools_ttl_ms, cache_scope, principal, task_ttl_ms"),
        ("[mcp.servers.a]\ncommand = \"x\"\nargv = []\n", "line 3, column 1: unknown key `mcp.servers.a.argv`; known keys: command, args, env, url, timeout_ms"),
        ("mcp.servers.a = { url = \"http://h\", timeout = 1 }\n", "line 1, column 37: unknown key `mcp.servers.a.timeout`; known keys: command, args, env, url, timeout_ms"),
    ] {
        assert_eq!(error(text), want, "{text}");
    }
}

#[test]
fn a_wrong_type_names_the_key_and_line() {
    for (text, want) in [
        ("limits = 5\n", "line 1, column 10: `limits`: must be a table"),
        ("[workspace]\nroot = 1\n", "line 2, column 8: `workspace.root`: must be a string"),
        ("[http]\nallowed_origins = \"x\"\n", "line 2, column 19: `http.allowed_origins`: must be an array of strings"),
        ("[http]\nallowed_hosts = [\"a\", 1]\n", "line 2, column 17: `http.allowed_hosts`: must be an array of strings"),
        ("[http]\nauth_token_file = false\n", "line 2, column 19: `http.auth_token_file`: must be a string"),
        ("tools = 3\n", "line 1, column 9: `tools`: must be an array of tables ([[tools]])"),
        ("[[tools]]\nname = \"t\"\ndescription = \"d\"\ninput_schema = {}\ncommand = [\"x\"]\nreplay_safe = \"yes\"\n", "line 6, column 15: tools[0]: `replay_safe`: must be a boolean"),
        ("[[tools]]\nname = \"t\"\ndescription = \"d\"\ninput_schema = {}\ncommand = [\"x\"]\ntimeout_ms = 1.5\n", "line 6, column 14: tools[0]: `timeout_ms`: must be an integer"),
        ("[mcp.servers.a]\ncommand = \"x\"\nargs = [1]\n", "line 3, column 8: `mcp.servers.a.args`: must be an array of strings"),
        ("[mcp.servers.a]\ncommand = \"x\"\nenv = { K = 1 }\n", "line 3, column 13: `mcp.servers.a.env.K`: must be a string"),
        ("[mcp]\nservers = 1\n", "line 2, column 11: `mcp.servers`: must be a table"),
        ("[mcp.servers]\na = 1\n", "line 2, column 5: `mcp.servers.a`: must be a table"),
    ] {
        assert_eq!(error(text), want, "{text}");
    }
}

#[test]
fn checks_after_deserializing_give_the_entry_line() {
    let tool = |name: &str| {
        format!("[[tools]]\nname = \"{name}\"\ndescription = \"d\"\ninput_schema = {{}}\ncommand = [\"x\"]\n")
    };
    assert_eq!(
        error(&format!("{}\n{}", tool("t"), tool("t"))),
        "line 7, column 1: tools[1]: `name`: \"t\" is already used by tools[0]"
    );
    assert_eq!(
        error(&format!("{}timeout_ms = 0\n", tool("t"))),
        "line 1, column 1: tools[0]: `timeout_ms`: must be an integer from 1 to 600000"
    );
    assert_eq!(
        error("[limits]\n[mcp.servers.a]\ncommand = \"x\"\nurl = \"http://h\"\n"),
        "line 2, column 1: `mcp.servers.a`: set `command` or `url`, not both"
    );
    assert_eq!(
        error("[limits]\ntimeout_ms = 99999999999999999999\n"),
        "line 2, column 14: `limits.timeout_ms`: the integer does not fit in 64 bits"
    );
}

#[test]
fn limit_keys_take_any_value() {
    let config = super::parse(
        "[limits]\ntimeout_ms = \"5\"\nmax_output_bytes = [1]\nmemory_limit_bytes = { a = 1 }\nmax_snapshot_bytes = 1979-05-27\nsnapshot_ttl_seconds = true\nfuel = true\n[http]\nmax_sessions = -1\nmax_body_bytes = 1\n",
    )
    .unwrap();
    assert_eq!(config.limits, Limits::default());
    assert_eq!(config.http.max_sessions(), 1_024);
    assert_eq!(config.http.max_body_bytes(), 1_024);
}

/// `[host]` values inside their ranges are taken as written (a share
/// up to the total the same file sets).
#[test]
fn host_keys_in_range_are_obeyed() {
    let config = super::parse(
        "[host]\nmax_suspended_runs = 1000\nmax_suspended_runs_per_session = 1000\nmax_running_cells_per_session = 256\nmax_await_results_ms = 100\napproval_timeout_ms = 86400000\n",
    )
    .unwrap();
    assert_eq!(config.host.max_suspended_runs(), 1000);
    assert_eq!(config.host.max_suspended_runs_per_session(), 1000);
    assert_eq!(config.host.max_running_cells_per_session(), 256);
    assert_eq!(config.host.max_await_results_ms(), 100);
    assert_eq!(config.host.approval_timeout_ms(), 86_400_000);
    let config = super::parse("[host]\ndrain_timeout_ms = 2500\n").unwrap();
    assert_eq!(config.host.drain_timeout_ms(), 2_500);
    assert_eq!(HostLimits::default().drain_timeout_ms(), 10_000);
    let config = super::parse("[host]\nmax_running_cells_per_session = 1\n").unwrap();
    assert_eq!(config.host.max_running_cells_per_session(), 1);
}

/// A `[host]` value outside its range is an error naming the key, its
/// range and the value, at the value's position: a share of 0, a
/// negative one, one over the total, a value of another type.
#[test]
fn host_keys_out_of_range_are_refused_by_name() {
    let error = |text: &str| super::parse(text).unwrap_err().to_string();
    assert_eq!(
        error("[host]\nmax_running_cells_per_session = 0\n"),
        "line 2, column 33: `host.max_running_cells_per_session`: must be an integer from 1 to 256, got 0"
    );
    assert_eq!(
        error("[host]\nmax_running_cells_per_session = 257\n"),
        "line 2, column 33: `host.max_running_cells_per_session`: must be an integer from 1 to 256, got 257"
    );
    assert_eq!(
        error("[host]\nmax_suspended_runs_per_session = 100\n"),
        "line 2, column 34: `host.max_suspended_runs_per_session`: must be an integer from 1 to 64 (a share of `host.max_suspended_runs`, 64), got 100"
    );
    assert_eq!(
        error("[host]\nmax_suspended_runs = 10\nmax_suspended_runs_per_session = 11\n"),
        "line 3, column 34: `host.max_suspended_runs_per_session`: must be an integer from 1 to 10 (a share of `host.max_suspended_runs`, 10), got 11"
    );
    assert_eq!(
        error("[host]\nmax_suspended_runs = -1\n"),
        "line 2, column 22: `host.max_suspended_runs`: must be an integer from 1 to 100000, got -1"
    );
    assert_eq!(
        error("[host]\nmax_await_results_ms = \"5\"\n"),
        "line 2, column 24: `host.max_await_results_ms`: must be an integer from 100 to 86400000, got a value of another type"
    );
    assert_eq!(
        error("[host]\napproval_timeout_ms = 99\n"),
        "line 2, column 23: `host.approval_timeout_ms`: must be an integer from 100 to 86400000, got 99"
    );
    assert_eq!(
        error("[host]\ndrain_timeout_ms = 3600001\n"),
        "line 2, column 20: `host.drain_timeout_ms`: must be an integer from 100 to 3600000, got 3600001"
    );
}

#[test]
fn policy_table_is_read_and_checked() {
    let config = super::parse(
        "[policy]\nallow = [\"read\", \"fs.*\"]\ndeny = [\"fs.write*\"]\napprove = [\"fs.edit*\"]\n",
    )
    .unwrap();
    assert_eq!(
        config.policy,
        quickcell_catalog::Policy {
            allow: Some(vec!["read".into(), "fs.*".into()]),
            deny: vec!["fs.write*".into()],
            approve: vec!["fs.edit*".into()],
        }
    );
    assert_eq!(
        super::parse("").unwrap().policy,
        quickcell_catalog::Policy::default()
    );
    let e = error("[policy]\nblock = [\"x\"]\n");
    assert!(e.contains("unknown key `policy.block`"), "{e}");
    let e = error("[policy]\ndeny = \"x\"\n");
    assert!(e.contains("line 2"), "{e}");
    let many: Vec<String> = (0..300).map(|i| format!("\"t{i}\"")).collect();
    let e = error(&format!("\n[policy]\napprove = [{}]\n", many.join(",")));
    assert!(
        e.contains("line 2") && e.contains("policy.approve has 300 patterns; at most 256"),
        "{e}"
    );
}

#[test]
fn max_await_results_ms_is_read_and_checked() {
    let config = super::parse(
        "[host]
max_await_results_ms = 5000
",
    )
    .unwrap();
    assert_eq!(config.host.max_await_results_ms(), 5_000);
    // Out of range: an error naming the key (not clamped).
    for bad in ["1", "0"] {
        let text = format!("[host]\nmax_await_results_ms = {bad}\n");
        let error = super::parse(&text).unwrap_err().to_string();
        assert!(
            error.contains("`host.max_await_results_ms`: must be an integer from 100 to 86400000"),
            "{error}"
        );
    }
}

#[test]
fn approval_timeout_ms_is_read_and_checked() {
    let timeout = |text: &str| super::parse(text).unwrap().host.approval_timeout_ms();
    assert_eq!(timeout("[host]\napproval_timeout_ms = 2500\n"), 2_500);
    assert_eq!(timeout(""), 300_000);
    for bad in ["5", "0"] {
        let text = format!("[host]\napproval_timeout_ms = {bad}\n");
        let error = super::parse(&text).unwrap_err().to_string();
        assert!(
            error.contains("`host.approval_timeout_ms`: must be an integer from 100 to 86400000"),
            "{error}"
        );
    }
}

#[test]
fn tool_search_activation_mode_and_limits() {
    use crate::config::ToolSearchMode as Mode;
    let ts = |text: &str| super::parse(text).unwrap().tool_search;
    let limits = |t: &crate::ToolSearchConfig| {
        let l = t.search_limits();
        (l.default_limit, l.max_limit)
    };
    // Absent: inactive, code, 8/20.
    let t = ts("");
    assert_eq!(
        (t.active(), t.mode(), limits(&t)),
        (false, Mode::Code, (8, 20))
    );
    // Any key activates it; an explicit `enabled` wins.
    let t = ts("[tool_search]\nmode = \"directory\"\n");
    assert_eq!((t.active(), t.mode()), (true, Mode::Directory));
    let t = ts("[tool_search]\nsearch_default_limit = 3\n");
    assert_eq!(
        (t.active(), t.mode(), limits(&t)),
        (true, Mode::Code, (3, 20))
    );
    let t = ts("[tool_search]\nenabled = false\nmode = \"tools\"\n");
    assert!(!t.active());
    // The lean profile fills what is unset; explicit values win.
    let t = ts("[tool_search]\nlean = true\n");
    assert_eq!(
        (t.active(), t.mode(), limits(&t)),
        (true, Mode::Tools, (5, 10))
    );
    let t = ts("[tool_search]\nlean = true\nmode = \"directory\"\nmax_search_limit = 30\n");
    assert_eq!((t.mode(), limits(&t)), (Mode::Directory, (5, 30)));
    // Clamped, or the default for non-positive values.
    let t = ts("[tool_search]\nmax_search_limit = 99\nsearch_default_limit = 70\n");
    assert_eq!(limits(&t), (50, 50));
    let t = ts("[tool_search]\nmax_search_limit = 0\nsearch_default_limit = -4\n");
    assert_eq!((t.active(), limits(&t)), (true, (8, 20)));
    // A bad mode names the key.
    let e = super::parse("[tool_search]\nmode = \"fast\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2") && e.contains("fast"), "{e}");
}

#[test]
fn telemetry_otlp_endpoint_is_checked() {
    let t = |text: &str| super::parse(text).map(|c| c.telemetry.otlp_endpoint);
    assert_eq!(t("").unwrap(), None);
    assert_eq!(
        t("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n").unwrap(),
        Some("http://127.0.0.1:4318".into())
    );
    for (bad, why) in [
        ("ftp://h", "must be an http:// or https:// URL"),
        ("http://", "has no host"),
        ("https://h/a b", "whitespace"),
    ] {
        let e = t(&format!("[telemetry]\notlp_endpoint = \"{bad}\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains(why), "{bad}: {e}");
    }
    let long = format!(
        "http://h/{}",
        "a".repeat(super::super::MAX_OTLP_ENDPOINT_BYTES)
    );
    let e = t(&format!("[telemetry]\notlp_endpoint = \"{long}\"\n")).unwrap_err();
    assert!(e.to_string().contains("over 2048 bytes"), "{e}");
    let e = t("[telemetry]\nendpoint = \"http://h\"\n").unwrap_err();
    assert!(e.to_string().contains("known keys: otlp_endpoint"), "{e}");
}

#[test]
fn state_url_is_checked() {
    let u = |text: &str| super::parse(text).map(|c| c.state_url);
    assert_eq!(u("").unwrap(), None);
    assert_eq!(
        u("[state]\nurl = \"postgres://q@db:5432/quickcell\"\n").unwrap(),
        Some("postgres://q@db:5432/quickcell".into())
    );
    let e = u("[state]\nurl = \"mysql://db/q\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("line 2") && e.contains("must be a postgres:// URL"),
        "{e}"
    );
    let long = format!("[state]\nurl = \"postgres://{}\"\n", "h".repeat(5000));
    assert!(u(&long)
        .unwrap_err()
        .to_string()
        .contains("over 4096 bytes"));
}

#[test]
fn quotas_are_read_and_non_positive_means_none() {
    let q = |text: &str| super::parse(text).unwrap().quotas;
    assert!(q("").is_empty());
    let set =
        q("[quotas]\nfuel_per_session_per_hour = 5000000\ncells_per_session_per_minute = 30\n");
    assert_eq!(set.fuel_per_session_per_hour(), Some(5_000_000));
    assert_eq!(set.cells_per_session_per_minute(), Some(30));
    assert!(
        q("[quotas]\nfuel_per_session_per_hour = 0\ncells_per_session_per_minute = -1\n")
            .is_empty()
    );
    let e = super::parse("[quotas]\nfuel = 1\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("quotas.fuel"), "{e}");
}

#[test]
fn the_mcp_table_sets_cache_hints_and_the_stdio_principal() {
    let m = |text: &str| super::parse(text).unwrap().mcp;
    assert_eq!(m(""), crate::McpOptions::default());
    assert_eq!(m("").tools_ttl_ms, 3_600_000);
    let set = m("[mcp]\ntools_ttl_ms = 0\ncache_scope = \"private\"\nprincipal = \"ci.bot-1\"\n");
    assert_eq!(set.tools_ttl_ms, 0);
    assert!(!set.cache_public);
    assert_eq!(set.principal.as_deref(), Some("ci.bot-1"));
    assert_eq!(
        m("[mcp]\ntools_ttl_ms = 86400000\n").tools_ttl_ms,
        86_400_000
    );
    assert_eq!(m("").task_ttl_ms, 3_600_000);
    assert_eq!(m("[mcp]\ntask_ttl_ms = 1000\n").task_ttl_ms, 1_000);
    // With servers in the same table.
    let both = super::parse("[mcp]\ntools_ttl_ms = 5\n[mcp.servers.a]\ncommand = \"x\"\n").unwrap();
    assert_eq!((both.mcp.tools_ttl_ms, both.mcp_servers.len()), (5, 1));
    for (text, want) in [
        ("[mcp]\ntools_ttl_ms = 86400001\n", "line 2, column 16: `mcp.tools_ttl_ms`: must be an integer from 0 to 86400000, got 86400001"),
        ("[mcp]\ntools_ttl_ms = -1\n", "`mcp.tools_ttl_ms`: must be an integer from 0 to 86400000, got -1"),
        ("[mcp]\ncache_scope = \"shared\"\n", "line 2, column 15: `mcp.cache_scope`: must be \"public\" or \"private\", got \"shared\""),
        ("[mcp]\nprincipal = \"a b\"\n", "`mcp.principal`: must be 1 to 64 of A-Z a-z 0-9 . _ -, got \"a b\""),
        ("[mcp]\nprincipal = \"\"\n", "`mcp.principal`: must be 1 to 64"),
        ("[mcp]\ntask_ttl_ms = 999\n", "`mcp.task_ttl_ms`: must be an integer from 1000 to 604800000, got 999"),
    ] {
        let got = error(text);
        assert!(got.contains(want), "{text:?}: {got}");
    }
}
