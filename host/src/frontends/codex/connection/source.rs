//! What a Codex cell runs: the profile in front of the source, the client
//! tools that carry its nested calls, and Codex's rules for the pragma and
//! tool identifiers.

use crate::frontends::codex::wire::ExecuteRequest;
use crate::{ClientToolSpec, ExecInput, Owner};
use serde_json::Value;

/// The profile's source; its last line, `})(`, is completed with the
/// cell's tool table and output marker.
pub(super) const PROFILE_JS: &str = include_str!("profile.js");

/// The client tool that carries `notify()`.
pub(super) const NOTIFY_TOOL: &str = "__codex_notify";

/// The client tool the profile calls when the source ends with nested tool
/// calls nobody awaits: the host discards them (answers them with `null`,
/// sending nothing), as Codex does.
pub(super) const END_TOOL: &str = "__codex_end";

/// The client tool that carries every nested tool call of a cell
/// (`{tool: <index in enabled_tools>, input}`).
pub(super) const CALL_TOOL: &str = "__codex_call";

/// Most nested tools one cell may have.
pub(super) const MAX_NESTED_TOOLS: usize = 1024;

/// Characters (UTF-16 units, keys and JSON) of a session's stored values
/// that load synchronously in a Codex cell: the host puts them in the
/// cell's source, which is bounded (`MAX_SOURCE_BYTES`). `store` refuses a
/// write past it; values past it (stored otherwise) are named, and `load`
/// refuses them.
pub(super) const CODEX_LOAD_CHARS: usize = 64 * 1024;

/// Bytes the nested tools' descriptions may take in a cell's source (for
/// `ALL_TOOLS`) in all: each is cut to its share, at most 4 KiB.
pub(super) const NESTED_DESCRIPTION_BYTES: usize = 96 * 1024;

/// The `exec` input of a Codex cell: the profile in front of the source
/// (with the session's stored `values`, for a synchronous `load`), its
/// nested tools and `notify` as client tools.
pub(super) fn cell_input(
    request: &ExecuteRequest,
    owner: &Owner,
    marker: &str,
    values: &[(String, Value)],
) -> Result<ExecInput, String> {
    if request.enabled_tools.len() > MAX_NESTED_TOOLS {
        return Err(format!(
            "quickcell's code-mode host takes at most {MAX_NESTED_TOOLS} nested tools per cell, got {}",
            request.enabled_tools.len()
        ));
    }
    if request.source.len() > crate::MAX_SOURCE_BYTES {
        return Err(format!(
            "invalid code-mode execute request: source is over {} bytes",
            crate::MAX_SOURCE_BYTES
        ));
    }
    let share = (NESTED_DESCRIPTION_BYTES / request.enabled_tools.len().max(1))
        .min(crate::client_tools::MAX_CLIENT_TOOL_DESCRIPTION_BYTES);
    let table: Vec<Value> = request
        .enabled_tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            serde_json::json!({
                "global": normalize_identifier(&tool.name),
                "index": i,
                "description": crate::output::safe_cut_utf8(&tool.description, share),
            })
        })
        .collect();
    let object = serde_json::json!({"type": "object"});
    let specs = vec![
        ClientToolSpec::new(CALL_TOOL, "Calls a nested tool.", object.clone()),
        ClientToolSpec::new(
            NOTIFY_TOOL,
            "Sends a notification to the Codex turn.",
            object.clone(),
        ),
        ClientToolSpec::new(END_TOOL, "Marks the end of the source.", object),
    ];
    let table = script_json(&serde_json::to_string(&table).unwrap_or_else(|_| "[]".into()));
    let marker = serde_json::to_string(marker).unwrap_or_default();
    // The values go in as one JSON string that the profile parses: in an
    // object literal, a `__proto__` key would set a prototype instead.
    let mut size = 0;
    let mut loaded = Vec::new();
    let mut omitted = Vec::new();
    for (key, value) in values {
        let chars = key.encode_utf16().count() + value.to_string().encode_utf16().count();
        if size + chars <= CODEX_LOAD_CHARS {
            size += chars;
            loaded.push((key, value));
        } else {
            omitted.push(key);
        }
    }
    let values =
        serde_json::json!({"values": loaded, "omitted": omitted, "budget": CODEX_LOAD_CHARS})
            .to_string();
    let values = script_json(&serde_json::to_string(&values).unwrap_or_default());
    // The source runs in a function of its own, so that its declarations
    // may shadow the profile's globals.
    let code = format!(
        "{PROFILE_JS}{table}, {marker}, {values});\nconst __codexMain = async () => {{\n{}\n}};\ntry {{ await __codexMain(); }} catch (__codexError) {{ if (__codexError !== __codexExit) throw __codexError; }} finally {{ await __codexEnd(); }}\n",
        request.source
    );
    Ok(
        ExecInput::new(format!("codex {}", request.tool_call_id), code)
            .with_client_tools(specs)
            .with_owner(owner.clone()),
    )
}

/// JSON as script text: JSON is JavaScript but for U+2028 and U+2029,
/// which end a line in a script; escaped, they stay inside their strings.
fn script_json(json: &str) -> String {
    json.replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// The values of a first-line `// @exec: {...}` pragma.
#[derive(Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExecPragma {
    pub(super) yield_time_ms: Option<u64>,
    pub(super) max_output_tokens: Option<u64>,
}

/// Codex strips the pragma before it sends a source; one left in is read
/// here, by Codex's rules (a JSON object of `yield_time_ms` and
/// `max_output_tokens`, non-negative safe integers, followed by source).
/// The line stays in the source: it is a comment.
pub(super) fn exec_pragma(source: &str) -> Result<ExecPragma, String> {
    const PREFIX: &str = "// @exec:";
    const MAX_SAFE: u64 = (1 << 53) - 1;
    let first = source.lines().next().unwrap_or_default().trim_start();
    let Some(json) = first.strip_prefix(PREFIX) else {
        return Ok(ExecPragma::default());
    };
    if source.lines().skip(1).all(|l| l.trim().is_empty()) {
        return Err("exec pragma must be followed by JavaScript source on subsequent lines".into());
    }
    let value: Value = serde_json::from_str(json.trim())
        .map_err(|e| format!("exec pragma must be valid JSON: {e}"))?;
    if let Some(key) = value.as_object().and_then(|o| {
        o.keys()
            .find(|k| *k != "yield_time_ms" && *k != "max_output_tokens")
    }) {
        return Err(format!(
            "exec pragma only supports `yield_time_ms` and `max_output_tokens`; got `{key}`"
        ));
    }
    let pragma: ExecPragma = serde_json::from_value(value).map_err(|_| {
        "exec pragma must be a JSON object whose values are non-negative safe integers".to_string()
    })?;
    if [pragma.yield_time_ms, pragma.max_output_tokens]
        .iter()
        .flatten()
        .any(|&n| n > MAX_SAFE)
    {
        return Err("exec pragma values must be non-negative safe integers".into());
    }
    Ok(pragma)
}

/// Codex's `normalize_code_mode_identifier`: characters that cannot be in
/// a JavaScript identifier become `_`; an empty name is `_`.
pub(crate) fn normalize_identifier(name: &str) -> String {
    let mut out: String = name
        .chars()
        .enumerate()
        .map(|(i, c)| {
            let ok =
                c.is_ascii_alphabetic() || c == '_' || c == '$' || (i > 0 && c.is_ascii_digit());
            if ok {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}
