//! Node addresses: `redis://[user:pass@]host[:port][/db]` and `rediss://...` (TLS) URLs, as redis-rs writes them,
//! and plain `host:port`.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;

/// Where a Redis master is and how to log in to it.
///
/// Accepted forms:
///
/// - `host:port`, `[ipv6]:port`;
/// - `redis://host[:port][/db]` (port 6379 when omitted);
/// - `redis://[user][:password]@host[:port][/db]`, with `%XX` escapes in the user name and password;
/// - `rediss://...` in any of these forms: the same over TLS (the `tls` cargo feature, on by default), the
///   certificate checked against the host as written (see [`TlsConfig`](super::TlsConfig));
/// - a `?protocol=resp3` (or `resp2`) query, as redis-rs accepts, to speak RESP3 (`HELLO 3`) to that node;
/// - an `#insecure` fragment after a `rediss://` URL, as redis-rs spells it: **for tests only**, that node's
///   certificate is not verified.
///
/// `unix://` is refused with a message saying so: muxlock does not speak it yet.
///
/// The password never appears in `Display` or `Debug` output.
///
/// # Examples
///
/// ```
/// use muxlock::net::NodeAddr;
///
/// let node: NodeAddr = "redis://locker:s%40cret@10.0.0.7:6380/2".parse()?;
/// assert_eq!((node.host(), node.port(), node.db()), ("10.0.0.7", 6380, Some(2)));
/// assert_eq!(node.username(), Some("locker"));
/// assert_eq!(node.password(), Some("s@cret"));
/// assert_eq!(node.to_string(), "redis://locker:***@10.0.0.7:6380/2");
///
/// let plain: NodeAddr = "127.0.0.1:7000".parse()?;
/// assert_eq!(plain.to_string(), "redis://127.0.0.1:7000");
///
/// let tls: NodeAddr = "rediss://redis.example.com:6380".parse()?;
/// assert!(tls.tls() && !tls.insecure());
/// # Ok::<(), muxlock::net::AddrError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct NodeAddr {
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    db: Option<u32>,
    resp3: bool,
    tls: bool,
    insecure: bool,
}

/// Why a node address was refused: the input and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrError {
    input: String,
    reason: &'static str,
}

impl AddrError {
    pub(crate) fn new(input: &str, reason: &'static str) -> AddrError {
        // Never echo a password back: keep the input only up to its credentials.
        let shown = match (input.find("://"), input.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}://***@{}", &input[..scheme], &input[at + 1..])
            }
            _ => input.to_owned(),
        };
        AddrError {
            input: shown,
            reason,
        }
    }

    /// What is wrong, e.g. `"port is not a number from 1 to 65535"`.
    pub fn reason(&self) -> &str {
        self.reason
    }
}

impl fmt::Display for AddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid node address {:?}: {}", self.input, self.reason)
    }
}

impl std::error::Error for AddrError {}

const DEFAULT_PORT: u16 = 6379;

impl NodeAddr {
    /// A node at `host:port`, without credentials, database 0, RESP2.
    pub fn new(host: impl Into<String>, port: u16) -> NodeAddr {
        NodeAddr {
            host: host.into(),
            port,
            username: None,
            password: None,
            db: None,
            resp3: false,
            tls: false,
            insecure: false,
        }
    }

    /// The host name or IP address (IPv6 without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The ACL user name sent with `AUTH`, if any.
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    /// The password sent with `AUTH`, if any.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The database selected with `SELECT` after connecting; `None` leaves the server's default (0).
    pub fn db(&self) -> Option<u32> {
        self.db
    }

    /// Whether the connection switches to RESP3 with `HELLO 3`.
    pub fn resp3(&self) -> bool {
        self.resp3
    }

    /// Whether the connection is TLS (`rediss://`).
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// Whether this node's certificate goes unverified (`rediss://...#insecure`: for tests only).
    pub fn insecure(&self) -> bool {
        self.insecure
    }

    /// Sets whether the connection is TLS (`rediss://`).
    #[must_use]
    pub fn with_tls(mut self, tls: bool) -> NodeAddr {
        self.tls = tls;
        self
    }

    /// **For tests only**: sets whether this node's certificate goes unverified (the `#insecure` fragment).
    #[must_use]
    pub fn with_insecure(mut self, insecure: bool) -> NodeAddr {
        self.insecure = insecure;
        self
    }

    /// Sets the `AUTH` credentials: a password, with an ACL user name or not.
    #[must_use]
    pub fn with_auth(mut self, username: Option<&str>, password: &str) -> NodeAddr {
        self.username = username.map(str::to_owned);
        self.password = Some(password.to_owned());
        self
    }

    /// Sets the database selected after connecting.
    #[must_use]
    pub fn with_db(mut self, db: u32) -> NodeAddr {
        self.db = Some(db);
        self
    }

    /// Sets whether the connection speaks RESP3 (`HELLO 3`).
    #[must_use]
    pub fn with_resp3(mut self, resp3: bool) -> NodeAddr {
        self.resp3 = resp3;
        self
    }

    /// Whether `self` and `other` name the same server: host and port match, or they resolve to a common socket
    /// address (`localhost:6379` and `127.0.0.1:6379`). Names that do not resolve now are compared as written.
    /// May block on the system resolver.
    pub(crate) fn same_server(&self, other: &NodeAddr) -> bool {
        if self.port() != other.port() {
            return false;
        }
        if self.host().eq_ignore_ascii_case(other.host()) {
            return true;
        }
        match (self.resolve(), other.resolve()) {
            (Ok(x), Ok(y)) => x.iter().any(|s| y.contains(s)),
            _ => false,
        }
    }

    /// Resolves the host to socket addresses. IP literals resolve without DNS; names go through the system
    /// resolver, which may block.
    pub fn resolve(&self) -> std::io::Result<Vec<SocketAddr>> {
        Ok((self.host.as_str(), self.port).to_socket_addrs()?.collect())
    }

    /// Parses `rest`, what follows `redis://` or `rediss://` in `input` (which errors name).
    pub(crate) fn parse_url(input: &str, rest: &str, tls: bool) -> Result<NodeAddr, AddrError> {
        let bad = |reason| AddrError::new(input, reason);
        // A fragment follows the last '#', unless that '#' is part of the credentials (an unescaped password).
        let fragment = rest.rsplit_once('#').filter(|(_, f)| !f.contains('@'));
        let (rest, insecure) = match fragment {
            Some((r, "insecure")) if tls => (r, true),
            Some(_) if tls => return Err(bad("the only URL fragment understood is #insecure")),
            Some(_) => return Err(bad("#insecure applies to rediss:// (TLS) URLs only")),
            None => (rest, false),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let mut addr = parse_host_port(hostport, true).map_err(bad)?;
        addr.tls = tls;
        addr.insecure = insecure;
        if let Some(userinfo) = userinfo {
            let (user, pass) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            let user =
                percent_decode(user).ok_or_else(|| bad("user name has an invalid %-escape"))?;
            addr.username = Some(user).filter(|u| !u.is_empty());
            addr.password = match pass {
                Some(p) => {
                    Some(percent_decode(p).ok_or_else(|| bad("password has an invalid %-escape"))?)
                }
                None => None,
            };
            if addr.username.is_some() && addr.password.is_none() {
                return Err(bad(
                    "a user name needs a password (redis://user:password@host)",
                ));
            }
        }
        if !path.is_empty() {
            addr.db = Some(
                path.parse()
                    .map_err(|_| bad("database is not a number (redis://host:port/0)"))?,
            );
        }
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            addr.resp3 = match pair {
                "protocol=resp3" | "protocol=3" => true,
                "protocol=resp2" | "protocol=2" => false,
                _ => {
                    return Err(bad(
                        "the only query parameter understood is protocol=resp2|resp3",
                    ));
                }
            };
        }
        Ok(addr)
    }
}

/// `host:port` or `[v6]:port`; the port may be omitted when `port_optional`.
fn parse_host_port(s: &str, port_optional: bool) -> Result<NodeAddr, &'static str> {
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or("IPv6 address without closing ']'")?;
        // Brackets hold an IPv6 address, nothing else (`[[]` printed back would not parse).
        if !host.contains(':') || host.contains('[') {
            return Err("brackets hold an IPv6 address: [::1]:6379");
        }
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err("unexpected characters after ']'"),
        }
    } else {
        match s.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                return Err("an IPv6 address needs brackets: [::1]:6379");
            }
            Some((host, port)) => (host, Some(port)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("host is empty");
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c == '/' || c == '@')
    {
        return Err("host contains a space, '/' or '@'");
    }
    // A NUL or an escape in a host name can only be a mistake (a name pasted with its terminal's bytes) and would
    // reach the resolver and the logs as it is.
    if host.chars().any(char::is_control) {
        return Err("host contains a control character");
    }
    let port = match port {
        Some(p) => match p.parse::<u16>() {
            // u16's parser takes `+1` and `007`; a port is written plainly.
            Ok(n) if n > 0 && n.to_string() == p => n,
            _ => return Err("port is not a number from 1 to 65535"),
        },
        None if port_optional => DEFAULT_PORT,
        None => return Err("port is missing (host:port)"),
    };
    Ok(NodeAddr::new(host, port))
}

/// Decodes `%XX` escapes; `None` on a malformed escape or a result that is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl FromStr for NodeAddr {
    type Err = AddrError;

    fn from_str(input: &str) -> Result<NodeAddr, AddrError> {
        let s = input.trim();
        match s.split_once("://") {
            Some((scheme, rest)) => match scheme.to_ascii_lowercase().as_str() {
                "redis" => NodeAddr::parse_url(input, rest, false),
                "rediss" => NodeAddr::parse_url(input, rest, true),
                "unix" | "redis+unix" => {
                    Err(AddrError::new(input, "unix sockets are not supported yet"))
                }
                // A cluster is a Redlock member of its own (`net::cluster::MemberAddr`), not one node.
                "redis+cluster" | "rediss+cluster" => Err(AddrError::new(
                    input,
                    "a redis+cluster:// URL names a cluster's seed nodes, not one node",
                )),
                _ => Err(AddrError::new(
                    input,
                    "unknown scheme: use redis://host:port or host:port",
                )),
            },
            None => parse_host_port(s, false).map_err(|reason| AddrError::new(input, reason)),
        }
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.tls { "rediss://" } else { "redis://" })?;
        match (&self.username, &self.password) {
            (Some(user), _) => write!(f, "{user}:***@")?,
            (None, Some(_)) => f.write_str(":***@")?,
            (None, None) => {}
        }
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)?;
        } else {
            write!(f, "{}:{}", self.host, self.port)?;
        }
        if let Some(db) = self.db {
            write!(f, "/{db}")?;
        }
        if self.resp3 {
            f.write_str("?protocol=resp3")?;
        }
        if self.insecure {
            f.write_str("#insecure")?;
        }
        Ok(())
    }
}

impl fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeAddr({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<NodeAddr, String> {
        s.parse::<NodeAddr>().map_err(|e| e.to_string())
    }

    #[test]
    fn accepted_forms() {
        let a = parse("127.0.0.1:7000").unwrap();
        assert_eq!(
            (a.host(), a.port(), a.db(), a.password()),
            ("127.0.0.1", 7000, None, None)
        );
        let a = parse("redis://example.com").unwrap();
        assert_eq!((a.host(), a.port()), ("example.com", 6379));
        let a = parse("redis://:pw@h:1/15").unwrap();
        assert_eq!(
            (a.username(), a.password(), a.db()),
            (None, Some("pw"), Some(15))
        );
        let a = parse("redis://u:p%3Aq@h:1").unwrap();
        assert_eq!((a.username(), a.password()), (Some("u"), Some("p:q")));
        let a = parse("redis://[::1]:6380?protocol=resp3").unwrap();
        assert_eq!((a.host(), a.port(), a.resp3()), ("::1", 6380, true));
        assert_eq!(a.to_string(), "redis://[::1]:6380?protocol=resp3");
        let a = parse("[::1]:6379").unwrap();
        assert_eq!(a.host(), "::1");
        assert_eq!(parse("REDIS://h:1").unwrap().port(), 1);
        let a = parse("rediss://u:p@h:7/1?protocol=resp3#insecure").unwrap();
        assert!(a.tls() && a.insecure() && a.resp3());
        assert_eq!(
            a.to_string(),
            "rediss://u:***@h:7/1?protocol=resp3#insecure"
        );
        let a = parse("rediss://h").unwrap();
        assert_eq!((a.tls(), a.insecure(), a.port()), (true, false, 6379));
        assert!(!parse("redis://h:1").unwrap().tls());
        let a = parse("redis://u:p#w@h:1").unwrap();
        assert_eq!((a.password(), a.insecure()), (Some("p#w"), false));
    }

    #[test]
    fn refused_forms_say_why() {
        let cases = [
            ("h", "port is missing"),
            ("h:0", "port is not a number"),
            ("h:65536", "port is not a number"),
            ("h:+1", "port is not a number"),
            ("h:x", "port is not a number"),
            (":6379", "host is empty"),
            ("redis://", "host is empty"),
            ("::1:6379", "needs brackets"),
            ("[::1", "without closing"),
            ("[[]:1", "brackets hold an IPv6 address"),
            ("redis://[h]:1", "brackets hold an IPv6 address"),
            ("redis://h:1/x", "database is not a number"),
            ("redis://h:1?db=2", "only query parameter"),
            ("redis://u@h:1", "needs a password"),
            ("redis://u:%zz@h:1", "invalid %-escape"),
            ("rediss://h:1#secure", "only URL fragment"),
            ("redis://h:1#insecure", "rediss:// (TLS) URLs only"),
            ("unix:///tmp/redis.sock", "unix sockets"),
            ("http://h:1", "unknown scheme"),
            ("redis+cluster://h:1,h:2", "not one node"),
            ("h h:1", "contains a space"),
            ("h\u{1d}x:1", "control character"),
            ("redis://h\0:1", "control character"),
        ];
        for (input, want) in cases {
            let got = parse(input).unwrap_err();
            assert!(got.contains(want), "{input}: {got}");
        }
    }

    #[test]
    fn passwords_never_show() {
        let a = parse("redis://u:topsecret@h:1").unwrap();
        assert!(!format!("{a} {a:?}").contains("topsecret"));
        let e = parse("rediss://u:topsecret@h:x").unwrap_err();
        assert!(!e.contains("topsecret"), "{e}");
    }
}
