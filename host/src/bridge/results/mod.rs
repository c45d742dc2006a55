//! Saved results (`results.save` / `load` / `delete`, contract §8.9) of an
//! agent run, kept in the state store's [`ResultStore`](crate::store::ResultStore).

pub(crate) mod describe;

use super::settlement::{err, ok, ok_raw, Settlement};
use super::SessionAccess;
use crate::store::StateStore;
use serde_json::value::RawValue;
use serde_json::Value;

/// Saved results an agent run may hold (contract §8.9).
pub(crate) const MAX_SAVED_RESULTS: usize = 64;
/// Message of a missing or expired saved result.
pub(crate) const RESULT_UNAVAILABLE: &str =
    "Code Mode result is unavailable or expired; fetch fresh data if needed.";
/// Message of a full results store.
pub(crate) const RESULTS_FULL: &str = "Code Mode results capacity exceeded; delete saved references or save a smaller value. Existing references are unchanged.";

/// Saves `value` as a result of `agent_run` if capacity allows: at most
/// [`MAX_SAVED_RESULTS`] entries and `capacity_bytes` bytes of JSON in all.
/// Returns the descriptor JSON, or the contract's message when full.
pub(crate) async fn save_result(
    state: &dyn StateStore,
    agent_run: &str,
    value: &Value,
    capacity_bytes: usize,
) -> anyhow::Result<Result<Value, String>> {
    let json = value.to_string();
    let id = format!("result_{}", uuid::Uuid::new_v4());
    if !state
        .result_save(agent_run, &id, json, MAX_SAVED_RESULTS, capacity_bytes)
        .await?
    {
        return Ok(Err(RESULTS_FULL.to_string()));
    }
    let described = describe::describe(value);
    Ok(Ok(describe::descriptor_json(&id, &described)))
}

/// Runs `resultSave {value}`, `resultLoad {id}` or `resultDelete {id}`.
/// `capacity_bytes` bounds what the agent run may hold in all.
pub(crate) async fn request(
    session: SessionAccess,
    id: u64,
    method: String,
    args: Value,
    capacity_bytes: usize,
) -> Settlement {
    let run = &session.owner.agent_run;
    let unavailable = |e: &dyn std::fmt::Display| {
        err(
            id,
            format!("the results store is unavailable: {e:#}"),
            "tool_error",
        )
    };
    match method.as_str() {
        "resultSave" => {
            let value = args.get("value").cloned().unwrap_or(Value::Null);
            match save_result(&*session.state, run, &value, capacity_bytes).await {
                Ok(Ok(descriptor)) => ok(id, descriptor),
                Ok(Err(message)) => err(id, message, "invalid_input"),
                Err(e) => unavailable(&e),
            }
        }
        "resultLoad" => {
            let key = args["id"].as_str().unwrap_or("");
            // The stored text is delivered as it is (checked to be JSON,
            // never parsed into a tree).
            match session.state.result_load(run, key).await {
                Ok(Some(json)) => match RawValue::from_string(json) {
                    Ok(value) => ok_raw(id, value),
                    Err(e) => err(
                        id,
                        format!("a saved result is unreadable: {e}"),
                        "tool_error",
                    ),
                },
                Ok(None) => err(id, RESULT_UNAVAILABLE, "invalid_input"),
                Err(e) => unavailable(&e),
            }
        }
        _ => {
            let key = args["id"].as_str().unwrap_or("");
            match session.state.result_delete(run, key).await {
                Ok(true) => ok(id, Value::Bool(true)),
                Ok(false) => err(id, RESULT_UNAVAILABLE, "invalid_input"),
                Err(e) => unavailable(&e),
            }
        }
    }
}
