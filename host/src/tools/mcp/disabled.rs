//! Without the `mcp-client` feature there are no downstream servers:
//! [`RuntimeBuilder::build`](crate::RuntimeBuilder::build) refuses a
//! configuration that names one.

use super::McpServerConfig;
use crate::tools::Tool;
use std::sync::Arc;

/// No servers.
#[derive(Default)]
pub(crate) struct McpClients;

/// A server's name.
pub(crate) struct Named(String);

impl Named {
    pub(crate) fn name(&self) -> &str {
        &self.0
    }
}

/// Never made: there is no server to connect to.
pub(crate) struct ConnectedServer {
    pub connection: Named,
    pub tools: Vec<Arc<dyn Tool>>,
}

impl McpClients {
    /// Connects to nothing.
    pub(crate) async fn start(_configs: Vec<McpServerConfig>) -> (Self, Vec<ConnectedServer>) {
        (Self, Vec::new())
    }

    /// Never down.
    pub(crate) fn outage(&self) -> Option<(Vec<String>, String)> {
        None
    }
}
