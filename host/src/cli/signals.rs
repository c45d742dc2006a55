//! Graceful shutdown of the command line: SIGTERM and SIGINT
//! ([`quickcell::Runtime::shutdown`], `[host] drain_timeout_ms`).

use quickcell::Runtime;

/// Resolves at the first SIGTERM or SIGINT (never, when the handlers
/// cannot be installed).
pub(crate) async fn termination_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => std::future::pending().await,
        }
    }
    #[cfg(not(unix))]
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Shuts `runtime` down gracefully at SIGTERM or SIGINT
/// ([`Runtime::shutdown`], `[host] drain_timeout_ms`); the task ends when
/// the shutdown has.
pub(crate) fn shut_down_on_signal(runtime: std::sync::Arc<Runtime>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        termination_signal().await;
        let drain_ms = runtime.host_limits().drain_timeout_ms();
        eprintln!(
            "quickcell: shutting down: cells in progress have {drain_ms} ms to finish or park"
        );
        let done = runtime
            .shutdown(std::time::Duration::from_millis(drain_ms))
            .await;
        if !done.drained {
            eprintln!("quickcell: cells still running after {drain_ms} ms were aborted");
        }
    })
}

/// How long a server that has shut its runtime down waits for the open
/// connections to deliver the last results (an open SSE stream would
/// keep it forever).
pub(crate) const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long `serve` over stdio lets the last results reach stdout once
/// the runtime has shut down, before it stops serving.
pub(crate) const STDIO_RESPONSE_GRACE: std::time::Duration = std::time::Duration::from_millis(250);
