//! Built without the `tls` feature: there is no rustls, and `rediss://` nodes are refused when the fanout is
//! built, with a message saying why.

use std::io;

use super::Transport;
use crate::net::addr::NodeAddr;
use crate::net::error::NodeError;
use crate::net::tls_config::TlsConfig;

/// Stands for the TLS client configurations of a build that has none.
#[derive(Debug)]
pub(crate) struct Connector;

/// No node of this build can be a TLS node: this type has no values.
#[derive(Clone, Debug)]
pub(crate) enum Target {}

impl Connector {
    /// `Ok(None)` without TLS nodes; `InvalidInput` naming the first one otherwise.
    pub(crate) fn new(_tls: &TlsConfig, nodes: &[NodeAddr]) -> io::Result<Option<Connector>> {
        match nodes.iter().find(|a| a.tls()) {
            None => Ok(None),
            Some(addr) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "node {addr}: TLS (rediss://) needs muxlock's `tls` cargo feature, which this build lacks"
                ),
            )),
        }
    }

    pub(crate) fn target(&self, _addr: &NodeAddr) -> Option<Target> {
        None
    }
}

impl Target {
    pub(crate) fn link(&self, _socket: mio::net::TcpStream) -> Result<Transport, NodeError> {
        match *self {}
    }
}
