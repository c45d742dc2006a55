//! The public entry point: [`Runtime`] and its builder.

use crate::bridge::CellTools;
use crate::cell;
use crate::config::Limits;
use crate::engine::{self, SharedEngine};
use crate::error::Error;
use crate::input::ExecInput;
use crate::registry::ToolRegistry;
use crate::result::{CellResult, Telemetry};
use quickcell_catalog::Catalog;
use std::sync::Arc;

/// Builds a [`Runtime`].
///
/// Secure defaults: a cell gets no filesystem (no preopens), no
/// environment, no arguments, no network, a closed stdin, and discarded
/// stdout/stderr; its only way out is the bridge. Limits default to the
/// contract's values ([`Limits::default`]).
#[derive(Debug, Clone, Default)]
pub struct RuntimeBuilder {
    limits: Limits,
    tools: ToolRegistry,
}

impl RuntimeBuilder {
    /// Uses these limits for every call.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Offers these tools to cells (see [`ToolRegistry`]). Cells reach the
    /// catalog's search and tools through the bridge; until the bridge
    /// dispatch lands, the tools are cataloged (telemetry, search, the CLI)
    /// but not callable from cells.
    pub fn tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
        self
    }

    /// Creates the runtime. The first runtime of a process creates the
    /// shared Wasmtime engine and loads the pre-initialized guest from the
    /// module cache (or builds and caches it, which takes about a second).
    pub async fn build(self) -> Result<Runtime, Error> {
        let shared = engine::shared()
            .await
            .map_err(|e| Error::RuntimeUnavailable(format!("{e:#}")))?;
        let cell_tools = Arc::new(CellTools::new(
            self.tools.catalog(),
            self.tools.tools().clone(),
        ));
        Ok(Runtime {
            shared,
            limits: self.limits,
            tools: self.tools,
            cell_tools,
        })
    }
}

/// A quickcell runtime: runs cells under one set of limits.
///
/// Cheap to share (`&Runtime` is all `exec` needs) and safe to use from
/// many tasks at once: every call gets a fresh instance in its own store.
pub struct Runtime {
    shared: Arc<SharedEngine>,
    limits: Limits,
    tools: ToolRegistry,
    cell_tools: Arc<CellTools>,
}

impl Runtime {
    /// A builder with the default limits.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether the pre-initialized guest came from the on-disk module cache.
    pub fn module_from_cache(&self) -> bool {
        self.shared.from_cache
    }

    /// The tools offered to cells.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The tool catalog built from [`Runtime::tools`].
    pub fn catalog(&self) -> &Catalog {
        &self.cell_tools.catalog
    }

    fn telemetry(&self) -> Telemetry {
        Telemetry {
            catalog: self.cell_tools.catalog.telemetry(&["exec", "wait"]),
            fuel_used: 0,
        }
    }

    /// Runs a cell (`exec`). Never panics and never returns a Rust error:
    /// every outcome, including rejected input, is a [`CellResult`].
    ///
    /// Must be awaited inside a Tokio runtime (tool calls and timers run as
    /// Tokio tasks); current-thread and multi-thread runtimes both work.
    pub async fn exec(&self, input: ExecInput) -> CellResult {
        cell::exec(
            &self.shared,
            &self.limits,
            &self.cell_tools,
            || self.telemetry(),
            &input,
        )
        .await
    }

    /// Runs a cell from raw `exec` arguments (`{"title":..,"code":..}` as a
    /// model or MCP client sends them), applying the contract's argument
    /// rules first.
    pub async fn exec_json(&self, args: &serde_json::Value) -> CellResult {
        match ExecInput::from_json(args) {
            Ok(input) => self.exec(input).await,
            Err(message) => cell::input_failure(message, self.telemetry()),
        }
    }
}
