//! The `find` workspace tool (see [`super::workspace`] for its contract).

use super::args::Args;
use super::ls::open_dir;
use super::rooted::{cancelled, run_blocking, RelPath, Workspace};
use super::walk::{walk, End, Entry, Flow, MAX_WALK_ENTRIES};
use super::{async_trait, CancelSignal, Tool, ToolError};
use globset::{GlobBuilder, GlobMatcher};
use serde_json::{json, Value};
use std::sync::Arc;

/// Matches per `find` call when `limit` is omitted: 100.
pub const FIND_DEFAULT_LIMIT: u64 = 100;

/// Largest `limit` a `find` call accepts: 1,000 matches.
pub const FIND_MAX_LIMIT: u64 = 1000;

const NAME: &str = "find";

/// A compiled name-or-path glob (shared with `grep`'s `glob`).
pub(crate) struct NameGlob {
    matcher: GlobMatcher,
    whole_path: bool,
}

impl NameGlob {
    pub(crate) fn new(tool: &str, pattern: &str) -> Result<Self, ToolError> {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| ToolError::invalid_input(format!("{tool}: invalid glob: {e}")))?;
        Ok(Self {
            matcher: glob.compile_matcher(),
            whole_path: pattern.contains('/'),
        })
    }

    /// Whether the entry matches: by name, or by walk-relative path when
    /// the pattern has a `/`.
    pub(crate) fn matches(&self, entry: &Entry<'_>) -> bool {
        self.matcher.is_match(if self.whole_path {
            entry.sub
        } else {
            entry.name
        })
    }
}

/// Notice for a walk that hit [`MAX_WALK_ENTRIES`].
pub(crate) fn entry_cap_notice() -> String {
    format!(
        "[search stopped after visiting {MAX_WALK_ENTRIES} entries; results may be incomplete: narrow path]"
    )
}

pub(crate) struct FindTool {
    ws: Arc<Workspace>,
}

impl FindTool {
    pub(crate) fn new(ws: Arc<Workspace>) -> Self {
        Self { ws }
    }
}

#[async_trait]
impl Tool for FindTool {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Find files and directories in the workspace whose name matches a glob (*.rs), or whose \
         path below `path` matches when the glob has a / (src/**/*.rs). Bounded; says when it cut."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob: *, ?, [ab], {a,b}, **. Without / it matches names; with / paths relative to `path`."},
                "path": {"type": "string", "description": "Directory to search, relative to the workspace root (default the root)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": FIND_MAX_LIMIT, "description": format!("Most matches to return (default {FIND_DEFAULT_LIMIT}).")}
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
                            "type": {"enum": ["file", "dir", "symlink", "other"]}
                        },
                        "required": ["path", "type"]
                    }
                },
                "truncated": {"type": "boolean"}
            },
            "required": ["pattern", "path", "content", "matches", "truncated"]
        }))
    }

    fn replay_safe(&self) -> bool {
        true
    }

    async fn call(&self, args: Value, cancel: CancelSignal) -> Result<Value, ToolError> {
        let args = Args::parse(NAME, args, &["pattern", "path", "limit"])?;
        let pattern = args.str("pattern")?.to_owned();
        let glob = NameGlob::new(NAME, &pattern)?;
        let rel = self
            .ws
            .resolve(NAME, args.opt_str("path")?.unwrap_or("."))?;
        let limit = args
            .opt_int("limit", 1, FIND_MAX_LIMIT)?
            .unwrap_or(FIND_DEFAULT_LIMIT) as usize;
        let ws = self.ws.clone();
        run_blocking(NAME, cancel, move |cancel| {
            find(&ws, &rel, &pattern, &glob, limit, cancel)
        })
        .await
    }
}

fn find(
    ws: &Workspace,
    rel: &RelPath,
    pattern: &str,
    glob: &NameGlob,
    limit: usize,
    cancel: &CancelSignal,
) -> Result<Value, ToolError> {
    let start = open_dir(ws, NAME, rel)?;
    let mut found: Vec<(String, super::walk::Kind)> = Vec::new();
    let end = walk(&start, cancel, &mut |entry| {
        if glob.matches(entry) {
            found.push((rel.join_display(entry.sub), entry.kind));
            if found.len() > limit {
                return Flow::Stop;
            }
        }
        Flow::Continue
    });
    if end == End::Cancelled {
        return Err(cancelled(NAME));
    }
    let more = found.len() > limit;
    found.truncate(limit);

    let mut content = String::new();
    for (path, kind) in &found {
        content.push_str(path);
        content.push_str(kind.marker());
        content.push('\n');
    }
    let shown = rel.display();
    if found.is_empty() {
        content.push_str(&format!("No matches for `{pattern}` under `{shown}`.\n"));
    }
    if more {
        content.push_str(&format!(
            "[results truncated at {limit} matches; narrow the pattern or path, or raise limit (max {FIND_MAX_LIMIT})]\n"
        ));
    }
    if end == End::EntryCap {
        content.push_str(&entry_cap_notice());
        content.push('\n');
    }
    content.pop();
    let matches: Vec<Value> = found
        .iter()
        .map(|(p, k)| json!({"path": p, "type": k.as_str()}))
        .collect();
    Ok(json!({
        "pattern": pattern,
        "path": shown,
        "content": content,
        "matches": matches,
        "truncated": more || end == End::EntryCap,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::rooted::test_support::{check_schema, TempDir};
    use super::super::ToolErrorCode;
    use super::*;

    fn tool(tmp: &TempDir) -> FindTool {
        FindTool::new(Arc::new(Workspace::open(tmp.path()).unwrap()))
    }

    async fn call(t: &FindTool, args: Value) -> Result<Value, ToolError> {
        let out = t.call(args, CancelSignal::new()).await;
        if let Ok(v) = &out {
            check_schema(&t.output_schema().unwrap(), v);
        }
        out
    }

    fn paths(v: &Value) -> Vec<&str> {
        v["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["path"].as_str().unwrap())
            .collect()
    }

    fn tree() -> TempDir {
        let tmp = TempDir::new("find");
        tmp.write("README.md", "");
        tmp.write("src/main.rs", "");
        tmp.write("src/lib.rs", "");
        tmp.write("src/tools/mod.rs", "");
        tmp.write("docs/guide.md", "");
        tmp.write(".git/config.rs", "");
        std::fs::create_dir(tmp.path().join("src/rs_dir.rs")).unwrap();
        tmp
    }

    #[tokio::test]
    async fn matches_names_and_paths_in_order() {
        let tmp = tree();
        let t = tool(&tmp);
        let v = call(&t, json!({"pattern": "*.rs"})).await.unwrap();
        assert_eq!(
            paths(&v),
            [
                "src/lib.rs",
                "src/main.rs",
                "src/rs_dir.rs",
                "src/tools/mod.rs"
            ]
        );
        assert_eq!(
            v["content"],
            "src/lib.rs\nsrc/main.rs\nsrc/rs_dir.rs/\nsrc/tools/mod.rs"
        );
        assert_eq!(v["matches"][2]["type"], "dir");
        assert_eq!(v["truncated"], false);
        let v = call(&t, json!({"pattern": "*/*.rs"})).await.unwrap();
        assert_eq!(paths(&v), ["src/lib.rs", "src/main.rs", "src/rs_dir.rs"]);
        let v = call(&t, json!({"pattern": "**/*.rs", "path": "src/tools"}))
            .await
            .unwrap();
        assert_eq!(paths(&v), ["src/tools/mod.rs"]);
        let v = call(&t, json!({"pattern": "*.{md,txt}"})).await.unwrap();
        assert_eq!(paths(&v), ["README.md", "docs/guide.md"]);
        let v = call(&t, json!({"pattern": "*.zig"})).await.unwrap();
        assert_eq!(v["content"], "No matches for `*.zig` under `.`.");
        // `.git` itself is listed but not descended into, unless asked.
        let v = call(&t, json!({"pattern": "config.rs", "path": ".git"}))
            .await
            .unwrap();
        assert_eq!(paths(&v), [".git/config.rs"]);
    }

    #[tokio::test]
    async fn bounds_results_and_says_so() {
        let tmp = TempDir::new("find-many");
        for i in 0..30 {
            tmp.write(&format!("d{}/f{i:02}.txt", i % 3), "");
        }
        let t = tool(&tmp);
        let v = call(&t, json!({"pattern": "*.txt", "limit": 7}))
            .await
            .unwrap();
        assert_eq!(v["matches"].as_array().unwrap().len(), 7);
        assert_eq!(v["truncated"], true);
        assert!(v["content"]
            .as_str()
            .unwrap()
            .ends_with("[results truncated at 7 matches; narrow the pattern or path, or raise limit (max 1000)]"));
        let v = call(&t, json!({"pattern": "*.txt", "limit": 30}))
            .await
            .unwrap();
        assert_eq!(v["truncated"], false);
        assert_eq!(v["matches"].as_array().unwrap().len(), 30);
    }

    #[tokio::test]
    async fn does_not_follow_symlinks_and_rejects_escapes() {
        let outer = TempDir::new("find-outer");
        outer.write("secret.rs", "");
        let tmp = tree();
        std::os::unix::fs::symlink(outer.path(), tmp.path().join("out")).unwrap();
        std::os::unix::fs::symlink("src", tmp.path().join("src-link")).unwrap();
        let t = tool(&tmp);
        let v = call(&t, json!({"pattern": "secret.rs"})).await.unwrap();
        assert_eq!(paths(&v), Vec::<&str>::new());
        let v = call(&t, json!({"pattern": "*link"})).await.unwrap();
        assert_eq!(paths(&v), ["src-link"]);
        assert_eq!(v["content"], "src-link@");
        // A symlink inside the workspace works as the start directory.
        let v = call(&t, json!({"pattern": "main.rs", "path": "src-link"}))
            .await
            .unwrap();
        assert_eq!(paths(&v), ["src-link/main.rs"]);
        for p in ["out", "..", "/etc", "src/../.."] {
            let e = call(&t, json!({"pattern": "*", "path": p}))
                .await
                .unwrap_err();
            assert_eq!(e.code, ToolErrorCode::InvalidInput, "{p}: {}", e.message);
        }
        let e = call(&t, json!({"pattern": "a[", "path": "."}))
            .await
            .unwrap_err();
        assert_eq!(e.code, ToolErrorCode::InvalidInput);
        assert!(e.message.starts_with("find: invalid glob"), "{}", e.message);
        let e = call(&t, json!({"pattern": "*", "path": "README.md"}))
            .await
            .unwrap_err();
        assert_eq!(e.message, "find: `README.md` is not a directory");
    }
}
