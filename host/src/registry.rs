//! The runtime's tools and the catalog built from them.
//!
//! Tools come from three places, cataloged as trusted `host` tools:
//! the built-in workspace tools (`read`, `ls`, `find`, `grep`; catalog
//! source `core`, only when a workspace root is configured), tools
//! registered from Rust (source `core`), and command tools declared in the
//! config (`[[tools]]`; plugin source `commands`). Names are unique across
//! all of them.

use crate::config::Config;
use crate::error::Error;
use crate::tools::{command_tools, workspace_tools, Tool, ToolSet};
use quickcell_catalog::{Catalog, ToolSpec};
use std::path::Path;
use std::sync::Arc;

/// Catalog plugin id of command tools declared in the config.
pub const COMMAND_TOOLS_SOURCE: &str = "commands";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Core,
    Command,
}

/// The tools a runtime offers to its cells, in registration order.
#[derive(Default, Clone)]
pub struct ToolRegistry {
    tools: ToolSet,
    origins: Vec<Origin>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.tools.iter().map(|t| t.name().to_string()))
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The workspace tools for `config.workspace_root` (if any), then the
    /// command tools of `config.tools`.
    pub fn from_config(config: &Config) -> Result<Self, Error> {
        let mut registry = Self::new();
        if let Some(root) = &config.workspace_root {
            registry.add_workspace(root)?;
        }
        let commands = command_tools(config.tools.clone()).map_err(Error::Config)?;
        for tool in commands {
            registry.add_with_origin(tool, Origin::Command)?;
        }
        Ok(registry)
    }

    /// Adds the read-only workspace tools `read`, `ls`, `find` and `grep`
    /// serving `root`.
    pub fn add_workspace(&mut self, root: &Path) -> Result<(), Error> {
        let tools = workspace_tools(root).map_err(|e| Error::Config(format!("workspace: {e}")))?;
        for tool in tools {
            self.add_with_origin(tool, Origin::Core)?;
        }
        Ok(())
    }

    /// Adds a tool implemented in Rust. Names must be unique.
    pub fn add(&mut self, tool: Arc<dyn Tool>) -> Result<(), Error> {
        self.add_with_origin(tool, Origin::Core)
    }

    fn add_with_origin(&mut self, tool: Arc<dyn Tool>, origin: Origin) -> Result<(), Error> {
        self.tools
            .register(tool)
            .map_err(|e| Error::Config(e.to_string()))?;
        self.origins.push(origin);
        Ok(())
    }

    /// The registered tools.
    pub fn tools(&self) -> &ToolSet {
        &self.tools
    }

    /// Builds the tool catalog (search index, callable names, hints).
    pub fn catalog(&self) -> Catalog {
        let mut builder = Catalog::builder();
        for (tool, origin) in self.tools.iter().zip(&self.origins) {
            let mut spec = ToolSpec::new(tool.name(), tool.description())
                .with_input_schema(tool.input_schema());
            if let Some(output) = tool.output_schema() {
                spec = spec.with_output_schema(output);
            }
            if tool.replay_safe() {
                spec = spec.replay_safe();
            }
            builder = match origin {
                Origin::Core => builder.core(spec),
                Origin::Command => builder.plugin(COMMAND_TOOLS_SOURCE, false, spec),
            };
        }
        builder.build()
    }
}
