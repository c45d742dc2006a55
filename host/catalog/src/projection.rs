//! The Code Mode projection of a catalog (contract.md §8.1): the tool
//! globals and MCP handles a cell sees, and the caps on the names and
//! `API.read` paths a guest passes to look them up.

use crate::catalog::{Catalog, Entry, SourceKind};
use crate::error::{CatalogError, ErrorKind};
use crate::names::{assign_callable_names, NameCandidate};
use crate::text::collate;
use std::collections::{HashMap, HashSet};

/// Longest callable name, MCP server identifier or MCP method name a guest
/// may pass to a lookup (`describe`, a tool call, `MCP.<server>.$api`), in
/// UTF-8 bytes. A longer name is rejected at once with an error that states
/// its length and this cap (and does not echo the name); no catalog name is
/// that long in practice.
pub const MAX_CALLABLE_NAME_BYTES: usize = 1_024;
/// Longest `API.read` path, in UTF-8 bytes: `mcp/` or `tools/`, a name of
/// at most [`MAX_CALLABLE_NAME_BYTES`] and `.d.ts`. A longer path is rejected
/// at once as an unknown file with an error that states its length and this
/// cap (and does not echo the path).
pub const MAX_API_PATH_BYTES: usize = MAX_CALLABLE_NAME_BYTES + 16;

/// One tool global: its callable name and the catalog id it routes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The guest global name.
    pub callable_name: String,
    /// Catalog id (host side only).
    pub id: String,
}

/// The Code Mode projection (contract.md §8.1), computed once before a cell
/// starts and carried through every resume.
#[derive(Debug, Clone, Default)]
pub struct Projection {
    bindings: Vec<Binding>,
    by_callable: HashMap<String, usize>,
    by_id: HashMap<String, usize>,
    mcp: Vec<Binding>,
    searchable: HashSet<String>,
}

impl Projection {
    /// Native and client bindings sorted by callable name (the order of
    /// `catalog.all()`).
    pub fn bindings(&self) -> &[Binding] {
        &self.bindings
    }
    /// MCP handles (`MCP.<server>.<tool>`), in catalog order.
    pub fn mcp_bindings(&self) -> &[Binding] {
        &self.mcp
    }
    /// Binding by exact callable name.
    pub fn resolve(&self, callable_name: &str) -> Option<&Binding> {
        self.by_callable
            .get(callable_name)
            .map(|&i| &self.bindings[i])
    }
    /// Callable name of a native/client catalog id.
    pub fn callable_name_of(&self, id: &str) -> Option<&str> {
        self.by_id
            .get(id)
            .map(|&i| self.bindings[i].callable_name.as_str())
    }
    /// The ids `catalog.search` may return (native, client and MCP).
    pub fn searchable_ids(&self) -> &HashSet<String> {
        &self.searchable
    }
}
impl Catalog {
    /// Compute the Code Mode projection (contract.md §8.1).
    pub fn callable_projection(&self) -> Projection {
        let native: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| e.kind() != SourceKind::Mcp)
            .collect();
        let cands: Vec<NameCandidate> = native
            .iter()
            .map(|e| NameCandidate {
                name: e.name(),
                id: e.id(),
            })
            .collect();
        let names = assign_callable_names(&cands, &HashSet::new());
        let mut bindings: Vec<Binding> = native
            .iter()
            .zip(names)
            .map(|(e, n)| Binding {
                callable_name: n,
                id: e.id().to_string(),
            })
            .collect();
        bindings.sort_by(|a, b| collate(&a.callable_name, &b.callable_name));
        let mcp: Vec<Binding> = self
            .entries
            .iter()
            .filter_map(|e| {
                e.mcp_callable_name().map(|c| Binding {
                    callable_name: c,
                    id: e.id().to_string(),
                })
            })
            .collect();
        let by_callable = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| (b.callable_name.clone(), i))
            .collect();
        let by_id = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| (b.id.clone(), i))
            .collect();
        let searchable = bindings
            .iter()
            .chain(mcp.iter())
            .map(|b| b.id.clone())
            .collect();
        Projection {
            bindings,
            by_callable,
            by_id,
            mcp,
            searchable,
        }
    }
}

/// Reject a guest-supplied name longer than [`MAX_CALLABLE_NAME_BYTES`]
/// (`what` names it in the error, which does not echo the name).
pub(crate) fn check_name_len(name: &str, kind: ErrorKind, what: &str) -> Result<(), CatalogError> {
    if name.len() <= MAX_CALLABLE_NAME_BYTES {
        return Ok(());
    }
    Err(CatalogError::new(
        kind,
        format!(
            "{what}: the name is {} bytes long; names are at most {MAX_CALLABLE_NAME_BYTES} bytes.",
            name.len()
        ),
    ))
}
