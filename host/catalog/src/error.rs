//! The crate's error type.

use thiserror::Error;

/// What went wrong; selects the guest error code where one applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Unknown tool id or name (structured modes). Text contains `Use tool_search`.
    UnknownTool,
    /// A direct-only tool was requested through the catalog. Text contains
    /// `Call it directly by its declared name`.
    DirectOnly,
    /// A selector matched several tools, or selectors disagree.
    AmbiguousTool,
    /// Code Mode: `Unknown catalog function: <name>.`
    UnknownCallable,
    /// Call-time input validation failed (`code: "input_contract"`).
    InputContract,
    /// Output-schema validation failed (`code: "output_contract"`).
    OutputContract,
    /// A structured request was malformed (bad shape, blank query, ...).
    InvalidRequest,
    /// A `tool_search` batch limit was exceeded (no search ran).
    BatchLimit,
    /// `API.read` path with a `.` or `..` segment.
    InvalidApiPath,
    /// `API.read` of a file that does not exist.
    UnknownApiFile,
}

/// An error from a catalog surface; `message` is the exact model-facing text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct CatalogError {
    /// The error class.
    pub kind: ErrorKind,
    /// Model-facing text (never contains a catalog id under Code Mode).
    pub message: String,
}

impl CatalogError {
    /// Build an error.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        CatalogError {
            kind,
            message: message.into(),
        }
    }

    /// The guest error code for contract errors (`input_contract`,
    /// `output_contract`); `None` otherwise.
    pub fn code(&self) -> Option<&'static str> {
        match self.kind {
            ErrorKind::InputContract => Some("input_contract"),
            ErrorKind::OutputContract => Some("output_contract"),
            _ => None,
        }
    }

    /// `effectStatus` for contract errors: `"unknown"`.
    pub fn effect_status(&self) -> Option<&'static str> {
        self.code().map(|_| "unknown")
    }
}
