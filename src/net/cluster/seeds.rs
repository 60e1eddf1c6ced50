//! A Redlock member that is a Redis Cluster, as a URL: `redis+cluster://[user:password@]host:port,host:port,...`
//! (`rediss+cluster://` for TLS), the nodes to read the slot map from (its *seeds*).
//!
//! The rest of the URL is a node URL's (`NodeAddr`): credentials with `%XX` escapes, `?protocol=resp3`,
//! `#insecure` after `rediss+cluster://` (tests only), the port 6379 when omitted. They apply to every seed and
//! to every node the slot map names. A cluster has database 0 only, so a path other than `/0` is refused; so are
//! an empty seed (`h:1,,h:2`) and a seed given twice.

use std::fmt;
use std::str::FromStr;

use crate::net::{AddrError, NodeAddr};

/// A cluster's seed nodes, sharing credentials, TLS and protocol.
///
/// # Examples
///
/// ```
/// use muxlock::net::cluster::ClusterAddr;
///
/// let member: ClusterAddr = "redis+cluster://locker:s3cret@10.0.0.1:7000,10.0.0.2:7000,[::1]:7001".parse()?;
/// let seeds = member.seeds();
/// assert_eq!(seeds.len(), 3);
/// assert_eq!((seeds[2].host(), seeds[2].port()), ("::1", 7001));
/// assert!(seeds.iter().all(|s| s.password() == Some("s3cret")));
/// assert_eq!(member.to_string(), "redis+cluster://locker:***@10.0.0.1:7000,10.0.0.2:7000,[::1]:7001");
/// # Ok::<(), muxlock::net::AddrError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClusterAddr {
    /// At least one; no two alike.
    seeds: Vec<NodeAddr>,
}

impl ClusterAddr {
    /// A cluster reached through `seeds`, which carry their own credentials and options.
    ///
    /// # Errors
    /// If `seeds` is empty, names a node twice, or names a database other than 0.
    pub fn new(seeds: Vec<NodeAddr>) -> Result<ClusterAddr, AddrError> {
        let shown = || {
            seeds
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        if seeds.is_empty() {
            return Err(AddrError::new("", "a cluster needs at least one seed node"));
        }
        if has_duplicate(&seeds) {
            return Err(AddrError::new(&shown(), "a seed is given twice"));
        }
        if seeds.iter().any(|s| s.db().is_some_and(|db| db != 0)) {
            return Err(AddrError::new(&shown(), "a cluster has database 0 only"));
        }
        Ok(ClusterAddr { seeds })
    }

    /// The seed nodes, in the order given.
    pub fn seeds(&self) -> &[NodeAddr] {
        &self.seeds
    }

    /// A node of this cluster at `host:port` (named by a slot map or a redirection), with the seeds' credentials,
    /// TLS and protocol.
    pub fn node(&self, host: &str, port: u16) -> NodeAddr {
        let first = &self.seeds[0];
        let mut node = NodeAddr::new(host, port)
            .with_tls(first.tls())
            .with_insecure(first.insecure())
            .with_resp3(first.resp3());
        if let Some(password) = first.password() {
            node = node.with_auth(first.username(), password);
        }
        node
    }
}

fn has_duplicate(seeds: &[NodeAddr]) -> bool {
    seeds.iter().enumerate().any(|(i, a)| {
        seeds[..i]
            .iter()
            .any(|b| (a.host(), a.port()) == (b.host(), b.port()))
    })
}

impl FromStr for ClusterAddr {
    type Err = AddrError;

    fn from_str(input: &str) -> Result<ClusterAddr, AddrError> {
        let bad = |reason| AddrError::new(input, reason);
        let s = input.trim();
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| bad("a cluster is redis+cluster://host:port,host:port"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "redis+cluster" => false,
            "rediss+cluster" => true,
            _ => {
                return Err(bad(
                    "a cluster's scheme is redis+cluster:// or rediss+cluster://",
                ));
            }
        };
        // The host list runs from after the credentials to the path, query or fragment; everything around it is
        // a node URL's and is parsed as such for each seed, so that every seed gets the same options.
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let hosts_start = rest[..authority_end].rfind('@').map_or(0, |at| at + 1);
        let hosts_end = rest[hosts_start..]
            .find(['/', '?', '#'])
            .map_or(rest.len(), |i| hosts_start + i);
        let (prefix, hosts, suffix) = (
            &rest[..hosts_start],
            &rest[hosts_start..hosts_end],
            &rest[hosts_end..],
        );
        if hosts.trim().is_empty() {
            return Err(bad("a cluster needs at least one seed (host:port)"));
        }
        let mut seeds = Vec::new();
        for host in hosts.split(',') {
            if host.trim().is_empty() {
                return Err(bad("a seed in the list is empty (host:port,host:port)"));
            }
            let url = format!("{prefix}{host}{suffix}");
            let seed = NodeAddr::parse_url(input, &url, tls)?;
            if seed.db().is_some_and(|db| db != 0) {
                return Err(bad("a cluster has database 0 only"));
            }
            seeds.push(seed);
        }
        if has_duplicate(&seeds) {
            return Err(bad("a seed is given twice"));
        }
        Ok(ClusterAddr { seeds })
    }
}

impl fmt::Display for ClusterAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = &self.seeds[0];
        f.write_str(if first.tls() {
            "rediss+cluster://"
        } else {
            "redis+cluster://"
        })?;
        match (first.username(), first.password()) {
            (Some(user), _) => write!(f, "{user}:***@")?,
            (None, Some(_)) => f.write_str(":***@")?,
            (None, None) => {}
        }
        for (i, seed) in self.seeds.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if seed.host().contains(':') {
                write!(f, "[{}]:{}", seed.host(), seed.port())?;
            } else {
                write!(f, "{}:{}", seed.host(), seed.port())?;
            }
        }
        if let Some(db) = first.db() {
            write!(f, "/{db}")?;
        }
        if first.resp3() {
            f.write_str("?protocol=resp3")?;
        }
        if first.insecure() {
            f.write_str("#insecure")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ClusterAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterAddr({self})")
    }
}

/// A Redlock member: one Redis node, or a Redis Cluster given by its seeds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemberAddr {
    /// One master (`redis://`, `rediss://`, `host:port`).
    Node(NodeAddr),
    /// A cluster (`redis+cluster://`, `rediss+cluster://`).
    Cluster(ClusterAddr),
}

impl FromStr for MemberAddr {
    type Err = AddrError;

    /// A `redis+cluster://` or `rediss+cluster://` URL is a [`MemberAddr::Cluster`], anything else is read as a
    /// node address.
    fn from_str(input: &str) -> Result<MemberAddr, AddrError> {
        let scheme = input
            .trim()
            .split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("redis+cluster" | "rediss+cluster") => input.parse().map(MemberAddr::Cluster),
            _ => input.parse().map(MemberAddr::Node),
        }
    }
}

impl fmt::Display for MemberAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemberAddr::Node(node) => node.fmt(f),
            MemberAddr::Cluster(cluster) => cluster.fmt(f),
        }
    }
}
