//! Command tools: external programs declared as `[[tools]]` entries.
//!
//! ```toml
//! [[tools]]
//! name = "weather"
//! description = "Current weather for a city."
//! input_schema = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }
//! command = ["/usr/local/bin/weather-tool", "--json"]
//! replay_safe = true      # optional, default false
//! timeout_ms = 5000       # optional, default 30000, at most 600000
//! ```
//!
//! # Keys
//!
//! | key | type | |
//! | --- | --- | --- |
//! | `name` | string | required; 1–64 characters from `A–Z a–z 0–9 _ - .` |
//! | `description` | string | required |
//! | `input_schema` | table, or a string holding a JSON object | required; JSON Schema of the arguments |
//! | `output_schema` | table, or a string holding a JSON object | optional; JSON Schema of the result |
//! | `command` | array of strings | required, non-empty; the argv, `command[0]` is the program |
//! | `replay_safe` | boolean | optional, default `false` |
//! | `timeout_ms` | integer | optional, default [`DEFAULT_COMMAND_TIMEOUT_MS`], 1–[`MAX_COMMAND_TIMEOUT_MS`] |
//!
//! Any other key is an error. TOML datetimes and non-finite floats inside a
//! schema are errors (they have no JSON form).
//!
//! # Execution (secure defaults)
//!
//! - **No shell**: `command[0]` is executed directly with `command[1..]` as
//!   its arguments. A bare program name is looked up in `PATH`; a name with
//!   a `/` is a path (relative ones resolve against the host's current
//!   directory, which the command also runs in).
//! - **Empty environment except `PATH`**: the child gets only `PATH`, set to
//!   the host's `PATH` as it was when the tool was created, or
//!   [`DEFAULT_COMMAND_PATH`] if the host had none.
//! - **stdin carries the JSON arguments** (compact JSON, then end of file);
//!   a command that does not read them is not an error.
//! - **stdout carries the result**: exactly one JSON value (surrounding
//!   whitespace allowed), at most [`MAX_COMMAND_STDOUT_BYTES`].
//! - **stderr is diagnostics**: only its last [`COMMAND_STDERR_TAIL_BYTES`]
//!   bytes are kept, and appear at the end of error messages.
//! - **Exit status 0 is success**; anything else is a `tool_error`.
//! - **Wall clock**: the whole call (start, stdin, stdout, exit) must finish
//!   within the tool's timeout.
//! - **Process group**: the command runs in a new process group. On
//!   timeout, cancellation, oversized stdout, or when the call's future is
//!   dropped, the group is killed with `SIGKILL` and the child reaped
//!   (`kill_on_drop` as a backstop), so a tool never outlives its call in
//!   those cases. Processes a command leaves behind after exiting normally
//!   are not tracked.
//!
//! Every failure — the program cannot start, non-zero exit, death by
//! signal, empty or invalid JSON, timeout, stdout over the cap,
//! cancellation — is a [`ToolError`] with code `tool_error` whose message
//! names the tool and ends with the stderr tail when there is one.

use super::{CancelSignal, Tool, ToolError};
use async_trait::async_trait;
use serde_json::Value;
use std::ffi::OsString;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStdout, Command};

/// Default wall-clock limit of one command tool call: 30,000 ms.
pub const DEFAULT_COMMAND_TIMEOUT_MS: u64 = 30_000;

/// Largest accepted `timeout_ms`: 600,000 ms (ten minutes).
pub const MAX_COMMAND_TIMEOUT_MS: u64 = 600_000;

/// Cap on a command's stdout: 4 MiB (4,194,304 bytes). A command that
/// prints more is killed and the call fails.
pub const MAX_COMMAND_STDOUT_BYTES: usize = 4 * 1024 * 1024;

/// How much of a command's stderr is kept for error messages: the last
/// 2,048 bytes (cut forward to a character boundary).
pub const COMMAND_STDERR_TAIL_BYTES: usize = 2048;

/// `PATH` given to commands when the host process has none.
pub const DEFAULT_COMMAND_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// After the command exits, how long to keep collecting stderr that a
/// leftover process may still hold open.
const STDERR_GRACE: Duration = Duration::from_millis(100);

/// How long to wait for a killed child to be reaped before leaving it to
/// `kill_on_drop` and the runtime's orphan reaper.
const REAP_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest tool name accepted in the configuration.
const MAX_NAME_CHARS: usize = 64;

/// How much of invalid stdout is quoted in the error message.
const STDOUT_PREVIEW_BYTES: usize = 200;

/// A command tool's declaration: one `[[tools]]` entry.
///
/// The configuration parser ([`crate::Config`]) reads it from the file.
/// It also deserializes, with the same checks and messages, from any
/// self-describing format, so a serde-derived configuration struct can
/// hold `tools: Vec<CommandToolConfig>`.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandToolConfig {
    /// Exact tool name.
    pub name: String,
    /// Description shown to the model.
    pub description: String,
    /// JSON Schema of the arguments (a JSON object).
    pub input_schema: Value,
    /// JSON Schema of the result, if declared.
    pub output_schema: Option<Value>,
    /// The argv; `command[0]` is the program. Must be non-empty.
    pub command: Vec<String>,
    /// Whether the tool is safe to replay after a restart. Default `false`.
    pub replay_safe: bool,
    /// Wall-clock limit per call in milliseconds; `None` means
    /// [`DEFAULT_COMMAND_TIMEOUT_MS`]. At most [`MAX_COMMAND_TIMEOUT_MS`].
    pub timeout_ms: Option<u64>,
}

impl CommandToolConfig {
    /// A declaration with an open object input schema, no output schema,
    /// not replay-safe and the default timeout.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        command: Vec<String>,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: None,
            command,
            replay_safe: false,
            timeout_ms: None,
        }
    }

    /// The effective per-call timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.unwrap_or(DEFAULT_COMMAND_TIMEOUT_MS))
    }

    /// Checks the invariants of a declaration (the configuration parser
    /// and [`CommandTool::new`] enforce them); the error names the
    /// offending key.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.name.chars().count();
        if n == 0
            || n > MAX_NAME_CHARS
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(format!(
                "`name`: must be 1-{MAX_NAME_CHARS} characters from A-Z a-z 0-9 _ - . (got {:?})",
                self.name
            ));
        }
        if !self.input_schema.is_object() {
            return Err("`input_schema`: must be a JSON object".into());
        }
        if self.output_schema.as_ref().is_some_and(|s| !s.is_object()) {
            return Err("`output_schema`: must be a JSON object".into());
        }
        match self.command.first() {
            None => return Err("`command`: must be a non-empty array of strings".into()),
            Some(p) if p.is_empty() => {
                return Err("`command`: the program (first element) must not be empty".into())
            }
            Some(_) => {}
        }
        if self.command.iter().any(|a| a.contains('\0')) {
            return Err("`command`: arguments must not contain NUL characters".into());
        }
        if let Some(t) = self.timeout_ms {
            if !(1..=MAX_COMMAND_TIMEOUT_MS).contains(&t) {
                return Err(format!(
                    "`timeout_ms`: must be an integer from 1 to {MAX_COMMAND_TIMEOUT_MS}, got {t}"
                ));
            }
        }
        Ok(())
    }
}

/// Builds a [`CommandTool`] for each declaration, in order.
pub fn command_tools(configs: Vec<CommandToolConfig>) -> Result<Vec<Arc<dyn Tool>>, String> {
    configs
        .into_iter()
        .map(|c| {
            let name = c.name.clone();
            CommandTool::new(c)
                .map(|t| Arc::new(t) as Arc<dyn Tool>)
                .map_err(|e| format!("tool {name:?}: {e}"))
        })
        .collect()
}

/// A tool backed by an external command; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct CommandTool {
    config: CommandToolConfig,
    path_env: OsString,
}

impl CommandTool {
    /// Validates `config` and captures the host's `PATH` for the child.
    pub fn new(config: CommandToolConfig) -> Result<Self, String> {
        config.validate()?;
        let path_env = std::env::var_os("PATH")
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| DEFAULT_COMMAND_PATH.into());
        Ok(Self { config, path_env })
    }

    /// The declaration this tool was built from.
    pub fn config(&self) -> &CommandToolConfig {
        &self.config
    }

    fn fail(&self, what: impl std::fmt::Display, stderr: &Tail) -> ToolError {
        ToolError::tool(format!(
            "command tool `{}` {what}{}",
            self.config.name,
            stderr.suffix()
        ))
    }

    async fn run(&self, args: Value, cancel: CancelSignal) -> Result<Value, ToolError> {
        let input = serde_json::to_vec(&args).map_err(|e| {
            ToolError::invalid_input(format!(
                "command tool `{}`: cannot encode arguments: {e}",
                self.config.name
            ))
        })?;
        let argv = &self.config.command;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .env("PATH", &self.path_env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd.spawn().map_err(|e| {
            ToolError::tool(format!(
                "command tool `{}`: cannot start {:?}: {e}",
                self.config.name, argv[0]
            ))
        })?;
        // Declared after `child`, so dropped (and the group killed) before
        // the child handle: the leader is still unreaped then, so its pid
        // cannot have been reused as a group id.
        let mut group = GroupGuard {
            pgid: child.id(),
            armed: true,
        };
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(ToolError::tool(format!(
                "command tool `{}`: stdio pipes unavailable",
                self.config.name
            )));
        };

        let mut tail = Tail::default();
        let deadline = tokio::time::Instant::now() + self.config.timeout();
        let outcome = {
            let exchange = async {
                let write = async move {
                    let mut stdin = stdin;
                    // A command may exit without reading its input; the
                    // broken pipe that causes is not an error.
                    let _ = stdin.write_all(&input).await;
                };
                let (_, out) = tokio::join!(write, read_capped(stdout, MAX_COMMAND_STDOUT_BYTES));
                match out {
                    Ok(Some(bytes)) => match child.wait().await {
                        Ok(status) => Outcome::Exited(status, bytes),
                        Err(e) => Outcome::Io(e),
                    },
                    Ok(None) => Outcome::Oversize,
                    Err(e) => Outcome::Io(e),
                }
            };
            let pump = tail.pump(stderr);
            tokio::select! {
                biased;
                _ = cancel.cancelled() => Outcome::Cancelled,
                _ = tokio::time::sleep_until(deadline) => Outcome::TimedOut,
                out = drive(exchange, pump) => out,
            }
        };

        let (status, stdout) = match outcome {
            Outcome::Exited(status, stdout) => {
                group.armed = false; // reaped: the pid may be reused now
                (status, stdout)
            }
            abnormal => {
                group.kill();
                let _ = child.start_kill();
                if let Ok(Ok(_)) = tokio::time::timeout(REAP_TIMEOUT, child.wait()).await {
                    group.armed = false;
                }
                return Err(match abnormal {
                    Outcome::Cancelled => self.fail("was cancelled", &tail),
                    Outcome::TimedOut => self.fail(
                        format_args!(
                            "timed out after {} ms and was killed",
                            self.config.timeout().as_millis()
                        ),
                        &tail,
                    ),
                    Outcome::Oversize => self.fail(
                        format_args!(
                            "printed more than {MAX_COMMAND_STDOUT_BYTES} bytes on stdout and was killed"
                        ),
                        &tail,
                    ),
                    Outcome::Io(e) => self.fail(format_args!("failed: {e}"), &tail),
                    Outcome::Exited(..) => unreachable!(),
                });
            }
        };

        if !status.success() {
            return Err(self.fail(describe_status(status), &tail));
        }
        if stdout.iter().all(u8::is_ascii_whitespace) {
            return Err(self.fail("printed nothing on stdout (expected one JSON value)", &tail));
        }
        serde_json::from_slice::<Value>(&stdout).map_err(|e| {
            let preview = String::from_utf8_lossy(&stdout[..stdout.len().min(STDOUT_PREVIEW_BYTES)]);
            self.fail(
                format_args!(
                    "printed invalid JSON on stdout (expected one JSON value): {e}; stdout starts with {preview:?}"
                ),
                &tail,
            )
        })
    }
}

#[async_trait]
impl Tool for CommandTool {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn description(&self) -> &str {
        &self.config.description
    }

    fn input_schema(&self) -> Value {
        self.config.input_schema.clone()
    }

    fn output_schema(&self) -> Option<Value> {
        self.config.output_schema.clone()
    }

    fn replay_safe(&self) -> bool {
        self.config.replay_safe
    }

    async fn call(&self, args: Value, cancel: CancelSignal) -> Result<Value, ToolError> {
        self.run(args, cancel).await
    }
}

enum Outcome {
    Exited(ExitStatus, Vec<u8>),
    Oversize,
    Io(io::Error),
    TimedOut,
    Cancelled,
}

fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return format!("was killed by signal {sig}");
        }
    }
    format!("ended abnormally ({status})")
}

/// Runs `exchange` while `pump` collects stderr; once `exchange` is done,
/// gives `pump` a short grace to reach end of file.
async fn drive<E: std::future::Future>(
    exchange: E,
    pump: impl std::future::Future<Output = ()>,
) -> E::Output {
    tokio::pin!(exchange);
    tokio::pin!(pump);
    let mut pump_done = false;
    let out = loop {
        tokio::select! {
            out = &mut exchange => break out,
            () = &mut pump, if !pump_done => pump_done = true,
        }
    };
    if !pump_done {
        let _ = tokio::time::timeout(STDERR_GRACE, pump).await;
    }
    out
}

/// Reads `r` to end of file; `None` if it holds more than `cap` bytes.
async fn read_capped(r: ChildStdout, cap: usize) -> io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    r.take(cap as u64 + 1).read_to_end(&mut buf).await?;
    Ok((buf.len() <= cap).then_some(buf))
}

/// The last [`COMMAND_STDERR_TAIL_BYTES`] of a stream.
#[derive(Default)]
struct Tail {
    buf: Vec<u8>,
    dropped: bool,
}

impl Tail {
    fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        if self.buf.len() > 2 * COMMAND_STDERR_TAIL_BYTES {
            let excess = self.buf.len() - COMMAND_STDERR_TAIL_BYTES;
            self.buf.drain(..excess);
            self.dropped = true;
        }
    }

    async fn pump(&mut self, mut r: impl AsyncRead + Unpin) {
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = r.read(&mut chunk).await {
            self.push(&chunk[..n]);
        }
    }

    /// The kept text, cut forward to a character boundary, trimmed.
    fn text(&self) -> (String, bool) {
        let start = self.buf.len().saturating_sub(COMMAND_STDERR_TAIL_BYTES);
        let mut bytes = &self.buf[start..];
        let cut = self.dropped || start > 0;
        if cut {
            let skip = bytes
                .iter()
                .take(3)
                .take_while(|&&b| b & 0xC0 == 0x80)
                .count();
            bytes = &bytes[skip..];
        }
        (String::from_utf8_lossy(bytes).trim().to_owned(), cut)
    }

    /// `""`, or `"; stderr: …"` to append to an error message.
    fn suffix(&self) -> String {
        match self.text() {
            (t, _) if t.is_empty() => String::new(),
            (t, false) => format!("; stderr: {t}"),
            (t, true) => format!("; stderr (last {COMMAND_STDERR_TAIL_BYTES} bytes): …{t}"),
        }
    }
}

/// Kills the command's process group when armed (see [`CommandTool`]).
struct GroupGuard {
    pgid: Option<u32>,
    armed: bool,
}

impl GroupGuard {
    fn kill(&self) {
        #[cfg(unix)]
        if let Some(pid) = self
            .pgid
            .and_then(|p| i32::try_from(p).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;
    use std::time::Instant;

    fn fixture(name: &str) -> String {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/tools")
            .join(name);
        assert!(p.exists(), "missing fixture {}", p.display());
        p.to_string_lossy().into_owned()
    }

    fn tool(name: &str, argv: Vec<String>, timeout_ms: Option<u64>) -> CommandTool {
        let mut c = CommandToolConfig::new(name, "test", argv);
        c.timeout_ms = timeout_ms;
        CommandTool::new(c).unwrap()
    }

    fn temp_file(tag: &str) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::env::temp_dir().join(format!("quickcell-cmd-{}-{tag}-{n}", std::process::id()))
    }

    /// Whether `pid` is gone or a zombie (killed but not yet reaped by
    /// whoever inherited it).
    fn dead(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        }
    }

    async fn wait_dead(pid: u32) -> bool {
        for _ in 0..100 {
            if dead(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    fn read_pids(path: &PathBuf) -> Vec<u32> {
        for _ in 0..100 {
            if let Ok(s) = std::fs::read_to_string(path) {
                let pids: Vec<u32> = s
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect();
                if pids.len() == 2 {
                    return pids;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("pid file {} not written", path.display());
    }

    #[tokio::test]
    async fn args_arrive_on_stdin_and_env_is_empty_except_path() {
        let t = tool("echo", vec![fixture("echo_args.sh")], None);
        let args = json!({"city": "Zürich", "n": [1, 2, {"deep": null}]});
        let out = t.call(args.clone(), CancelSignal::new()).await.unwrap();
        assert_eq!(out["args"], args);
        assert_eq!(out["home"], "unset");
        assert_eq!(
            out["path"],
            std::env::var("PATH").unwrap_or(DEFAULT_COMMAND_PATH.into())
        );
        assert_eq!(out["argc"], 0);
    }

    #[tokio::test]
    async fn argv_is_passed_without_a_shell() {
        let t = tool(
            "echo",
            vec![fixture("echo_args.sh"), "$HOME".into(), "a b;c".into()],
            None,
        );
        let out = t.call(json!({}), CancelSignal::new()).await.unwrap();
        assert_eq!(out["argc"], 2);
        assert_eq!(out["first"], "$HOME");
    }

    #[tokio::test]
    async fn path_lookup_of_bare_program() {
        let t = tool("cat", vec!["cat".into()], None);
        let out = t.call(json!({"x": 1}), CancelSignal::new()).await.unwrap();
        assert_eq!(out, json!({"x": 1}));
    }

    #[tokio::test]
    async fn large_arguments_not_read_are_fine() {
        // More than a pipe buffer of input that the command never reads.
        let t = tool(
            "ignore",
            vec!["/bin/sh".into(), "-c".into(), "echo '{\"ok\":true}'".into()],
            None,
        );
        let big = "x".repeat(1 << 20);
        let out = t
            .call(json!({ "big": big }), CancelSignal::new())
            .await
            .unwrap();
        assert_eq!(out, json!({"ok": true}));
        // And a large input that is read back whole.
        let t = tool("cat", vec!["cat".into()], None);
        let args = json!({ "big": "y".repeat(1 << 20) });
        assert_eq!(
            t.call(args.clone(), CancelSignal::new()).await.unwrap(),
            args
        );
    }

    #[tokio::test]
    async fn non_zero_exit_reports_status_and_stderr_tail() {
        let t = tool("fail", vec![fixture("fail.sh")], None);
        let e = t.call(json!({}), CancelSignal::new()).await.unwrap_err();
        assert_eq!(e.code, super::super::ToolErrorCode::ToolError);
        assert!(
            e.message
                .starts_with("command tool `fail` exited with status 3"),
            "{}",
            e.message
        );
        assert!(e.message.contains("fatal: the end"), "{}", e.message);
        assert!(e.message.contains("(last 2048 bytes)"), "{}", e.message);
        assert!(!e.message.contains("noise line 1\n"), "{}", e.message);
        assert!(e.message.len() < COMMAND_STDERR_TAIL_BYTES + 200);
    }

    #[tokio::test]
    async fn short_stderr_is_quoted_whole() {
        let t = tool(
            "f",
            vec![
                "/bin/sh".into(),
                "-c".into(),
                "echo oops >&2; exit 1".into(),
            ],
            None,
        );
        let e = t.call(json!({}), CancelSignal::new()).await.unwrap_err();
        assert_eq!(
            e.message,
            "command tool `f` exited with status 1; stderr: oops"
        );
    }

    #[tokio::test]
    async fn killed_by_signal() {
        let t = tool(
            "sig",
            vec!["/bin/sh".into(), "-c".into(), "kill -TERM $$".into()],
            None,
        );
        let e = t.call(json!({}), CancelSignal::new()).await.unwrap_err();
        assert!(
            e.message.contains("was killed by signal 15"),
            "{}",
            e.message
        );
    }

    #[tokio::test]
    async fn invalid_json_is_an_error() {
        let t = tool("garbage", vec![fixture("garbage.sh")], None);
        let e = t.call(json!({}), CancelSignal::new()).await.unwrap_err();
        assert!(
            e.message.contains("printed invalid JSON on stdout"),
            "{}",
            e.message
        );
        assert!(e.message.contains("this is not json"), "{}", e.message);
        assert!(
            e.message.contains("stderr: garbage.sh was here"),
            "{}",
            e.message
        );

        let two = tool(
            "two",
            vec!["/bin/sh".into(), "-c".into(), "echo 1; echo 2".into()],
            None,
        );
        let e = two.call(json!({}), CancelSignal::new()).await.unwrap_err();
        assert!(e.message.contains("invalid JSON"), "{}", e.message);

        let empty = tool(
            "empty",
            vec!["/bin/sh".into(), "-c".into(), "true".into()],
            None,
        );
        let e = empty
            .call(json!({}), CancelSignal::new())
            .await
            .unwrap_err();
        assert!(
            e.message.contains("printed nothing on stdout"),
            "{}",
            e.message
        );
    }

    #[tokio::test]
    async fn timeout_kills_the_child_and_its_group() {
        let pidfile = temp_file("slow");
        let t = tool(
            "slow",
            vec![fixture("slow.sh"), pidfile.to_string_lossy().into_owned()],
            Some(300),
        );
        let start = Instant::now();
        let e = t.call(json!({}), CancelSignal::new()).await.unwrap_err();
        let took = start.elapsed();
        assert!(
            e.message.contains("timed out after 300 ms and was killed"),
            "{}",
            e.message
        );
        assert!(e.message.contains("slow.sh started"), "{}", e.message);
        assert!(took < Duration::from_secs(5), "took {took:?}");
        for pid in read_pids(&pidfile) {
            assert!(wait_dead(pid).await, "process {pid} survived the timeout");
        }
        let _ = std::fs::remove_file(pidfile);
    }

    #[tokio::test]
    async fn cancellation_stops_promptly_and_kills() {
        let pidfile = temp_file("cancel");
        let t = tool(
            "slow",
            vec![fixture("slow.sh"), pidfile.to_string_lossy().into_owned()],
            None,
        );
        let cancel = CancelSignal::new();
        let trigger = cancel.clone();
        let start = Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            trigger.cancel();
        });
        let e = t.call(json!({}), cancel).await.unwrap_err();
        assert!(e.message.contains("was cancelled"), "{}", e.message);
        assert!(start.elapsed() < Duration::from_secs(5));
        for pid in read_pids(&pidfile) {
            assert!(wait_dead(pid).await, "process {pid} survived cancellation");
        }
        let _ = std::fs::remove_file(pidfile);
    }

    #[tokio::test]
    async fn dropping_the_call_kills_the_group() {
        let pidfile = temp_file("drop");
        let t = tool(
            "slow",
            vec![fixture("slow.sh"), pidfile.to_string_lossy().into_owned()],
            None,
        );
        let r = tokio::time::timeout(
            Duration::from_millis(300),
            t.call(json!({}), CancelSignal::new()),
        )
        .await;
        assert!(r.is_err());
        for pid in read_pids(&pidfile) {
            assert!(
                wait_dead(pid).await,
                "process {pid} survived the dropped call"
            );
        }
        let _ = std::fs::remove_file(pidfile);
    }

    #[tokio::test]
    async fn stdout_over_the_cap_is_killed() {
        let t = tool("flood", vec![fixture("flood.sh")], Some(20_000));
        let start = Instant::now();
        let e = t.call(json!({}), CancelSignal::new()).await.unwrap_err();
        assert!(
            e.message
                .contains("printed more than 4194304 bytes on stdout and was killed"),
            "{}",
            e.message
        );
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn spawn_failure_is_a_tool_error() {
        let t = tool("missing", vec!["/nonexistent/quickcell-tool".into()], None);
        let e = t.call(json!({}), CancelSignal::new()).await.unwrap_err();
        assert!(
            e.message.starts_with(
                "command tool `missing`: cannot start \"/nonexistent/quickcell-tool\""
            ),
            "{}",
            e.message
        );
        // Not found in PATH either: the environment is empty but PATH.
        let t = tool("nope", vec!["quickcell-no-such-program".into()], None);
        assert!(t.call(json!({}), CancelSignal::new()).await.is_err());
    }

    #[tokio::test]
    async fn leftover_stderr_holder_does_not_block() {
        // The command exits at once but leaves a process holding stderr.
        let t = tool(
            "bg",
            vec![
                "/bin/sh".into(),
                "-c".into(),
                "(sleep 5 >&2 &) ; echo 7".into(),
            ],
            Some(10_000),
        );
        let start = Instant::now();
        assert_eq!(
            t.call(json!({}), CancelSignal::new()).await.unwrap(),
            json!(7)
        );
        assert!(start.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn tail_keeps_the_end_at_a_char_boundary() {
        let mut t = Tail::default();
        t.push(b"first ");
        assert_eq!(t.suffix(), "; stderr: first");
        for _ in 0..3000 {
            t.push("é".as_bytes());
        }
        t.push(b"END\n");
        let (text, cut) = t.text();
        assert!(cut);
        assert!(text.ends_with("END"));
        assert!(!text.contains('\u{FFFD}'));
        assert!(text.len() <= COMMAND_STDERR_TAIL_BYTES);
        assert!(Tail::default().suffix().is_empty());
    }

    #[test]
    fn deserializes_inside_a_serde_config() {
        #[derive(serde::Deserialize)]
        struct Config {
            #[serde(default)]
            tools: Vec<CommandToolConfig>,
        }
        let c: Config = toml::from_str(
            "[[tools]]\nname = \"t\"\ndescription = \"d\"\ninput_schema = { type = \"object\" }\ncommand = [\"x\"]\n",
        )
        .unwrap();
        assert_eq!(c.tools[0].name, "t");
        let e = toml::from_str::<Config>(
            "[[tools]]\nname = \"t\"\ndescription = \"d\"\ninput_schema = {}\ncommand = [\"x\"]\nfoo = 1\n",
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("unknown key `foo`"), "{e}");
    }
}
