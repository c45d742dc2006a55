//! The CLI's logs and OTLP span export.

use super::*;

/// Prints log events and closed spans to stderr under `RUST_LOG` (default
/// `warn`), and sends quickcell's spans (`info`) to the OTLP export when
/// there is one.
pub(super) fn install_subscriber(export: Option<&quickcell::otlp::OtlpExport>) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Each span (exec, wait, tool_call, checkpoint, restore) is printed
        // once, when it closes, with its fields and its time.
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        );
    let otlp = export.map(|export| {
        export.layer().with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target("quickcell", tracing::Level::INFO),
        )
    });
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otlp)
        .try_init();
}

/// The OTLP span export that `[telemetry] otlp_endpoint` in the command's
/// `--config`, or else the `OTEL_EXPORTER_OTLP_*` variables, ask for.
/// (A config file that does not load is reported by the command itself.)
pub(super) fn start_otlp_export(
    command: &Command,
) -> Result<Option<quickcell::otlp::OtlpExport>, String> {
    let catalog = match command {
        Command::Exec(a) => Some(&a.catalog),
        Command::Wait(a) => Some(&a.catalog),
        Command::Cancel(a) => Some(&a.catalog),
        Command::Run(a) => Some(&a.catalog),
        Command::Serve(a) => Some(&a.catalog),
        Command::CodexHost(a) => Some(&a.catalog),
        Command::Search(a) => Some(&a.catalog),
        Command::Tools(a) => Some(a),
        Command::Usage(_) | Command::Init(_) | Command::Completions(_) | Command::Man => None,
    };
    let telemetry = catalog
        .and_then(|c| c.config.as_ref())
        .and_then(|path| Config::load(path).ok())
        .map(|config| config.telemetry)
        .unwrap_or_default();
    let Some(url) = telemetry.traces_url() else {
        return Ok(None);
    };
    quickcell::otlp::OtlpExport::start(&url)
        .map(Some)
        .map_err(|e| e.to_string())
}
