//! Where a tool comes from: its source, source kind and catalog id.

use serde::Serialize;

/// Where a tool comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// The host's built-in tools (`sourceName` = `core`). Trusted.
    Core,
    /// A host plugin (`sourceName` = plugin id). Trusted. Bundled plugins
    /// come before external ones in catalog order.
    Plugin {
        /// Plugin id.
        id: String,
        /// Bundled with the host (vs. external).
        bundled: bool,
    },
    /// An MCP server (`sourceName` = sanitized server name). Untrusted.
    Mcp {
        /// Server name as configured.
        server: String,
    },
    /// A tool supplied by the caller for the current run (`sourceName` =
    /// `client`). Untrusted.
    Client,
}

/// The three source kinds visible in metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// Host built-ins and plugins (trusted).
    Host,
    /// MCP servers (untrusted).
    Mcp,
    /// Caller-supplied tools (untrusted).
    Client,
}

impl SourceKind {
    /// `"host"`, `"mcp"` or `"client"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Host => "host",
            SourceKind::Mcp => "mcp",
            SourceKind::Client => "client",
        }
    }
}

/// Sanitize a source name for use inside a catalog id: every character
/// outside `[A-Za-z0-9_.-]` becomes `_`.
pub fn sanitize_source_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "_".to_string()
    } else {
        s
    }
}

impl Source {
    /// The source kind.
    pub fn kind(&self) -> SourceKind {
        match self {
            Source::Core | Source::Plugin { .. } => SourceKind::Host,
            Source::Mcp { .. } => SourceKind::Mcp,
            Source::Client => SourceKind::Client,
        }
    }

    /// The id's `sourceName` part.
    pub fn source_name(&self) -> String {
        match self {
            Source::Core => "core".to_string(),
            Source::Plugin { id, .. } => sanitize_source_name(id),
            Source::Mcp { server } => sanitize_source_name(server),
            Source::Client => "client".to_string(),
        }
    }

    /// Catalog id `<source>:<sourceName>:<toolName>`.
    pub fn catalog_id(&self, tool_name: &str) -> String {
        let (kind, name): (&str, std::borrow::Cow<'_, str>) = match self {
            Source::Core => ("host", "core".into()),
            Source::Client => ("client", "client".into()),
            _ => (self.kind().as_str(), self.source_name().into()),
        };
        let mut id = String::with_capacity(kind.len() + name.len() + tool_name.len() + 2);
        id.push_str(kind);
        id.push(':');
        id.push_str(&name);
        id.push(':');
        id.push_str(tool_name);
        id
    }

    /// Catalog-order group: core, bundled plugins, external plugins, MCP,
    /// client.
    pub(super) fn group(&self) -> u8 {
        match self {
            Source::Core => 0,
            Source::Plugin { bundled: true, .. } => 1,
            Source::Plugin { bundled: false, .. } => 2,
            Source::Mcp { .. } => 3,
            Source::Client => 4,
        }
    }
}
