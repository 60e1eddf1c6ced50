//! [`Resolved`]: a node's socket addresses, looked up when the fanout is built and again, in a background thread,
//! after a connection attempt failed. A name lookup may block for seconds (the system resolver's timeouts), so it
//! never happens under the fanout's lock or in a caller's round.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::thread;

use super::addr::NodeAddr;
use super::error::{IoError, NodeError};
use crate::sync::lock;

/// The outcome of a background lookup, filled in by its thread.
type Lookup = Arc<Mutex<Option<Result<Vec<SocketAddr>, IoError>>>>;

/// Where a node's connections go.
#[derive(Debug)]
pub(crate) struct Resolved {
    addrs: Result<Vec<SocketAddr>, IoError>,
    /// A lookup in progress, if any (at most one per node).
    lookup: Option<Lookup>,
}

impl Resolved {
    /// Resolves `addr` now: blocking, so only when the fanout is built.
    pub(crate) fn now(addr: &NodeAddr) -> Resolved {
        Resolved {
            addrs: resolve(addr),
            lookup: None,
        }
    }

    /// Nothing to dial yet (a vacant connection's).
    pub(crate) fn unresolved() -> Resolved {
        let none = std::io::Error::new(std::io::ErrorKind::NotFound, "no address yet");
        Resolved {
            addrs: Err(none.into()),
            lookup: None,
        }
    }

    /// The address to dial, taking the result of a finished background lookup first.
    pub(crate) fn current(&mut self) -> Result<SocketAddr, NodeError> {
        if let Some(done) = self.lookup.as_ref().and_then(|l| lock(l).take()) {
            self.lookup = None;
            // A failed lookup keeps the addresses we had: a resolver outage does not take a node away.
            if done.is_ok() || self.addrs.is_err() {
                self.addrs = done;
            }
        }
        match &self.addrs {
            Ok(addrs) => addrs.first().copied().ok_or_else(|| {
                let none = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
                NodeError::Resolve(none.into())
            }),
            Err(e) => Err(NodeError::Resolve(e.clone())),
        }
    }

    /// After a failed connect: looks the name up again in a background thread, for the next dial. Addresses
    /// given as IP literals are not looked up.
    pub(crate) fn refresh(&mut self, addr: &NodeAddr) {
        if self.lookup.is_some() || addr.host().parse::<IpAddr>().is_ok() {
            return;
        }
        let lookup: Lookup = Arc::default();
        let (out, addr) = (Arc::clone(&lookup), addr.clone());
        let spawned = thread::Builder::new()
            .name("muxlock-resolve".into())
            .spawn(move || *lock(&out) = Some(resolve(&addr)));
        // Without a thread, the next failed connect tries again.
        if spawned.is_ok() {
            self.lookup = Some(lookup);
        }
    }
}

fn resolve(addr: &NodeAddr) -> Result<Vec<SocketAddr>, IoError> {
    addr.resolve().map_err(IoError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literals_resolve_at_once_and_are_not_looked_up_again() {
        let addr = NodeAddr::new("127.0.0.1", 7000);
        let mut r = Resolved::now(&addr);
        assert_eq!(r.current(), Ok("127.0.0.1:7000".parse().expect("addr")));
        r.refresh(&addr);
        assert!(r.lookup.is_none());
    }

    #[test]
    fn a_failed_lookup_is_a_resolve_error_and_a_later_one_replaces_it() {
        let addr = NodeAddr::new("name.invalid", 7000);
        let mut r = Resolved {
            addrs: Err(std::io::Error::other("no such host").into()),
            lookup: None,
        };
        assert!(matches!(r.current(), Err(NodeError::Resolve(_))));
        let done: Lookup = Arc::new(Mutex::new(Some(Ok(vec![
            "10.0.0.1:7000".parse().expect("addr"),
        ]))));
        r.lookup = Some(done);
        assert_eq!(r.current(), Ok("10.0.0.1:7000".parse().expect("addr")));
        // A later failure keeps the good address.
        r.lookup = Some(Arc::new(Mutex::new(Some(Err(std::io::Error::other(
            "timeout",
        )
        .into())))));
        assert_eq!(r.current(), Ok("10.0.0.1:7000".parse().expect("addr")));
        // A lookup still running changes nothing yet.
        r.lookup = Some(Arc::default());
        assert!(r.current().is_ok());
        r.refresh(&addr);
        assert!(r.lookup.is_some(), "one lookup at a time");
    }
}
