//! Built-in workspace tools `read`, `ls`, `find` and `grep`.
//!
//! All four work on one directory, the *workspace*, opened once with
//! `cap-std` ([`cap_std::fs::Dir::open_ambient_dir`]). They are read-only
//! and replay-safe, and never write, create or delete anything.
//!
//! # Paths
//!
//! Every `path` argument is relative to the workspace root, with `/` as
//! the separator; `""` and `"."` mean the root. `.` components and empty
//! components are ignored and `..` is resolved lexically. The following
//! fail with an `invalid_input` error that says the path is outside the
//! workspace:
//!
//! - an absolute path (`/etc/passwd`);
//! - a `..` that climbs above the root (`../x`, `a/../../x`);
//! - a symlink whose target leads outside the workspace, or whose target
//!   is absolute (even one pointing back inside): `cap-std` refuses to
//!   resolve it.
//!
//! Symlinks that stay inside the workspace work for `read`, `ls` and as
//! the `path` of `find`/`grep`. The recursive walk of `find` and `grep`
//! never follows symlinks (it reports them, `find` can match them, but it
//! does not descend into or read through them) and does not descend into
//! directories named `.git`, nor deeper than [`MAX_WALK_DEPTH`] levels.
//! Unreadable directories and files met during a walk are skipped. File
//! names that are not valid UTF-8 are shown with U+FFFD replacements.
//!
//! # `read { path, offset?, limit?, cursor? }`
//!
//! Pages a text file by lines. `offset` is the 1-based number of the first
//! line (default 1); `limit` the most lines to return (default
//! [`READ_DEFAULT_LIMIT`], at most [`READ_MAX_LIMIT`]); `cursor` (default 0)
//! a byte position inside line `offset` to resume a line that an earlier
//! page cut. A page holds at most [`READ_MAX_PAGE_BYTES`] bytes of file data.
//!
//! - Last page: `{ kind: "text", path, content, offset, totalLines }`.
//! - More remains: `{ kind: "truncated", path, content, offset,
//!   continuation: { offset, limit, cursor? } }`. Call `read` again with
//!   the same `path` and the continuation's fields. Without `cursor` the
//!   next page starts on a new line: join pages with `"\n"`. With `cursor`
//!   (one line longer than a page) the next page continues the same line:
//!   join pages directly.
//!
//! `content` is the lines joined with `"\n"` (a final line break of the
//! file is not included; `\r` is kept). `totalLines` counts lines the way
//! `content` does: `"a\nb\n"` and `"a\nb"` both have 2, an empty file 0.
//! A file with a NUL byte in its first [`BINARY_SNIFF_BYTES`] bytes is
//! binary and fails with a `tool_error`; other bytes that are not UTF-8
//! become U+FFFD. Directories fail with a `tool_error`; an `offset` past
//! the last line too.
//!
//! # `ls { path?, after?, limit? }`
//!
//! Lists a directory (default the root), sorted by name (byte order).
//! Returns `{ path, content, entries: [{ name, type, size? }], nextAfter? }`.
//! `type` is `"file"`, `"dir"`, `"symlink"` or `"other"` (symlinks are not
//! followed), `size` is given for files in bytes. `content` is the listing
//! text, one entry per line with `ls -F` markers (`dir/`, `link@`), plus a
//! notice when more entries remain or the directory is empty. Only names
//! sorting strictly after `after` are listed, at most `limit` (default
//! [`LS_DEFAULT_LIMIT`], at most [`LS_MAX_LIMIT`]); `nextAfter`, present
//! only when more entries remain, is the `after` of the next page.
//!
//! # `find { pattern, path?, limit? }`
//!
//! Walks `path` (a directory, default the root) depth first in name order
//! and matches a glob (`globset` syntax: `*`, `?`, `[ab]`, `{a,b}`, `**`;
//! `*` does not cross `/`). A pattern without `/` matches entry names at
//! any depth (`*.rs`); one with `/` matches the path relative to `path`
//! (`src/**/*.rs`). Files, directories and symlinks can match. Returns
//! `{ pattern, path, content, matches: [{ path, type }], truncated }` with
//! workspace-relative paths, at most `limit` (default
//! [`FIND_DEFAULT_LIMIT`], at most [`FIND_MAX_LIMIT`]). `truncated` is true
//! when more matches exist or the walk stopped at [`MAX_WALK_ENTRIES`];
//! `content` then ends with a notice saying so; with no match it says so.
//!
//! # `grep { pattern, path?, glob?, limit?, ignoreCase? }`
//!
//! Searches text files under `path` (a file or a directory, default the
//! root) for a regular expression (`regex` crate syntax, linear time),
//! line by line, case-insensitively when `ignoreCase` is true. `glob`
//! filters the files searched, with `find`'s rules. Files larger than
//! [`GREP_MAX_FILE_BYTES`] are skipped (and counted), binary files (NUL in
//! the first [`BINARY_SNIFF_BYTES`]) silently skipped, and the search
//! stops after reading [`GREP_MAX_SCAN_BYTES`] in total. Returns
//! `{ pattern, path, content, matches: [{ path, line, text }], truncated,
//! skippedFiles? }`: `line` is 1-based, `text` is the line without its line
//! break, at most [`GREP_MAX_LINE_BYTES`] bytes around the first match
//! (cut at character boundaries, marked with `…`). `content` holds one
//! `path:line:text` per match, then notices. At most `limit` matches
//! (default [`GREP_DEFAULT_LIMIT`], at most [`GREP_MAX_LIMIT`]); `truncated`
//! is true when more exist or a walk or scan cap stopped the search.
//!
//! # Errors and cancellation
//!
//! Bad arguments (unknown keys, wrong types, out-of-range numbers, invalid
//! regex or glob, paths outside the workspace) are `invalid_input`; missing
//! files, wrong file types and I/O failures are `tool_error`. The file
//! system work runs on Tokio's blocking pool; a cancelled call returns at
//! once and the work stops at its next check (per directory entry, per
//! file, per 64 KiB read).

use super::Tool;
use std::path::Path;
use std::sync::Arc;

pub use super::find::{FIND_DEFAULT_LIMIT, FIND_MAX_LIMIT};
pub use super::grep::{
    GREP_DEFAULT_LIMIT, GREP_MAX_FILE_BYTES, GREP_MAX_LIMIT, GREP_MAX_LINE_BYTES,
    GREP_MAX_SCAN_BYTES,
};
pub use super::ls::{LS_DEFAULT_LIMIT, LS_MAX_LIMIT};
pub use super::read::{READ_DEFAULT_LIMIT, READ_MAX_LIMIT, READ_MAX_PAGE_BYTES};
pub use super::rooted::{Workspace, BINARY_SNIFF_BYTES};
pub use super::walk::{MAX_WALK_DEPTH, MAX_WALK_ENTRIES};

/// The built-in workspace tools over `root`, in the order `read`, `ls`,
/// `find`, `grep`. Fails if `root` is not a directory.
pub fn workspace_tools(root: &Path) -> Result<Vec<Arc<dyn Tool>>, String> {
    let ws = Arc::new(Workspace::open(root)?);
    Ok(vec![
        Arc::new(super::read::ReadTool::new(ws.clone())),
        Arc::new(super::ls::LsTool::new(ws.clone())),
        Arc::new(super::find::FindTool::new(ws.clone())),
        Arc::new(super::grep::GrepTool::new(ws)),
    ])
}

#[cfg(test)]
mod tests {
    use super::super::rooted::test_support::TempDir;
    use super::*;
    use serde_json::json;

    #[test]
    fn root_must_be_a_directory() {
        let tmp = TempDir::new("root");
        tmp.write("f.txt", "x");
        assert!(workspace_tools(&tmp.path().join("f.txt"))
            .err()
            .unwrap()
            .contains("not a directory"));
        assert!(workspace_tools(&tmp.path().join("missing")).is_err());
        let tools = workspace_tools(tmp.path()).unwrap();
        let names: Vec<_> = tools.iter().map(|t| t.name().to_owned()).collect();
        assert_eq!(names, ["read", "ls", "find", "grep"]);
        for t in &tools {
            assert!(t.replay_safe());
            assert!(!t.description().is_empty());
            assert_eq!(t.input_schema()["type"], json!("object"));
            assert_eq!(t.input_schema()["additionalProperties"], json!(false));
            assert!(t.output_schema().is_some());
        }
    }
}
