//! [`Cluster`]: N independent `redis-server` masters, the set a Redlock client locks across.
//!
//! Not a Redis Cluster: the nodes know nothing of each other, as the Redlock algorithm assumes.

use std::panic;
use std::thread;

use super::server::{RedisServer, RedisServerBuilder};

/// Options for a [`Cluster`]: the node count and the options every node gets.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    len: usize,
    server: RedisServerBuilder,
}

impl ClusterBuilder {
    /// Appends one argument to every node's command line.
    pub fn arg(mut self, arg: impl Into<std::ffi::OsString>) -> Self {
        self.server = self.server.arg(arg);
        self
    }

    /// Sets every node's options at once.
    pub fn server(mut self, server: RedisServerBuilder) -> Self {
        self.server = server;
        self
    }

    /// Starts the nodes in parallel, one thread each, and waits until all answer `PING`.
    ///
    /// # Panics
    /// If any node fails to start (the nodes that did start are stopped first).
    #[track_caller]
    pub fn start(self) -> Cluster {
        let results: Vec<thread::Result<RedisServer>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..self.len)
                .map(|_| {
                    let server = self.server.clone();
                    scope.spawn(move || server.start())
                })
                .collect();
            handles.into_iter().map(|h| h.join()).collect()
        });
        let mut nodes = Vec::with_capacity(self.len);
        let mut first_panic = None;
        for result in results {
            match result {
                Ok(node) => nodes.push(node),
                Err(payload) => {
                    first_panic.get_or_insert(payload);
                }
            }
        }
        if let Some(payload) = first_panic {
            drop(nodes); // stop the nodes that did start before reporting
            panic::resume_unwind(payload);
        }
        Cluster { nodes }
    }
}

/// N `redis-server` processes on distinct free ports; dropping it stops them all.
///
/// # Examples
/// ```ignore
/// let mut cluster = Cluster::start(5);
/// cluster.pause(0);
/// let urls = cluster.urls();
/// ```
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<RedisServer>,
}

impl Cluster {
    /// Starts `len` nodes with default options. See [`ClusterBuilder::start`].
    #[track_caller]
    pub fn start(len: usize) -> Self {
        Self::builder(len).start()
    }

    /// Options for a cluster of `len` nodes.
    pub fn builder(len: usize) -> ClusterBuilder {
        ClusterBuilder {
            len,
            server: RedisServer::builder(),
        }
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// `redis://127.0.0.1:port` of every node, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `rediss://127.0.0.1:tls_port` of every node (started with [`RedisServerBuilder::tls`]), in node order.
    #[track_caller]
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::tls_url).collect()
    }

    /// Every node's address, in node order.
    pub fn addrs(&self) -> Vec<std::net::SocketAddr> {
        self.nodes.iter().map(RedisServer::addr).collect()
    }

    /// All nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i`.
    ///
    /// # Panics
    /// If `i >= len()`.
    #[track_caller]
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// Node `i`, mutably.
    ///
    /// # Panics
    /// If `i >= len()`.
    #[track_caller]
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// Kills node `i` (SIGKILL). See [`RedisServer::kill`].
    #[track_caller]
    pub fn kill(&mut self, i: usize) {
        self.node_mut(i).kill();
    }

    /// Pauses node `i` (SIGSTOP). See [`RedisServer::pause`].
    #[track_caller]
    pub fn pause(&mut self, i: usize) {
        self.node_mut(i).pause();
    }

    /// Resumes node `i` (SIGCONT). See [`RedisServer::resume`].
    #[track_caller]
    pub fn resume(&mut self, i: usize) {
        self.node_mut(i).resume();
    }

    /// Restarts node `i` on its port, empty. See [`RedisServer::restart`].
    #[track_caller]
    pub fn restart(&mut self, i: usize) {
        self.node_mut(i).restart();
    }

    /// Restarts node `i` on its port after deleting its data files. See [`RedisServer::restart_without_files`].
    #[track_caller]
    pub fn restart_without_files(&mut self, i: usize) {
        self.node_mut(i).restart_without_files();
    }

    /// Sends `FLUSHALL` to every node, e.g. between benchmark iterations.
    ///
    /// # Panics
    /// If a node does not answer `+OK`.
    #[track_caller]
    pub fn flush_all(&self) {
        for node in &self.nodes {
            let reply = node.raw(&super::wire::cmd(&["FLUSHALL"]));
            assert_eq!(
                reply,
                b"+OK\r\n",
                "FLUSHALL on {}: {}",
                node.url(),
                super::wire::show(&reply)
            );
        }
    }
}
