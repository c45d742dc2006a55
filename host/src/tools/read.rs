//! The `read` workspace tool (see [`super::workspace`] for its contract).

use super::args::Args;
use super::rooted::{
    cut_at_char_boundary, io_error, looks_binary, run_blocking, RelPath, Workspace,
    BINARY_SNIFF_BYTES,
};
use super::{async_trait, CancelSignal, Tool, ToolError};
use serde_json::{json, Map, Value};
use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;

/// Lines per `read` page when `limit` is omitted: 2,000.
pub const READ_DEFAULT_LIMIT: u64 = 2000;

/// Largest `limit` a `read` call accepts: 10,000 lines.
pub const READ_MAX_LIMIT: u64 = 10_000;

/// Most bytes of file data in one `read` page: 64 KiB (65,536). A single
/// line longer than this is returned in pieces via `cursor`.
pub const READ_MAX_PAGE_BYTES: usize = 64 * 1024;

const NAME: &str = "read";

pub(crate) struct ReadTool {
    ws: Arc<Workspace>,
}

impl ReadTool {
    pub(crate) fn new(ws: Arc<Workspace>) -> Self {
        Self { ws }
    }
}

#[async_trait]
impl Tool for ReadTool {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Read a text file of the workspace, one page of lines at a time. Returns kind \"text\" \
         for the last page, or kind \"truncated\" with a continuation {offset, limit, cursor?} \
         to pass back for the next page."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace root."},
                "offset": {"type": "integer", "minimum": 1, "description": "1-based line to start at (default 1)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": READ_MAX_LIMIT, "description": format!("Most lines to return (default {READ_DEFAULT_LIMIT}).")},
                "cursor": {"type": "integer", "minimum": 0, "description": "Byte position inside line `offset` to resume at, from a continuation."}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "kind": {"enum": ["text", "truncated"]},
                "path": {"type": "string"},
                "content": {"type": "string"},
                "offset": {"type": "integer"},
                "totalLines": {"type": "integer"},
                "continuation": {
                    "type": "object",
                    "properties": {
                        "offset": {"type": "integer"},
                        "limit": {"type": "integer"},
                        "cursor": {"type": "integer"}
                    },
                    "required": ["offset", "limit"]
                }
            },
            "required": ["kind", "path", "content", "offset"]
        }))
    }

    fn replay_safe(&self) -> bool {
        true
    }

    async fn call(&self, args: Value, cancel: CancelSignal) -> Result<Value, ToolError> {
        let args = Args::parse(NAME, args, &["path", "offset", "limit", "cursor"])?;
        let rel = self.ws.resolve(NAME, args.str("path")?)?;
        let offset = args.opt_int("offset", 1, u64::MAX)?.unwrap_or(1);
        let limit = args
            .opt_int("limit", 1, READ_MAX_LIMIT)?
            .unwrap_or(READ_DEFAULT_LIMIT);
        let cursor = args.opt_int("cursor", 0, u64::MAX)?.unwrap_or(0);
        let ws = self.ws.clone();
        run_blocking(NAME, cancel, move |cancel| {
            read_page(&ws, &rel, offset, limit, cursor, cancel)
        })
        .await
    }
}

fn read_page(
    ws: &Workspace,
    rel: &RelPath,
    offset: u64,
    limit: u64,
    cursor: u64,
    cancel: &CancelSignal,
) -> Result<Value, ToolError> {
    let shown = rel.display();
    let io = |e: io::Error| io_error(NAME, &shown, e);
    if rel.is_root() {
        return Err(ToolError::tool(format!(
            "{NAME}: `.` is a directory; use ls to list it"
        )));
    }
    let (file, meta) = super::rooted::open_for_reading(ws.dir(), rel.fs_path()).map_err(io)?;
    if meta.is_dir() {
        return Err(ToolError::tool(format!(
            "{NAME}: `{shown}` is a directory; use ls to list it"
        )));
    }
    if !meta.is_file() {
        return Err(super::rooted::special_file_error(NAME, &shown));
    }
    let mut prefix = Vec::with_capacity(BINARY_SNIFF_BYTES);
    let mut file = file;
    (&mut file)
        .take(BINARY_SNIFF_BYTES as u64)
        .read_to_end(&mut prefix)
        .map_err(io)?;
    if looks_binary(&prefix) {
        return Err(ToolError::tool(format!(
            "{NAME}: `{shown}` looks like a binary file (NUL byte in its first {BINARY_SNIFF_BYTES} bytes); read returns text only"
        )));
    }
    let mut r = BufReader::with_capacity(64 * 1024, io::Cursor::new(prefix).chain(file));

    // Skip to line `offset`.
    let (skipped, partial) = skip_lines(&mut r, offset - 1, cancel).map_err(io)?;
    if skipped < offset - 1 {
        return Err(past_end(&shown, offset, skipped + u64::from(partial)));
    }
    if cursor > 0 {
        skip_in_line(&mut r, cursor).map_err(io)?.map_err(|why| {
            ToolError::invalid_input(format!(
                "{NAME}: cursor {cursor} is not a position in line {offset} of `{shown}`: {why}"
            ))
        })?;
    }

    let mut page: Vec<u8> = Vec::new();
    let mut lines: u64 = 0;
    let mut next: Option<(u64, Option<u64>)> = None;
    let mut line = Vec::new();
    loop {
        if cancel.is_cancelled() {
            return Err(super::rooted::cancelled(NAME));
        }
        if lines == limit {
            if !r.fill_buf().map_err(io)?.is_empty() {
                next = Some((offset + lines, None));
            }
            break;
        }
        let sep = usize::from(lines > 0);
        let room = READ_MAX_PAGE_BYTES.saturating_sub(page.len() + sep);
        line.clear();
        let n = (&mut r)
            .take(room as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(io)?;
        if n == 0 {
            break; // end of file
        }
        let ended = line.last() == Some(&b'\n');
        if ended || n <= room {
            let text = if ended { &line[..n - 1] } else { &line[..] };
            if sep == 1 {
                page.push(b'\n');
            }
            page.extend_from_slice(text);
            lines += 1;
            continue;
        }
        // The line does not fit in what is left of the page.
        if lines > 0 {
            next = Some((offset + lines, None));
        } else {
            let cut = cut_at_char_boundary(&line, room).max(1);
            page.extend_from_slice(&line[..cut]);
            next = Some((offset, Some(cursor + cut as u64)));
        }
        break;
    }

    let content = String::from_utf8_lossy(&page).into_owned();
    let mut out = Map::new();
    match next {
        Some((next_offset, next_cursor)) => {
            out.insert("kind".into(), "truncated".into());
            out.insert("path".into(), shown.into());
            out.insert("content".into(), content.into());
            out.insert("offset".into(), offset.into());
            let mut cont = Map::new();
            cont.insert("offset".into(), next_offset.into());
            cont.insert("limit".into(), limit.into());
            if let Some(c) = next_cursor {
                cont.insert("cursor".into(), c.into());
            }
            out.insert("continuation".into(), Value::Object(cont));
        }
        None => {
            if lines == 0 && offset > 1 && cursor == 0 {
                return Err(past_end(&shown, offset, offset - 1));
            }
            let total = if cursor > 0 && lines == 0 {
                offset
            } else {
                offset - 1 + lines
            };
            out.insert("kind".into(), "text".into());
            out.insert("path".into(), shown.into());
            out.insert("content".into(), content.into());
            out.insert("offset".into(), offset.into());
            out.insert("totalLines".into(), total.into());
        }
    }
    Ok(Value::Object(out))
}

fn past_end(shown: &str, offset: u64, total: u64) -> ToolError {
    ToolError::tool(format!(
        "{NAME}: offset {offset} is past the end of `{shown}` ({total} lines)"
    ))
}

/// Skips `n` lines; returns how many were skipped and whether a final
/// line without a line break was passed at end of file.
fn skip_lines(r: &mut impl BufRead, n: u64, cancel: &CancelSignal) -> io::Result<(u64, bool)> {
    let mut skipped = 0;
    let mut partial = false;
    while skipped < n {
        if cancel.is_cancelled() {
            return Err(io::Error::other("cancelled"));
        }
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let mut used = buf.len();
        for (i, &b) in buf.iter().enumerate() {
            if b == b'\n' {
                skipped += 1;
                if skipped == n {
                    used = i + 1;
                    break;
                }
            }
        }
        partial = buf[used - 1] != b'\n';
        r.consume(used);
    }
    Ok((skipped, partial))
}

/// Skips `cursor` bytes of the current line. The inner error says why the
/// cursor is not a position of the line.
fn skip_in_line(r: &mut impl BufRead, cursor: u64) -> io::Result<Result<(), &'static str>> {
    let mut left = cursor;
    while left > 0 {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(Err("the line is shorter"));
        }
        let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if buf[..take].contains(&b'\n') {
            return Ok(Err("the line is shorter"));
        }
        r.consume(take);
        left -= take as u64;
    }
    match r.fill_buf()?.first() {
        Some(b) if b & 0xC0 == 0x80 => Ok(Err("it is inside a character")),
        _ => Ok(Ok(())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::rooted::test_support::{check_schema, TempDir};
    use super::super::ToolErrorCode;
    use super::*;

    fn tool(tmp: &TempDir) -> ReadTool {
        ReadTool::new(Arc::new(Workspace::open(tmp.path()).unwrap()))
    }

    async fn call(t: &ReadTool, args: Value) -> Result<Value, ToolError> {
        let out = t.call(args, CancelSignal::new()).await;
        if let Ok(v) = &out {
            check_schema(&t.output_schema().unwrap(), v);
        }
        out
    }

    #[tokio::test]
    async fn small_file_in_one_page() {
        let tmp = TempDir::new("read-small");
        tmp.write("a.txt", "one\ntwo\r\nthree\n");
        tmp.write("empty.txt", "");
        tmp.write("nonl.txt", "x\ny");
        let t = tool(&tmp);
        let v = call(&t, json!({"path": "a.txt"})).await.unwrap();
        assert_eq!(
            v,
            json!({"kind": "text", "path": "a.txt", "content": "one\ntwo\r\nthree", "offset": 1, "totalLines": 3})
        );
        let v = call(&t, json!({"path": "./empty.txt"})).await.unwrap();
        assert_eq!(v["content"], "");
        assert_eq!(v["totalLines"], 0);
        let v = call(&t, json!({"path": "nonl.txt", "offset": 2}))
            .await
            .unwrap();
        assert_eq!(v["content"], "y");
        assert_eq!(v["totalLines"], 2);
        let e = call(&t, json!({"path": "a.txt", "offset": 4}))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "read: offset 4 is past the end of `a.txt` (3 lines)"
        );
        let e = call(&t, json!({"path": "nonl.txt", "offset": 9}))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "read: offset 9 is past the end of `nonl.txt` (2 lines)"
        );
    }

    #[tokio::test]
    async fn pages_a_large_file_and_round_trips() {
        let tmp = TempDir::new("read-large");
        let text: String = (1..=5000).map(|i| format!("line {i}\n")).collect();
        tmp.write("big.txt", &text);
        let t = tool(&tmp);
        let first = call(&t, json!({"path": "big.txt"})).await.unwrap();
        assert_eq!(first["kind"], "truncated");
        assert_eq!(
            first["continuation"],
            json!({"offset": 2001, "limit": 2000})
        );
        assert!(first["content"]
            .as_str()
            .unwrap()
            .starts_with("line 1\nline 2\n"));
        assert!(first["content"].as_str().unwrap().ends_with("\nline 2000"));

        // Follow continuations with a small limit to the end.
        let mut pages = vec![];
        let mut args = json!({"path": "big.txt", "limit": 700});
        loop {
            let v = call(&t, args.clone()).await.unwrap();
            pages.push(v["content"].as_str().unwrap().to_owned());
            if v["kind"] == "text" {
                assert_eq!(v["totalLines"], 5000);
                break;
            }
            let c = &v["continuation"];
            assert!(c.get("cursor").is_none());
            args = json!({"path": "big.txt", "offset": c["offset"], "limit": c["limit"]});
        }
        assert_eq!(pages.len(), 8);
        assert_eq!(pages.join("\n") + "\n", text);
    }

    #[tokio::test]
    async fn byte_cap_cuts_between_lines_then_inside_a_huge_line() {
        let tmp = TempDir::new("read-bytes");
        // 100 lines of 1000 bytes: the 64 KiB cap ends a page after 65 lines.
        let text: String = (0..100).map(|i| format!("{:0>999}\n", i)).collect();
        tmp.write("wide.txt", &text);
        // One line of 200,000 multi-byte characters, then a short line.
        let huge = "é".repeat(100_000) + "\nend\n";
        tmp.write("huge.txt", &huge);
        let t = tool(&tmp);

        let v = call(&t, json!({"path": "wide.txt"})).await.unwrap();
        assert_eq!(v["kind"], "truncated");
        assert_eq!(v["continuation"], json!({"offset": 66, "limit": 2000}));
        assert!(v["content"].as_str().unwrap().len() <= READ_MAX_PAGE_BYTES);

        let mut joined = String::new();
        let mut args = json!({"path": "huge.txt"});
        let mut glue = "";
        let mut n = 0;
        loop {
            n += 1;
            let v = call(&t, args.clone()).await.unwrap();
            let content = v["content"].as_str().unwrap();
            assert!(content.len() <= READ_MAX_PAGE_BYTES);
            assert!(!content.contains('\u{FFFD}'));
            joined.push_str(glue);
            joined.push_str(content);
            if v["kind"] == "text" {
                assert_eq!(v["totalLines"], 2);
                break;
            }
            let c = v["continuation"].clone();
            glue = if c.get("cursor").is_some() { "" } else { "\n" };
            args = json!({"path": "huge.txt", "offset": c["offset"], "limit": c["limit"], "cursor": c.get("cursor")});
        }
        assert!(n >= 4, "{n} pages");
        assert_eq!(joined + "\n", huge);
    }

    #[tokio::test]
    async fn bad_cursor_and_arguments() {
        let tmp = TempDir::new("read-args");
        tmp.write("a.txt", "héllo\nworld\n");
        let t = tool(&tmp);
        let e = call(&t, json!({"path": "a.txt", "cursor": 2}))
            .await
            .unwrap_err();
        assert_eq!(e.code, ToolErrorCode::InvalidInput);
        assert!(e.message.contains("inside a character"), "{}", e.message);
        let e = call(&t, json!({"path": "a.txt", "cursor": 10}))
            .await
            .unwrap_err();
        assert!(e.message.contains("the line is shorter"), "{}", e.message);
        let v = call(&t, json!({"path": "a.txt", "cursor": 3}))
            .await
            .unwrap();
        assert_eq!(v["content"], "llo\nworld");
        for bad in [
            json!({}),
            json!({"path": 1}),
            json!({"path": "a.txt", "offset": 0}),
            json!({"path": "a.txt", "limit": READ_MAX_LIMIT + 1}),
            json!({"path": "a.txt", "lines": 3}),
        ] {
            let e = call(&t, bad.clone()).await.unwrap_err();
            assert_eq!(e.code, ToolErrorCode::InvalidInput, "{bad}");
        }
    }

    #[tokio::test]
    async fn binary_missing_directory_and_lossy() {
        let tmp = TempDir::new("read-kinds");
        tmp.write("bin.dat", b"\x7fELF\0\0\x01");
        tmp.write("latin1.txt", b"caf\xe9\n");
        tmp.write("d/x.txt", "x");
        let t = tool(&tmp);
        let e = call(&t, json!({"path": "bin.dat"})).await.unwrap_err();
        assert_eq!(e.code, ToolErrorCode::ToolError);
        assert!(e.message.contains("binary file"), "{}", e.message);
        let e = call(&t, json!({"path": "nope.txt"})).await.unwrap_err();
        assert_eq!(e.message, "read: `nope.txt`: no such file or directory");
        let e = call(&t, json!({"path": "d"})).await.unwrap_err();
        assert!(e.message.contains("is a directory"), "{}", e.message);
        let e = call(&t, json!({"path": "."})).await.unwrap_err();
        assert!(e.message.contains("is a directory"), "{}", e.message);
        let v = call(&t, json!({"path": "latin1.txt"})).await.unwrap();
        assert_eq!(v["content"], "caf\u{FFFD}");
    }

    #[tokio::test]
    async fn escapes_are_rejected_and_inner_symlinks_work() {
        let outer = TempDir::new("read-outer");
        outer.write("secret.txt", "secret");
        let tmp = TempDir::new("read-escape");
        tmp.write("inside/real.txt", "real");
        let root = tmp.path();
        std::os::unix::fs::symlink(outer.path().join("secret.txt"), root.join("abs-out")).unwrap();
        std::os::unix::fs::symlink("../../", root.join("inside/up")).unwrap();
        std::os::unix::fs::symlink("inside/real.txt", root.join("ok-link")).unwrap();
        std::os::unix::fs::symlink("inside", root.join("ok-dir")).unwrap();
        std::os::unix::fs::symlink(root.join("inside/real.txt"), root.join("abs-in")).unwrap();
        let t = tool(&tmp);

        let secret = outer
            .path()
            .join("secret.txt")
            .to_string_lossy()
            .into_owned();
        let outer_name = outer
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for (path, want) in [
            ("../x", "is outside the workspace"),
            (
                &format!("../{outer_name}/secret.txt"),
                "is outside the workspace",
            ),
            (secret.as_str(), "is outside the workspace"),
            ("abs-out", "leads outside the workspace"),
            ("abs-in", "leads outside the workspace"),
            (
                &format!("inside/up/{outer_name}/secret.txt"),
                "leads outside the workspace",
            ),
        ] {
            let e = call(&t, json!({"path": path})).await.unwrap_err();
            assert_eq!(e.code, ToolErrorCode::InvalidInput, "{path}: {}", e.message);
            assert!(e.message.contains(want), "{path}: {}", e.message);
            assert!(!e.message.contains("secret\""));
        }
        let v = call(&t, json!({"path": "ok-link"})).await.unwrap();
        assert_eq!(v["content"], "real");
        let v = call(&t, json!({"path": "ok-dir/real.txt"})).await.unwrap();
        assert_eq!(v["content"], "real");
        let v = call(&t, json!({"path": "inside/../ok-link"}))
            .await
            .unwrap();
        assert_eq!(v["content"], "real");
    }

    #[tokio::test]
    async fn cancelled_call_returns_at_once() {
        let tmp = TempDir::new("read-cancel");
        tmp.write("a.txt", "a");
        let t = tool(&tmp);
        let cancel = CancelSignal::new();
        cancel.cancel();
        let e = t.call(json!({"path": "a.txt"}), cancel).await.unwrap_err();
        assert_eq!(e.message, "read: cancelled");
    }
}
