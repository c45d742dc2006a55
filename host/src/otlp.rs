//! OpenTelemetry export of quickcell's tracing spans over OTLP/HTTP
//! (operations.md §4.4): the `exec`, `wait`, `tool_call`, `checkpoint` and
//! `restore` spans with their fields, as OpenTelemetry spans with parents
//! (a cell's tool calls are children of its `exec`), posted as protobuf to
//! an OTLP receiver by a background thread in batches.
//!
//! The `quickcell` binary installs it when `[telemetry] otlp_endpoint` or
//! the standard `OTEL_EXPORTER_OTLP_*` variables name a receiver
//! ([`crate::TelemetryConfig::traces_url`]); an embedder adds
//! [`OtlpExport::layer`] to its own `tracing` subscriber.
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt as _;
//! let export = quickcell::otlp::OtlpExport::start("http://127.0.0.1:4318/v1/traces")?;
//! let subscriber = tracing_subscriber::registry().with(export.layer());
//! tracing::subscriber::set_global_default(subscriber)?;
//! // ... run cells ...
//! export.shutdown(); // flushes what is buffered
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::time::Duration;

/// How long one export request may take before it is abandoned.
pub const OTLP_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`OtlpExport::shutdown`] waits for the last batch.
pub const OTLP_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// A running OTLP span export. Build it outside any async runtime (its
/// HTTP client is a blocking one, driven by the exporter's own thread).
pub struct OtlpExport {
    provider: SdkTracerProvider,
}

impl OtlpExport {
    /// Starts exporting to `traces_url` (the full URL, e.g.
    /// `http://collector:4318/v1/traces`). The service name is
    /// `OTEL_SERVICE_NAME`, or `quickcell`.
    ///
    /// # Errors
    ///
    /// When the URL is not an `http://` or `https://` URL, or the exporter
    /// cannot be built.
    pub fn start(traces_url: &str) -> Result<Self, crate::Error> {
        crate::config::check_otlp_endpoint(traces_url).map_err(crate::Error::Config)?;
        crate::tls::install_default_provider();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(traces_url)
            .with_timeout(OTLP_EXPORT_TIMEOUT)
            .build()
            .map_err(|e| crate::Error::Config(format!("cannot export to {traces_url}: {e}")))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("quickcell");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        Ok(Self { provider })
    }

    /// The `tracing` layer that turns spans into OpenTelemetry spans for
    /// this export.
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("quickcell"))
    }

    /// Exports what is buffered (waiting at most
    /// [`OTLP_SHUTDOWN_TIMEOUT`]) and stops. Call it outside any async
    /// runtime, before the process exits.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(OTLP_SHUTDOWN_TIMEOUT) {
            eprintln!("quickcell: the OTLP export did not finish: {e}");
        }
    }
}

/// Makes `span` a child of the W3C trace context `traceparent` (with its
/// `tracestate`): an MCP request's `_meta` carries them. A malformed or
/// over-long value is ignored.
pub(crate) fn set_remote_parent(span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
    use opentelemetry::propagation::TextMapPropagator as _;
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let max = crate::input::MAX_TRACE_CONTEXT_BYTES;
    if traceparent.len() > max || tracestate.is_some_and(|s| s.len() > max) {
        return;
    }
    let mut carrier = std::collections::HashMap::new();
    carrier.insert("traceparent".to_string(), traceparent.to_string());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_string(), state.to_string());
    }
    let context = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    if context.span().span_context().is_valid() {
        let _ = span.set_parent(context);
    }
}
