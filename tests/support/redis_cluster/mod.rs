//! [`RedisCluster`]: a real Redis Cluster of K masters (and R replicas each) on loopback, built by the test itself.
//!
//! Each node is a [`RedisServer`] (a free port, a throwaway `--dir`, killed by its PID on drop) started with
//! `--cluster-enabled yes`, its own `--cluster-config-file` in that directory, and a cluster bus port of its own
//! picked free (`--cluster-port`: the default, port + 10,000, may be taken or above 65,535). The set-up is
//! `redis-cli --cluster create`'s, by hand: distinct config epochs (`CLUSTER SET-CONFIG-EPOCH`), `CLUSTER MEET`,
//! `CLUSTER ADDSLOTSRANGE` (16,384 slots split evenly over the masters), `CLUSTER REPLICATE`; then it waits until
//! every node says `cluster_state:ok` and agrees on every slot's owner (`CLUSTER NODES`), and every replica's
//! link is up.
//!
//! Helpers then make the redirections and faults that routing must survive: [`RedisCluster::begin_migration`] /
//! [`RedisCluster::move_slot_keys`] / [`RedisCluster::finish_migration`] move one slot as `CLUSTER SETSLOT`'s
//! documentation says (so that a test can see `ASK` mid-way and `MOVED` after), and [`RedisCluster::fail_over`]
//! kills a master and promotes its replica (`CLUSTER FAILOVER FORCE` or `TAKEOVER`).
//!
//! Every wait is bounded ([`CONVERGE_TIMEOUT`], generous: the machine's two vCPUs are shared with builds) and
//! panics naming what did not happen, with each node's view. Needs only std, the server guard and the wire helpers.
//!
//! Layout: this file (building, waiting, reading the guard's books), `changes` (slot migration, failover,
//! restart), `replies` (`CLUSTER NODES` and the bulk replies read as text).

mod changes;
mod replies;

use std::panic::{self, AssertUnwindSafe};
use std::thread;
use std::time::{Duration, Instant};

use super::process::free_port;
use super::server::{RedisServer, RedisServerBuilder};
use super::wire::{cmd, show};
use replies::parse_nodes;
pub use replies::{bulk_array, bulk_text};

/// Bound on a cluster's agreeing after a change (start, migration, failover).
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the nodes are polled while waiting.
const POLL: Duration = Duration::from_millis(20);
/// The slot count of every Redis Cluster.
pub const SLOTS: u16 = 16_384;
/// Tries of a node's start with a fresh bus port, should another process take the one picked.
const START_TRIES: usize = 3;

/// How [`RedisCluster::fail_over`] promotes a replica whose master was killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failover {
    /// `CLUSTER FAILOVER FORCE`: the replica asks the other masters for votes (a majority of all masters must be
    /// alive: not with one master).
    Force,
    /// `CLUSTER FAILOVER TAKEOVER`: the replica promotes itself with a new epoch, no vote.
    Takeover,
}

/// Options for a [`RedisCluster`].
#[derive(Debug, Clone)]
pub struct RedisClusterBuilder {
    masters: usize,
    replicas: usize,
    node_timeout: Duration,
    server: RedisServerBuilder,
    /// Nodes started with other options than `server`'s, by node index.
    own: Vec<(usize, RedisServerBuilder)>,
}

impl RedisClusterBuilder {
    /// `n` replicas for each master (0 by default).
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// `--cluster-node-timeout` (3 s by default): how long a silent node takes to be marked failing.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Every node's other options (the cluster's own are added).
    pub fn server(mut self, server: RedisServerBuilder) -> Self {
        self.server = server;
        self
    }

    /// Node `i`'s other options instead of [`server`](Self::server)'s (a clock of its own, say): nodes are
    /// numbered as [`RedisCluster`]'s.
    pub fn node_server(mut self, i: usize, server: RedisServerBuilder) -> Self {
        self.own.push((i, server));
        self
    }

    /// Starts the nodes in parallel, builds the cluster and waits until it has converged.
    ///
    /// # Panics
    /// If a node does not start, a command is refused, or the cluster does not converge within
    /// [`CONVERGE_TIMEOUT`] (the nodes started are stopped first, by their guards).
    #[track_caller]
    pub fn start(self) -> RedisCluster {
        assert!(self.masters > 0, "a cluster needs a master");
        let total = self.masters * (1 + self.replicas);
        let started: Vec<thread::Result<Node>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..total)
                .map(|i| {
                    let server = (self.own.iter().rev().find(|(n, _)| *n == i))
                        .map_or(&self.server, |(_, own)| own);
                    scope.spawn(move || start_node(server, self.node_timeout))
                })
                .collect();
            handles.into_iter().map(|h| h.join()).collect()
        });
        let mut nodes = Vec::with_capacity(total);
        let mut first_panic = None;
        for result in started {
            match result {
                Ok(node) => nodes.push(node),
                Err(payload) => {
                    first_panic.get_or_insert(payload);
                }
            }
        }
        if let Some(payload) = first_panic {
            drop(nodes);
            panic::resume_unwind(payload);
        }
        // Nodes 0..masters are the masters; then each master's replicas in turn.
        let shards = (0..self.masters)
            .map(|m| ShardNodes {
                master: m,
                replicas: (0..self.replicas)
                    .map(|r| self.masters + m * self.replicas + r)
                    .collect(),
            })
            .collect();
        let mut cluster = RedisCluster {
            nodes,
            shards,
            owner: vec![0; usize::from(SLOTS)],
            server: self.server.clone(),
            node_timeout: self.node_timeout,
        };
        cluster.form();
        cluster
    }
}

/// One node: its server guard, cluster id and bus port.
#[derive(Debug)]
struct Node {
    server: RedisServer,
    id: String,
    bus_port: u16,
}

/// A shard's nodes, as indexes into [`RedisCluster::nodes`].
#[derive(Debug, Clone)]
struct ShardNodes {
    master: usize,
    replicas: Vec<usize>,
}

/// A slot on its way from one master to another (see [`RedisCluster::begin_migration`]).
#[derive(Debug)]
#[must_use = "finish the migration with RedisCluster::finish_migration"]
pub struct SlotMigration {
    /// The slot.
    pub slot: u16,
    /// The source master's node index.
    pub from: usize,
    /// The target master's node index.
    pub to: usize,
}

/// A Redis Cluster of real `redis-server` processes on loopback; dropping it stops them all, by PID.
///
/// Nodes are numbered: the masters first (node `i` is shard `i`'s first master), then each master's replicas in
/// turn. Shards keep their number across failovers; [`master`](Self::master) is the shard's current master.
///
/// # Examples
/// ```ignore
/// let cluster = RedisCluster::builder(3).replicas(1).start();
/// let reply = cluster.master(0).raw(&cmd(&["CLUSTER", "SHARDS"]));
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
    shards: Vec<ShardNodes>,
    /// Each slot's owner, a node index, as this guard arranged it.
    owner: Vec<usize>,
    /// How its nodes were started (for [`add_master`](Self::add_master)).
    server: RedisServerBuilder,
    node_timeout: Duration,
}

impl RedisCluster {
    /// Starts `masters` masters with no replicas. See [`RedisClusterBuilder::start`].
    #[track_caller]
    pub fn start(masters: usize) -> Self {
        Self::builder(masters).start()
    }

    /// Options for a cluster of `masters` masters.
    pub fn builder(masters: usize) -> RedisClusterBuilder {
        RedisClusterBuilder {
            masters,
            replicas: 0,
            node_timeout: Duration::from_secs(3),
            server: RedisServer::builder(),
            own: Vec::new(),
        }
    }

    /// The number of shards (masters).
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Every node, masters first.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes (never, once started).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`'s server.
    #[track_caller]
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i].server
    }

    /// Node `i`'s server, to pause, resume or kill it by hand (the guard's books are not changed: use
    /// [`fail_over`](Self::fail_over) for a failover).
    #[track_caller]
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i].server
    }

    /// Node `i`'s cluster id (40 hex digits).
    #[track_caller]
    pub fn node_id(&self, i: usize) -> &str {
        &self.nodes[i].id
    }

    /// Node `i`'s cluster bus port.
    #[track_caller]
    pub fn bus_port(&self, i: usize) -> u16 {
        self.nodes[i].bus_port
    }

    /// The node index of shard `s`'s current master.
    #[track_caller]
    pub fn master_index(&self, s: usize) -> usize {
        self.shards[s].master
    }

    /// Shard `s`'s current master.
    #[track_caller]
    pub fn master(&self, s: usize) -> &RedisServer {
        self.node(self.master_index(s))
    }

    /// The node indexes of shard `s`'s replicas (a killed master that a failover replaced is one).
    #[track_caller]
    pub fn replica_indexes(&self, s: usize) -> &[usize] {
        &self.shards[s].replicas
    }

    /// The node index of `slot`'s owner, as this guard arranged it.
    #[track_caller]
    pub fn owner_of(&self, slot: u16) -> usize {
        self.owner[usize::from(slot)]
    }

    /// The shard number whose master owns `slot`.
    #[track_caller]
    pub fn shard_of(&self, slot: u16) -> usize {
        let owner = self.owner_of(slot);
        self.shards
            .iter()
            .position(|s| s.master == owner)
            .expect("every owner is a shard's master")
    }

    /// `redis+cluster://127.0.0.1:p0,127.0.0.1:p1,...` over the masters, the member URL of this cluster.
    pub fn seed_url(&self) -> String {
        let seeds: Vec<String> = self
            .shards
            .iter()
            .map(|s| format!("127.0.0.1:{}", self.node(s.master).port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Sends one command to node `i` on a new connection and returns the raw reply.
    ///
    /// # Panics
    /// If the node cannot be reached in time.
    #[track_caller]
    pub fn command(&self, i: usize, parts: &[&str]) -> Vec<u8> {
        self.node(i).raw(&cmd(parts))
    }

    /// Sends one command to node `i` and checks that it answers `+OK`.
    #[track_caller]
    pub fn command_ok(&self, i: usize, parts: &[&str]) {
        let reply = self.command(i, parts);
        assert_eq!(
            reply,
            b"+OK\r\n",
            "{parts:?} on node {i} (port {}): {}",
            self.node(i).port(),
            show(&reply)
        );
    }

    /// Waits until every live node says `cluster_state:ok`, knows every slot's owner as this guard arranged it
    /// (no slot migrating or importing), and sees every live replica attached to its shard's master, with its
    /// replication link up.
    ///
    /// # Panics
    /// After [`CONVERGE_TIMEOUT`], naming what was not yet so.
    #[track_caller]
    pub fn wait_converged(&mut self, after: &str) {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].server.is_running())
            .collect();
        self.wait_until(&format!("the cluster to converge after {after}"), || {
            for &i in &live {
                self.agrees(i, &live)
                    .map_err(|why| format!("node {i} (port {}): {why}", self.node(i).port()))?;
            }
            Ok(())
        });
    }

    /// Whether node `i` sees the cluster as arranged; the first difference otherwise.
    fn agrees(&self, i: usize, live: &[usize]) -> Result<(), String> {
        let info = bulk_text(&self.command(i, &["CLUSTER", "INFO"]));
        if !info.contains("cluster_state:ok\r\n") {
            return Err("cluster_state is not ok".into());
        }
        let view = parse_nodes(&bulk_text(&self.command(i, &["CLUSTER", "NODES"])));
        for (slot, &owner) in self.owner.iter().enumerate() {
            let want = self.node_id(owner);
            match view.owners.get(slot).and_then(|o| o.as_deref()) {
                Some(id) if id == want => {}
                other => return Err(format!("slot {slot} owned by {other:?}, not node {owner}")),
            }
        }
        if let Some(slot) = view.in_migration.first() {
            return Err(format!("slot {slot} still migrating or importing"));
        }
        for shard in &self.shards {
            for r in shard.replicas.iter().filter(|r| live.contains(r)) {
                let master = self.node_id(shard.master);
                if view.master_of.get(self.node_id(*r)).map(String::as_str) != Some(master) {
                    return Err(format!(
                        "node {r} is not seen as a replica of node {}",
                        shard.master
                    ));
                }
            }
        }
        if self.shards.iter().any(|s| s.replicas.contains(&i)) {
            let replication = bulk_text(&self.command(i, &["INFO", "replication"]));
            if !replication.contains("master_link_status:up\r\n") {
                return Err("its replication link is not up".into());
            }
        }
        Ok(())
    }

    /// Polls `check` until it returns `Ok`, for at most [`CONVERGE_TIMEOUT`].
    #[track_caller]
    fn wait_until(&self, what: &str, mut check: impl FnMut() -> Result<(), String>) {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            let why = match check() {
                Ok(()) => return,
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                panic!("{what}: not within {CONVERGE_TIMEOUT:?}; last: {why}");
            }
            thread::sleep(POLL);
        }
    }

    /// Builds the cluster from its started, empty nodes.
    #[track_caller]
    fn form(&mut self) {
        let masters: Vec<usize> = self.shards.iter().map(|s| s.master).collect();
        // Distinct epochs before the nodes meet, as redis-cli does: no epoch collision to resolve later.
        for (n, &m) in masters.iter().enumerate() {
            self.command_ok(m, &["CLUSTER", "SET-CONFIG-EPOCH", &(n + 1).to_string()]);
        }
        for i in 1..self.nodes.len() {
            let (port, bus) = (
                self.node(i).port().to_string(),
                self.bus_port(i).to_string(),
            );
            self.command_ok(0, &["CLUSTER", "MEET", "127.0.0.1", &port, &bus]);
        }
        for (n, &m) in masters.iter().enumerate() {
            let (start, end) = even_range(n, masters.len());
            self.command_ok(
                m,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &start.to_string(),
                    &end.to_string(),
                ],
            );
            for slot in start..=end {
                self.owner[usize::from(slot)] = m;
            }
        }
        // A replica can follow only a master it knows.
        let total = self.nodes.len();
        self.wait_until("every node to know every other", || {
            for i in 0..total {
                let view = parse_nodes(&bulk_text(&self.command(i, &["CLUSTER", "NODES"])));
                if view.known < total || view.handshaking > 0 {
                    return Err(format!("node {i} knows {} of {total}", view.known));
                }
            }
            Ok(())
        });
        for shard in self.shards.clone() {
            for r in shard.replicas {
                self.command_ok(r, &["CLUSTER", "REPLICATE", self.node_id(shard.master)]);
            }
        }
        self.wait_converged("its start");
    }
}

/// Starts one cluster-enabled node with a free bus port, trying fresh ports if the one picked gets taken.
fn start_node(server: &RedisServerBuilder, node_timeout: Duration) -> Node {
    let mut last = None;
    for _ in 0..START_TRIES {
        let bus_port = free_port();
        let builder = server.clone().args([
            "--cluster-enabled".to_owned(),
            "yes".to_owned(),
            // Relative to the node's own --dir, so every node has its own.
            "--cluster-config-file".to_owned(),
            "nodes.conf".to_owned(),
            "--cluster-port".to_owned(),
            bus_port.to_string(),
            "--cluster-node-timeout".to_owned(),
            node_timeout.as_millis().to_string(),
        ]);
        match panic::catch_unwind(AssertUnwindSafe(|| builder.start())) {
            Ok(server) => {
                let id = bulk_text(&server.raw(&cmd(&["CLUSTER", "MYID"])));
                assert_eq!(id.len(), 40, "CLUSTER MYID answered {id:?}");
                return Node {
                    server,
                    id,
                    bus_port,
                };
            }
            Err(payload) => last = Some(payload),
        }
    }
    panic::resume_unwind(last.expect("at least one try"))
}

/// Master `n` of `count`'s share of the slots: `(start, end)` inclusive, as even as integers allow.
pub fn even_range(n: usize, count: usize) -> (u16, u16) {
    let slots = usize::from(SLOTS);
    let start = n * slots / count;
    let end = (n + 1) * slots / count - 1;
    (
        u16::try_from(start).expect("a slot"),
        u16::try_from(end).expect("a slot"),
    )
}

// What the cluster members' tests read from a live cluster: replication, keys read with `ASKING`, bus links.

/// Waits (30 s at most) until node `i`'s `INFO replication` has the line `line`.
#[track_caller]
pub fn wait_replication(c: &RedisCluster, i: usize, line: &str) {
    let line = format!("{line}\r\n");
    super::locks::wait_until(
        Duration::from_secs(30),
        &format!("node {i}: {line:?}"),
        || bulk_text(&c.command(i, &["INFO", "replication"])).contains(&line),
    );
}

/// The value `key` holds on node `i` of `c` (`None`: absent), read with `ASKING`.
#[track_caller]
pub fn get_asking(c: &RedisCluster, i: usize, key: &str) -> Option<Vec<u8>> {
    let mut bytes = cmd(&["ASKING"]);
    bytes.extend(cmd(&["GET", key]));
    let raw = c.node(i).raw(&bytes);
    let rest = raw
        .strip_prefix(b"+OK\r\n")
        .unwrap_or_else(|| panic!("ASKING: {}", show(&raw)));
    if rest == b"$-1\r\n" || rest.starts_with(b"-ASK") || rest.starts_with(b"-MOVED") {
        return None;
    }
    let body = rest
        .splitn(2, |&b| b == b'\n')
        .nth(1)
        .unwrap_or_else(|| panic!("GET: {}", show(rest)));
    Some(body.strip_suffix(b"\r\n").unwrap_or(body).to_vec())
}

/// The creation time (ms) of node `from`'s outbound cluster-bus link to node `to` (`CLUSTER LINKS`).
#[track_caller]
pub fn link_created(c: &RedisCluster, from: usize, to: usize) -> Option<u64> {
    let raw = c.command(from, &["CLUSTER", "LINKS"]);
    let text = String::from_utf8_lossy(&raw).into_owned();
    // RESP2: an array of flat maps, each value a bulk string but the times: `$9`, `direction`, `$2`, `to`,
    // `$4`, `node`, `$40`, the id, `$11`, `create-time`, `:<ms>`, ...
    let lines: Vec<&str> = text.split("\r\n").collect();
    let id = c.node_id(to);
    (0..lines.len().saturating_sub(9)).find_map(|i| {
        let fields = (lines[i], lines[i + 2], lines[i + 6], lines[i + 8]);
        (fields == ("direction", "to", id, "create-time"))
            .then(|| lines[i + 9].strip_prefix(':')?.parse().ok())
            .flatten()
    })
}
