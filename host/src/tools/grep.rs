//! The `grep` workspace tool (see [`super::workspace`] for its contract).

use super::args::Args;
use super::find::{entry_cap_notice, NameGlob};
use super::rooted::{
    cancelled, cut_at_char_boundary, io_error, looks_binary, open_for_reading, run_blocking,
    special_file_error, RelPath, Workspace,
};
use super::walk::{walk, End, Flow, Kind};
use super::{async_trait, CancelSignal, Tool, ToolError};
use regex::bytes::{Regex, RegexBuilder};
use serde_json::{json, Map, Value};
use std::io::Read;
use std::sync::Arc;

/// Matching lines per `grep` call when `limit` is omitted: 100.
pub const GREP_DEFAULT_LIMIT: u64 = 100;

/// Largest `limit` a `grep` call accepts: 1,000 matching lines.
pub const GREP_MAX_LIMIT: u64 = 1000;

/// Files larger than this are skipped (and counted): 4 MiB (4,194,304 bytes).
pub const GREP_MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Most file bytes one `grep` call reads before it stops: 256 MiB.
pub const GREP_MAX_SCAN_BYTES: u64 = 256 * 1024 * 1024;

/// Most bytes of a matching line shown in a result: 300 (a window around
/// the first match, cut at character boundaries and marked with `…`).
pub const GREP_MAX_LINE_BYTES: usize = 300;

/// Compiled-program size limit of a `grep` regex: 1 MiB.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Bytes kept before the first match when a long line is cut.
const LINE_CONTEXT_BYTES: usize = 60;

const NAME: &str = "grep";

pub(crate) struct GrepTool {
    ws: Arc<Workspace>,
}

impl GrepTool {
    pub(crate) fn new(ws: Arc<Workspace>) -> Self {
        Self { ws }
    }
}

#[async_trait]
impl Tool for GrepTool {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Search workspace text files for a regular expression, line by line. Returns \
         path:line:text matches, bounded; says when it cut. Skips binary and very large files."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression (Rust regex syntax)."},
                "path": {"type": "string", "description": "File or directory to search, relative to the workspace root (default the root)."},
                "glob": {"type": "string", "description": "Only search files whose name (or path below `path`, if it has a /) matches this glob."},
                "limit": {"type": "integer", "minimum": 1, "maximum": GREP_MAX_LIMIT, "description": format!("Most matching lines to return (default {GREP_DEFAULT_LIMIT}).")},
                "ignoreCase": {"type": "boolean", "description": "Match case-insensitively (default false)."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string"},
                "content": {"type": "string"},
                "matches": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string"},
                            "line": {"type": "integer"},
                            "text": {"type": "string"}
                        },
                        "required": ["path", "line", "text"]
                    }
                },
                "truncated": {"type": "boolean"},
                "skippedFiles": {"type": "integer"}
            },
            "required": ["pattern", "path", "content", "matches", "truncated"]
        }))
    }

    fn replay_safe(&self) -> bool {
        true
    }

    async fn call(&self, args: Value, cancel: CancelSignal) -> Result<Value, ToolError> {
        let args = Args::parse(
            NAME,
            args,
            &["pattern", "path", "glob", "limit", "ignoreCase"],
        )?;
        let pattern = args.str("pattern")?.to_owned();
        let regex = RegexBuilder::new(&pattern)
            .case_insensitive(args.opt_bool("ignoreCase")?.unwrap_or(false))
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| ToolError::invalid_input(format!("{NAME}: invalid regex: {e}")))?;
        let glob = args
            .opt_str("glob")?
            .map(|g| NameGlob::new(NAME, g))
            .transpose()?;
        let rel = self
            .ws
            .resolve(NAME, args.opt_str("path")?.unwrap_or("."))?;
        let limit = args
            .opt_int("limit", 1, GREP_MAX_LIMIT)?
            .unwrap_or(GREP_DEFAULT_LIMIT) as usize;
        let ws = self.ws.clone();
        run_blocking(NAME, cancel, move |cancel| {
            let mut search = Search {
                regex,
                limit,
                matches: Vec::new(),
                scanned: 0,
                too_large: 0,
                binary: 0,
                scan_cap: false,
            };
            let end = search.run(&ws, &rel, glob.as_ref(), cancel)?;
            Ok(search.finish(&pattern, &rel, end))
        })
        .await
    }
}

struct Search {
    regex: Regex,
    limit: usize,
    matches: Vec<(String, usize, String)>,
    scanned: u64,
    too_large: u64,
    binary: u64,
    scan_cap: bool,
}

impl Search {
    fn run(
        &mut self,
        ws: &Workspace,
        rel: &RelPath,
        glob: Option<&NameGlob>,
        cancel: &CancelSignal,
    ) -> Result<End, ToolError> {
        let shown = rel.display();
        let io = |e| io_error(NAME, &shown, e);
        let meta = if rel.is_root() {
            None
        } else {
            Some(ws.dir().metadata(rel.fs_path()).map_err(io)?)
        };
        if meta.is_some_and(|m| !m.is_dir()) {
            // A single file: searched whatever its name (no glob filter).
            let (file, meta) = open_for_reading(ws.dir(), rel.fs_path()).map_err(io)?;
            if !meta.is_file() {
                return Err(special_file_error(NAME, &shown));
            }
            self.file(file, meta.len(), &shown);
            return Ok(End::Complete);
        }
        let start = super::ls::open_dir(ws, NAME, rel)?;
        let end = walk(&start, cancel, &mut |entry| {
            if entry.kind != Kind::File || glob.is_some_and(|g| !g.matches(entry)) {
                return Flow::Continue;
            }
            // Never a FIFO or device, even one swapped in since the
            // directory was listed.
            let Ok((file, meta)) = open_for_reading(entry.dir, entry.os_name) else {
                return Flow::Continue;
            };
            if !meta.is_file() {
                return Flow::Continue;
            }
            self.file(file, meta.len(), &rel.join_display(entry.sub))
        });
        if end == End::Cancelled {
            return Err(cancelled(NAME));
        }
        Ok(end)
    }

    /// Searches one file; says whether the walk may go on.
    fn file(&mut self, file: cap_std::fs::File, size: u64, path: &str) -> Flow {
        if size > GREP_MAX_FILE_BYTES {
            self.too_large += 1;
            return Flow::Continue;
        }
        if self.scanned + size > GREP_MAX_SCAN_BYTES {
            self.scan_cap = true;
            return Flow::Stop;
        }
        let mut data = Vec::with_capacity(size as usize);
        if file
            .take(GREP_MAX_FILE_BYTES + 1)
            .read_to_end(&mut data)
            .is_err()
        {
            return Flow::Continue;
        }
        self.scanned += data.len() as u64;
        if data.len() as u64 > GREP_MAX_FILE_BYTES {
            self.too_large += 1; // grew since its size was read
            return Flow::Continue;
        }
        if looks_binary(&data) {
            self.binary += 1;
            return Flow::Continue;
        }
        if data.is_empty() {
            return Flow::Continue;
        }
        let body = data.strip_suffix(b"\n").unwrap_or(&data);
        for (i, raw) in body.split(|&b| b == b'\n').enumerate() {
            let line = raw.strip_suffix(b"\r").unwrap_or(raw);
            if let Some(m) = self.regex.find(line) {
                self.matches
                    .push((path.to_owned(), i + 1, excerpt(line, m.start())));
                if self.matches.len() > self.limit {
                    return Flow::Stop;
                }
            }
        }
        Flow::Continue
    }

    fn finish(mut self, pattern: &str, rel: &RelPath, end: End) -> Value {
        let shown = rel.display();
        let more = self.matches.len() > self.limit;
        self.matches.truncate(self.limit);
        let mut content = String::new();
        for (path, line, text) in &self.matches {
            content.push_str(&format!("{path}:{line}:{text}\n"));
        }
        if self.matches.is_empty() {
            content.push_str(&format!("No matches for /{pattern}/ under `{shown}`.\n"));
        }
        if more {
            content.push_str(&format!(
                "[results truncated at {} matches; narrow the pattern, path or glob, or raise limit (max {GREP_MAX_LIMIT})]\n",
                self.limit
            ));
        }
        let walk_cap = end == End::EntryCap;
        if walk_cap {
            content.push_str(&entry_cap_notice());
            content.push('\n');
        }
        if self.scan_cap {
            content.push_str(&format!(
                "[search stopped after reading {} MiB; results may be incomplete: narrow path or glob]\n",
                GREP_MAX_SCAN_BYTES >> 20
            ));
        }
        if self.too_large > 0 {
            content.push_str(&format!(
                "[skipped {} file(s) larger than {} MiB]\n",
                self.too_large,
                GREP_MAX_FILE_BYTES >> 20
            ));
        }
        if self.binary > 0 && !rel.is_root() && self.matches.is_empty() {
            content.push_str(&format!("[skipped {} binary file(s)]\n", self.binary));
        }
        content.pop();
        let matches: Vec<Value> = self
            .matches
            .iter()
            .map(|(p, l, t)| json!({"path": p, "line": l, "text": t}))
            .collect();
        let mut out = Map::new();
        out.insert("pattern".into(), pattern.into());
        out.insert("path".into(), shown.into());
        out.insert("content".into(), content.into());
        out.insert("matches".into(), Value::Array(matches));
        out.insert(
            "truncated".into(),
            (more || self.scan_cap || walk_cap).into(),
        );
        if self.too_large > 0 {
            out.insert("skippedFiles".into(), self.too_large.into());
        }
        out.into()
    }
}

/// At most [`GREP_MAX_LINE_BYTES`] of `line` around byte `at` (the first
/// match), as text, with `…` marking cut ends.
fn excerpt(line: &[u8], at: usize) -> String {
    if line.len() <= GREP_MAX_LINE_BYTES {
        return String::from_utf8_lossy(line).into_owned();
    }
    let mut start = if at + LINE_CONTEXT_BYTES < GREP_MAX_LINE_BYTES {
        0
    } else {
        at - LINE_CONTEXT_BYTES
    };
    while start < line.len() && start > 0 && line[start] & 0xC0 == 0x80 {
        start += 1;
    }
    let end = start + cut_at_char_boundary(&line[start..], GREP_MAX_LINE_BYTES);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push_str(&String::from_utf8_lossy(&line[start..end]));
    if end < line.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::rooted::test_support::{check_schema, TempDir};
    use super::super::ToolErrorCode;
    use super::*;

    fn tool(tmp: &TempDir) -> GrepTool {
        GrepTool::new(Arc::new(Workspace::open(tmp.path()).unwrap()))
    }

    async fn call(t: &GrepTool, args: Value) -> Result<Value, ToolError> {
        let out = t.call(args, CancelSignal::new()).await;
        if let Ok(v) = &out {
            check_schema(&t.output_schema().unwrap(), v);
        }
        out
    }

    #[tokio::test]
    async fn finds_lines_with_numbers() {
        let tmp = TempDir::new("grep-basic");
        tmp.write("a.rs", "fn main() {\n    println!(\"Hello\");\n}\n");
        tmp.write("sub/b.txt", "hello world\r\nbye\n");
        tmp.write("sub/c.md", "HELLO\n");
        tmp.write("bin.dat", b"hello\0binary");
        let t = tool(&tmp);
        let v = call(&t, json!({"pattern": "hello"})).await.unwrap();
        assert_eq!(v["content"], "sub/b.txt:1:hello world");
        assert_eq!(
            v["matches"],
            json!([{"path": "sub/b.txt", "line": 1, "text": "hello world"}])
        );
        assert_eq!(v["truncated"], false);
        let v = call(&t, json!({"pattern": "hello", "ignoreCase": true}))
            .await
            .unwrap();
        assert_eq!(
            v["content"],
            "a.rs:2:    println!(\"Hello\");\nsub/b.txt:1:hello world\nsub/c.md:1:HELLO"
        );
        let v = call(
            &t,
            json!({"pattern": "hello", "ignoreCase": true, "glob": "*.md"}),
        )
        .await
        .unwrap();
        assert_eq!(v["content"], "sub/c.md:1:HELLO");
        let v = call(
            &t,
            json!({"pattern": "hello", "ignoreCase": true, "path": "sub", "glob": "b.*"}),
        )
        .await
        .unwrap();
        assert_eq!(v["content"], "sub/b.txt:1:hello world");
        let v = call(&t, json!({"pattern": "^bye$", "path": "sub/b.txt"}))
            .await
            .unwrap();
        assert_eq!(v["content"], "sub/b.txt:2:bye");
        let v = call(&t, json!({"pattern": "nothing"})).await.unwrap();
        assert_eq!(v["content"], "No matches for /nothing/ under `.`.");
        let v = call(&t, json!({"pattern": "hello", "path": "bin.dat"}))
            .await
            .unwrap();
        assert_eq!(
            v["content"],
            "No matches for /hello/ under `bin.dat`.\n[skipped 1 binary file(s)]"
        );
        let v = call(&t, json!({"pattern": "^$"})).await.unwrap();
        assert_eq!(v["matches"], json!([]));
    }

    #[tokio::test]
    async fn many_matches_are_bounded() {
        let tmp = TempDir::new("grep-many");
        let text: String = (1..=500).map(|i| format!("match {i}\n")).collect();
        tmp.write("a.txt", &text);
        tmp.write("b.txt", &text);
        let t = tool(&tmp);
        let v = call(&t, json!({"pattern": "match"})).await.unwrap();
        assert_eq!(v["matches"].as_array().unwrap().len(), 100);
        assert_eq!(v["truncated"], true);
        let content = v["content"].as_str().unwrap();
        assert!(content.starts_with("a.txt:1:match 1\na.txt:2:match 2\n"));
        assert!(content.ends_with(
            "a.txt:100:match 100\n[results truncated at 100 matches; narrow the pattern, path or glob, or raise limit (max 1000)]"
        ));
        let v = call(&t, json!({"pattern": "match", "limit": 1000}))
            .await
            .unwrap();
        assert_eq!(v["matches"].as_array().unwrap().len(), 1000);
        assert_eq!(v["truncated"], false);
        assert_eq!(
            v["matches"][999],
            json!({"path": "b.txt", "line": 500, "text": "match 500"})
        );
        let e = call(&t, json!({"pattern": "x", "limit": 1001}))
            .await
            .unwrap_err();
        assert_eq!(e.code, ToolErrorCode::InvalidInput);
    }

    #[tokio::test]
    async fn long_lines_are_cut_around_the_match() {
        let tmp = TempDir::new("grep-long");
        let line = format!("{}NEEDLE{}\n", "é".repeat(1000), "x".repeat(1000));
        tmp.write("long.txt", &line);
        tmp.write("short.txt", format!("NEEDLE{}\n", "y".repeat(1000)));
        let t = tool(&tmp);
        let v = call(&t, json!({"pattern": "NEEDLE", "path": "long.txt"}))
            .await
            .unwrap();
        let text = v["matches"][0]["text"].as_str().unwrap();
        assert!(text.starts_with('…') && text.ends_with('…'), "{text}");
        assert!(text.contains("NEEDLE"));
        assert!(!text.contains('\u{FFFD}'));
        assert!(text.len() <= GREP_MAX_LINE_BYTES + 2 * '…'.len_utf8());
        let v = call(&t, json!({"pattern": "NEEDLE", "path": "short.txt"}))
            .await
            .unwrap();
        let text = v["matches"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("NEEDLEyyy") && text.ends_with('…'),
            "{text}"
        );
    }

    #[tokio::test]
    async fn skips_large_files_and_says_so() {
        let tmp = TempDir::new("grep-large");
        let big = "needle\n".repeat((GREP_MAX_FILE_BYTES / 7 + 1) as usize);
        tmp.write("big.txt", &big);
        tmp.write("small.txt", "needle\n");
        let t = tool(&tmp);
        let v = call(&t, json!({"pattern": "needle"})).await.unwrap();
        assert_eq!(v["skippedFiles"], 1);
        assert_eq!(
            v["content"],
            "small.txt:1:needle\n[skipped 1 file(s) larger than 4 MiB]"
        );
    }

    #[tokio::test]
    async fn escapes_and_bad_patterns_rejected() {
        let outer = TempDir::new("grep-outer");
        outer.write("secret.txt", "needle\n");
        let tmp = TempDir::new("grep-escape");
        tmp.write("in.txt", "needle\n");
        std::os::unix::fs::symlink(outer.path().join("secret.txt"), tmp.path().join("link-out"))
            .unwrap();
        std::os::unix::fs::symlink(outer.path(), tmp.path().join("dir-out")).unwrap();
        std::os::unix::fs::symlink("in.txt", tmp.path().join("link-in")).unwrap();
        let t = tool(&tmp);
        // The walk neither follows nor reads through symlinks.
        let v = call(&t, json!({"pattern": "needle"})).await.unwrap();
        assert_eq!(v["content"], "in.txt:1:needle");
        for p in ["link-out", "dir-out", "../", "/etc/passwd"] {
            let e = call(&t, json!({"pattern": "needle", "path": p}))
                .await
                .unwrap_err();
            assert_eq!(e.code, ToolErrorCode::InvalidInput, "{p}: {}", e.message);
            assert!(
                e.message.contains("outside the workspace"),
                "{p}: {}",
                e.message
            );
        }
        // An inner symlink named explicitly is searched.
        let v = call(&t, json!({"pattern": "needle", "path": "link-in"}))
            .await
            .unwrap();
        assert_eq!(v["content"], "link-in:1:needle");
        let e = call(&t, json!({"pattern": "(unclosed"})).await.unwrap_err();
        assert_eq!(e.code, ToolErrorCode::InvalidInput);
        assert!(
            e.message.starts_with("grep: invalid regex"),
            "{}",
            e.message
        );
        let e = call(&t, json!({"pattern": "x", "glob": "[z"}))
            .await
            .unwrap_err();
        assert!(e.message.starts_with("grep: invalid glob"), "{}", e.message);
        let e = call(&t, json!({"pattern": "x", "ignoreCase": "yes"}))
            .await
            .unwrap_err();
        assert_eq!(e.code, ToolErrorCode::InvalidInput);
    }

    #[tokio::test]
    async fn cancellation_is_prompt() {
        let tmp = TempDir::new("grep-cancel");
        for i in 0..50 {
            tmp.write(&format!("d{i}/f.txt"), "x\n");
        }
        let t = tool(&tmp);
        let cancel = CancelSignal::new();
        cancel.cancel();
        let e = t.call(json!({"pattern": "x"}), cancel).await.unwrap_err();
        assert_eq!(e.message, "grep: cancelled");
        // The walk itself checks the signal.
        let ws = Workspace::open(tmp.path()).unwrap();
        let token = CancelSignal::new();
        let mut n = 0;
        let end = walk(ws.dir(), &token, &mut |_| {
            n += 1;
            if n == 3 {
                token.cancel();
            }
            Flow::Continue
        });
        assert_eq!(end, End::Cancelled);
        assert!(n < 10);
    }
}
