//! The crypto provider behind quickcell's TLS: rustls with ring.
//!
//! reqwest (the MCP client's HTTP transport, the OTLP exporter) is built
//! without a provider of its own and takes rustls's process-wide default,
//! which [`install_default_provider`] sets before the first client is made.
//! An embedder that installed a provider first (aws-lc-rs, a FIPS build)
//! keeps it: quickcell uses whatever default is installed.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// Makes ring rustls's process-wide default provider, unless the process
/// has one already. Cheap and idempotent: call it before building a client.
pub(crate) fn install_default_provider() {
    if CryptoProvider::get_default().is_none() {
        // A concurrent installer may win the race; either provider is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The process's default provider (installing ring if there is none).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn provider() -> Arc<CryptoProvider> {
    install_default_provider();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}
