//! The error a tool call returns.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Category of a [`ToolError`]; its [`as_str`](ToolErrorCode::as_str) form
/// is the `code` of the `Error` the cell receives.
///
/// Schema violations detected before a tool runs (`input_contract`) or on
/// its result (`output_contract`) are produced by the dispatcher, not by
/// tools, and so are not listed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorCode {
    /// `tool_error`: the tool ran (or tried to) and failed: a command that
    /// could not start, exited non-zero, printed invalid JSON, timed out,
    /// overflowed its stdout cap or was cancelled; a missing file; a binary
    /// file given to `read`; any I/O failure.
    ToolError,
    /// `invalid_input`: the arguments are unacceptable independent of the
    /// environment: a wrong type, an out-of-range number, an unknown key, an
    /// invalid regex or glob, or a path that is absolute or leaves the
    /// workspace.
    InvalidInput,
}

impl ToolErrorCode {
    /// The wire name: `"tool_error"` or `"invalid_input"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolError => "tool_error",
            Self::InvalidInput => "invalid_input",
        }
    }
}

impl fmt::Display for ToolErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed tool call: a message for the cell plus a [`ToolErrorCode`].
///
/// The message is shown to the model; it names what failed and, for
/// command tools, ends with the tail of the command's stderr.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// Human-readable description of the failure.
    pub message: String,
    /// Category of the failure.
    pub code: ToolErrorCode,
}

impl ToolError {
    /// An error with an explicit code.
    pub fn new(code: ToolErrorCode, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code,
        }
    }

    /// A `tool_error`.
    pub fn tool(message: impl Into<String>) -> Self {
        Self::new(ToolErrorCode::ToolError, message)
    }

    /// An `invalid_input` error.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ToolErrorCode::InvalidInput, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_wire_names() {
        assert_eq!(ToolErrorCode::ToolError.as_str(), "tool_error");
        assert_eq!(ToolErrorCode::InvalidInput.to_string(), "invalid_input");
        assert_eq!(
            serde_json::to_value(ToolErrorCode::InvalidInput).unwrap(),
            "invalid_input"
        );
        let e = ToolError::tool("boom");
        assert_eq!(e.to_string(), "boom");
        assert_eq!(e.code, ToolErrorCode::ToolError);
    }
}
