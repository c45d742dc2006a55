//! What the workspace tools (`read`, `ls`, `find`, `grep`) share: the
//! workspace directory as a capability, workspace-relative paths, opening
//! without blocking, their errors, the blocking pool, binary sniffing. A
//! leaf: it imports none of the tools, which import it; `workspace.rs`
//! registers them (its module docs describe the tools' contract).

use super::{CancelSignal, ToolError};
use cap_std::fs::Dir;
use std::io;
use std::path::{Path, PathBuf};

/// Bytes examined at the start of a file to tell binary from text: 8 KiB.
/// A NUL byte among them makes the file binary.
pub const BINARY_SNIFF_BYTES: usize = 8192;

/// The workspace directory, opened as a capability.
#[derive(Debug)]
pub struct Workspace {
    dir: Dir,
    root: PathBuf,
}

impl Workspace {
    /// Opens `root`, which must be an existing directory.
    pub fn open(root: &Path) -> Result<Self, String> {
        let meta =
            std::fs::metadata(root).map_err(|e| format!("workspace {}: {e}", root.display()))?;
        if !meta.is_dir() {
            return Err(format!("workspace {}: not a directory", root.display()));
        }
        let dir = Dir::open_ambient_dir(root, cap_std::ambient_authority())
            .map_err(|e| format!("workspace {}: {e}", root.display()))?;
        Ok(Self {
            dir,
            root: root.to_path_buf(),
        })
    }

    /// The path the workspace was opened with (for display only; all
    /// access goes through the capability).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The capability directory.
    pub(crate) fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Normalizes a `path` argument (see the module docs).
    pub(crate) fn resolve(&self, tool: &str, path: &str) -> Result<RelPath, ToolError> {
        RelPath::parse(tool, path)
    }
}

/// Opens `path` under `dir` for reading without ever blocking in `open()`:
/// with `O_NONBLOCK`, a FIFO with no writer, a terminal or a device opens
/// (or fails) at once instead of waiting. Returns the file and its metadata;
/// callers refuse anything that is not a regular file
/// ([`special_file_error`]), so the non-blocking flag never changes how a
/// file they read behaves (reads of regular files ignore it).
pub(crate) fn open_for_reading(
    dir: &Dir,
    path: impl AsRef<Path>,
) -> io::Result<(cap_std::fs::File, cap_std::fs::Metadata)> {
    use cap_std::fs::OpenOptionsExt as _;
    let mut options = cap_std::fs::OpenOptions::new();
    options
        .read(true)
        .custom_flags((rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY).bits() as i32);
    let file = dir.open_with(path, &options)?;
    let meta = file.metadata()?;
    Ok((file, meta))
}

/// The error for a path that names a FIFO, socket or device: the workspace
/// tools read regular files only.
pub(crate) fn special_file_error(tool: &str, shown: &str) -> ToolError {
    ToolError::tool(format!(
        "{tool}: `{shown}` is not a regular file (a FIFO, socket or device); {tool} reads regular files only"
    ))
}

/// A normalized workspace-relative path: no empty, `.` or `..` parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RelPath {
    parts: Vec<String>,
}

impl RelPath {
    pub(crate) fn parse(tool: &str, input: &str) -> Result<Self, ToolError> {
        let outside = || {
            ToolError::invalid_input(format!(
                "{tool}: path `{input}` is outside the workspace; paths are relative to the workspace root and may not leave it"
            ))
        };
        if input.contains('\0') {
            return Err(ToolError::invalid_input(format!(
                "{tool}: path must not contain NUL characters"
            )));
        }
        if input.starts_with('/') || Path::new(input).is_absolute() {
            return Err(outside());
        }
        let mut parts: Vec<String> = Vec::new();
        for part in input.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    parts.pop().ok_or_else(outside)?;
                }
                p => parts.push(p.to_owned()),
            }
        }
        Ok(Self { parts })
    }

    /// Whether this is the workspace root.
    pub(crate) fn is_root(&self) -> bool {
        self.parts.is_empty()
    }

    /// The path for `cap-std` calls (`.` for the root).
    pub(crate) fn fs_path(&self) -> PathBuf {
        if self.is_root() {
            PathBuf::from(".")
        } else {
            self.parts.iter().collect()
        }
    }

    /// The path shown in results (`.` for the root).
    pub(crate) fn display(&self) -> String {
        if self.is_root() {
            ".".to_owned()
        } else {
            self.parts.join("/")
        }
    }

    /// Joins a walk-relative path onto this one for display.
    pub(crate) fn join_display(&self, sub: &str) -> String {
        if self.is_root() {
            sub.to_owned()
        } else {
            format!("{}/{sub}", self.parts.join("/"))
        }
    }
}

/// Maps an I/O error on `path` to a [`ToolError`]: escapes detected by
/// `cap-std` become `invalid_input`, everything else `tool_error`.
pub(crate) fn io_error(tool: &str, path: &str, e: io::Error) -> ToolError {
    // cap-std reports an escape as PermissionDenied without an OS error
    // code; a real EACCES carries one.
    if e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none() {
        return ToolError::invalid_input(format!(
            "{tool}: path `{path}` leads outside the workspace (through a symlink that points outside it or to an absolute target)"
        ));
    }
    let what = match e.kind() {
        io::ErrorKind::NotFound => "no such file or directory".to_owned(),
        io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => e.to_string(),
    };
    ToolError::tool(format!("{tool}: `{path}`: {what}"))
}

/// The error a cancelled workspace call returns.
pub(crate) fn cancelled(tool: &str) -> ToolError {
    ToolError::tool(format!("{tool}: cancelled"))
}

/// Runs blocking file-system work `f` on Tokio's blocking pool; returns
/// as soon as `cancel` fires (the work sees the same signal and stops at
/// its next check).
pub(crate) async fn run_blocking<T, F>(
    tool: &'static str,
    cancel: CancelSignal,
    f: F,
) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce(&CancelSignal) -> Result<T, ToolError> + Send + 'static,
{
    if cancel.is_cancelled() {
        return Err(cancelled(tool));
    }
    let token = cancel.clone();
    let task = tokio::task::spawn_blocking(move || f(&token));
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(cancelled(tool)),
        joined = task => joined.unwrap_or_else(|e| Err(ToolError::tool(format!("{tool}: internal failure: {e}")))),
    }
}

/// Whether `prefix` (the first bytes of a file) marks a binary file.
pub(crate) fn looks_binary(prefix: &[u8]) -> bool {
    prefix[..prefix.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// The longest prefix of `bytes` of at most `max` bytes that does not end
/// inside a UTF-8 sequence (when `bytes` is UTF-8 there).
pub(crate) fn cut_at_char_boundary(bytes: &[u8], max: usize) -> usize {
    if bytes.len() <= max {
        return bytes.len();
    }
    let mut end = max;
    // Back off over continuation bytes (at most 3) to a sequence start.
    while end > 0 && max - end < 3 && bytes[end] & 0xC0 == 0x80 {
        end -= 1;
    }
    if bytes[end] & 0xC0 == 0x80 {
        max // not UTF-8 here anyway
    } else {
        end
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::path::{Path, PathBuf};

    /// A fresh directory under the system temp dir, removed on drop.
    pub(crate) struct TempDir(PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir()
                .join(format!("quickcell-tools-{}-{tag}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }

        pub(crate) fn path(&self) -> &Path {
            &self.0
        }

        /// Writes `content` to `rel`, creating parent directories.
        pub(crate) fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
    }

    /// Panics unless `v` is valid against the JSON Schema `schema`.
    pub(crate) fn check_schema(schema: &serde_json::Value, v: &serde_json::Value) {
        let validator = jsonschema::validator_for(schema).unwrap();
        if let Err(e) = validator.validate(v) {
            panic!("output {v} violates schema: {e}");
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relpath_normalizes_and_rejects_escapes() {
        let ok = |s: &str| RelPath::parse("t", s).unwrap().display();
        assert_eq!(ok(""), ".");
        assert_eq!(ok("."), ".");
        assert_eq!(ok("./a//b/"), "a/b");
        assert_eq!(ok("a/../b"), "b");
        assert_eq!(ok("a/.."), ".");
        for bad in ["..", "../x", "a/../../x", "/etc/passwd", "/"] {
            let e = RelPath::parse("t", bad).unwrap_err();
            assert_eq!(e.code, super::super::ToolErrorCode::InvalidInput, "{bad}");
            assert!(
                e.message.contains("is outside the workspace"),
                "{bad}: {}",
                e.message
            );
        }
        assert!(RelPath::parse("t", "a\0b").is_err());
        let p = RelPath::parse("t", "x/y").unwrap();
        assert_eq!(p.fs_path(), PathBuf::from("x/y"));
        assert_eq!(p.join_display("z"), "x/y/z");
        assert_eq!(RelPath::parse("t", "").unwrap().join_display("z"), "z");
    }

    #[test]
    fn char_boundary_cuts() {
        let s = "aé€😀".as_bytes(); // 1 + 2 + 3 + 4 bytes
        assert_eq!(cut_at_char_boundary(s, 100), 10);
        assert_eq!(cut_at_char_boundary(s, 2), 1);
        assert_eq!(cut_at_char_boundary(s, 3), 3);
        assert_eq!(cut_at_char_boundary(s, 5), 3);
        assert_eq!(cut_at_char_boundary(s, 8), 6);
        assert_eq!(cut_at_char_boundary(&[0x80; 10], 5), 5);
    }
}
