//! `quickcell codex-host`: Codex's code-mode host protocol on stdio.

use super::*;

#[derive(Args)]
pub(super) struct CodexHostArgs {
    /// Keep sessions in the state store under this name: a host started
    /// again with the same scope answers `session/wait` for the cells of a
    /// session opened again under its id, and cells waiting on Codex stay
    /// parked when it closes stdin. Without it, sessions end with the
    /// connection.
    #[arg(long, value_name = "NAME")]
    pub(super) scope: Option<String>,
    /// Leave `code_mode_host_duration_ns` out of runtime responses, for
    /// Codex releases up to 0.151, which refuse it (later ones require it).
    #[arg(long)]
    pub(super) no_host_duration: bool,
    /// What Codex passes when it wants its gRPC transport
    /// (`--listen grpc+stdio://`), which quickcell does not speak: refused
    /// with the setting that turns it off.
    #[arg(long, hide = true, value_name = "URL")]
    pub(super) listen: Option<String>,
    #[command(flatten)]
    pub(super) catalog: CatalogArgs,
    #[command(flatten)]
    pub(super) state: StateArgs,
}

/// `quickcell codex-host`: the Codex code-mode host protocol on stdio,
/// until Codex closes stdin or a SIGTERM/SIGINT (which parks or ends the
/// cells in progress, as `serve` does).
pub(super) async fn codex_host(args: CodexHostArgs) -> ExitCode {
    if let Some(url) = &args.listen {
        eprintln!(
            "quickcell: codex-host speaks Codex's framed-JSON code-mode protocol on stdio, not its gRPC transport (`--listen {url}`): set `code_mode_host_grpc = false` under `[features]` in Codex's config.toml"
        );
        return ExitCode::from(2);
    }
    let runtime = match build_runtime(&args.catalog, &args.state).await {
        Ok(r) => std::sync::Arc::new(r),
        Err(code) => return code,
    };
    let mut options = quickcell::CodexOptions::default().with_host_duration(!args.no_host_duration);
    if let Some(scope) = args.scope {
        options = options.with_scope(scope);
    }
    let served = quickcell::serve_codex(
        runtime.clone(),
        options,
        tokio::io::stdin(),
        tokio::io::stdout(),
    );
    let result = tokio::select! {
        served = served => served,
        () = termination_signal() => {
            let drain_ms = runtime.host_limits().drain_timeout_ms();
            runtime.shutdown(std::time::Duration::from_millis(drain_ms)).await;
            Ok(())
        }
    };
    runtime.flush_usage().await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickcell: the Codex connection failed: {e}");
            ExitCode::from(1)
        }
    }
}
