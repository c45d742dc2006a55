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
use serde_json::{Map, Value};
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

/// The keys of a `[[tools]]` entry.
const KEYS: [&str; 7] = [
    "name",
    "description",
    "input_schema",
    "output_schema",
    "command",
    "replay_safe",
    "timeout_ms",
];

/// A command tool's declaration: one `[[tools]]` entry.
///
/// Deserializes (through [`toml::Value`], with [`from_toml`](Self::from_toml)'s
/// checks and messages) from any self-describing format, so a serde-derived
/// configuration struct can hold `tools: Vec<CommandToolConfig>`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(try_from = "toml::Value")]
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

    /// Checks the invariants [`parse_tools`] enforces; the error names the
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

    /// Parses one `[[tools]]` table. Errors name the key.
    pub fn from_toml(entry: &toml::Value) -> Result<Self, String> {
        let table = entry
            .as_table()
            .ok_or_else(|| "must be a table".to_owned())?;
        if let Some(key) = table.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!(
                "unknown key `{key}` (expected one of {})",
                KEYS.join(", ")
            ));
        }
        let string = |key: &str| -> Result<String, String> {
            match table.get(key) {
                Some(toml::Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(format!("`{key}`: must be a string")),
                None => Err(format!("missing key `{key}`")),
            }
        };
        let schema = |key: &str| -> Result<Option<Value>, String> {
            let value = match table.get(key) {
                None => return Ok(None),
                Some(toml::Value::String(text)) => serde_json::from_str::<Value>(text)
                    .map_err(|e| format!("`{key}`: invalid JSON: {e}"))?,
                Some(v @ toml::Value::Table(_)) => {
                    toml_to_json(v).map_err(|e| format!("`{key}`{e}"))?
                }
                Some(_) => {
                    return Err(format!(
                        "`{key}`: must be a table or a string holding a JSON object"
                    ))
                }
            };
            if !value.is_object() {
                return Err(format!("`{key}`: must be a JSON object"));
            }
            Ok(Some(value))
        };
        let command = match table.get("command") {
            Some(toml::Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| "`command`: must be an array of strings".to_owned())?,
            Some(_) => return Err("`command`: must be an array of strings".into()),
            None => return Err("missing key `command`".into()),
        };
        let replay_safe = match table.get("replay_safe") {
            None => false,
            Some(toml::Value::Boolean(b)) => *b,
            Some(_) => return Err("`replay_safe`: must be a boolean".into()),
        };
        let timeout_ms = match table.get("timeout_ms") {
            None => None,
            Some(toml::Value::Integer(i)) if *i >= 1 => Some(*i as u64),
            Some(_) => {
                return Err(format!(
                    "`timeout_ms`: must be an integer from 1 to {MAX_COMMAND_TIMEOUT_MS}"
                ))
            }
        };
        let config = Self {
            name: string("name")?,
            description: string("description")?,
            input_schema: schema("input_schema")?
                .ok_or_else(|| "missing key `input_schema`".to_owned())?,
            output_schema: schema("output_schema")?,
            command,
            replay_safe,
            timeout_ms,
        };
        config.validate()?;
        Ok(config)
    }
}

impl TryFrom<toml::Value> for CommandToolConfig {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<Self, String> {
        Self::from_toml(&value)
    }
}

/// Parses the value of the configuration's top-level `tools` key (the
/// array of `[[tools]]` tables) into validated declarations.
///
/// Errors name the entry and key, e.g. ``tools[1]: unknown key `cmd` ``
/// (indices are 0-based, in file order); two entries with the same name
/// are an error too.
pub fn parse_tools(value: &toml::Value) -> Result<Vec<CommandToolConfig>, String> {
    let items = value
        .as_array()
        .ok_or_else(|| "`tools`: must be an array of tables ([[tools]])".to_owned())?;
    let mut out: Vec<CommandToolConfig> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let config = CommandToolConfig::from_toml(item).map_err(|e| format!("tools[{i}]: {e}"))?;
        if let Some(j) = out.iter().position(|c| c.name == config.name) {
            return Err(format!(
                "tools[{i}]: `name`: {:?} is already used by tools[{j}]",
                config.name
            ));
        }
        out.push(config);
    }
    Ok(out)
}

/// Converts a TOML value to JSON; the error is a suffix to the key name
/// (a nested path, then the reason).
fn toml_to_json(v: &toml::Value) -> Result<Value, String> {
    Ok(match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!(": the float {f} has no JSON form"))?,
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => {
            return Err(format!(
                ": the datetime {d} has no JSON form; quote it as a string"
            ))
        }
        toml::Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| toml_to_json(v).map_err(|e| format!("[{i}]{e}")))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(t) => {
            let mut map = Map::with_capacity(t.len());
            for (k, v) in t {
                map.insert(k.clone(), toml_to_json(v).map_err(|e| format!(".{k}{e}"))?);
            }
            Value::Object(map)
        }
    })
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

    fn parse(text: &str) -> Result<Vec<CommandToolConfig>, String> {
        let doc: toml::Table = text.parse().unwrap();
        parse_tools(doc.get("tools").expect("tools key"))
    }

    #[test]
    fn parses_tool_entries() {
        let tools = parse(
            r#"
            [[tools]]
            name = "weather"
            description = "Weather."
            input_schema = { type = "object", properties = { city = { type = "string" }, days = { type = "integer", maximum = 7 } }, required = ["city"] }
            command = ["weather", "--json"]
            replay_safe = true
            timeout_ms = 5000

            [[tools]]
            name = "json-schema"
            description = ""
            input_schema = '{"type": "object", "properties": {"x": {"type": "number", "minimum": 0.5}}}'
            output_schema = { type = "array" }
            command = ["/bin/x"]
            "#,
        )
        .unwrap();
        assert_eq!(tools.len(), 2);
        let w = &tools[0];
        assert_eq!(w.name, "weather");
        assert_eq!(w.command, ["weather", "--json"]);
        assert!(w.replay_safe);
        assert_eq!(w.timeout(), Duration::from_millis(5000));
        assert_eq!(
            w.input_schema,
            json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 7}}, "required": ["city"]})
        );
        assert_eq!(w.output_schema, None);
        let j = &tools[1];
        assert!(!j.replay_safe);
        assert_eq!(j.timeout_ms, None);
        assert_eq!(
            j.timeout(),
            Duration::from_millis(DEFAULT_COMMAND_TIMEOUT_MS)
        );
        assert_eq!(j.input_schema["properties"]["x"]["minimum"], json!(0.5));
        assert_eq!(j.output_schema, Some(json!({"type": "array"})));
        let built = command_tools(tools).unwrap();
        assert_eq!(built[0].name(), "weather");
        assert!(built[0].replay_safe());
        assert_eq!(built[1].output_schema(), Some(json!({"type": "array"})));
        assert_eq!(parse("tools = []").unwrap(), vec![]);
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

    #[test]
    fn tool_entry_errors_name_index_and_key() {
        let base = r#"name = "t"
            description = "d"
            input_schema = { type = "object" }
            command = ["x"]"#;
        let entry = |extra: &str| format!("[[tools]]\n{base}\n\n[[tools]]\n{base}\n{extra}");
        let cases: &[(&str, &str)] = &[
            ("cmd = 1", "tools[1]: unknown key `cmd`"),
            (
                "timeout_ms = 0",
                "tools[1]: `timeout_ms`: must be an integer from 1 to 600000",
            ),
            (
                "timeout_ms = 600001",
                "tools[1]: `timeout_ms`: must be an integer from 1 to 600000, got 600001",
            ),
            ("timeout_ms = \"5\"", "tools[1]: `timeout_ms`"),
            (
                "replay_safe = \"yes\"",
                "tools[1]: `replay_safe`: must be a boolean",
            ),
            (
                "output_schema = [1]",
                "tools[1]: `output_schema`: must be a table",
            ),
            (
                "output_schema = '[1]'",
                "tools[1]: `output_schema`: must be a JSON object",
            ),
            (
                "output_schema = '{'",
                "tools[1]: `output_schema`: invalid JSON",
            ),
            (
                "output_schema = { a = { b = 1979-05-27 } }",
                "tools[1]: `output_schema`.a.b: the datetime",
            ),
            (
                "output_schema = { a = [1, nan] }",
                "tools[1]: `output_schema`.a[1]: the float NaN",
            ),
        ];
        for (extra, want) in cases {
            // Renaming avoids the duplicate-name error for the second entry.
            let text = entry(extra).replacen("name = \"t\"", "name = \"u\"", 1);
            let err = parse(&text).unwrap_err();
            assert!(err.starts_with(want), "{extra}: got {err:?}, want {want:?}");
        }
        let err = parse(&entry("")).unwrap_err();
        assert_eq!(err, "tools[1]: `name`: \"t\" is already used by tools[0]");

        let single = |body: &str| parse(&format!("[[tools]]\n{body}")).unwrap_err();
        assert_eq!(
            single("description = \"d\"\ninput_schema = {}\ncommand = [\"x\"]"),
            "tools[0]: missing key `name`"
        );
        assert!(
            single("name = \"t\"\ndescription = \"d\"\ncommand = [\"x\"]")
                .contains("missing key `input_schema`")
        );
        assert!(
            single("name = \"t\"\ndescription = \"d\"\ninput_schema = {}")
                .contains("missing key `command`")
        );
        assert!(
            single("name = \"t\"\ndescription = \"d\"\ninput_schema = {}\ncommand = []")
                .contains("`command`: must be a non-empty array")
        );
        assert!(
            single("name = \"t\"\ndescription = \"d\"\ninput_schema = {}\ncommand = [\"\"]")
                .contains("`command`: the program")
        );
        assert!(
            single("name = \"t\"\ndescription = \"d\"\ninput_schema = {}\ncommand = [1]")
                .contains("`command`: must be an array of strings")
        );
        assert!(single(
            "name = \"a b\"\ndescription = \"d\"\ninput_schema = {}\ncommand = [\"x\"]"
        )
        .starts_with("tools[0]: `name`: must be 1-64 characters"));
        assert!(
            single("name = \"t\"\ndescription = 5\ninput_schema = {}\ncommand = [\"x\"]")
                .contains("`description`: must be a string")
        );
        assert!(parse("tools = 3")
            .unwrap_err()
            .contains("must be an array of tables"));
        assert_eq!(
            parse("tools = [1]").unwrap_err(),
            "tools[0]: must be a table"
        );
    }
}
