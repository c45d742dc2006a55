//! The `quickcell` command-line interface.

use clap::{Args, Parser, Subcommand};
use quickcell::{CellResult, Config, ExecInput, Runtime, ToolRegistry};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

/// Runs model-written JavaScript cells in QuickJS on Wasmtime.
#[derive(Parser)]
#[command(name = "quickcell", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs one cell and prints the result as one line of compact JSON.
    /// Exit status: 0 completed, 1 failed, 2 usage or configuration error.
    Exec(ExecArgs),
    /// Searches the tool catalog and prints the ranked hits as JSON.
    Search(SearchArgs),
    /// Prints the directory of deferred tools (names and descriptions).
    Tools(CatalogArgs),
}

#[derive(Args)]
struct CatalogArgs {
    /// TOML configuration file (`[[tools]]`, `[workspace]`, `[limits]`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Serve the built-in read-only workspace tools over this directory.
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
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
}

fn usage_error(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("quickcell: {message}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return usage_error(format!("cannot start the async runtime: {e}")),
    };
    match cli.command {
        Command::Exec(args) => runtime.block_on(exec(args)),
        Command::Search(args) => search(args),
        Command::Tools(args) => tools(args),
    }
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

fn search(args: SearchArgs) -> ExitCode {
    let (_, registry) = match load(&args.catalog) {
        Ok(x) => x,
        Err(e) => return usage_error(e),
    };
    let mut request = serde_json::json!({ "query": args.query });
    if let Some(limit) = args.limit {
        request["limit"] = limit.into();
    }
    match registry.catalog().tool_search(&request) {
        Ok(hits) => {
            println!("{hits}");
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(e),
    }
}

fn tools(args: CatalogArgs) -> ExitCode {
    match load(&args) {
        Ok((_, registry)) => {
            println!("{}", registry.catalog().directory());
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(e),
    }
}

async fn exec(args: ExecArgs) -> ExitCode {
    let (config, registry) = match load(&args.catalog) {
        Ok(x) => x,
        Err(e) => return usage_error(e),
    };
    let source = match (&args.code, &args.file, &args.stdin) {
        (Some(code), _, _) => code.clone(),
        (None, Some(path), _) => match std::fs::read_to_string(path) {
            Ok(s) => s,
            Err(e) => return usage_error(format!("cannot read {}: {e}", path.display())),
        },
        (None, None, Some(_)) => {
            let mut s = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut s) {
                return usage_error(format!("cannot read standard input: {e}"));
            }
            s
        }
        (None, None, None) => {
            return usage_error("give the cell's source with --code JS, --file PATH or - (stdin)")
        }
    };
    let title = args
        .title
        .clone()
        .unwrap_or_else(|| quickcell::title_from_source(&source));
    let runtime = match Runtime::builder()
        .limits(config.limits)
        .tools(registry)
        .build()
        .await
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("quickcell: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.exec(ExecInput::new(title, source)).await;
    println!("{}", result.to_json());
    match result {
        CellResult::Completed(_) => ExitCode::SUCCESS,
        CellResult::Failed(_) => ExitCode::from(1),
    }
}
