//! The `ls` workspace tool (see [`super::workspace`] for its contract).

use super::args::Args;
use super::rooted::{io_error, run_blocking, RelPath, Workspace};
use super::walk::Kind;
use super::{async_trait, CancelSignal, Tool, ToolError};
use cap_std::fs::Dir;
use serde_json::{json, Map, Value};
use std::collections::BinaryHeap;
use std::ffi::OsString;
use std::sync::Arc;

/// Entries per `ls` page when `limit` is omitted: 200.
pub const LS_DEFAULT_LIMIT: u64 = 200;

/// Largest `limit` an `ls` call accepts: 1,000 entries.
pub const LS_MAX_LIMIT: u64 = 1000;

const NAME: &str = "ls";

pub(crate) struct LsTool {
    ws: Arc<Workspace>,
}

impl LsTool {
    pub(crate) fn new(ws: Arc<Workspace>) -> Self {
        Self { ws }
    }
}

/// Opens the directory at `rel` for `tool`, with a clear error when it is
/// not one.
pub(crate) fn open_dir(ws: &Workspace, tool: &str, rel: &RelPath) -> Result<Dir, ToolError> {
    let shown = rel.display();
    if rel.is_root() {
        return ws.dir().try_clone().map_err(|e| io_error(tool, &shown, e));
    }
    let path = rel.fs_path();
    let meta = ws
        .dir()
        .metadata(&path)
        .map_err(|e| io_error(tool, &shown, e))?;
    if !meta.is_dir() {
        return Err(ToolError::tool(format!(
            "{tool}: `{shown}` is not a directory"
        )));
    }
    ws.dir()
        .open_dir(&path)
        .map_err(|e| io_error(tool, &shown, e))
}

#[async_trait]
impl Tool for LsTool {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "List a workspace directory, sorted by name, one page at a time. Directories end in /, \
         symlinks in @. Pass nextAfter back as after for the next page."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory relative to the workspace root (default the root)."},
                "after": {"type": "string", "description": "List only names sorting after this one (a previous nextAfter)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": LS_MAX_LIMIT, "description": format!("Most entries to return (default {LS_DEFAULT_LIMIT}).")}
            },
            "additionalProperties": false
        })
    }

    fn output_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"},
                "entries": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "type": {"enum": ["file", "dir", "symlink", "other"]},
                            "size": {"type": "integer"}
                        },
                        "required": ["name", "type"]
                    }
                },
                "nextAfter": {"type": "string"}
            },
            "required": ["path", "content", "entries"]
        }))
    }

    fn replay_safe(&self) -> bool {
        true
    }

    async fn call(&self, args: Value, cancel: CancelSignal) -> Result<Value, ToolError> {
        let args = Args::parse(NAME, args, &["path", "after", "limit"])?;
        let rel = self
            .ws
            .resolve(NAME, args.opt_str("path")?.unwrap_or("."))?;
        let after = args.opt_str("after")?.map(str::to_owned);
        let limit = args
            .opt_int("limit", 1, LS_MAX_LIMIT)?
            .unwrap_or(LS_DEFAULT_LIMIT) as usize;
        let ws = self.ws.clone();
        run_blocking(NAME, cancel, move |cancel| {
            list(&ws, &rel, after.as_deref(), limit, cancel)
        })
        .await
    }
}

fn list(
    ws: &Workspace,
    rel: &RelPath,
    after: Option<&str>,
    limit: usize,
    cancel: &CancelSignal,
) -> Result<Value, ToolError> {
    let shown = rel.display();
    let dir = open_dir(ws, NAME, rel)?;
    let read = dir.entries().map_err(|e| io_error(NAME, &shown, e))?;
    // Keep only the `limit + 1` smallest names after `after`: memory stays
    // bounded by the page, not the directory.
    let mut heap: BinaryHeap<(OsString, Kind)> = BinaryHeap::new();
    for entry in read {
        if cancel.is_cancelled() {
            return Err(super::rooted::cancelled(NAME));
        }
        let entry = entry.map_err(|e| io_error(NAME, &shown, e))?;
        let name = entry.file_name();
        if after.is_some_and(|a| name.as_encoded_bytes() <= a.as_bytes()) {
            continue;
        }
        let kind = entry.file_type().map(Kind::of).unwrap_or(Kind::Other);
        heap.push((name, kind));
        if heap.len() > limit + 1 {
            heap.pop();
        }
    }
    let mut page = heap.into_sorted_vec();
    let more = page.len() > limit;
    page.truncate(limit);

    let mut entries = Vec::with_capacity(page.len());
    let mut content = String::new();
    for (os_name, kind) in &page {
        let name = os_name.to_string_lossy();
        let mut e = Map::new();
        e.insert("name".into(), name.as_ref().into());
        e.insert("type".into(), kind.as_str().into());
        if *kind == Kind::File {
            if let Ok(m) = dir.symlink_metadata(os_name) {
                e.insert("size".into(), m.len().into());
            }
        }
        entries.push(Value::Object(e));
        content.push_str(&name);
        content.push_str(kind.marker());
        content.push('\n');
    }
    let next_after = if more {
        page.last().map(|(n, _)| n.to_string_lossy().into_owned())
    } else {
        None
    };
    match (&next_after, page.is_empty(), after) {
        (Some(next), _, _) => content.push_str(&format!(
            "[{} entries shown; more remain: call ls again with after: {next:?}]",
            page.len()
        )),
        (None, true, None) => content.push_str("(empty directory)"),
        (None, true, Some(a)) => content.push_str(&format!("(no entries after {a:?})")),
        (None, false, _) => {
            content.pop();
        }
    }
    let mut out = Map::new();
    out.insert("path".into(), shown.into());
    out.insert("content".into(), content.into());
    out.insert("entries".into(), Value::Array(entries));
    if let Some(next) = next_after {
        out.insert("nextAfter".into(), next.into());
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::super::rooted::test_support::{check_schema, TempDir};
    use super::super::ToolErrorCode;
    use super::*;

    fn tool(tmp: &TempDir) -> LsTool {
        LsTool::new(Arc::new(Workspace::open(tmp.path()).unwrap()))
    }

    async fn call(t: &LsTool, args: Value) -> Result<Value, ToolError> {
        let out = t.call(args, CancelSignal::new()).await;
        if let Ok(v) = &out {
            check_schema(&t.output_schema().unwrap(), v);
        }
        out
    }

    #[tokio::test]
    async fn lists_sorted_with_markers() {
        let tmp = TempDir::new("ls-basic");
        tmp.write("b.txt", "hello");
        tmp.write("a/inner.txt", "x");
        tmp.write("C", "");
        std::os::unix::fs::symlink("b.txt", tmp.path().join("link")).unwrap();
        std::fs::create_dir(tmp.path().join("empty")).unwrap();
        let t = tool(&tmp);
        let v = call(&t, json!({})).await.unwrap();
        assert_eq!(v["path"], ".");
        assert_eq!(v["content"], "C\na/\nb.txt\nempty/\nlink@");
        assert_eq!(
            v["entries"][2],
            json!({"name": "b.txt", "type": "file", "size": 5})
        );
        assert_eq!(v["entries"][1], json!({"name": "a", "type": "dir"}));
        assert_eq!(v["entries"][4], json!({"name": "link", "type": "symlink"}));
        assert!(v.get("nextAfter").is_none());
        let v = call(&t, json!({"path": "empty"})).await.unwrap();
        assert_eq!(v["content"], "(empty directory)");
        assert_eq!(v["entries"], json!([]));
        let v = call(&t, json!({"path": "a/"})).await.unwrap();
        assert_eq!(v["path"], "a");
        assert_eq!(v["content"], "inner.txt");
        let e = call(&t, json!({"path": "b.txt"})).await.unwrap_err();
        assert_eq!(e.message, "ls: `b.txt` is not a directory");
        let e = call(&t, json!({"path": "zzz"})).await.unwrap_err();
        assert_eq!(e.message, "ls: `zzz`: no such file or directory");
    }

    #[tokio::test]
    async fn paginates_with_next_after() {
        let tmp = TempDir::new("ls-pages");
        for i in 0..25 {
            tmp.write(&format!("f{i:02}"), "");
        }
        let t = tool(&tmp);
        let mut after: Option<String> = None;
        let mut seen = vec![];
        let mut pages = 0;
        loop {
            let v = call(&t, json!({"limit": 10, "after": after}))
                .await
                .unwrap();
            pages += 1;
            for e in v["entries"].as_array().unwrap() {
                seen.push(e["name"].as_str().unwrap().to_owned());
            }
            match v.get("nextAfter") {
                Some(n) => {
                    assert!(v["content"].as_str().unwrap().ends_with(&format!(
                        "[10 entries shown; more remain: call ls again with after: {n}]"
                    )));
                    after = Some(n.as_str().unwrap().to_owned());
                }
                None => break,
            }
        }
        assert_eq!(pages, 3);
        let want: Vec<String> = (0..25).map(|i| format!("f{i:02}")).collect();
        assert_eq!(seen, want);
        let v = call(&t, json!({"after": "f24"})).await.unwrap();
        assert_eq!(v["content"], "(no entries after \"f24\")");
        // Exactly `limit` entries left: no nextAfter.
        let v = call(&t, json!({"after": "f14", "limit": 10}))
            .await
            .unwrap();
        assert_eq!(v["entries"].as_array().unwrap().len(), 10);
        assert!(v.get("nextAfter").is_none());
    }

    #[tokio::test]
    async fn escapes_rejected_inner_symlink_dir_listed() {
        let outer = TempDir::new("ls-outer");
        let tmp = TempDir::new("ls-escape");
        tmp.write("in/x.txt", "");
        std::os::unix::fs::symlink(outer.path(), tmp.path().join("out")).unwrap();
        std::os::unix::fs::symlink("in", tmp.path().join("in-link")).unwrap();
        let t = tool(&tmp);
        for p in ["..", "/", "/tmp", "out", "in/../../"] {
            let e = call(&t, json!({"path": p})).await.unwrap_err();
            assert_eq!(e.code, ToolErrorCode::InvalidInput, "{p}: {}", e.message);
            assert!(
                e.message.contains("outside the workspace"),
                "{p}: {}",
                e.message
            );
        }
        let v = call(&t, json!({"path": "in-link"})).await.unwrap();
        assert_eq!(v["content"], "x.txt");
    }
}
