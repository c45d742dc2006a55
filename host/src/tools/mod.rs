//! Host tool providers: the [`Tool`] trait, the [`ToolSet`] registry,
//! command tools declared in the configuration and the built-in read-only
//! workspace tools.
//!
//! This module tree is a leaf: it uses nothing from the rest of the crate,
//! so the bridge, the guest globals and the dispatch loop build on it
//! rather than the other way round.
//!
//! # The `Tool` trait
//!
//! A tool has a name, a description, a JSON Schema for its input, an
//! optional JSON Schema for its output, a replay-safe flag and an async
//! [`Tool::call`] taking the JSON arguments and a [`CancelSignal`]. A call
//! returns a JSON value or a [`ToolError`] whose [`ToolErrorCode`] becomes
//! the `code` of the `Error` the cell catches. A cancelled call stops
//! promptly: command tools kill their process group, workspace tools stop
//! walking or reading at their next check.
//!
//! # Command tools ([`command`])
//!
//! Declared as `[[tools]]` entries in the configuration, which
//! [`crate::Config`] reads into [`CommandToolConfig`]s. Secure defaults: no
//! shell (the `command` argv is executed directly), an empty environment
//! except `PATH`, stdin carries the JSON arguments, stdout must hold
//! exactly one JSON value. Caps:
//!
//! | cap | default |
//! | --- | --- |
//! | wall clock per call (`timeout_ms`) | [`DEFAULT_COMMAND_TIMEOUT_MS`] = 30,000 ms, at most [`MAX_COMMAND_TIMEOUT_MS`] = 600,000 ms |
//! | stdout | [`MAX_COMMAND_STDOUT_BYTES`] = 4 MiB; more is a tool error |
//! | stderr kept for error messages | the last [`COMMAND_STDERR_TAIL_BYTES`] = 2,048 bytes |
//!
//! `PATH` is the host's, or [`DEFAULT_COMMAND_PATH`] when the host has
//! none. The command runs in its own process group; on timeout, cancellation,
//! oversized stdout or when the call future is dropped the whole group is
//! killed with `SIGKILL` and the child is reaped: the host never hangs on
//! a tool, and a call it gives up on leaves no process behind.
//!
//! # Workspace tools ([`workspace`])
//!
//! `read`, `ls`, `find` and `grep` over one directory opened with `cap-std`:
//! every path is relative to the workspace root, and `..` above the root,
//! absolute paths and symlinks leading outside it fail with an
//! `invalid_input` error. All four are read-only and replay-safe; each
//! result's shape and every cap are documented in [`workspace`].

pub mod command;
mod error;
pub mod mcp;
mod registry;
pub mod workspace;

mod args;
mod find;
mod grep;
mod ls;
mod read;
mod rooted;
mod walk;

use serde_json::Value;

/// The attribute that implements [`Tool::call`]'s boxed future; re-exported
/// so implementors need no direct `async-trait` dependency.
pub use async_trait::async_trait;

pub use command::{
    command_tools, CommandTool, CommandToolConfig, COMMAND_STDERR_TAIL_BYTES, DEFAULT_COMMAND_PATH,
    DEFAULT_COMMAND_TIMEOUT_MS, MAX_COMMAND_STDOUT_BYTES, MAX_COMMAND_TIMEOUT_MS,
};
pub use error::{ToolError, ToolErrorCode};
pub use registry::{ToolSet, ToolSetError};
pub use workspace::{workspace_tools, Workspace};

/// Cancellation signal handed to every [`Tool::call`].
///
/// The dispatcher keeps a clone and calls
/// [`cancel`](tokio_util::sync::CancellationToken::cancel) when the cell
/// (or its owning run) is cancelled; tools observe it with
/// [`cancelled`](tokio_util::sync::CancellationToken::cancelled) or
/// [`is_cancelled`](tokio_util::sync::CancellationToken::is_cancelled).
pub type CancelSignal = tokio_util::sync::CancellationToken;

/// A host tool that cells can call.
///
/// Object safe: tools are stored as `Arc<dyn Tool>`. Implement it with the
/// [`async_trait`](macro@async_trait) attribute (re-exported from this module):
///
/// ```ignore
/// struct Echo;
///
/// #[async_trait]
/// impl Tool for Echo {
///     fn name(&self) -> &str { "echo" }
///     fn description(&self) -> &str { "Returns its arguments." }
///     fn input_schema(&self) -> Value { json!({"type": "object"}) }
///     async fn call(&self, args: Value, _cancel: CancelSignal) -> Result<Value, ToolError> {
///         Ok(args)
///     }
/// }
/// ```
#[async_trait]
pub trait Tool: Send + Sync {
    /// The tool's exact name; unique within a [`ToolSet`].
    fn name(&self) -> &str;

    /// Human-readable description shown by `describe()` and used by search.
    fn description(&self) -> &str;

    /// JSON Schema of the arguments object.
    fn input_schema(&self) -> Value;

    /// JSON Schema of the returned value, when the tool declares one.
    /// Defaults to `None` (output unknown).
    fn output_schema(&self) -> Option<Value> {
        None
    }

    /// Whether replaying the call after a restart is harmless (read-only,
    /// idempotent). Only replay-safe tools may be called by `restartSafe`
    /// cells. Defaults to `false`.
    fn replay_safe(&self) -> bool {
        false
    }

    /// Runs the tool with `args` (the JSON value the cell passed; `null`
    /// when it passed nothing). Must return promptly once `cancel` fires.
    ///
    /// The future's first poll runs on the cell's own task (a call that is
    /// done by then settles without a task of its own); it is moved into a
    /// separate task only if it is still pending. So do not block before
    /// the first `.await`: put blocking work in
    /// `tokio::task::spawn_blocking`.
    async fn call(&self, args: Value, cancel: CancelSignal) -> Result<Value, ToolError>;
}
