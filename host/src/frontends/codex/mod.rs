//! The Codex code-mode host (`quickcell codex-host`): OpenAI Codex runs its
//! code-mode cells in an external host process and speaks a framed JSON
//! protocol to it over stdio (openai/codex,
//! `codex-rs/code-mode-protocol/src/host/`). quickcell speaks protocol
//! version 1 and runs each cell as a quickcell cell, under the **Codex
//! guest profile**: the globals Codex tells its model about (`tools.<name>`,
//! `ALL_TOOLS`, `text`, `image`, `store`/`load`, `notify`, `exit`,
//! `yield_control`), put in front of the cell's source (`connection/profile.js`) and
//! built on the same bridge as quickcell's own.
//!
//! - [`frame`]: a `u32` little-endian length and UTF-8 JSON, at most
//!   [`MAX_CODEX_FRAME_BYTES`]; a larger frame is skipped unread into
//!   memory.
//! - [`wire`]: the messages; unknown fields are refused, as the reference
//!   host does.
//! - `connection`: the handshake, sessions (`session/open`, `/shutdown`),
//!   cells (`session/execute` with a host-chosen or a client-chosen
//!   `cellId`, `execute/initialResponse`, `session/wait`,
//!   `session/terminate`, `cell/closed`), `operation/cancel`,
//!   `operation/yield` (capability `yield-observation`), and the
//!   reverse calls: a nested tool call or `notify()` parks the cell (its
//!   snapshot is taken, as for any tool) and goes to the client as
//!   `delegate/request`; the answer resumes it; a terminated cell's calls
//!   get `delegate/cancel`.
//!
//! Bad input never ends the connection: a frame that does not decode is
//! answered with an error response when it names an operation request id,
//! and logged otherwise; a delegate answer for an unknown id is logged.
//! (The reference host ends the connection on both.)

mod connection;
mod frame;
mod wire;

pub use frame::MAX_CODEX_FRAME_BYTES;

use crate::Runtime;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

/// The protocol version quickcell speaks.
pub const CODEX_PROTOCOL_VERSION: u32 = 1;

/// The capability that lets `session/open` carry `cellExecutionLimits`.
pub(crate) const RESOURCE_LIMITS_CAPABILITY: &str = "session-cell-execution-resource-limits";

/// The capability that lets the client end an observation early with
/// `operation/yield`, the cell going on.
pub(crate) const YIELD_OBSERVATION_CAPABILITY: &str = "yield-observation";

/// Longest yield a request may ask for, in milliseconds (the protocol's
/// `wait` is capped at 300 s).
pub(crate) const MAX_YIELD_TIME_MS: u64 = 300_000;

/// Most bytes of a session id, or of a cell id the client chooses.
pub(crate) const MAX_CODEX_ID_BYTES: usize = 256;

/// Bounds of one connection (the reference host's values where it has
/// them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CodexLimits {
    /// Sessions open at once.
    pub max_sessions: usize,
    /// Session ids remembered so that none is opened twice.
    pub max_recent_sessions: usize,
    /// Operations in flight at once.
    pub max_in_flight: usize,
    /// Cells live at once, over all sessions.
    pub max_active_cells: usize,
    /// Reverse calls awaiting the client at once.
    pub max_pending_delegates: usize,
}

impl Default for CodexLimits {
    fn default() -> Self {
        Self {
            max_sessions: 4096,
            max_recent_sessions: 4096,
            max_in_flight: 256,
            max_active_cells: 128,
            max_pending_delegates: 1024,
        }
    }
}

/// How a Codex connection keeps its sessions and speaks to its client.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CodexOptions {
    /// The namespace of the connection's sessions in the state store.
    /// With one, a session's values, cells and cell numbering are kept
    /// there: a host started again with the same scope (or another host on
    /// the same PostgreSQL store) that gets `session/open` for the same
    /// session id answers `session/wait` for the cells started before,
    /// resuming their parked runs (an execute never runs twice), and a
    /// client that closes its end leaves the cells waiting on it parked.
    /// Without one (the default) sessions end with their connection.
    pub scope: Option<String>,
    /// Whether each `Yielded` / `Terminated` / `Result` carries
    /// `code_mode_host_duration_ns`, the host's time from receiving the
    /// request to having its outcome ready. Codex releases from about
    /// 0.152 require the field; earlier ones refuse it as an unknown field
    /// and end the connection. Default: `true`.
    pub report_host_duration: bool,
}

impl Default for CodexOptions {
    fn default() -> Self {
        Self {
            scope: None,
            report_host_duration: true,
        }
    }
}

impl CodexOptions {
    /// Keeps sessions in the state store under `scope`.
    pub fn with_scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// Sets [`CodexOptions::report_host_duration`]: `false` for a Codex
    /// release up to 0.151.
    pub fn with_host_duration(mut self, report: bool) -> Self {
        self.report_host_duration = report;
        self
    }
}

/// Serves the Codex code-mode host protocol on one connection (`reader`
/// from the client, `writer` to it) until the client closes its end. Its
/// sessions then end (cells terminated, values dropped), unless
/// `options` gives them a scope (see [`CodexOptions::scope`]).
///
/// # Errors
///
/// When reading or writing fails, or the stream ends inside a frame.
pub async fn serve_codex(
    runtime: Arc<Runtime>,
    options: CodexOptions,
    reader: impl AsyncRead + Unpin,
    writer: impl AsyncWrite + Unpin + Send + 'static,
) -> std::io::Result<()> {
    connection::serve(runtime, CodexLimits::default(), options, reader, writer).await
}
