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
