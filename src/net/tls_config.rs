//! [`TlsConfig`]: what a `rediss://` connection trusts and presents. Plain data (paths and a flag): it exists in
//! every build, and the files are read when the connections are set up, so that a build without the `tls`
//! feature can still name it (and refuses `rediss://` nodes with a message saying why).

use std::path::{Path, PathBuf};

/// TLS settings for the `rediss://` nodes of a lock manager (or fanout): which certificate authorities to trust,
/// which certificate to present, and, for tests only, whether to skip verification. Plain `redis://` nodes
/// ignore it.
///
/// By default a node's certificate is verified against the platform's root certificates (the system's bundle,
/// honouring `SSL_CERT_FILE`), and its name must match the host of the node's URL (a DNS name, or an IP address
/// among the certificate's subject alternative names). Self-hosted Redis usually has a private CA: give it with
/// [`with_ca_file`](TlsConfig::with_ca_file). Redis asks clients for a certificate by default
/// (`tls-auth-clients yes`): give one with [`with_client_cert`](TlsConfig::with_client_cert).
///
/// # Examples
///
/// ```
/// use muxlock::{Config, TlsConfig};
///
/// let tls = TlsConfig::new()
///     .with_ca_file("/etc/redis/tls/ca.crt")
///     .with_client_cert("/etc/muxlock/client.crt", "/etc/muxlock/client.key");
/// let config = Config::default().with_tls(tls);
/// assert!(config.tls().ca_file().is_some());
/// // Nodes then use `rediss://` URLs: LockManager::builder().nodes(["rediss://10.0.0.1:6379", ...]).config(config)
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TlsConfig {
    ca_file: Option<PathBuf>,
    client_cert: Option<(PathBuf, PathBuf)>,
    dangerous_no_verification: bool,
}

impl TlsConfig {
    /// The defaults: the platform's roots, no client certificate, verification on.
    pub fn new() -> TlsConfig {
        TlsConfig::default()
    }

    /// Trusts the certificate authorities in this PEM file (one or more `CERTIFICATE` blocks) *instead of* the
    /// platform's roots (default: the platform's roots). The file is read when the lock manager is built: a
    /// missing or empty file is a configuration error then.
    #[must_use]
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> TlsConfig {
        self.ca_file = Some(path.into());
        self
    }

    /// Presents this client certificate (a PEM chain, leaf first) with its private key (PEM: PKCS#8, PKCS#1 or
    /// SEC1) to nodes that ask for one (default none). Redis asks by default (`tls-auth-clients yes`) and refuses
    /// clients without one.
    #[must_use]
    pub fn with_client_cert(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> TlsConfig {
        self.client_cert = Some((cert.into(), key.into()));
        self
    }

    /// **Dangerous, for tests only**: accepts any certificate from any node, so that anyone on the path can read
    /// and change the traffic, passwords included (default off). The traffic is still encrypted. A single node
    /// can be made to skip verification with the `#insecure` URL fragment instead (`rediss://host:port#insecure`,
    /// as redis-rs spells it).
    #[must_use]
    pub fn with_dangerous_no_verification(mut self, skip: bool) -> TlsConfig {
        self.dangerous_no_verification = skip;
        self
    }

    /// The value of [`with_ca_file`](TlsConfig::with_ca_file).
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// The value of [`with_client_cert`](TlsConfig::with_client_cert): the certificate's path, then the key's.
    pub fn client_cert(&self) -> Option<(&Path, &Path)> {
        self.client_cert
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path()))
    }

    /// The value of [`with_dangerous_no_verification`](TlsConfig::with_dangerous_no_verification).
    pub fn dangerous_no_verification(&self) -> bool {
        self.dangerous_no_verification
    }
}
