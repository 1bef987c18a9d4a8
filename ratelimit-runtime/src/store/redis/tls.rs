//! TLS for `rediss://` (one server and cluster seeds): rustls with the `ring` provider, the
//! platform's roots plus a private CA, and an optional client certificate (mutual TLS).

use crate::error::StoreError;
use std::path::PathBuf;

/// Certificates for `rediss://` connections. Without any, the server is verified against the
/// platform's roots. Plain `redis://` URLs ignore them.
///
/// ```
/// use ratelimit_runtime::store::TlsConfig;
/// let tls = TlsConfig::new().ca_cert("/etc/redis/ca.pem").client_cert("/etc/redis/client.pem", "/etc/redis/client.key");
/// assert!(!tls.is_empty());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    ca_cert: Option<PathBuf>,
    client_cert: Option<(PathBuf, PathBuf)>,
}

impl TlsConfig {
    /// No private CA, no client certificate: the platform's roots verify the server.
    pub fn new() -> TlsConfig {
        TlsConfig::default()
    }

    /// Also trust the CA certificate(s) in this PEM file (for a private CA), besides the
    /// platform's roots.
    pub fn ca_cert(mut self, pem: impl Into<PathBuf>) -> TlsConfig {
        self.ca_cert = Some(pem.into());
        self
    }

    /// Present this client certificate chain and private key (PEM files) to the server: mutual
    /// TLS (`tls-auth-clients yes`).
    pub fn client_cert(mut self, cert_pem: impl Into<PathBuf>, key_pem: impl Into<PathBuf>) -> TlsConfig {
        self.client_cert = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Neither a private CA nor a client certificate.
    pub fn is_empty(&self) -> bool {
        self.ca_cert.is_none() && self.client_cert.is_none()
    }
}

/// Whether `url` asks for TLS.
pub(crate) fn is_tls_url(url: &str) -> bool {
    url.trim_start().get(..9).is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
}

/// The client for one URL: with these certificates when it is `rediss://`.
pub(crate) fn client(url: &str, tls: &TlsConfig, redacted: &str) -> Result<redis::Client, StoreError> {
    let invalid = |e: redis::RedisError| StoreError::misconfigured_by(format!("invalid Redis URL {redacted:?}"), e);
    if !is_tls_url(url) {
        if !tls.is_empty() {
            tracing::warn!(store = %redacted, "TLS certificates are configured but the URL is not rediss://: connecting without TLS");
        }
        return redis::Client::open(url).map_err(invalid);
    }
    #[cfg(feature = "tls")]
    {
        install_provider();
        match certificates(tls)? {
            Some(certs) => redis::Client::build_with_tls(url, certs).map_err(invalid),
            None => redis::Client::open(url).map_err(invalid),
        }
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = tls;
        Err(StoreError::misconfigured(format!(
            "{redacted}: rediss:// needs the `tls` feature of ratelimit (on by default)"
        )))
    }
}

/// Makes `ring` the process's rustls provider unless one is installed already: with a single
/// provider compiled in rustls picks it itself, but another crate may compile in a second.
#[cfg(feature = "tls")]
pub(crate) fn install_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The certificates redis-rs takes, read from the files now (a missing file is an error at
/// startup, naming it). `None` when there are none: redis-rs then uses the platform's roots.
#[cfg(feature = "tls")]
pub(crate) fn certificates(tls: &TlsConfig) -> Result<Option<redis::TlsCertificates>, StoreError> {
    if tls.is_empty() {
        return Ok(None);
    }
    let read = |what: &str, path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| StoreError::misconfigured_by(format!("cannot read the {what} {}", path.display()), e))
    };
    let root_cert = match &tls.ca_cert {
        None => None,
        Some(path) => {
            let mut pem = read("CA certificate (REDIS_CA_CERT)", path)?;
            if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
                return Err(StoreError::misconfigured(format!(
                    "the CA certificate {} is not a PEM file (no -----BEGIN CERTIFICATE-----)",
                    path.display()
                )));
            }
            // redis-rs trusts only the roots it is given: add the platform's to the private CA.
            pem.push(b'\n');
            for cert in rustls_native_certs::load_native_certs().certs {
                pem.extend_from_slice(&pem_block("CERTIFICATE", &cert));
            }
            Some(pem)
        }
    };
    let client_tls = match &tls.client_cert {
        None => None,
        Some((cert, key)) => Some(redis::ClientTlsConfig {
            client_cert: read("client certificate (REDIS_CLIENT_CERT)", cert)?,
            client_key: read("client key (REDIS_CLIENT_KEY)", key)?,
        }),
    };
    Ok(Some(redis::TlsCertificates { client_tls, root_cert }))
}

/// DER bytes as a PEM block.
#[cfg(feature = "tls")]
fn pem_block(label: &str, der: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n").into_bytes();
    for line in b64.as_bytes().chunks(64) {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.extend_from_slice(format!("-----END {label}-----\n").as_bytes());
    out
}

/// A hint for an error of a TLS connection, naming the likely cause: the store's own words are
/// kept and this is appended.
pub(crate) fn hint(error: &str) -> Option<&'static str> {
    let e = error.to_ascii_lowercase();
    if e.contains("unknownissuer") || e.contains("unknown issuer") {
        Some("the server's certificate is not signed by a trusted CA: set REDIS_CA_CERT (or Config::ca_cert) to the CA's PEM file")
    } else if e.contains("notvalidforname") || e.contains("not valid for name") {
        Some("the server's certificate does not name the host in the URL")
    } else if e.contains("expired") && e.contains("certificate") {
        Some("the server's certificate has expired")
    } else if e.contains("certificate required") || e.contains("certificaterequired") {
        Some("the server requires a client certificate: set REDIS_CLIENT_CERT and REDIS_CLIENT_KEY")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_urls() {
        assert!(is_tls_url("rediss://h:6380"));
        assert!(is_tls_url("REDISS://h"));
        assert!(!is_tls_url("redis://h"));
        assert!(!is_tls_url("redis"));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn pem_blocks_are_base64() {
        let pem = String::from_utf8(pem_block("CERTIFICATE", b"Man Ma M")).unwrap();
        assert_eq!(pem, "-----BEGIN CERTIFICATE-----\nTWFuIE1hIE0=\n-----END CERTIFICATE-----\n");
        let pem = String::from_utf8(pem_block("X", b"Ma")).unwrap();
        assert!(pem.contains("\nTWE=\n"));
    }
}
