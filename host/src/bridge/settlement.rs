//! Settlements: what the guest receives for each bridge request, and the
//! constructors every kind of request uses.

use super::MAX_QUEUED_REQUESTS;
use quickcell_catalog::CatalogError;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// One settled bridge request, as the guest receives it in `cell.settle`:
/// `{"id":N,"ok":true,"value":..}` or
/// `{"id":N,"ok":false,"error":{"message":..,"code":..}}`. Typed, so that
/// building, checking and writing one touches no map (one is made per tool
/// round trip).
///
/// The value is held as JSON text ([`RawValue`]), never as a parsed tree:
/// a reply waits for delivery as the bytes the guest will parse, once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Settlement {
    pub id: u64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<SettlementError>,
}

impl Settlement {
    /// The text `settle` hands the guest for this settlement alone (a JSON
    /// array of one): settlements are delivered one per guest call.
    pub(crate) fn delivery_json(&self) -> String {
        serde_json::to_string(&[self]).unwrap_or_default()
    }

    /// Bytes this settlement takes while it waits for delivery: its value's
    /// JSON, or its error message.
    pub(crate) fn bytes(&self) -> usize {
        self.value.as_ref().map_or(0, |v| v.get().len())
            + self.error.as_ref().map_or(0, |e| e.message.len())
    }
}

/// Why a bridge request failed; the guest makes it an `Error` with `code`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SettlementError {
    pub message: String,
    pub code: String,
}

pub(crate) fn ok(id: u64, value: Value) -> Settlement {
    match serde_json::value::to_raw_value(&value) {
        Ok(raw) => ok_raw(id, raw),
        Err(e) => err(id, format!("the result is not JSON: {e}"), "tool_error"),
    }
}

/// A successful settlement whose value is already JSON text.
pub(crate) fn ok_raw(id: u64, value: Box<RawValue>) -> Settlement {
    Settlement {
        id,
        ok: true,
        value: Some(value),
        error: None,
    }
}

/// `null`, the value of timers, deletes and released yields.
pub(crate) fn ok_null(id: u64) -> Settlement {
    ok(id, Value::Null)
}

pub(crate) fn err(id: u64, message: impl Into<String>, code: &str) -> Settlement {
    Settlement {
        id,
        ok: false,
        value: None,
        error: Some(SettlementError {
            message: message.into(),
            code: code.to_string(),
        }),
    }
}

/// The contract's queue-overflow message.
pub(crate) fn queue_overflow(max_in_flight: usize) -> String {
    format!(
        "code mode bridge queue limit exceeded ({MAX_QUEUED_REQUESTS} ordinary requests queued; {max_in_flight} in-flight slots). Await smaller batches before creating more tool calls or timers."
    )
}

/// The settlement of a request whose arguments are not what its method
/// takes.
pub(crate) fn malformed(id: u64, e: serde_json::Error) -> Settlement {
    err(
        id,
        format!("malformed bridge request: {e}"),
        "invalid_input",
    )
}

pub(crate) fn tool_panicked(id: u64) -> Settlement {
    err(
        id,
        "the tool failed unexpectedly (it panicked)",
        "tool_error",
    )
}

pub(crate) fn catalog_err(id: u64, e: CatalogError) -> Settlement {
    let code = e.code().unwrap_or("invalid_input");
    err(id, e.message, code)
}
