//! Connection settings: the URL's `sslrootcert`, the TLS connector, and
//! URLs with their password redacted for messages.

use super::*;

/// `url` without its `sslrootcert` parameter (which tokio-postgres does not
/// know), and the path that parameter names. Only the URL form carries it.
pub(super) fn split_root_cert(url: &str) -> anyhow::Result<(String, Option<std::path::PathBuf>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), None));
    };
    let mut kept = Vec::new();
    let mut root_cert = None;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("sslrootcert", path)) => {
                let path = percent_encoding::percent_decode_str(path)
                    .decode_utf8()
                    .context("the URL's sslrootcert is not UTF-8")?;
                root_cert = Some(std::path::PathBuf::from(path.into_owned()));
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, root_cert))
}

/// The TLS connector: server certificates verified against the CA file
/// `root_cert`, or the system's roots.
pub(super) fn tls_connector(
    root_cert: Option<&std::path::Path>,
) -> anyhow::Result<tokio_postgres_rustls::MakeRustlsConnect> {
    use rustls::pki_types::{pem::PemObject as _, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    match root_cert {
        Some(path) => {
            use std::io::Read as _;
            let unreadable = |e: std::io::Error| {
                anyhow::anyhow!(
                    "cannot read the CA file {} (sslrootcert): {e}",
                    path.display()
                )
            };
            let mut pem = Vec::new();
            std::fs::File::open(path)
                .map_err(unreadable)?
                .take(MAX_POSTGRES_CA_FILE_BYTES as u64 + 1)
                .read_to_end(&mut pem)
                .map_err(unreadable)?;
            if pem.len() > MAX_POSTGRES_CA_FILE_BYTES {
                anyhow::bail!(
                    "the CA file {} (sslrootcert) is over {MAX_POSTGRES_CA_FILE_BYTES} bytes",
                    path.display()
                );
            }
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| {
                    anyhow::anyhow!("the CA file {} (sslrootcert): {e}", path.display())
                })?;
                roots.add(cert).map_err(|e| {
                    anyhow::anyhow!("the CA file {} (sslrootcert): {e}", path.display())
                })?;
            }
            if roots.is_empty() {
                anyhow::bail!(
                    "the CA file {} (sslrootcert) holds no PEM certificate",
                    path.display()
                );
            }
        }
        None => {
            let (added, _) =
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            tracing::debug!(added, "system CA certificates for the state store");
        }
    }
    let provider = crate::tls::provider();
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS for the state store")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The URL without its password, for messages.
pub(super) fn redacted(url: &str) -> String {
    match url.parse::<tokio_postgres::Config>() {
        Ok(config) => {
            let host = config
                .get_hosts()
                .first()
                .map(|h| match h {
                    tokio_postgres::config::Host::Tcp(name) => name.clone(),
                    tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
                })
                .unwrap_or_default();
            let port = config.get_ports().first().copied().unwrap_or(5432);
            let db = config.get_dbname().unwrap_or("");
            format!("postgres://{host}:{port}/{db}")
        }
        Err(_) => "the PostgreSQL URL".into(),
    }
}
