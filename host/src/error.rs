//! The public error type of the library boundary.

/// What went wrong, as a Rust error.
///
/// Cell failures are reported to callers as [`crate::CellResult::Failed`]
/// (the contract's result union); [`crate::CellResult::into_value`] turns a
/// failed result into one of these variants. Runtime construction and
/// configuration loading return this type directly.
///
/// Errors that come from a failure below quickcell (the engine, the state
/// store, a socket) keep it as their [`source`](std::error::Error::source);
/// print the whole chain (for example with `anyhow`'s `{:#}`) to see it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad `exec` / `wait` arguments or rejected source (`invalid_input`).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The call's wall-clock deadline passed (`timeout`).
    #[error("code mode timeout exceeded")]
    Timeout,
    /// The call's fuel allowance ran out (`fuel_exhausted`).
    #[error("code mode fuel exhausted")]
    FuelExhausted,
    /// The cell hit its memory cap (`memory_limit_exceeded`).
    #[error("code mode memory limit exceeded")]
    MemoryLimitExceeded,
    /// A checkpoint exceeded `maxSnapshotBytes` (`snapshot_limit_exceeded`).
    #[error("code mode snapshot limit exceeded")]
    SnapshotLimitExceeded,
    /// A `wait` on a run parked by another guest build than this host
    /// carries (`snapshot_incompatible`); the message names both builds.
    /// The run stays parked: a host carrying its build can resume it.
    #[error("{0}")]
    SnapshotIncompatible(String),
    /// The result cannot be serialized within limits (`output_limit_exceeded`).
    #[error("output limit exceeded: {0}")]
    OutputLimitExceeded(String),
    /// The session is over a quota (`quota_exceeded`); the message names
    /// it and when it frees.
    #[error("{0}")]
    QuotaExceeded(String),
    /// The run was cancelled (`aborted`).
    #[error("code mode execution aborted")]
    Aborted,
    /// The Wasmtime engine, guest module or instance could not be created
    /// (`runtime_unavailable`).
    #[error("runtime unavailable: {message}")]
    RuntimeUnavailable {
        /// What could not be done (the contract's `error` text for a cell).
        message: String,
        /// The underlying failure.
        #[source]
        source: Option<BoxError>,
    },
    /// An uncaught guest error or host fault (`internal_error`); the text is
    /// the contract's `error` string.
    #[error("{0}")]
    Internal(String),
    /// The cell parked instead of finishing; resume it with `wait` on this
    /// run id.
    #[error("the cell is waiting; resume run {0} with wait")]
    Waiting(String),
    /// The state store (parked runs) cannot be opened or used.
    #[error("state store: {message}")]
    StateStore {
        /// What could not be done.
        message: String,
        /// The underlying failure.
        #[source]
        source: Option<BoxError>,
    },
    /// A configuration file or value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// The underlying failure an [`Error`] keeps as its source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl Error {
    /// [`Error::RuntimeUnavailable`] caused by `source`.
    pub(crate) fn runtime_unavailable(message: impl Into<String>, source: anyhow::Error) -> Self {
        Error::RuntimeUnavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// [`Error::StateStore`] caused by `source`.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn state_store(message: impl Into<String>, source: anyhow::Error) -> Self {
        Error::StateStore {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// The message and the messages of its sources, joined by `: `.
    pub fn chain_message(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}
