//! The `quickcell` command-line interface.

use clap::{Args, CommandFactory as _, Parser, Subcommand};
use quickcell::{
    CellResult, Config, ExecInput, HttpOptions, Owner, Runtime, ServeMode, ToolRegistry, WaitInput,
};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[path = "cli/codex_host.rs"]
mod codex_host;
#[path = "cli/signals.rs"]
mod signals;
#[path = "cli/telemetry.rs"]
mod telemetry;

use codex_host::{codex_host, CodexHostArgs};
use signals::{shut_down_on_signal, termination_signal, CLOSE_GRACE, STDIO_RESPONSE_GRACE};
use telemetry::{install_subscriber, start_otlp_export};

/// Runs model-written JavaScript cells in QuickJS on Wasmtime.
#[derive(Parser)]
#[command(name = "quickcell", version = version_text(), about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs one cell and prints the result as one line of compact JSON.
    /// Exit status: 0 completed, 1 failed, 2 usage or configuration error,
    /// 3 waiting (resume it with `quickcell wait RUNID`). A process that
    /// parks a cell exits once the tool calls it started have settled and
    /// been recorded in the state store.
    Exec(ExecArgs),
    /// Resumes a parked cell and prints the result like `exec` (same exit
    /// statuses).
    Wait(WaitArgs),
    /// Cancels a parked cell: removes it and cancels its tool calls, then
    /// prints the `aborted` result. Exit status 0 when the run was
    /// cancelled, 1 when it could not be (unknown, another session's).
    Cancel(CancelArgs),
    /// Runs a cell to its end, waiting as often as needed, and prints a
    /// human-readable account (`--json`: every call's raw result, one JSON
    /// line each). Exit status as `exec`, never 3.
    Run(RunArgs),
    /// Serves `exec` and `wait` as MCP tools: over stdio (default), or over
    /// streamable HTTP at `http://ADDR/mcp` with `--http ADDR`.
    Serve(ServeArgs),
    /// Serves OpenAI Codex's code-mode host protocol (version 1) on
    /// stdio: Codex runs its `exec` cells here, as quickcell cells (see
    /// docs/codex-host.md). Exits 0 when Codex closes stdin.
    CodexHost(CodexHostArgs),
    /// Searches the tool catalog and prints the ranked hits as JSON.
    Search(SearchArgs),
    /// Prints the directory of deferred tools (names and descriptions).
    Tools(CatalogArgs),
    /// Sums the usage ledger of the state store: one record per `exec` /
    /// `wait` call (fuel, wall and guest time, tool calls, output and
    /// snapshot bytes). `--json` prints one object whose `fuel` is the
    /// total.
    Usage(UsageArgs),
    /// Writes a commented starter configuration file (use it with
    /// `--config`). Refuses to overwrite an existing file.
    Init(InitArgs),
    /// Prints the completion script of a shell (e.g. `quickcell completions
    /// bash > /etc/bash_completion.d/quickcell`).
    Completions(CompletionsArgs),
    /// Prints the manual page, in roff (e.g. `quickcell man | man -l -`).
    Man,
}

/// `--version`: quickcell's version, the guest build it carries (the first
/// 16 hex digits of its SHA-256) and the engines.
fn version_text() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{} (guest {}; {})",
            env!("CARGO_PKG_VERSION"),
            &quickcell::guest_build()[..16],
            quickcell::ENGINE_VERSIONS
        )
    })
}

#[derive(Args)]
struct InitArgs {
    /// The file to write.
    #[arg(default_value = "quickcell.toml")]
    path: PathBuf,
}

#[derive(Args)]
struct CompletionsArgs {
    /// The shell.
    shell: clap_complete::Shell,
}

/// The configuration `quickcell init` writes: every table, commented.
const STARTER_CONFIG: &str = include_str!("starter.toml");

/// `quickcell init`: writes [`STARTER_CONFIG`] to a file that must not
/// exist yet.
fn init(args: InitArgs) -> ExitCode {
    use std::io::Write as _;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&args.path);
    let written = file.and_then(|mut file| {
        file.write_all(STARTER_CONFIG.as_bytes()).inspect_err(|_| {
            // The file is ours (just created): leave no half-written config.
            let _ = std::fs::remove_file(&args.path);
        })
    });
    match written {
        Ok(()) => {
            eprintln!(
                "quickcell: wrote {}; use it with --config {}",
                args.path.display(),
                args.path.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => usage_error(format!(
            "{} exists; quickcell init does not overwrite a file",
            args.path.display()
        )),
        Err(e) => usage_error(format!("cannot write {}: {e}", args.path.display())),
    }
}

#[derive(Args)]
struct UsageArgs {
    /// Only this session's calls (default: every session).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Only calls since this time: Unix milliseconds, or an age such as
    /// `90s`, `30m`, `12h`, `7d`.
    #[arg(long, value_name = "TIME", value_parser = parse_since)]
    since: Option<u64>,
    /// Also list the latest N records (at most 10,000).
    #[arg(long, value_name = "N", default_value_t = 0)]
    records: usize,
    /// Print one JSON object instead of lines for people.
    #[arg(long)]
    json: bool,
    /// Directory of the state store.
    #[arg(long, value_name = "DIR", default_value = ".quickcell")]
    state_dir: PathBuf,
    /// PostgreSQL state store instead (also `QUICKCELL_STATE_URL`).
    #[arg(long, value_name = "URL")]
    state_url: Option<String>,
    /// Its key file (see `exec --help`).
    #[arg(long, value_name = "FILE")]
    state_key_file: Option<PathBuf>,
}

/// `--since`: Unix milliseconds, or an age (`90s`, `30m`, `12h`, `7d`)
/// before now.
fn parse_since(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let unit = text.chars().last().unwrap_or(' ');
    let number = &text[..text.len() - unit.len_utf8().min(text.len())];
    let seconds: u64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        'd' => 86_400,
        _ => {
            return Err(format!(
                "`{text}` is neither Unix milliseconds nor an age like 30m, 12h or 7d"
            ))
        }
    };
    let n: u64 = number.parse().map_err(|_| {
        format!("`{text}` is neither Unix milliseconds nor an age like 30m, 12h or 7d")
    })?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Ok(now.saturating_sub(n.saturating_mul(seconds).saturating_mul(1_000)))
}

#[derive(Args)]
struct CatalogArgs {
    /// TOML configuration file (`[[tools]]`, `[workspace]`, `[limits]`,
    /// `[mcp.servers.NAME]`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Serve the built-in read-only workspace tools over this directory.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

#[derive(Args)]
struct StateArgs {
    /// Directory of the state store that keeps parked runs, the session
    /// store and saved results.
    #[arg(long, value_name = "DIR", default_value = ".quickcell")]
    state_dir: PathBuf,
    /// PostgreSQL database that keeps them instead, shared by every host
    /// that names it (`postgres://user@host:port/db`; also
    /// `QUICKCELL_STATE_URL` or `[state] url`, which keep a password out of
    /// the process list).
    #[arg(long, value_name = "URL")]
    state_url: Option<String>,
    /// File holding the key (at least 32 bytes) that authenticates stored
    /// snapshots; required with a state URL, the same on every host (also
    /// `[state] key_file`). A state directory without one generates its own.
    #[arg(long, value_name = "FILE")]
    state_key_file: Option<PathBuf>,
    /// The session the cell belongs to: its `store`/`load` values, and the
    /// only session that may `wait` it.
    #[arg(long, value_name = "ID", default_value = "default")]
    session: String,
}

impl StateArgs {
    fn owner(&self) -> Owner {
        Owner {
            agent_run: String::new(),
            session: self.session.clone(),
        }
    }
}

#[derive(Args)]
struct WaitArgs {
    /// The run id a `waiting` result gave (`cm_…`).
    #[arg(required_unless_present = "input", conflicts_with = "input")]
    run_id: Option<String>,
    /// The whole `wait` input object of the contract (`{"runId": …}`), as
    /// JSON text, `@FILE`, or `-` for standard input.
    #[arg(long, value_name = "JSON|@FILE|-")]
    input: Option<String>,
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Args)]
struct CancelArgs {
    /// The run id a `waiting` result gave (`cm_…`).
    run_id: String,
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Args)]
struct RunArgs {
    /// The cell's source file, or `-` for standard input.
    #[arg(value_name = "FILE | -")]
    source: PathBuf,
    /// The cell's title; derived from the source when omitted.
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
    /// Print every call's raw result as one JSON line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ServeModeArg {
    Code,
    Tools,
    Directory,
}

#[derive(Args)]
struct ServeArgs {
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8765).
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// Which tools to offer: `code` (exec and wait), `tools`
    /// (tool_search, tool_describe and tool_call, no cells) or `directory`
    /// (`tools` plus a directory of host tools in the server's
    /// instructions). Default: `[tool_search] mode` when Tool Search is
    /// active in the config, else `code`.
    #[arg(long, value_enum)]
    mode: Option<ServeModeArg>,
    /// The lean profile for local-inference models (tool-search.md §2.1):
    /// for what the config leaves unset, mode `tools` and Tool Search
    /// limits 5/10.
    #[arg(long)]
    lean: bool,
    /// With --http: every request must carry `Authorization: Bearer
    /// <token>` with the token in this file (default: `[http]
    /// auth_token_file`, else the QUICKCELL_AUTH_TOKEN variable). Required
    /// for a non-loopback address.
    #[arg(long, value_name = "FILE", requires = "http")]
    auth_token_file: Option<PathBuf>,
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Args)]
struct SearchArgs {
    /// What to look for, in words.
    query: String,
    /// Most hits to return (clamped to 1–max_search_limit).
    #[arg(long, value_name = "N")]
    limit: Option<i64>,
    #[command(flatten)]
    catalog: CatalogArgs,
}

#[derive(Args)]
struct ExecArgs {
    #[command(flatten)]
    catalog: CatalogArgs,
    #[command(flatten)]
    state: StateArgs,
    /// The cell's title; derived from the source when omitted.
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
    /// The cell's JavaScript source.
    #[arg(long, value_name = "JS", conflicts_with_all = ["file", "stdin"])]
    code: Option<String>,
    /// Read the source from this file.
    #[arg(long, value_name = "PATH", conflicts_with = "stdin")]
    file: Option<PathBuf>,
    /// Read the source from standard input (`-`).
    #[arg(value_name = "-", value_parser = ["-"])]
    stdin: Option<String>,
    /// The whole `exec` input object of the contract (`title`, `code` or
    /// `command`, `restartSafe`, `awaitResults`; retired fields are
    /// rejected as the contract says), as JSON text, `@FILE`, or `-` for
    /// standard input. Replaces the source and title flags.
    #[arg(long, value_name = "JSON|@FILE|-", conflicts_with_all = ["code", "file", "stdin", "title"])]
    input: Option<String>,
}

/// Most bytes an `--input` may have: a cell's largest source, escaped in
/// JSON (`\uXXXX` is six bytes a character), with room for the other
/// fields.
const MAX_INPUT_BYTES: usize = 8 * quickcell::MAX_SOURCE_BYTES;

fn usage_error(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("quickcell: {message}");
    ExitCode::from(2)
}

/// How long the process waits, at its end, for blocking tasks still
/// running.
const RUNTIME_SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The file name Codex runs its code-mode host by: quickcell installed (or
/// linked) under it serves `codex-host`, as Codex starts it with no
/// arguments.
const CODEX_HOST_PROGRAM: &str = "codex-code-mode-host";

fn main() -> ExitCode {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let invoked_as = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_stem())
        .map(|name| name == CODEX_HOST_PROGRAM)
        .unwrap_or(false);
    if invoked_as {
        args.insert(1, "codex-host".into());
    }
    let cli = Cli::parse_from(args);
    let export = match start_otlp_export(&cli.command) {
        Ok(export) => export,
        Err(message) => {
            install_subscriber(None);
            return usage_error(message);
        }
    };
    install_subscriber(export.as_ref());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return usage_error(format!("cannot start the async runtime: {e}")),
    };
    let code = match cli.command {
        Command::Exec(args) => runtime.block_on(exec(args)),
        Command::Wait(args) => runtime.block_on(wait(args)),
        Command::Cancel(args) => runtime.block_on(cancel(args)),
        Command::Run(args) => runtime.block_on(run(args)),
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::CodexHost(args) => runtime.block_on(codex_host(args)),
        Command::Search(args) => runtime.block_on(search(args)),
        Command::Tools(args) => tools(args),
        Command::Usage(args) => runtime.block_on(usage(args)),
        Command::Init(args) => init(args),
        Command::Completions(args) => {
            clap_complete::generate(
                args.shell,
                &mut Cli::command(),
                "quickcell",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
        Command::Man => {
            match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => usage_error(format!("cannot write the manual page: {e}")),
            }
        }
    };
    // A blocking task still running (say, a write to a stdout nobody
    // reads) may not hold the process past this.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_GRACE);
    // Outside the async runtime: the exporter's client is a blocking one.
    if let Some(export) = export {
        export.shutdown();
    }
    code
}

/// Loads the config and the tool registry named by the arguments.
fn load(args: &CatalogArgs) -> Result<(Config, ToolRegistry), String> {
    let mut config = match &args.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    if let Some(dir) = &args.workspace {
        config.workspace_root = Some(dir.clone());
    }
    let registry = ToolRegistry::from_config(&config).map_err(|e| e.to_string())?;
    Ok((config, registry))
}

/// `quickcell search`: connects to the configured MCP servers too, so
/// their tools are found.
///
/// Its default and cap are those of the search it stands for: Tool
/// Search's (`[tool_search]`) when the configuration turns Tool Search on,
/// else a cell's `catalog.search` (`[limits]` `search_default_limit`,
/// `max_search_limit`).
async fn search(args: SearchArgs) -> ExitCode {
    let (config, registry) = match load(&args.catalog) {
        Ok(loaded) => loaded,
        Err(e) => return usage_error(e),
    };
    let limits = if config.tool_search.active() {
        config.tool_search.search_limits()
    } else {
        quickcell::catalog::SearchLimits {
            default_limit: config.limits.search_default_limit() as usize,
            max_limit: config.limits.max_search_limit() as usize,
        }
    };
    let runtime = match runtime_with_limits(config, registry, None, Some(limits)).await {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let mut request = serde_json::json!({ "query": args.query });
    if let Some(limit) = args.limit {
        request["limit"] = limit.into();
    }
    match runtime.catalog().tool_search(&request) {
        Ok(hits) => {
            println!("{hits}");
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(e),
    }
}

fn tools(args: CatalogArgs) -> ExitCode {
    match load(&args) {
        Ok((config, registry)) => {
            if let Err(e) = config.policy.check() {
                return usage_error(e);
            }
            println!("{}", registry.catalog_under(config.policy).directory());
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(e),
    }
}

/// Builds the runtime for a command that runs cells.
async fn build_runtime(catalog: &CatalogArgs, state: &StateArgs) -> Result<Runtime, ExitCode> {
    let (config, registry) = load(catalog).map_err(usage_error)?;
    runtime_from(config, registry, state).await
}

/// Builds the runtime from a loaded configuration and tool registry.
async fn runtime_from(
    config: Config,
    registry: ToolRegistry,
    state: &StateArgs,
) -> Result<Runtime, ExitCode> {
    runtime_with_limits(config, registry, Some(state), None).await
}

/// [`runtime_from`] for `serve`, with Tool Search's limits.
async fn runtime_with_search(
    config: Config,
    registry: ToolRegistry,
    state: &StateArgs,
    tool_search: &quickcell::ToolSearchConfig,
) -> Result<Runtime, ExitCode> {
    runtime_with_limits(
        config,
        registry,
        Some(state),
        Some(tool_search.search_limits()),
    )
    .await
}

async fn runtime_with_limits(
    config: Config,
    registry: ToolRegistry,
    state: Option<&StateArgs>,
    search_limits: Option<quickcell::catalog::SearchLimits>,
) -> Result<Runtime, ExitCode> {
    let mut builder = Runtime::builder()
        .limits(config.limits)
        .host_limits(config.host)
        .tools(registry)
        .mcp_servers(config.mcp_servers)
        .policy(config.policy)
        .quotas(config.quotas);
    if let Some(state) = state {
        // `--state-url`, else `QUICKCELL_STATE_URL`, else `[state] url`,
        // else the state directory.
        let url = state
            .state_url
            .clone()
            .or_else(|| {
                std::env::var("QUICKCELL_STATE_URL")
                    .ok()
                    .filter(|u| !u.is_empty())
            })
            .or(config.state_url);
        builder = match url {
            Some(url) => {
                if let Err(e) = quickcell::check_state_url(&url) {
                    return Err(usage_error(e));
                }
                builder.state_url(url)
            }
            None => builder.state_dir(&state.state_dir),
        };
        if let Some(path) = state
            .state_key_file
            .as_ref()
            .or(config.state_key_file.as_ref())
        {
            match quickcell::StateKey::from_file(path) {
                Ok(key) => builder = builder.state_key(key),
                Err(e) => return Err(usage_error(e.to_string())),
            }
        }
    }
    if let Some(limits) = search_limits {
        builder = builder.tool_search_limits(limits);
    }
    builder.build().await.map_err(|e| {
        eprintln!("quickcell: {}", e.chain_message());
        ExitCode::from(1)
    })
}

fn exit_status(result: &CellResult) -> ExitCode {
    match result {
        CellResult::Completed(_) => ExitCode::SUCCESS,
        CellResult::Failed(_) => ExitCode::from(1),
        CellResult::Waiting(_) => ExitCode::from(3),
    }
}

/// Prints a result; a parked cell's tool calls are settled before exit.
async fn report(
    runtime: &Runtime,
    result: CellResult,
    mut signals: tokio::task::JoinHandle<()>,
) -> ExitCode {
    println!("{}", result.to_json());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if runtime.is_shutting_down() {
        // The shutdown parked or aborted the cell; it ends the process's
        // tool calls and writes the ledger.
        let _ = signals.await;
    } else {
        if let CellResult::Waiting(_) = result {
            // Until the tool calls settle, or a signal shuts down (the
            // calls still running are then cancelled).
            tokio::select! {
                () = runtime.settle_parked_tool_calls() => {}
                _ = &mut signals => {}
            }
        }
        signals.abort();
    }
    runtime.flush_usage().await;
    exit_status(&result)
}

/// Reads a cell's source from a file or standard input (`-`), at most one
/// byte more than [`quickcell::MAX_SOURCE_BYTES`]: a longer source is a
/// usage error, and the rest is never read.
fn read_source(path: &std::path::Path) -> Result<String, ExitCode> {
    read_text(path, quickcell::MAX_SOURCE_BYTES, "the source")
}

/// An `--input` argument: JSON text, `@FILE` or `-` (standard input), at
/// most [`MAX_INPUT_BYTES`], parsed as a JSON object. Anything else is a
/// usage error; whether the object is a valid input is the contract's
/// concern (a failed result, as over MCP).
fn read_input(spec: &str) -> Result<serde_json::Value, ExitCode> {
    let text = if spec == "-" {
        read_text(Path::new("-"), MAX_INPUT_BYTES, "the input")?
    } else if let Some(path) = spec.strip_prefix('@') {
        read_text(Path::new(path), MAX_INPUT_BYTES, "the input")?
    } else if spec.len() > MAX_INPUT_BYTES {
        return Err(usage_error(format!(
            "--input is over {MAX_INPUT_BYTES} bytes, the most it may have"
        )));
    } else {
        spec.to_string()
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err(usage_error("--input must be a JSON object")),
        Err(e) => Err(usage_error(format!("--input is not JSON: {e}"))),
    }
}

/// Reads UTF-8 text from a file or standard input (`-`), at most one byte
/// more than `max`: longer is a usage error, and the rest is never read.
fn read_text(path: &Path, max: usize, what: &str) -> Result<String, ExitCode> {
    let limit = max as u64 + 1;
    let (reader, shown): (Box<dyn Read>, String) = if path.as_os_str() == "-" {
        (Box::new(std::io::stdin()), "standard input".to_string())
    } else {
        let file = std::fs::File::open(path)
            .map_err(|e| usage_error(format!("cannot read {}: {e}", path.display())))?;
        (Box::new(file), path.display().to_string())
    };
    let mut bytes = Vec::new();
    reader
        .take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| usage_error(format!("cannot read {shown}: {e}")))?;
    if bytes.len() as u64 >= limit {
        return Err(usage_error(format!(
            "{what} in {shown} is over {max} bytes, the most it may have"
        )));
    }
    String::from_utf8(bytes)
        .map_err(|e| usage_error(format!("cannot read {shown}: not UTF-8 text: {e}")))
}

async fn exec(args: ExecArgs) -> ExitCode {
    if let Some(spec) = &args.input {
        let input = match read_input(spec) {
            Ok(input) => input,
            Err(code) => return code,
        };
        let runtime = match build_runtime(&args.catalog, &args.state).await {
            Ok(r) => std::sync::Arc::new(r),
            Err(code) => return code,
        };
        let signals = shut_down_on_signal(runtime.clone());
        let result = runtime.exec_json_as(Some(args.state.owner()), &input).await;
        return report(&runtime, result, signals).await;
    }
    let source = match (&args.code, &args.file, &args.stdin) {
        (Some(code), _, _) => code.clone(),
        (None, Some(path), _) => match read_source(path) {
            Ok(s) => s,
            Err(code) => return code,
        },
        (None, None, Some(_)) => match read_source(std::path::Path::new("-")) {
            Ok(s) => s,
            Err(code) => return code,
        },
        (None, None, None) => {
            return usage_error("give the cell's source with --code JS, --file PATH or - (stdin)")
        }
    };
    let title = args
        .title
        .clone()
        .unwrap_or_else(|| quickcell::title_from_source(&source));
    let runtime = match build_runtime(&args.catalog, &args.state).await {
        Ok(r) => std::sync::Arc::new(r),
        Err(code) => return code,
    };
    let signals = shut_down_on_signal(runtime.clone());
    let input = ExecInput::new(title, source).with_owner(args.state.owner());
    let result = runtime.exec(input).await;
    report(&runtime, result, signals).await
}

async fn wait(args: WaitArgs) -> ExitCode {
    let input = match (&args.input, &args.run_id) {
        (Some(spec), _) => match read_input(spec) {
            Ok(input) => input,
            Err(code) => return code,
        },
        (None, Some(run_id)) => serde_json::json!({ "runId": run_id }),
        (None, None) => return usage_error("give the run id, or --input"),
    };
    let runtime = match build_runtime(&args.catalog, &args.state).await {
        Ok(r) => std::sync::Arc::new(r),
        Err(code) => return code,
    };
    let signals = shut_down_on_signal(runtime.clone());
    let result = runtime.wait_json_as(Some(args.state.owner()), &input).await;
    report(&runtime, result, signals).await
}

async fn cancel(args: CancelArgs) -> ExitCode {
    let runtime = match build_runtime(&args.catalog, &args.state).await {
        Ok(r) => r,
        Err(code) => return code,
    };
    let result = runtime.cancel(&args.run_id, &args.state.owner()).await;
    runtime.flush_usage().await;
    println!("{}", result.to_json());
    match &result {
        CellResult::Failed(f) if f.code == quickcell::ErrorCode::Aborted => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

async fn usage(args: UsageArgs) -> ExitCode {
    let state = StateArgs {
        state_dir: args.state_dir.clone(),
        state_url: args.state_url.clone(),
        state_key_file: args.state_key_file.clone(),
        session: "default".into(),
    };
    let runtime = match runtime_from(Config::default(), ToolRegistry::new(), &state).await {
        Ok(r) => r,
        Err(code) => return code,
    };
    let mut filter = quickcell::store::UsageFilter::all();
    if let Some(session) = &args.session {
        filter = filter.session(session.clone());
    }
    if let Some(since) = args.since {
        filter = filter.since_ms(since);
    }
    let read = async {
        let totals = runtime.usage(&filter).await?;
        let records = if args.records > 0 {
            runtime.usage_records(&filter, args.records).await?
        } else {
            Vec::new()
        };
        Ok::<_, quickcell::Error>((totals, records))
    };
    let (totals, records) = match read.await {
        Ok(read) => read,
        Err(e) => {
            eprintln!("quickcell: {}", e.chain_message());
            return ExitCode::from(1);
        }
    };
    if args.json {
        let mut out = serde_json::to_value(totals).unwrap_or_default();
        if args.records > 0 {
            out["records"] = serde_json::to_value(&records).unwrap_or_default();
        }
        println!("{out}");
    } else {
        println!(
            "calls {}\nfuel {}\nwall_ms {}\nguest_us {}\ntool_calls {}\noutput_bytes {}\nsnapshot_bytes {}",
            totals.calls,
            totals.fuel,
            totals.wall_ms,
            totals.guest_us,
            totals.tool_calls,
            totals.output_bytes,
            totals.snapshot_bytes
        );
        for r in &records {
            println!(
                "{} {} {} session={} run={} fuel={} wall_ms={} tool_calls={}",
                r.at_ms,
                r.kind,
                r.outcome,
                r.session,
                r.run_id.as_deref().unwrap_or("-"),
                r.fuel,
                r.wall_ms,
                r.tool_calls
            );
        }
    }
    ExitCode::SUCCESS
}

/// Prints one result for people: output entries, then the outcome.
fn print_human(result: &CellResult) {
    for entry in result.output() {
        match entry["type"].as_str() {
            Some("text") => println!("{}", entry["text"].as_str().unwrap_or_default()),
            _ => println!("{}", entry["value"]),
        }
    }
    match result {
        CellResult::Completed(c) => println!("=> completed: {}", c.value),
        CellResult::Waiting(w) => {
            let pending: Vec<&str> = w.pending_tool_calls.iter().map(|p| p.id.as_str()).collect();
            eprintln!("... waiting ({:?}) on {}", w.reason, pending.join(", "));
        }
        CellResult::Failed(f) => println!("=> failed ({:?}): {}", f.code, f.error),
    }
}

async fn run(args: RunArgs) -> ExitCode {
    let source = match read_source(&args.source) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let title = args
        .title
        .clone()
        .unwrap_or_else(|| quickcell::title_from_source(&source));
    let runtime = match build_runtime(&args.catalog, &args.state).await {
        Ok(r) => r,
        Err(code) => return code,
    };
    let owner = args.state.owner();
    let mut result = runtime
        .exec(ExecInput::new(title, source).with_owner(owner.clone()))
        .await;
    loop {
        if args.json {
            println!("{}", result.to_json());
        } else {
            print_human(&result);
        }
        let Some(run_id) = result.run_id() else {
            runtime.flush_usage().await;
            return exit_status(&result);
        };
        result = runtime
            .wait(WaitInput::new(run_id).with_owner(owner.clone()))
            .await;
    }
}

/// The HTTP front end's options: `[http]` from the config, the token from
/// `--auth-token-file`, `[http] auth_token_file` or `QUICKCELL_AUTH_TOKEN`.
fn http_options(args: &ServeArgs, config: &Config) -> Result<HttpOptions, String> {
    let file = args
        .auth_token_file
        .clone()
        .or_else(|| config.http.auth_token_file().map(Path::to_path_buf));
    let options = HttpOptions {
        limits: config.http.clone(),
        mcp: config.mcp.clone(),
        ..HttpOptions::default()
    };
    match file {
        Some(file) => options.with_token_file(&file),
        None => Ok(HttpOptions {
            auth_token: std::env::var("QUICKCELL_AUTH_TOKEN")
                .ok()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
            ..options
        }),
    }
}

async fn serve(args: ServeArgs) -> ExitCode {
    let (config, registry) = match load(&args.catalog) {
        Ok(loaded) => loaded,
        Err(e) => return usage_error(e),
    };
    let options = match args.http.map(|_| http_options(&args, &config)).transpose() {
        Ok(options) => options.unwrap_or_default(),
        Err(e) => return usage_error(e),
    };
    let mcp_options = config.mcp.clone();
    // Refused before the runtime is built (it compiles the guest and
    // connects to MCP servers).
    if let Some(refusal) = args.http.and_then(|addr| options.refusal(addr)) {
        return usage_error(refusal);
    }
    let mut tool_search = config.tool_search.clone();
    tool_search.lean |= args.lean;
    let mode = match (args.mode, tool_search.active()) {
        (Some(ServeModeArg::Code), _) => ServeMode::Code,
        (Some(ServeModeArg::Tools), _) => ServeMode::Tools,
        (Some(ServeModeArg::Directory), _) => ServeMode::Directory,
        (None, false) => ServeMode::Code,
        (None, true) => match tool_search.mode() {
            quickcell::ToolSearchMode::Tools => ServeMode::Tools,
            quickcell::ToolSearchMode::Directory => ServeMode::Directory,
            _ => ServeMode::Code,
        },
    };
    let runtime = match runtime_with_search(config, registry, &args.state, &tool_search).await {
        Ok(r) => std::sync::Arc::new(r),
        Err(code) => return code,
    };
    // SIGTERM or SIGINT: stop accepting, let cells finish or park (the
    // drain time), end the tool calls, write the ledger, exit 0.
    let stop_serving = tokio_util::sync::CancellationToken::new();
    let mut server = match args.http {
        Some(addr) => {
            let options = quickcell::HttpOptions {
                shutdown: stop_serving.clone(),
                ..options
            };
            tokio::spawn(runtime.clone().serve_mcp_http(addr, mode, options))
        }
        None => tokio::spawn(runtime.clone().serve_mcp_stdio_with(
            mode,
            mcp_options,
            stop_serving.clone(),
        )),
    };
    let served = tokio::select! {
        served = &mut server => served,
        () = termination_signal() => {
            let drain_ms = runtime.host_limits().drain_timeout_ms();
            eprintln!("quickcell: shutting down: cells in progress have {drain_ms} ms to finish or park");
            if args.http.is_some() {
                // No new connection; requests in progress go on.
                stop_serving.cancel();
            }
            let done = runtime.shutdown(std::time::Duration::from_millis(drain_ms)).await;
            if !done.drained {
                eprintln!("quickcell: cells still running after {drain_ms} ms were aborted");
            }
            if args.http.is_none() {
                tokio::time::sleep(STDIO_RESPONSE_GRACE).await;
                stop_serving.cancel();
            }
            match tokio::time::timeout(CLOSE_GRACE, &mut server).await {
                Ok(served) => served,
                Err(_) => Ok(Ok(())),
            }
        }
    };
    match served {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("quickcell: {}", e.chain_message());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("quickcell: the server task failed: {e}");
            ExitCode::from(1)
        }
    }
}
