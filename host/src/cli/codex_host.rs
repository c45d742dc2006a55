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
    #[command(flatten)]
    pub(super) catalog: CatalogArgs,
    #[command(flatten)]
    pub(super) state: StateArgs,
}

/// `quickcell codex-host`: the Codex code-mode host protocol on stdio,
/// until Codex closes stdin or a SIGTERM/SIGINT (which parks or ends the
/// cells in progress, as `serve` does).
pub(super) async fn codex_host(args: CodexHostArgs) -> ExitCode {
    let runtime = match build_runtime(&args.catalog, &args.state).await {
        Ok(r) => std::sync::Arc::new(r),
        Err(code) => return code,
    };
    let options = match args.scope {
        Some(scope) => quickcell::CodexOptions::default().with_scope(scope),
        None => quickcell::CodexOptions::default(),
    };
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
