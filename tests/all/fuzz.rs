//! Fuzz targets for the host's parsers and cutters that take hostile bytes
//! (operations.md §1, "Fuzzing"), driven by `bolero`.
//!
//! Under `cargo test` each target runs bolero's random engine for about a
//! second. For a long run of one target (see `docs/hardening.md`):
//!
//! ```sh
//! BOLERO_RANDOM_TEST_TIME_MS=600000 cargo test --test all fuzz::source_check_tokens -- --nocapture
//! ```
//!
//! The snapshot decoder and the catalog (search, describe, input checks)
//! have their targets in their own crates (`host/snapshot`,
//! `host/catalog`).

use quickcell::testing::fuzz;

/// Pieces of JavaScript the source check must survive in any order:
/// brackets, quotes, comment and template starts, regular-expression
/// slashes, escapes, lone surrogates and multi-byte characters, keywords.
const TOKENS: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "`",
    "${",
    "'",
    "\"",
    "/",
    "//",
    "/*",
    "*/",
    "\\",
    "\n",
    "\r",
    "!",
    "?",
    ":",
    "=",
    "=>",
    ",",
    ";",
    "x",
    "1",
    "return ",
    "if (x) ",
    "else ",
    "await ",
    "typeof ",
    "new ",
    "import(",
    "import.meta",
    "require(",
    "r\\u0065quire(",
    "\\ud800",
    "€",
    "😀",
    "\u{2028}",
    "#!",
    "<!--",
    "-->",
    "ls -la ",
    "FOO=1 ",
    "__qcKeep",
    "__qcKeep1",
    "function f(",
    "class A{",
    "async ",
    "/[(]/",
    "a.return/",
    "++",
    " ",
];

#[test]
fn source_check_tokens() {
    bolero::check!()
        .with_type::<Vec<u8>>()
        .for_each(|picks: &Vec<u8>| {
            let source: String = picks
                .iter()
                .map(|&i| TOKENS[usize::from(i) % TOKENS.len()])
                .collect();
            fuzz::source_check(&source);
        });
}

#[test]
fn source_check_text() {
    bolero::check!()
        .with_type::<String>()
        .for_each(|source: &String| fuzz::source_check(source));
}

/// Pieces of guest JSON text: escapes (surrogates among them), quotes and
/// multi-byte characters.
const JSON_PIECES: &[&str] = &[
    "\"",
    "\\\"",
    "\\\\",
    "\\n",
    "\\u0000",
    "\\ud800",
    "\\udc00",
    "\\ud83d\\ude00",
    "\\u",
    "\\",
    "€",
    "😀",
    "a",
    "[",
    "]",
    "{",
    "}",
    ":",
    ",",
    "1e+21",
    "null",
    "\u{7f}",
    "\u{1f}",
];

#[test]
fn output_fit_pieces() {
    bolero::check!()
        .with_type::<(Vec<u8>, u16)>()
        .for_each(|(picks, budget): &(Vec<u8>, u16)| {
            let text: String = picks
                .iter()
                .map(|&i| JSON_PIECES[usize::from(i) % JSON_PIECES.len()])
                .collect();
            fuzz::output_fit(&text, *budget % 2048);
            fuzz::output_fit(&format!("\"{text}\""), *budget % 2048);
        });
}

#[test]
fn output_fit_text() {
    bolero::check!()
        .with_type::<(String, u16)>()
        .for_each(|(text, budget): &(String, u16)| fuzz::output_fit(text, *budget % 4096));
}

/// Bridge methods, the real ones and some that are not.
const METHODS: &[&str] = &[
    "callValue",
    "search",
    "describe",
    "apiRead",
    "mcpApi",
    "sleep",
    "yield",
    "storeSet",
    "storeGet",
    "resultSave",
    "resultLoad",
    "resultDelete",
    "approval",
    "clientTool",
    "",
    "nope",
];

#[test]
fn bridge_request_decoding() {
    bolero::check!()
        .with_type::<(u8, String)>()
        .for_each(|(method, args): &(u8, String)| {
            let method = METHODS[usize::from(*method) % METHODS.len()];
            fuzz::bridge_request(method, args);
            // The same method with JSON-shaped arguments of wrong types.
            let shaped = format!(
                r#"{{"callable":{args:?},"input":{args:?},"query":{args:?},"limit":-1,"path":{args:?},"key":{args:?},"value":[{args:?}],"id":{args:?},"ms":1e308,"server":{args:?}}}"#
            );
            fuzz::bridge_request(method, &shaped);
        });
}

/// Pieces of TOML configuration: the tables and keys the parser knows,
/// values of every type, and malformed bits.
const TOML_PIECES: &[&str] = &[
    "[limits]\n",
    "[host]\n",
    "[http]\n",
    "[policy]\n",
    "[quotas]\n",
    "[state]\n",
    "[telemetry]\n",
    "[tool_search]\n",
    "[workspace]\n",
    "[[tools]]\n",
    "[mcp.servers.x]\n",
    "timeout_ms = ",
    "memory_limit_bytes = ",
    "max_body_bytes = ",
    "max_suspended_runs = ",
    "fuel = ",
    "url = ",
    "name = ",
    "command = ",
    "allowed_hosts = ",
    "hidden = ",
    "0\n",
    "-1\n",
    "18446744073709551615\n",
    "99999999999999999999\n",
    "2.5\n",
    "1e308\n",
    "false\n",
    "\"postgres://h/db\"\n",
    "\"\"\n",
    "[\"a\", 1]\n",
    "{ type = \"object\" }\n",
    "\"\\u0000\"\n",
    "'''\n",
    "=",
    "[",
    "]",
    "\n",
    "€",
];

#[test]
fn config_parse_pieces() {
    bolero::check!()
        .with_type::<Vec<u8>>()
        .for_each(|picks: &Vec<u8>| {
            let text: String = picks
                .iter()
                .map(|&i| TOML_PIECES[usize::from(i) % TOML_PIECES.len()])
                .collect();
            fuzz::config_parse(&text);
        });
}

#[test]
fn config_parse_text() {
    bolero::check!()
        .with_type::<String>()
        .for_each(|text: &String| fuzz::config_parse(text));
}

#[test]
fn mcp_request_body_bytes() {
    bolero::check!()
        .with_type::<(u8, String)>()
        .for_each(|(tool, args): &(u8, String)| {
            fuzz::mcp_request_body(args.as_bytes());
            // A `tools/call` of each tool with JSON-shaped arguments.
            let name = ["exec", "wait", "tool_search", "nope"][usize::from(*tool) % 4];
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{name}","arguments":{{"title":{args:?},"code":{args:?},"runId":{args:?},"cancel":{args:?},"clientTools":[{{"name":{args:?}}}],"toolResults":[{{"id":{args:?},"value":1}}]}}}}}}"#
            );
            fuzz::mcp_request_body(body.as_bytes());
            // The retry of an `input_required`, and a `tasks/update`.
            let retry = format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"{name}","arguments":{{}},"requestState":{args:?},"inputResponses":{{"approve-1":{{"action":{args:?},"content":{{"approve":{args:?}}}}},{args:?}:{{}}}}}}}}"#
            );
            fuzz::mcp_request_body(retry.as_bytes());
            let update = format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"tasks/update","params":{{"taskId":{args:?},"inputResponses":{{"approve-{tool}":{{"action":"accept","content":{{"approve":true}}}},{args:?}:{{"action":{args:?}}}}}}}}}"#
            );
            fuzz::mcp_request_body(update.as_bytes());
        });
}

/// Pieces of stored host state, bridge state and settlement JSON.
const RECORD_PIECES: &[&str] = &[
    r#"{"runId":"r","agentRun":"fuzz","session":"fuzz","generation":1,"lastRequestId":3,"deliveredOutputBytes":0,"maxOutputBytes":100,"restartSafe":true,"guestClockNs":1,"parkedUnixMs":1,"bridge":{"outstanding":{"#,
    r#""1":{"method":"sleep","args_json":"{\"ms\":5}","started":true,"replay_safe":false,"due_unix_ms":18446744073709551615}"#,
    r#""2":{"method":"clientTool","args_json":"{\"tool\":\"t\",\"input\":{}}","started":false,"replay_safe":true}"#,
    r#""3":{"method":"callValue","args_json":"{","started":false,"replay_safe":true,"drained_by":"h"}"#,
    r#""1":{"method":"approval","args_json":"{\"tool\":\"t\",\"pattern\":\"t\",\"arguments\":\"{}\",\"call\":{\"callable\":\"t\"}}","started":true,"replay_safe":false}"#,
    r#""2":{"method":"approval","args_json":"{\"tool\":1}","started":false,"replay_safe":false}"#,
    r#"},"ready":[{"id":1,"ok":true,"value":1}],"yields":[1,2],"dispatch_started":true,"store_writes":{"k":"1"}}}"#,
    r#"{"id":7,"ok":false,"error":{"message":"m","code":"c"}}"#,
    r#"{"atMs":1,"agentRun":"a","session":"s","runId":null,"kind":"exec","fuel":1,"wallMs":1,"guestUs":1,"toolCalls":0,"outputBytes":2,"snapshotBytes":0,"outcome":"completed"}"#,
    ",",
    "}",
    "]",
    "1",
    "\"",
];

#[test]
fn store_records_pieces() {
    bolero::check!()
        .with_type::<Vec<u8>>()
        .for_each(|picks: &Vec<u8>| {
            let text: String = picks
                .iter()
                .map(|&i| RECORD_PIECES[usize::from(i) % RECORD_PIECES.len()])
                .collect();
            fuzz::store_records(text.as_bytes());
        });
}

#[test]
fn store_records_bytes() {
    bolero::check!()
        .with_type::<Vec<u8>>()
        .for_each(|bytes: &Vec<u8>| fuzz::store_records(bytes));
}

/// A stored session value that is not one JSON value is refused, not
/// spliced into `store.get`'s `{"found":true,"value":…}` where it could
/// close the value early and add fields (found by the `store_records`
/// libFuzzer target, `fuzz/`).
#[test]
fn session_value_is_one_json_value() {
    fuzz::session_value(r#"1,"found":false"#);
    fuzz::session_value(r#"{"a":1},"b":{"c":2}"#);
    fuzz::session_value("");
    fuzz::session_value(r#"[1,{"x":"y"}]"#);
}

#[test]
fn session_value_text() {
    bolero::check!()
        .with_type::<String>()
        .for_each(|stored: &String| fuzz::session_value(stored));
}
