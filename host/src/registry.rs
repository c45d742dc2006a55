//! The runtime's tools and the catalog built from them.
//!
//! Host tools come from three places, cataloged as trusted `host` tools:
//! the built-in workspace tools (`read`, `ls`, `find`, `grep`; catalog
//! source `core`, only when a workspace root is configured), tools
//! registered from Rust (source `core`), and command tools declared in the
//! config (`[[tools]]`; plugin source `commands`). Names are unique across
//! all of them.
//!
//! *Client* tools ([`ToolRegistry::add_client`]) are supplied by the
//! caller the runtime serves and are untrusted: their descriptions never
//! reach a prompt, their schemas are not read for hints (`input` is
//! `"unknown"`) and are shown only by `describe()`. A client tool may share
//! its exact name with a host tool and then shadows it (the host tool is
//! neither searchable nor callable); among client tools the later one wins.
//! A runtime serves one tool set: build a runtime per client tool set.
//!
//! *MCP* tools come from downstream MCP servers (see [`crate::tools::mcp`]); the
//! runtime builder adds them when it connects. They are untrusted, live
//! under `MCP.<server>` instead of as globals, and may share names with any
//! other tool: calls reach them by catalog id.

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
    /// Host tools (unique names), in registration order.
    host: ToolSet,
    origins: Vec<Origin>,
    /// MCP tools with their server's name, in server and listing order.
    mcp: Vec<(String, Arc<dyn Tool>)>,
    /// Client tools, in registration order (names may repeat).
    clients: Vec<Arc<dyn Tool>>,
    /// What calls reach: host tools not shadowed, then the winning client
    /// tool of each name. Built on first use after a change (rebuilding it
    /// on every `add` made registering n tools O(n²)).
    effective: std::sync::OnceLock<ToolSet>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.tools().iter().map(|t| t.name().to_string()))
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

    /// Adds an untrusted client tool (see the module docs); it shadows a
    /// host tool or an earlier client tool of the same name.
    pub fn add_client(&mut self, tool: Arc<dyn Tool>) -> Result<(), Error> {
        if tool.name().is_empty() {
            return Err(Error::Config("a tool name must not be empty".into()));
        }
        self.clients.push(tool);
        self.effective = std::sync::OnceLock::new();
        Ok(())
    }

    /// Adds a tool of the downstream MCP server `server`.
    /// A server listing one name twice gets its first tool of that name.
    pub(crate) fn add_mcp(&mut self, server: &str, tool: Arc<dyn Tool>) {
        if self
            .mcp
            .iter()
            .any(|(s, t)| s == server && t.name() == tool.name())
        {
            return;
        }
        self.mcp.push((server.to_owned(), tool));
    }

    /// MCP tools by catalog id (`mcp:<server>:<tool>`).
    pub(crate) fn mcp_tools(&self) -> std::collections::HashMap<String, Arc<dyn Tool>> {
        self.mcp
            .iter()
            .map(|(server, tool)| {
                let source = quickcell_catalog::Source::Mcp {
                    server: server.clone(),
                };
                (source.catalog_id(tool.name()), tool.clone())
            })
            .collect()
    }

    fn add_with_origin(&mut self, tool: Arc<dyn Tool>, origin: Origin) -> Result<(), Error> {
        self.host
            .register(tool)
            .map_err(|e| Error::Config(e.to_string()))?;
        self.origins.push(origin);
        self.effective = std::sync::OnceLock::new();
        Ok(())
    }

    /// The host tools, shadowed or not: a call reaches one only when the
    /// catalog resolved it to that host entry.
    pub(crate) fn host_tools(&self) -> &ToolSet {
        &self.host
    }

    /// The winning client tool of each name, by name.
    pub(crate) fn client_tools(&self) -> std::collections::HashMap<String, Arc<dyn Tool>> {
        self.client_winners()
            .into_iter()
            .map(|tool| (tool.name().to_string(), tool.clone()))
            .collect()
    }

    /// The winning client tool of each name, in registration order of the
    /// winners.
    fn client_winners(&self) -> Vec<&Arc<dyn Tool>> {
        let mut last = std::collections::HashMap::new();
        for (i, tool) in self.clients.iter().enumerate() {
            last.insert(tool.name(), i);
        }
        self.clients
            .iter()
            .enumerate()
            .filter(|(i, t)| last[t.name()] == *i)
            .map(|(_, t)| t)
            .collect()
    }

    fn effective_tools(&self) -> ToolSet {
        let winners = self.client_winners();
        let shadowed: std::collections::HashSet<&str> = winners.iter().map(|w| w.name()).collect();
        let mut set = ToolSet::new();
        for tool in self.host.iter() {
            if !shadowed.contains(tool.name()) {
                set.register(tool.clone()).expect("host names are unique");
            }
        }
        for tool in winners {
            set.register(tool.clone()).expect("winners are unique");
        }
        set
    }

    /// The tools calls reach: host tools (except those a client tool
    /// shadows), then client tools.
    pub fn tools(&self) -> &ToolSet {
        self.effective.get_or_init(|| self.effective_tools())
    }

    /// Builds the tool catalog (search index, callable names, hints).
    pub fn catalog(&self) -> Catalog {
        self.catalog_under(quickcell_catalog::Policy::default())
    }

    /// [`ToolRegistry::catalog`] with only the tools `policy` lets cells
    /// see (indexed once, after the policy).
    pub fn catalog_under(&self, policy: quickcell_catalog::Policy) -> Catalog {
        self.catalog_within(policy, None, None)
    }

    /// [`ToolRegistry::catalog_under`] with a further policy every tool
    /// must also pass (a caller's, within the runtime's).
    pub(crate) fn catalog_within(
        &self,
        policy: quickcell_catalog::Policy,
        narrowing: Option<quickcell_catalog::Policy>,
        limits: Option<quickcell_catalog::SearchLimits>,
    ) -> Catalog {
        let mut builder = Catalog::builder().policy(policy);
        if let Some(limits) = limits {
            builder = builder.limits(limits);
        }
        if let Some(narrowing) = narrowing {
            builder = builder.narrowed_by(narrowing);
        }
        for (tool, origin) in self.host.iter().zip(&self.origins) {
            let mut spec = spec_of(tool.as_ref());
            if tool.replay_safe() {
                spec = spec.replay_safe();
            }
            builder = match origin {
                Origin::Core => builder.core(spec),
                Origin::Command => builder.plugin(COMMAND_TOOLS_SOURCE, false, spec),
            };
        }
        for (server, tool) in &self.mcp {
            builder = builder.mcp(server, spec_of(tool.as_ref()));
        }
        for tool in self.client_winners() {
            builder = builder.client(spec_of(tool.as_ref()));
        }
        builder.build()
    }
}

/// A tool's catalog entry: name, description and schemas. Only host tools
/// may add the replay-safe mark (the caller does).
fn spec_of(tool: &dyn Tool) -> ToolSpec {
    let spec =
        ToolSpec::new(tool.name(), tool.description()).with_input_schema(tool.input_schema());
    match tool.output_schema() {
        Some(output) => spec.with_output_schema(output),
        None => spec,
    }
}
