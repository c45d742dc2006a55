//! How far a running `exec` or `wait` has got: the tool calls it has seen
//! settle and the latest one's name (operations.md §3.2). The MCP server
//! reads it to send `notifications/progress`; an embedder can read it the
//! same way ([`crate::ExecInput::with_progress`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Most bytes of a tool name kept as [`Progress::latest_tool`] (a longer
/// name is cut at a character boundary).
pub const MAX_PROGRESS_TOOL_NAME_BYTES: usize = 128;

/// A progress handle shared by a call and whoever watches it; cheap to
/// clone. It counts the tool calls that settled during the calls it was
/// given to (a tool call settled while its run was parked counts when the
/// `wait` that resumes the run delivers it).
#[derive(Clone, Default, Debug)]
pub struct Progress(Arc<Inner>);

#[derive(Default, Debug)]
struct Inner {
    settled: AtomicU64,
    latest_tool: Mutex<Option<String>>,
}

impl Progress {
    /// A handle that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tool calls settled so far.
    pub fn settled_tool_calls(&self) -> u64 {
        self.0.settled.load(Ordering::Acquire)
    }

    /// The name of the latest tool call that settled, as the cell called it
    /// (at most [`MAX_PROGRESS_TOOL_NAME_BYTES`] bytes).
    pub fn latest_tool(&self) -> Option<String> {
        self.0
            .latest_tool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records one settled tool call.
    pub(crate) fn tool_settled(&self, tool: Option<&str>) {
        if let Some(tool) = tool {
            let mut end = tool.len().min(MAX_PROGRESS_TOOL_NAME_BYTES);
            while !tool.is_char_boundary(end) {
                end -= 1;
            }
            *self.0.latest_tool.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(tool[..end].to_string());
        }
        self.0.settled.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_is_cut_at_a_character_boundary() {
        let progress = Progress::new();
        let name = "é".repeat(MAX_PROGRESS_TOOL_NAME_BYTES);
        progress.tool_settled(Some(&name));
        progress.tool_settled(None);
        let kept = progress.latest_tool().unwrap();
        assert_eq!(kept.len(), MAX_PROGRESS_TOOL_NAME_BYTES);
        assert_eq!(kept, "é".repeat(MAX_PROGRESS_TOOL_NAME_BYTES / 2));
        assert_eq!(progress.settled_tool_calls(), 2);
    }
}
