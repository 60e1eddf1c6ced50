//! `-MOVED <slot> <endpoint>:<port>` and `-ASK <slot> <endpoint>:<port>`: a cluster node telling the client that a
//! key's slot is served elsewhere.
//!
//! - `MOVED`: the slot belongs to that node now; the client's map is stale (refresh it) and the command is to be
//!   sent there.
//! - `ASK`: the slot is being migrated and this key is no longer (or not yet) on the node asked; send `ASKING`
//!   and then the command to that node, once, without changing the map.
//!
//! The endpoint is written as Redis writes it (`"%s:%d"`, the preferred endpoint and port): an IPv4 address, a
//! host name, an IPv6 address **without** brackets (`::1:6381`: the port follows the last colon), empty
//! (`:6381`, with `cluster-preferred-endpoint-type unknown-endpoint`: the host the command went to), or `?` (a
//! node with no announced host name). `[v6]:port` is read too.

use std::fmt;

use super::SLOT_COUNT;
use super::slot_map::Endpoint;

/// Which redirection a node sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedirectKind {
    /// `MOVED`: the slot has a new owner for good.
    Moved,
    /// `ASK`: this one command goes to the importing node, after `ASKING`.
    Ask,
}

/// A parsed `MOVED` or `ASK` error.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Redirect {
    /// `MOVED` or `ASK`.
    pub kind: RedirectKind,
    /// The key's slot, below 16,384.
    pub slot: u16,
    /// Where to send the command.
    pub endpoint: Endpoint,
    /// The port to send it to.
    pub port: u16,
}

/// Why an error that starts as a redirection could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RedirectError {
    /// Not `MOVED <slot> <endpoint>:<port>` (or `ASK ...`): a part is missing or there is one too many.
    Shape,
    /// The slot is not a number from 0 to 16,383.
    Slot,
    /// The address has no `:port`.
    NoPort,
    /// The port is not a number from 1 to 65,535.
    Port,
    /// The endpoint is not valid UTF-8 or holds a space or a control character.
    Endpoint,
}

impl fmt::Display for RedirectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RedirectError::Shape => "a redirection is MOVED|ASK <slot> <endpoint>:<port>",
            RedirectError::Slot => "a redirection's slot is not a number from 0 to 16383",
            RedirectError::NoPort => "a redirection's address has no :port",
            RedirectError::Port => "a redirection's port is not a number from 1 to 65535",
            RedirectError::Endpoint => "a redirection's endpoint is not printable UTF-8",
        })
    }
}

impl std::error::Error for RedirectError {}

impl Redirect {
    /// Reads an error reply's text (without the leading `-`, as [`Value::Error`](crate::resp::Value::Error) holds
    /// it).
    ///
    /// Returns `Ok(None)` for any other error (`ERR ...`, `CROSSSLOT ...`, `TRYAGAIN ...`, and a word that merely
    /// starts with `MOVED`, such as `MOVEDX`).
    ///
    /// # Errors
    /// A [`RedirectError`] when the text is a `MOVED` or `ASK` that cannot be read.
    ///
    /// # Examples
    ///
    /// ```
    /// use muxlock::net::cluster::{Endpoint, Redirect, RedirectKind};
    ///
    /// let r = Redirect::parse(b"MOVED 3999 127.0.0.1:6381")?.unwrap();
    /// assert_eq!((r.kind, r.slot, r.port), (RedirectKind::Moved, 3999, 6381));
    /// assert_eq!(r.endpoint, Endpoint::Host("127.0.0.1".into()));
    ///
    /// let r = Redirect::parse(b"ASK 3999 :6381")?.unwrap(); // the same host as asked
    /// assert_eq!((r.kind, r.endpoint), (RedirectKind::Ask, Endpoint::SameHost));
    ///
    /// assert_eq!(Redirect::parse(b"ERR unknown command")?, None);
    /// # Ok::<(), muxlock::net::cluster::RedirectError>(())
    /// ```
    pub fn parse(error: &[u8]) -> Result<Option<Redirect>, RedirectError> {
        let mut words = error.split(|&b| b == b' ');
        let kind = match words.next() {
            Some(b"MOVED") => RedirectKind::Moved,
            Some(b"ASK") => RedirectKind::Ask,
            _ => return Ok(None),
        };
        let (Some(slot), Some(addr), None) = (words.next(), words.next(), words.next()) else {
            return Err(RedirectError::Shape);
        };
        let slot = std::str::from_utf8(slot)
            .ok()
            .filter(|s| !s.starts_with('+') && (s.len() == 1 || !s.starts_with('0')))
            .and_then(|s| s.parse::<u16>().ok())
            .filter(|s| *s < SLOT_COUNT)
            .ok_or(RedirectError::Slot)?;
        let addr = std::str::from_utf8(addr).map_err(|_| RedirectError::Endpoint)?;
        let (host, port) = addr.rsplit_once(':').ok_or(RedirectError::NoPort)?;
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0 && p.to_string() == port)
            .ok_or(RedirectError::Port)?;
        if host.chars().any(char::is_control) {
            return Err(RedirectError::Endpoint);
        }
        Ok(Some(Redirect {
            kind,
            slot,
            endpoint: Endpoint::from_announced(host),
            port,
        }))
    }
}

impl fmt::Display for Redirect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            RedirectKind::Moved => "MOVED",
            RedirectKind::Ask => "ASK",
        };
        // As the server wrote it: IPv6 without brackets, the same host as empty.
        let host = match &self.endpoint {
            Endpoint::Host(host) => host.as_str(),
            Endpoint::SameHost => "",
            Endpoint::Unknown => "?",
        };
        write!(f, "{kind} {} {host}:{}", self.slot, self.port)
    }
}
