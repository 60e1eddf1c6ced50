//! Which nodes a command talks to, and the lock manager over them.
//!
//! In order: `--nodes URL,...`, else `$MUXLOCK_NODES`, else the local cluster of `muxlock cluster up` if it is
//! running, else an error that says what to do. The local cluster of `cluster up --tls` brings its CA and client
//! certificate: they are used where `--tls-ca`, `--tls-cert`/`--tls-key` are not given. `$MUXLOCK_PASSWORD` is the password of every given URL that has
//! none (it is not applied to the local cluster, whose nodes have no password); it is read from the environment
//! only, never from the command line, and never shown.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use muxlock::{Config, LockManager, NodeAddr, TlsConfig};

use crate::duration;
use crate::exit::{self, CliError};
use crate::state::{self, TlsFiles};

/// On or off. (No doc comments on the variants: clap would list them as a table of "On"/"Off".)
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Toggle {
    On,
    Off,
}

/// The connection options of every command that talks to the nodes. Only `--nodes` is in the short help (`-h`);
/// the others are in `--help`. No variable's value is shown in either (`hide_env_values`: a password may be in
/// one, and clap would show an unset one as `NAME=`).
#[derive(Args, Clone)]
pub struct Conn {
    /// The Redis masters, comma-separated URLs.
    ///
    /// Each is host:port, redis://host:port, redis://:password@host:port/db, redis://user:password@host:port (an
    /// ACL user) or rediss://... (TLS: see --tls-ca), with ?protocol=resp3 for RESP3. Default: the local cluster of
    /// `muxlock cluster up`, if one is running. The password may instead come from MUXLOCK_PASSWORD.
    #[arg(
        long,
        env = "MUXLOCK_NODES",
        hide_env_values = true,
        value_delimiter = ',',
        value_name = "URL,..."
    )]
    pub nodes: Vec<String>,

    /// How long one round waits for the nodes' replies.
    ///
    /// `status` does not count connecting: it first waits for its connections (TCP, TLS, set-up) for up to the 1 s
    /// connect timeout; the other commands' first round also connects. The CLI's default is 200ms, where the
    /// library's is 50ms: a command connects afresh to every node on each run, and often across a network; the
    /// guard's margin (and so when SIGTERM and SIGKILL come under `exec`) is at least two round timeouts, and a
    /// fenced acquisition's token must be written back a round timeout before the lease ends. A unit is required
    /// (500ms, 1s).
    #[arg(
        long,
        hide_short_help = true,
        env = "MUXLOCK_ROUND_TIMEOUT",
        hide_env_values = true,
        value_name = "DUR",
        default_value = "200ms",
        value_parser = round_timeout
    )]
    pub round_timeout: Duration,

    /// The restart-aware quorum: a node that restarted less than the lease ago does not vote.
    ///
    /// Turn it off only for nodes that persist every write (appendfsync always), or when a lost lock is
    /// acceptable.
    #[arg(
        long,
        hide_short_help = true,
        env = "MUXLOCK_RESTART_GUARD",
        hide_env_values = true,
        value_enum,
        value_name = "on|off",
        default_value = "on"
    )]
    pub restart_guard: Toggle,

    /// The restart guard's least window: a node up less than this (or than the lease, if longer) does not vote.
    ///
    /// Set it to the longest lease that any client of these nodes takes or extends to: a node that restarted
    /// may have forgotten a lock as long as that lock's lease runs, and a client with shorter leases than
    /// another's would otherwise count that node too early. A lease longer than the window is said on stderr.
    /// Default: the lease of the command. A unit is required (5m, 1h).
    #[arg(
        long,
        hide_short_help = true,
        env = "MUXLOCK_RESTART_WINDOW",
        hide_env_values = true,
        value_name = "DUR",
        value_parser = restart_window
    )]
    pub restart_window: Option<Duration>,

    /// For rediss:// nodes: the CA certificate(s), PEM, that the nodes' certificates must chain to.
    ///
    /// Default: the local cluster's CA when its nodes are used (cluster up --tls), else the platform's roots
    /// (honouring SSL_CERT_FILE).
    #[arg(
        long,
        env = "MUXLOCK_TLS_CA",
        hide_env_values = true,
        hide_short_help = true,
        value_name = "FILE"
    )]
    pub tls_ca: Option<PathBuf>,

    /// For rediss:// nodes: a client certificate (PEM) to present, with --tls-key.
    ///
    /// Redis asks for one by default (tls-auth-clients). Default: the local cluster's, when its nodes are used.
    #[arg(
        long,
        env = "MUXLOCK_TLS_CERT",
        hide_env_values = true,
        hide_short_help = true,
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        env = "MUXLOCK_TLS_KEY",
        hide_env_values = true,
        hide_short_help = true,
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
}

fn round_timeout(s: &str) -> Result<Duration, String> {
    match duration::parse(s)? {
        d if d.is_zero() => Err("the round timeout must be more than zero".into()),
        d => Ok(d),
    }
}

fn restart_window(s: &str) -> Result<Duration, String> {
    match duration::parse(s)? {
        d if d > Config::MAX_TTL => Err(format!("{s:?} is longer than the longest lease, a year")),
        d => Ok(d),
    }
}

impl Conn {
    /// A note on stderr when `ttl` is longer than the `--restart-window` given: every client of the nodes
    /// should count a restarted node only after the longest lease any of them takes, and this one's is longer
    /// than the window the others were told. (This command itself waits for the longer of the two.)
    pub fn note_lease(&self, ttl: Duration) {
        if let (Toggle::On, Some(window)) = (self.restart_guard, self.restart_window) {
            if ttl > window {
                crate::output::note(&format!(
                    "the lease ({}) is longer than --restart-window ({}): this command counts a restarted node \
                     only after {}, but a client with the {} window counts one that may have forgotten this lock; \
                     set --restart-window (MUXLOCK_RESTART_WINDOW) to at least {} on every client of these nodes",
                    duration::human(ttl),
                    duration::human(window),
                    duration::human(ttl),
                    duration::human(window),
                    duration::human(ttl),
                ));
            }
        }
    }

    /// The URLs to use, with `$MUXLOCK_PASSWORD` applied to given URLs without a password.
    ///
    /// # Errors
    ///
    /// [`exit::CONFIG`] for an invalid URL (its password hidden), or no nodes at all;
    /// [`exit::UNAVAILABLE`] when the local cluster is recorded but none of its nodes runs.
    pub fn urls(&self) -> Result<Vec<String>, CliError> {
        Ok(self.target()?.0)
    }

    /// [`urls`](Conn::urls), and the TLS files of the local cluster when the URLs are its nodes'.
    fn target(&self) -> Result<(Vec<String>, Option<TlsFiles>), CliError> {
        let given: Vec<&str> = self
            .nodes
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect();
        if !given.is_empty() {
            let password = std::env::var("MUXLOCK_PASSWORD")
                .ok()
                .filter(|p| !p.is_empty());
            let urls = given
                .iter()
                .enumerate()
                .map(|(i, url)| with_password(i, url, password.as_deref()))
                .collect::<Result<_, _>>()?;
            return Ok((urls, None));
        }
        let dir = state::dir()?;
        match state::load(&dir)? {
            Some(cluster) => {
                let urls = cluster.live_urls();
                if urls.is_empty() {
                    return Err(CliError::new(
                        exit::UNAVAILABLE,
                        "unavailable",
                        format!(
                            "the local cluster recorded in {} is not running (none of its {} nodes is): run \
                             `muxlock cluster down` to clear the record, then `muxlock cluster up`",
                            state::describe(&dir),
                            cluster.nodes.len()
                        ),
                    ));
                }
                Ok((urls, cluster.tls))
            }
            None => Err(CliError::config(
                "no nodes: give --nodes redis://host:port,... (or set MUXLOCK_NODES), or start a local cluster \
                 with `muxlock cluster up`",
            )),
        }
    }

    /// A lock manager over [`urls`](Conn::urls) making `retry_count` further attempts after a failed one.
    ///
    /// It connects in the background: a round made at once counts the connecting (a TLS handshake, the set-up)
    /// against the round timeout. `status` waits for the connections first (`wait_connected`); the lock commands
    /// do not yet: after the wait, a node down is being redialled when their round decides and is reported
    /// "not awaited", which changes which cause their headline names (`verdict.rs`).
    ///
    /// # Errors
    ///
    /// As [`urls`](Conn::urls), and [`exit::CONFIG`] for a configuration the library refuses (the same node twice).
    pub fn manager(&self, retry_count: u32) -> Result<LockManager, CliError> {
        let (urls, recorded) = self.target()?;
        let conn = self.clone().with_cluster_tls(recorded.as_ref());
        let config = Config::default()
            .with_retry_count(retry_count)
            .with_round_timeout(self.round_timeout)
            .with_restart_guard(self.restart_guard == Toggle::On)
            .with_restart_window(self.restart_window.unwrap_or_default())
            .with_tls(conn.tls());
        Ok(LockManager::builder().nodes(urls).config(config).build()?)
    }
}

impl Conn {
    /// These options with the local TLS cluster's CA, client certificate and key where none is given (a given
    /// `--tls-ca`, or `--tls-cert` with `--tls-key`, wins).
    pub fn with_cluster_tls(mut self, files: Option<&TlsFiles>) -> Conn {
        if let Some(files) = files {
            if self.tls_ca.is_none() {
                self.tls_ca = Some(files.ca.clone());
            }
            if self.tls_cert.is_none() {
                self.tls_cert = Some(files.client_cert.clone());
                self.tls_key = Some(files.client_key.clone());
            }
        }
        self
    }

    /// The TLS settings of `--tls-ca`, `--tls-cert` and `--tls-key` (plain `redis://` nodes ignore them).
    fn tls(&self) -> TlsConfig {
        let mut tls = TlsConfig::new();
        if let Some(ca) = &self.tls_ca {
            tls = tls.with_ca_file(ca);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            tls = tls.with_client_cert(cert, key);
        }
        tls
    }
}

/// `url` (the `i`th given), checked, with `password` put in if it has none.
fn with_password(i: usize, url: &str, password: Option<&str>) -> Result<String, CliError> {
    let addr: NodeAddr = url.parse().map_err(|e: muxlock::AddrError| {
        // The address itself is not repeated: a mistyped URL may carry its password where the parser does not
        // expect one.
        CliError::config(format!(
            "node {} of --nodes/MUXLOCK_NODES is not a valid address: {}",
            i + 1,
            e.reason()
        ))
    })?;
    Ok(match (addr.password(), password) {
        (None, Some(password)) => url_with_password(&addr, password),
        _ => url.to_owned(),
    })
}

/// The URL of `addr` with `password` in it, %-escaped.
fn url_with_password(addr: &NodeAddr, password: &str) -> String {
    let host = if addr.host().contains(':') {
        format!("[{}]", addr.host())
    } else {
        addr.host().to_owned()
    };
    let mut url = format!("redis://:{}@{host}:{}", escape(password), addr.port());
    if let Some(db) = addr.db() {
        url.push_str(&format!("/{db}"));
    }
    if addr.resp3() {
        url.push_str("?protocol=resp3");
    }
    url
}

/// %-escapes everything but RFC 3986's unreserved characters.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_goes_into_urls_without_one() {
        let url = with_password(0, "127.0.0.1:7000", Some("p@ss:w/rd%")).unwrap();
        let addr: NodeAddr = url.parse().unwrap();
        assert_eq!((addr.host(), addr.port()), ("127.0.0.1", 7000));
        assert_eq!(addr.password(), Some("p@ss:w/rd%"));
        let url = with_password(0, "redis://[::1]:7000/3?protocol=resp3", Some("x")).unwrap();
        let addr: NodeAddr = url.parse().unwrap();
        assert_eq!(
            (addr.host(), addr.db(), addr.resp3(), addr.password()),
            ("::1", Some(3), true, Some("x"))
        );
        // A URL's own password wins.
        let url = with_password(0, "redis://:mine@h:1", Some("env")).unwrap();
        assert_eq!(url.parse::<NodeAddr>().unwrap().password(), Some("mine"));
        assert_eq!(with_password(0, "h:1", None).unwrap(), "h:1");
    }

    #[test]
    fn a_bad_url_is_named_by_position_not_echoed() {
        let e = with_password(1, "redis://:topsecret@h:99999", None).unwrap_err();
        assert_eq!(e.code, exit::CONFIG);
        assert!(
            e.message.contains("node 2") && e.message.contains("port"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("topsecret"), "{}", e.message);
    }
}
