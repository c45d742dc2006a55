//! Bounded, cancellable, deterministic recursive walk used by `find` and
//! `grep`.

use super::CancelSignal;
use cap_std::fs::Dir;
use std::ffi::OsString;

/// Deepest directory level a walk descends to below its start: 64.
pub const MAX_WALK_DEPTH: usize = 64;

/// Most directory entries one `find` or `grep` call visits: 100,000.
/// Reaching it stops the walk and marks the result truncated.
pub const MAX_WALK_ENTRIES: usize = 100_000;

/// Type of a directory entry, without following symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

impl Kind {
    pub(crate) fn of(ft: cap_std::fs::FileType) -> Self {
        if ft.is_symlink() {
            Self::Symlink
        } else if ft.is_dir() {
            Self::Dir
        } else if ft.is_file() {
            Self::File
        } else {
            Self::Other
        }
    }

    /// Name used in JSON results.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Dir => "dir",
            Self::Symlink => "symlink",
            Self::Other => "other",
        }
    }

    /// `ls -F` style marker appended to names in listing text.
    pub(crate) fn marker(self) -> &'static str {
        match self {
            Self::Dir => "/",
            Self::Symlink => "@",
            _ => "",
        }
    }
}

/// One entry met by the walk.
pub(crate) struct Entry<'a> {
    /// The directory holding the entry.
    pub dir: &'a Dir,
    /// The entry's name as stored.
    pub os_name: &'a OsString,
    /// The entry's name for display and matching.
    pub name: &'a str,
    /// Path relative to the walk's start, `/`-separated.
    pub sub: &'a str,
    /// Type, symlinks not followed.
    pub kind: Kind,
}

/// What the visitor wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Stop,
}

/// Why a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Every reachable entry was visited.
    Complete,
    /// The visitor returned [`Flow::Stop`].
    Stopped,
    /// [`MAX_WALK_ENTRIES`] were visited.
    EntryCap,
    /// The cancel signal fired.
    Cancelled,
}

/// Walks `start` depth first, entries of each directory in byte order of
/// their names, calling `visit` on each (directories before their
/// contents). Never follows symlinks, never descends into `.git`.
pub(crate) fn walk(
    start: &Dir,
    cancel: &CancelSignal,
    visit: &mut dyn FnMut(&Entry<'_>) -> Flow,
) -> End {
    walk_capped(start, cancel, MAX_WALK_ENTRIES, visit)
}

/// [`walk`] visiting at most `max_entries` entries.
fn walk_capped(
    start: &Dir,
    cancel: &CancelSignal,
    max_entries: usize,
    visit: &mut dyn FnMut(&Entry<'_>) -> Flow,
) -> End {
    let mut state = State {
        cancel,
        visited: 0,
        max_entries,
        end: End::Complete,
    };
    state.dir(start, "", 0, visit);
    state.end
}

struct State<'c> {
    cancel: &'c CancelSignal,
    visited: usize,
    max_entries: usize,
    end: End,
}

impl State<'_> {
    /// Returns `false` once the walk must end (`self.end` says why).
    fn dir(
        &mut self,
        dir: &Dir,
        prefix: &str,
        depth: usize,
        visit: &mut dyn FnMut(&Entry<'_>) -> Flow,
    ) -> bool {
        let Ok(read) = dir.entries() else {
            return true; // unreadable: skip
        };
        let mut entries: Vec<(OsString, String, Kind)> = Vec::new();
        for entry in read {
            if self.cancel.is_cancelled() {
                self.end = End::Cancelled;
                return false;
            }
            let Ok(entry) = entry else { continue };
            let Ok(ft) = entry.file_type() else { continue };
            let os_name = entry.file_name();
            let name = os_name.to_string_lossy().into_owned();
            entries.push((os_name, name, Kind::of(ft)));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (os_name, name, kind) in &entries {
            if self.cancel.is_cancelled() {
                self.end = End::Cancelled;
                return false;
            }
            if self.visited >= self.max_entries {
                self.end = End::EntryCap;
                return false;
            }
            self.visited += 1;
            let sub = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let entry = Entry {
                dir,
                os_name,
                name,
                sub: &sub,
                kind: *kind,
            };
            if visit(&entry) == Flow::Stop {
                self.end = End::Stopped;
                return false;
            }
            if *kind == Kind::Dir && name != ".git" && depth < MAX_WALK_DEPTH {
                if let Ok(child) = dir.open_dir(os_name) {
                    if !self.dir(&child, &sub, depth + 1, visit) {
                        return false;
                    }
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::rooted::test_support::TempDir;
    use super::*;

    fn open(tmp: &TempDir) -> Dir {
        Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap()
    }

    #[test]
    fn order_git_skip_and_symlinks() {
        let tmp = TempDir::new("walk-order");
        tmp.write("b/z.txt", "");
        tmp.write("b/a.txt", "");
        tmp.write("a.txt", "");
        tmp.write(".git/HEAD", "");
        std::os::unix::fs::symlink("b", tmp.path().join("c")).unwrap();
        let dir = open(&tmp);
        let mut seen = vec![];
        let end = walk(&dir, &CancelSignal::new(), &mut |e| {
            seen.push(format!("{}{}", e.sub, e.kind.marker()));
            Flow::Continue
        });
        assert_eq!(end, End::Complete);
        assert_eq!(seen, [".git/", "a.txt", "b/", "b/a.txt", "b/z.txt", "c@"]);
    }

    #[test]
    fn entry_cap_and_visitor_stop() {
        let tmp = TempDir::new("walk-cap");
        for i in 0..20 {
            tmp.write(&format!("d{}/f{i:02}", i % 4), "");
        }
        let dir = open(&tmp);
        let mut n = 0;
        let end = walk_capped(&dir, &CancelSignal::new(), 10, &mut |_| {
            n += 1;
            Flow::Continue
        });
        assert_eq!((end, n), (End::EntryCap, 10));
        let mut n = 0;
        let end = walk(&dir, &CancelSignal::new(), &mut |_| {
            n += 1;
            if n == 5 {
                Flow::Stop
            } else {
                Flow::Continue
            }
        });
        assert_eq!((end, n), (End::Stopped, 5));
    }

    #[test]
    fn depth_is_bounded() {
        let tmp = TempDir::new("walk-deep");
        let deep: Vec<String> = (0..MAX_WALK_DEPTH + 5).map(|i| format!("d{i}")).collect();
        tmp.write(&(deep.join("/") + "/leaf"), "");
        let dir = open(&tmp);
        let mut max_depth = 0;
        walk(&dir, &CancelSignal::new(), &mut |e| {
            max_depth = max_depth.max(e.sub.matches('/').count());
            Flow::Continue
        });
        assert_eq!(max_depth, MAX_WALK_DEPTH);
    }
}
