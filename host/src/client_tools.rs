//! Per-cell client tools (operations.md §3.5): tools the caller declares in
//! an `exec` input (`clientTools`) and runs itself. A call to one parks the
//! cell with `reason: "client_tools"`; the caller answers with `wait
//! {toolResults}`.
//!
//! This module parses and checks what callers send; the catalog, bridge
//! and cell machinery do the rest. Every length a caller controls has a
//! cap here, checked before anything is built from it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most client tools one `exec` may declare.
pub const MAX_CLIENT_TOOLS: usize = 64;

/// Most bytes of a client tool's name. Names are JavaScript identifiers
/// (`[A-Za-z_$][A-Za-z0-9_$]*`), since each becomes a global.
pub const MAX_CLIENT_TOOL_NAME_BYTES: usize = 64;

/// Most bytes of a client tool's description.
pub const MAX_CLIENT_TOOL_DESCRIPTION_BYTES: usize = 4 * 1024;

/// Most bytes of all declared client tools together, as compact JSON
/// (their schemas, mostly).
pub const MAX_CLIENT_TOOLS_BYTES: usize = 256 * 1024;

/// Most bytes of one client tool call's arguments (compact JSON): they are
/// handed to the caller in the `waiting` result. A larger call rejects with
/// `invalid_input`.
pub const MAX_CLIENT_TOOL_INPUT_BYTES: usize = 64 * 1024;

/// Most bytes of the arguments of all client tool calls a cell has waiting
/// for answers at once; a call past it rejects with `invalid_input`.
pub const MAX_PENDING_CLIENT_INPUT_BYTES: usize = 1024 * 1024;

/// Most entries of one `wait`'s `toolResults`.
pub const MAX_TOOL_RESULTS: usize = 256;

/// Most bytes of a `toolResults` entry's `error` text.
pub const MAX_TOOL_RESULT_ERROR_BYTES: usize = 16 * 1024;

/// The prefix of a client tool call's id in `pendingToolCalls`.
pub(crate) const CLIENT_CALL_ID_PREFIX: &str = "bridge:clientTool:";

/// A tool the caller declares for one cell and runs itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ClientToolSpec {
    /// The tool's name: a JavaScript identifier, the cell's global.
    pub name: String,
    /// What it does (shown by `describe()` and used by search).
    #[serde(default)]
    pub description: String,
    /// JSON Schema of its arguments (`{"type": "object"}` when absent).
    #[serde(default = "object_schema")]
    pub input_schema: Value,
}

fn object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

impl ClientToolSpec {
    /// A client tool with this name, description and input schema.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema,
        }
    }
}

/// Parses and checks an `exec` input's `clientTools` (absent or `null`:
/// none). Errors name the entry and the rule it breaks.
pub(crate) fn parse_client_tools(value: Option<&Value>) -> Result<Vec<ClientToolSpec>, String> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err("clientTools must be an array of tool definitions.".into()),
    };
    if items.len() > MAX_CLIENT_TOOLS {
        return Err(format!(
            "clientTools has {} entries; at most {MAX_CLIENT_TOOLS} are allowed.",
            items.len()
        ));
    }
    let bytes = serde_json::to_string(items).map_or(usize::MAX, |text| text.len());
    if bytes > MAX_CLIENT_TOOLS_BYTES {
        return Err(format!(
            "clientTools is {bytes} bytes of JSON; at most {MAX_CLIENT_TOOLS_BYTES} are allowed."
        ));
    }
    let mut specs: Vec<ClientToolSpec> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(fields) = item else {
            return Err(format!(
                "clientTools[{i}] must be an object with name, description and inputSchema."
            ));
        };
        if let Some(unknown) = fields
            .keys()
            .find(|k| !matches!(k.as_str(), "name" | "description" | "inputSchema"))
        {
            return Err(format!(
                "clientTools[{i}] has the unknown field `{unknown}`; known fields: name, description, inputSchema."
            ));
        }
        let name = match fields.get("name") {
            Some(Value::String(name)) => name.clone(),
            _ => return Err(format!("clientTools[{i}].name must be a string.")),
        };
        check_name(&name).map_err(|why| format!("clientTools[{i}].name {why}"))?;
        let description = match fields.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) if text.len() <= MAX_CLIENT_TOOL_DESCRIPTION_BYTES => {
                text.clone()
            }
            Some(Value::String(text)) => {
                return Err(format!(
                    "clientTools[{i}].description is {} bytes; at most {MAX_CLIENT_TOOL_DESCRIPTION_BYTES} are allowed.",
                    text.len()
                ))
            }
            Some(_) => return Err(format!("clientTools[{i}].description must be a string.")),
        };
        let input_schema = match fields.get("inputSchema") {
            None | Some(Value::Null) => object_schema(),
            Some(schema @ Value::Object(_)) => schema.clone(),
            Some(_) => {
                return Err(format!(
                    "clientTools[{i}].inputSchema must be a JSON Schema object."
                ))
            }
        };
        if specs.iter().any(|s| s.name == name) {
            return Err(format!("clientTools declares `{name}` twice."));
        }
        specs.push(ClientToolSpec {
            name,
            description,
            input_schema,
        });
    }
    Ok(specs)
}

/// Checks a client tool's name: a JavaScript identifier of at most
/// [`MAX_CLIENT_TOOL_NAME_BYTES`] bytes.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_CLIENT_TOOL_NAME_BYTES {
        return Err(format!(
            "is {} bytes; at most {MAX_CLIENT_TOOL_NAME_BYTES} are allowed.",
            name.len()
        ));
    }
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
        return Err(format!(
            "`{}` is not a JavaScript identifier (letters, digits, _ and $, not starting with a digit).",
            name.escape_debug()
        ));
    }
    Ok(())
}

/// The caller's answer to one client tool call (`wait {toolResults}`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClientToolResult {
    /// The call's id from `pendingToolCalls` (`bridge:clientTool:<n>`).
    pub id: String,
    /// The value the guest's call resolves with, or the error text it
    /// rejects with (a catchable `tool_error`).
    pub outcome: Result<Value, String>,
}

impl ClientToolResult {
    /// The call resolves with `value`.
    pub fn value(id: impl Into<String>, value: Value) -> Self {
        Self {
            id: id.into(),
            outcome: Ok(value),
        }
    }

    /// The call rejects with a `tool_error` whose message is `error`.
    pub fn error(id: impl Into<String>, error: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            outcome: Err(error.into()),
        }
    }

    /// The bridge request id this answers, if the id has the client call
    /// form.
    pub(crate) fn request_id(&self) -> Option<u64> {
        // Only the canonical form (`…:05` or `…:+5` would name the same
        // call under another string, slipping past the repeated-id check).
        let n: u64 = self.id.strip_prefix(CLIENT_CALL_ID_PREFIX)?.parse().ok()?;
        (self.id.len() == CLIENT_CALL_ID_PREFIX.len() + n.to_string().len()).then_some(n)
    }
}

/// Parses a `wait` input's `toolResults` (absent or `null`: none): each
/// entry `{id, value}` or `{id, error}`; an id at most once.
pub(crate) fn parse_tool_results(value: Option<&Value>) -> Result<Vec<ClientToolResult>, String> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err("toolResults must be an array of {id, value} or {id, error}.".into())
        }
    };
    if items.len() > MAX_TOOL_RESULTS {
        return Err(too_many_results(items.len()));
    }
    let mut results: Vec<ClientToolResult> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(fields) = item else {
            return Err(format!(
                "toolResults[{i}] must be an object {{id, value}} or {{id, error}}."
            ));
        };
        if let Some(unknown) = fields
            .keys()
            .find(|k| !matches!(k.as_str(), "id" | "value" | "error"))
        {
            return Err(format!(
                "toolResults[{i}] has the unknown field `{unknown}`; known fields: id, value, error."
            ));
        }
        let id = match fields.get("id") {
            Some(Value::String(id)) => id.clone(),
            _ => return Err(format!("toolResults[{i}].id must be a string.")),
        };
        let outcome = match (fields.get("value"), fields.get("error")) {
            (Some(value), None) => Ok(value.clone()),
            (None, Some(Value::String(text))) => Err(text.clone()),
            (None, Some(_)) => return Err(format!("toolResults[{i}].error must be a string.")),
            _ => {
                return Err(format!(
                    "toolResults[{i}] must have exactly one of value and error."
                ))
            }
        };
        results.push(ClientToolResult { id, outcome });
    }
    check_tool_results(&results)?;
    Ok(results)
}

fn too_many_results(n: usize) -> String {
    format!("toolResults has {n} entries; at most {MAX_TOOL_RESULTS} are allowed.")
}

/// The rules of `toolResults` that do not depend on the run: at most
/// [`MAX_TOOL_RESULTS`] entries, error texts of at most
/// [`MAX_TOOL_RESULT_ERROR_BYTES`], each id once.
pub(crate) fn check_tool_results(results: &[ClientToolResult]) -> Result<(), String> {
    if results.len() > MAX_TOOL_RESULTS {
        return Err(too_many_results(results.len()));
    }
    let mut seen = std::collections::HashSet::with_capacity(results.len());
    for (i, result) in results.iter().enumerate() {
        if let Err(text) = &result.outcome {
            if text.len() > MAX_TOOL_RESULT_ERROR_BYTES {
                return Err(format!(
                    "toolResults[{i}].error is {} bytes; at most {MAX_TOOL_RESULT_ERROR_BYTES} are allowed.",
                    text.len()
                ));
            }
        }
        if !seen.insert(result.id.as_str()) {
            return Err(format!(
                "toolResults answers `{}` twice; answer each call once.",
                result.id.escape_debug()
            ));
        }
    }
    Ok(())
}

/// The rules of `clientTools` for declarations made in code
/// ([`crate::ExecInput::with_client_tools`]): those of
/// [`parse_client_tools`].
pub(crate) fn check_client_tools(specs: &[ClientToolSpec]) -> Result<(), String> {
    if specs.is_empty() {
        return Ok(());
    }
    let value = serde_json::to_value(specs).map_err(|e| format!("clientTools: {e}"))?;
    parse_client_tools(Some(&value)).map(drop)
}

/// A declared client tool's place in the catalog and the registry: its
/// name, description and schema. The bridge never calls it — a call to it
/// waits for the caller ([`crate::WaitReason::ClientTools`]).
pub(crate) struct DeclaredClientTool(pub ClientToolSpec);

#[crate::tools::async_trait]
impl crate::tools::Tool for DeclaredClientTool {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn description(&self) -> &str {
        &self.0.description
    }

    fn input_schema(&self) -> Value {
        self.0.input_schema.clone()
    }

    async fn call(
        &self,
        _args: Value,
        _cancel: crate::tools::CancelSignal,
    ) -> Result<Value, crate::tools::ToolError> {
        Err(crate::tools::ToolError::tool(format!(
            "{} is a client tool: the caller runs it",
            self.0.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn client_tools_are_checked_entry_by_entry() {
        let ok = parse_client_tools(Some(&json!([
            {"name": "ask_user", "description": "Ask", "inputSchema": {"type": "object"}},
            {"name": "$b"}
        ])))
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].input_schema, json!({"type": "object"}));
        for (input, error) in [
            (json!({}), "clientTools must be an array of tool definitions."),
            (json!([1]), "clientTools[0] must be an object with name, description and inputSchema."),
            (json!([{"name": "a", "x": 1}]), "clientTools[0] has the unknown field `x`; known fields: name, description, inputSchema."),
            (json!([{"name": 1}]), "clientTools[0].name must be a string."),
            (json!([{"name": "1a"}]), "clientTools[0].name `1a` is not a JavaScript identifier (letters, digits, _ and $, not starting with a digit)."),
            (json!([{"name": "a.b"}]), "clientTools[0].name `a.b` is not a JavaScript identifier (letters, digits, _ and $, not starting with a digit)."),
            (json!([{"name": "a", "inputSchema": true}]), "clientTools[0].inputSchema must be a JSON Schema object."),
            (json!([{"name": "a"}, {"name": "a"}]), "clientTools declares `a` twice."),
        ] {
            assert_eq!(parse_client_tools(Some(&input)).unwrap_err(), error);
        }
    }

    #[test]
    fn client_tool_caps_have_an_obeyed_and_a_violated_side() {
        let tools =
            |n: usize| Value::Array((0..n).map(|i| json!({"name": format!("t{i}")})).collect());
        assert!(parse_client_tools(Some(&tools(MAX_CLIENT_TOOLS))).is_ok());
        assert_eq!(
            parse_client_tools(Some(&tools(MAX_CLIENT_TOOLS + 1))).unwrap_err(),
            "clientTools has 65 entries; at most 64 are allowed."
        );
        let name = |n: usize| json!([{"name": "a".repeat(n)}]);
        assert!(parse_client_tools(Some(&name(MAX_CLIENT_TOOL_NAME_BYTES))).is_ok());
        assert!(
            parse_client_tools(Some(&name(MAX_CLIENT_TOOL_NAME_BYTES + 1)))
                .unwrap_err()
                .contains("at most 64")
        );
        let description = |n: usize| json!([{"name": "a", "description": "d".repeat(n)}]);
        assert!(parse_client_tools(Some(&description(MAX_CLIENT_TOOL_DESCRIPTION_BYTES))).is_ok());
        assert!(
            parse_client_tools(Some(&description(MAX_CLIENT_TOOL_DESCRIPTION_BYTES + 1)))
                .unwrap_err()
                .contains("at most 4096")
        );
        // The total: 60 schemas of 4 KiB pass, 70 do not.
        let big = |n: usize| {
            let schema = json!({"type": "object", "description": "s".repeat(4_200)});
            Value::Array(
                (0..n)
                    .map(|i| json!({"name": format!("t{i}"), "inputSchema": schema}))
                    .collect(),
            )
        };
        assert!(parse_client_tools(Some(&big(60))).is_ok());
        let too_many = big(64);
        assert!(parse_client_tools(Some(&too_many))
            .unwrap_err()
            .contains("at most 262144 are allowed"));
    }

    #[test]
    fn tool_results_are_checked_entry_by_entry() {
        let ok = parse_tool_results(Some(&json!([
            {"id": "bridge:clientTool:3", "value": null},
            {"id": "bridge:clientTool:4", "error": "no"}
        ])))
        .unwrap();
        assert_eq!(ok[0].outcome, Ok(Value::Null));
        assert_eq!(ok[0].request_id(), Some(3));
        for other_form in [
            "bridge:clientTool:03",
            "bridge:clientTool:+3",
            "bridge:clientTool: 3",
        ] {
            assert_eq!(
                ClientToolResult::value(other_form, Value::Null).request_id(),
                None
            );
        }
        assert_eq!(ok[1].outcome, Err("no".into()));
        for (input, error) in [
            (
                json!("x"),
                "toolResults must be an array of {id, value} or {id, error}.",
            ),
            (
                json!([{"id": "a"}]),
                "toolResults[0] must have exactly one of value and error.",
            ),
            (
                json!([{"id": "a", "value": 1, "error": "e"}]),
                "toolResults[0] must have exactly one of value and error.",
            ),
            (
                json!([{"id": 1, "value": 1}]),
                "toolResults[0].id must be a string.",
            ),
            (
                json!([{"id": "a", "error": 1}]),
                "toolResults[0].error must be a string.",
            ),
            (
                json!([{"id": "a", "value": 1, "extra": 1}]),
                "toolResults[0] has the unknown field `extra`; known fields: id, value, error.",
            ),
            (
                json!([{"id": "a", "value": 1}, {"id": "a", "error": "e"}]),
                "toolResults answers `a` twice; answer each call once.",
            ),
        ] {
            assert_eq!(parse_tool_results(Some(&input)).unwrap_err(), error);
        }
        let results = |n: usize| {
            Value::Array(
                (0..n)
                    .map(|i| json!({"id": format!("bridge:clientTool:{i}"), "value": i}))
                    .collect(),
            )
        };
        assert!(parse_tool_results(Some(&results(MAX_TOOL_RESULTS))).is_ok());
        assert!(parse_tool_results(Some(&results(MAX_TOOL_RESULTS + 1)))
            .unwrap_err()
            .contains("at most 256"));
        let error = |n: usize| json!([{"id": "a", "error": "e".repeat(n)}]);
        assert!(parse_tool_results(Some(&error(MAX_TOOL_RESULT_ERROR_BYTES))).is_ok());
        assert!(
            parse_tool_results(Some(&error(MAX_TOOL_RESULT_ERROR_BYTES + 1)))
                .unwrap_err()
                .contains("at most 16384")
        );
    }
}
