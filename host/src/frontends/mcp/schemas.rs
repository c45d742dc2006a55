//! The tools the MCP server lists: their descriptions and input schemas
//! (fixed here; `exec`'s description comes from the runtime, it carries the
//! quick index of tools).

use rmcp::model::JsonObject;
use serde_json::{json, Value};
use std::sync::Arc;

/// `tool_search`'s description.
pub(super) const TOOL_SEARCH_DESCRIPTION: &str =
    "Search the tool catalog in English words. Pass `query` \
(and optionally `limit`), or a batch as `queries: [{query, limit?}]` (at most 16 entries, 50 \
results in all). Each hit has an `id` to pass to tool_describe or tool_call, a name, a \
description, its source and a compact input hint.";
/// `tool_describe`'s description.
pub(super) const TOOL_DESCRIBE_DESCRIPTION: &str =
    "The full definition of one tool: pass the `id` from \
tool_search (a tool name works too). Returns its description and complete input schema.";
/// `tool_call`'s description.
pub(super) const TOOL_CALL_DESCRIPTION: &str =
    "Call one tool: pass the `id` from tool_search and the \
tool's `arguments` object. Trusted tools validate the arguments first; the result is the \
tool's value.";

/// The `wait` tool's description.
pub(super) const WAIT_DESCRIPTION: &str =
    "Resumes a parked cell. When exec (or an earlier wait) returns \
{\"status\":\"waiting\",\"runId\":...}, the cell was checkpointed while its tool calls keep \
running; call wait with that runId to restore it, deliver what settled meanwhile and continue. \
Only the session that started the run may wait it. Returns the same result union as exec: \
completed, waiting again, or failed.";

/// The `exec` tool's input schema.
pub(crate) fn exec_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "Short intent, 3–7 words; display only."},
            "code": {
                "type": "string",
                "description": "JavaScript: the body of an async function. Top-level await and return work."
            },
            "restartSafe": {"type": "boolean"},
            "awaitResults": {"type": "boolean"},
            "clientTools": {
                "type": "array",
                "maxItems": crate::MAX_CLIENT_TOOLS,
                "description": "Tools you run yourself, for this cell. A call to one returns {status: \"waiting\", reason: \"client_tools\", pendingToolCalls: [{id, method: \"clientTool\", tool, input}]}; answer with wait({runId, toolResults}).",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "pattern": "^[A-Za-z_$][A-Za-z0-9_$]*$"},
                        "description": {"type": "string"},
                        "inputSchema": {"type": "object"}
                    },
                    "required": ["name"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["title", "code"],
        "additionalProperties": false
    })
}

/// The `wait` tool's input schema.
pub(crate) fn wait_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "runId": {"type": "string", "description": "The runId of a waiting result."},
            "cancel": {"type": "boolean", "description": "Abandon the run instead of resuming it: it is removed and its tool calls are cancelled; returns the aborted result once."},
            "toolResults": {
                "type": "array",
                "maxItems": crate::MAX_TOOL_RESULTS,
                "description": "Answers to the run's client tool calls: {id, value} resolves the call, {id, error} rejects it. Each id once.",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "value": {},
                        "error": {"type": "string"}
                    },
                    "required": ["id"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["runId"],
        "additionalProperties": false
    })
}

/// A schema value as the JSON object rmcp's [`rmcp::model::Tool`] holds (an empty object
/// for a non-object, which the schemas above never are).
pub(super) fn schema_object(schema: Value) -> Arc<JsonObject> {
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// `tool_search`'s input schema.
pub(super) fn tool_search_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What the tool should do, in English words."},
            "limit": {"type": "integer", "minimum": 1, "description": "Most hits for `query`."},
            "queries": {
                "type": "array",
                "maxItems": 16,
                "items": {
                    "type": "object",
                    "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
                    "required": ["query"]
                }
            }
        }
    })
}

/// `tool_describe`'s input schema.
pub(super) fn tool_describe_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"id": {"type": "string", "description": "A tool id from tool_search."}},
        "required": ["id"]
    })
}

/// `tool_call`'s input schema.
pub(super) fn tool_call_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "A tool id from tool_search."},
            "arguments": {"type": "object", "description": "The tool's arguments."}
        },
        "required": ["id"]
    })
}
