//! [`Members`]: a manager's Redlock members over the connections of one [`Fanout`]: a plain member is one
//! connection, a cluster member one connection per node of its slot map; [`MembersRound`] routes each command of
//! a round to the master owning its slot, follows `MOVED` and `ASK` within the round's deadline, and hands up
//! exactly one outcome per command per member, in the order the member was sent them.
//!
//! # Layout
//!
//! - this file: [`Members`] (and its map refreshes);
//! - `conns`: [`Conns`] and [`ConnRound`], what the routing needs of the connections it drives: the threaded
//!   [`Fanout`], or the deterministic simulator's machine (`tests/sim/`), which so runs this very routing;
//! - `plan`: [`Plan`], reading the cluster members' maps at build time;
//! - `clock`: the clock bracket of a cluster node's writes (`TIME` around them, read for the engine's clock check);
//! - `replid`: the replication check of a cluster node's votes (a failover it did not see);
//! - `round`: [`MembersRound`], one round over the members;
//! - `command`: a request cut into commands, each with its slot (pure);
//! - `table`: one cluster member's slot → connection table (pure).
//!
//! # Connections
//!
//! Connections `0..N` are the members' own, in member order: a plain member's node, or a cluster member's first
//! master (its first seed if its map could not be read). A cluster member's other nodes follow from `N` on,
//! masters and replicas alike, all dialled when the manager is built: a replica is there before it is promoted,
//! so a failover needs no new connection. A manager of plain members only has no routing at all
//! ([`Members::is_routed`] is false): its rounds are the fanout's rounds, untouched (the engine pays one branch
//! on an `Option` per call, nothing else: no copy, no allocation).
//!
//! # Invariants (what keeps one vote per member)
//!
//! - **One outcome per command per member, from exactly one connection.** A command of a cluster member is on
//!   the wire of one connection at a time: its expectation sits in that connection's FIFO of the round
//!   (`round.rs`, `wire`), which mirrors the fanout's own order of that connection's outcomes (the fanout hands out
//!   exactly one outcome per request per connection, in send order). A redirection's reply is consumed by the
//!   routing layer and never handed up: the command is sent again (to one other connection) only after it came,
//!   so two masters never answer for the same command, and a late reply of the first is impossible (it *was* the
//!   redirection). A timed-out request's late reply is dropped by the fanout, as for a plain node.
//! - **A redirection is never a vote.** `MOVED`/`ASK` are followed at most twice per command; a third, one that
//!   cannot be read, one to a node this member's map never showed, or one that comes after the round's deadline
//!   makes the command's outcome a failure ([`NodeError::Cluster`], or [`NodeError::Timeout`] past the
//!   deadline), which every kind counts as a failed vote.
//! - **Nothing is sent after the deadline.** A resend is made only before the round's deadline; all sends of a
//!   round share its fanout round, whose deadline bounds every outcome.
//! - **Outcomes by identity.** A member's commands are numbered as the caller sent them to the member
//!   ([`MembersRound::next_seq`]), wherever each was routed or redirected; each outcome is handed up under its
//!   command's id as soon as it is final, in any order (commands sent to different masters answer independently).
//!   Below, every reply awaited on a connection (a command's, an `ASKING`'s, a check's readings and verdict) is
//!   looked up by the id the fanout's round gave it, and a check judges exactly the outcomes of its own write.
//! - **The vote's source.** Each outcome handed up is dated by the connection it came from
//!   ([`MembersRound::source`]): the restart guard judges that connection's server, not the member's first.
//! - **A vote is checked before it is handed up** (when [`Members::check_replication`] is on, for every round
//!   but a release round): each write of commands to a cluster node ends with `INFO replication`, and the
//!   outcomes read before it are held until its reply is judged (`replid.rs`): a master with another
//!   replication id than before is quarantined first, a reading that proves nothing turns replies into failed
//!   votes, and an outcome still held when the round ends is a timeout. One check per write: the outcomes it
//!   covers are exactly those expected before it on that connection's FIFO.
//! - **A vote carries the clock of the node it ran on** (when the round asks, [`MembersRound::time_writes`]: a
//!   lease round with the clock check on): each write of commands to a cluster node is `TIME`, the commands,
//!   `TIME` (then the replication check), and its outcomes are handed up with both readings once the last of them
//!   is read (`clock.rs`); a redirected command's resend is a write of its own, bracketed again on its node.
//!
//! [`NodeError::Cluster`]: crate::net::NodeError::Cluster
//! [`NodeError::Timeout`]: crate::net::NodeError::Timeout

mod clock;
pub(crate) use clock::TIME;
mod command;
mod conns;
mod plan;
mod replid;
mod round;
mod table;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use clock::Bracket;
pub use conns::{ConnRound, Conns, MapDone, Vacancies};
pub use plan::{MapRead, Plan};
use replid::ReplCheck;
pub use round::MembersRound;
use table::{Node, Table, Takeover};

use crate::net::cluster::{ClusterAddr, MemberAddr, key_slot};
use crate::net::{Fanout, NodeAddr, NodeCounts, Options, TlsConfig};
use crate::resp::Value;
use crate::sync::lock;

/// The members of a manager over one fanout's connections (see the module doc): the threaded [`Fanout`]'s,
/// or the simulator's ([`Conns`]).
#[derive(Debug)]
pub struct Members<F = Fanout> {
    fanout: F,
    /// Per member, the address its reports name: a plain member's node, a cluster member's first seed.
    addrs: Vec<NodeAddr>,
    routes: Option<Box<Routes>>,
}

/// The routing of a manager with at least one cluster member.
#[derive(Debug)]
struct Routes {
    /// Per member: its cluster, or `None` for a plain node (whose connection is its own index).
    clusters: Vec<Option<Cluster>>,
    /// Per connection: its member.
    member_of: Vec<usize>,
    /// Per connection: when this manager saw it take over slots it had not served as a master of its member's
    /// map (a promoted replica); `None`: never.
    promoted: Arc<Mutex<Vec<Option<Instant>>>>,
    /// The replication check of cluster nodes' votes (`replid.rs`), when on ([`Members::check_replication`]).
    check: Option<ReplCheck>,
    /// Held by a map refresh while it compares the nodes it dials with the other members' servers and occupies
    /// vacant connections for them: two members' refreshes at once must not both dial the same new server.
    occupying: Arc<Mutex<()>>,
    /// How long a map refresh may wait for its replies (the connect timeout), and the TLS settings to dial with.
    wait: Duration,
    tls: TlsConfig,
}

/// One cluster member: its URL, its table, its map refreshes.
#[derive(Debug)]
struct Cluster {
    addr: ClusterAddr,
    table: Arc<Mutex<Table>>,
    /// A refresh is under way (at most one per member).
    refreshing: Arc<AtomicBool>,
    /// When the last refresh started (they are at least [`MIN_REFRESH`] apart).
    last: Mutex<Option<Instant>>,
}

/// Map refreshes of one member start at least this far apart.
const MIN_REFRESH: Duration = Duration::from_millis(100);

impl Members {
    /// The members of `plan` over a fanout of its connections, made with `opts`.
    ///
    /// # Errors
    ///
    /// As [`Fanout::new`].
    pub fn new(plan: Plan, opts: Options) -> io::Result<Members> {
        let fanout = Fanout::with_vacancies(plan.conns.clone(), plan.vacant, opts)?;
        Ok(Members::over(plan, fanout))
    }

    /// The connections.
    pub fn fanout(&self) -> &Fanout {
        &self.fanout
    }
}

impl<F: Conns> Members<F> {
    /// The members of `plan` over `fanout`, whose connections are [`Plan::conns`], in order.
    pub fn over(plan: Plan, fanout: F) -> Members<F> {
        let Plan {
            members,
            conns,
            tables,
            vacant: _,
        } = plan;
        let addrs: Vec<NodeAddr> = members
            .iter()
            .map(|m| match m {
                MemberAddr::Node(node) => node.clone(),
                MemberAddr::Cluster(c) => c.seeds()[0].clone(),
            })
            .collect();
        let routed = tables.iter().any(Option::is_some);
        let nconns = conns.len();
        let (wait, tls) = (
            fanout.options().connect_timeout,
            fanout.options().tls().clone(),
        );
        let routes = routed.then(|| {
            let mut member_of: Vec<usize> = (0..nconns).collect();
            let clusters: Vec<Option<Cluster>> = members
                .into_iter()
                .zip(tables)
                .enumerate()
                .map(|(m, (addr, table))| match (addr, table) {
                    (MemberAddr::Cluster(addr), Some(table)) => {
                        let vacant = table.vacant.iter().copied();
                        for conn in table.nodes.iter().map(|(node, _)| node.conn).chain(vacant) {
                            if let Some(slot) = member_of.get_mut(conn) {
                                *slot = m;
                            }
                        }
                        Some(Cluster {
                            addr,
                            table: Arc::new(Mutex::new(table)),
                            refreshing: Arc::default(),
                            last: Mutex::new(None),
                        })
                    }
                    _ => None,
                })
                .collect();
            Box::new(Routes {
                clusters,
                member_of,
                promoted: Arc::new(Mutex::new(vec![None; nconns])),
                check: None,
                occupying: Arc::default(),
                wait,
                tls,
            })
        });
        Members {
            fanout,
            addrs,
            routes,
        }
    }

    /// Follows every command a routed round (not a release round) sends to a cluster node with `INFO
    /// replication`, and hands its outcome up only once that reply shows the same master as the connection's
    /// set-up reading, whose reply is the `info_at`-th of [`Options::setup`]'s (an `INFO` with the replication
    /// section): a failover and failback this manager never saw then quarantines the node as a promoted
    /// replica before its votes are counted (see `replid.rs`). Nothing for a manager of plain members.
    pub fn check_replication(&mut self, info_at: usize) {
        if let Some(routes) = self.routes.as_deref_mut() {
            routes.check = Some(ReplCheck::new(info_at, routes.member_of.len()));
        }
    }

    /// Whether some member is a cluster (its rounds are routed).
    #[inline]
    pub fn is_routed(&self) -> bool {
        self.routes.is_some()
    }

    /// Whether member `member` is a cluster.
    pub fn is_cluster(&self, member: usize) -> bool {
        self.routes
            .as_ref()
            .is_some_and(|r| matches!(r.clusters.get(member), Some(Some(_))))
    }

    /// The connections.
    pub fn conns(&self) -> &F {
        &self.fanout
    }

    /// How many members.
    #[inline]
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// How many connections: one per member, more with cluster members (every node of their maps, and their
    /// vacant connections).
    pub fn connections(&self) -> usize {
        self.routes
            .as_ref()
            .map_or(self.addrs.len(), |r| r.member_of.len())
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// The members' addresses for reports (a cluster member's first seed).
    pub fn addrs(&self) -> &[NodeAddr] {
        &self.addrs
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        self.fanout.options()
    }

    /// What member `member`'s connections did so far: a plain member's own; a cluster member's, every node's of
    /// its table summed (each one's alone is in [`fanout`](Members::fanout)'s statistics).
    pub fn stats(&self, member: usize) -> NodeCounts {
        let mut counts = self.fanout.stats(member);
        for conn in self.member_conns(member).into_iter().skip(1) {
            counts.absorb(&self.fanout.stats(conn));
        }
        counts
    }

    /// A round over the members (see [`Fanout::round`]).
    #[inline]
    pub fn round(&self, deadline: Instant) -> MembersRound<'_, F> {
        MembersRound::new(self, self.fanout.round(deadline), deadline, true)
    }

    /// A release round over the members (see [`Fanout::release_round`]). Its commands carry no replication
    /// check (a release makes no holder).
    #[inline]
    pub fn release_round(&self, deadline: Instant) -> MembersRound<'_, F> {
        MembersRound::new(self, self.fanout.release_round(deadline), deadline, false)
    }

    /// Connection `conn`'s completed set-ups (see [`Fanout::sessions`]).
    #[inline]
    pub fn sessions(&self, conn: usize) -> u64 {
        self.fanout.sessions(conn)
    }

    /// The session a request queued on connection `conn` now would be answered in (see
    /// [`Fanout::next_session`]).
    pub fn next_session(&self, conn: usize) -> u64 {
        self.fanout.next_session(conn)
    }

    /// Connection `conn`'s set-up replies (see [`Fanout::setup_replies`]).
    pub fn setup_replies(&self, conn: usize) -> Vec<(Value, Instant)> {
        self.fanout.setup_replies(conn)
    }

    /// When connection `conn` was last seen taking over slots it had not served as a master (a promoted
    /// replica, or a node its member's map never showed as one); `None` if never.
    #[inline]
    pub fn promoted(&self, conn: usize) -> Option<Instant> {
        let routes = self.routes.as_ref()?;
        lock(&routes.promoted).get(conn).copied().flatten()
    }

    /// When connection `conn` was last seen taking over what serves `key`: as a promoted replica
    /// ([`promoted`](Members::promoted)), or as the new owner of `key`'s slot ([`Table::taken_over`]: a
    /// migration, which carries whatever the old owner lost); the later of the two. `None` for a plain member's
    /// connection, and for one seen taking over neither.
    pub fn taken_over(&self, conn: usize, key: &[u8]) -> Option<Instant> {
        let promoted = self.promoted(conn);
        let cluster = self.cluster(self.member_of(conn))?;
        let slot = lock(&cluster.table).taken_over(key_slot(key), conn);
        promoted.max(slot)
    }

    /// Whether connection `conn` is a node of a cluster member (not a plain member's).
    pub fn in_cluster(&self, conn: usize) -> bool {
        self.is_cluster(self.member_of(conn))
    }

    /// Whether plain member `member` has stopped answering ([`Fanout::silent`]); never for a cluster member (its
    /// votes come from whichever master serves the key: a round waits for them as before).
    pub fn silent(&self, member: usize, for_at_least: Duration) -> bool {
        !self.is_cluster(member) && self.fanout.silent(member, for_at_least)
    }

    /// The connections of member `member`: its own, and for a cluster member every node of its table.
    pub fn member_conns(&self, member: usize) -> Vec<usize> {
        let mut conns = vec![member];
        if let Some(cluster) = self.cluster(member) {
            let table = lock(&cluster.table);
            conns.extend(
                table
                    .nodes
                    .iter()
                    .map(|(node, _)| node.conn)
                    .filter(|&c| c != member),
            );
        }
        conns
    }

    /// Quarantines `conn` as a promoted replica from `now` (or from a later instant already noted).
    fn note_promoted(&self, conn: usize, now: Instant) {
        if let Some(routes) = &self.routes {
            if let Some(cell) = lock(&routes.promoted).get_mut(conn) {
                *cell = Some(cell.map_or(now, |at| at.max(now)));
            }
        }
    }

    /// The cluster of member `member`, if it is one.
    fn cluster(&self, member: usize) -> Option<&Cluster> {
        self.routes.as_ref()?.clusters.get(member)?.as_ref()
    }

    /// The member of connection `conn`.
    fn member_of(&self, conn: usize) -> usize {
        self.routes
            .as_ref()
            .and_then(|r| r.member_of.get(conn).copied())
            .unwrap_or(conn)
    }

    /// Records that `conn` serves `slot` of member `member` now (a `MOVED`), quarantining it if it takes over as
    /// a promoted replica; and asks for a new map.
    fn moved(&self, member: usize, slot: u16, conn: usize, now: Instant) {
        let Some(cluster) = self.cluster(member) else {
            return;
        };
        {
            // The quarantine is noted before the table lock is let go, so before any round routes a command to
            // the promoted node (as a refresh does): another thread's grant from it must find it quarantined.
            let mut table = lock(&cluster.table);
            if table.moved(slot, conn, now) == Takeover::Promoted {
                self.note_promoted(conn, now);
            }
        }
        self.refresh(member);
    }

    /// Records that `conn` answers an `ASK` for `slot` of member `member`: it takes the slot over (importing it,
    /// [`Table::taken_over`]); a node that was no master of its map is quarantined as a promoted one would be (the
    /// safe side: an importing master is one already).
    fn asked(&self, member: usize, slot: u16, conn: usize, now: Instant) {
        let Some(cluster) = self.cluster(member) else {
            return;
        };
        let mut table = lock(&cluster.table);
        table.note_taken(slot, conn, now);
        if !table.is_master(conn) {
            self.note_promoted(conn, now);
        }
    }

    /// Reads member `member`'s map again, in a thread of its own (so that no round, thread or task waits for it),
    /// from every node of its table and its seeds; the new map replaces the table when it comes, and the nodes it
    /// shows taking over as promoted replicas are quarantined from then. At most one refresh per member at a
    /// time, and [`MIN_REFRESH`] apart; called after a `MOVED`, a failed connection of the member, or a slot no
    /// master serves.
    pub(crate) fn refresh(&self, member: usize) {
        let (Some(routes), Some(cluster)) = (self.routes.as_deref(), self.cluster(member)) else {
            return;
        };
        if cluster.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let now = self.fanout.now();
        {
            let mut last = lock(&cluster.last);
            if last.is_some_and(|t| now.saturating_duration_since(t) < MIN_REFRESH) {
                cluster.refreshing.store(false, Ordering::Release);
                return;
            }
            *last = Some(now);
        }
        let tls_member = cluster.addr.seeds()[0].tls();
        let mut nodes: Vec<NodeAddr> = {
            let table = lock(&cluster.table);
            let mut known: Vec<&(Node, bool)> = table.nodes.iter().collect();
            known.sort_by_key(|(_, master)| !*master); // masters first
            known
                .iter()
                .map(|(n, _)| cluster.addr.node(&n.host, n.port))
                .collect()
        };
        for seed in cluster.addr.seeds() {
            if !nodes
                .iter()
                .any(|n| n.host() == seed.host() && n.port() == seed.port())
            {
                nodes.push(seed.clone());
            }
        }
        let table = Arc::clone(&cluster.table);
        let promoted = Arc::clone(&routes.promoted);
        let flag = Arc::clone(&cluster.refreshing);
        let (wait, tls) = (routes.wait, routes.tls.clone());
        let (occupier, addr) = (self.fanout.vacancies(), cluster.addr.clone());
        let (occupying, member_of) = (Arc::clone(&routes.occupying), routes.member_of.clone());
        let done: MapDone = Box::new(move |read, clock| {
            if let Some((map, origin)) = read {
                // Nodes the table does not know get vacant connections first, so the table can route to
                // them; a master among them takes over as a promoted one would (`Table::read`): quarantined.
                let unknown = lock(&table).unknown(&map, &origin, tls_member);
                // Every other member's servers (a vacant connection's placeholder is its member's seed), read
                // now, under the lock every refresh occupies under: a node of this member's map that is one
                // of them is not dialled, or one server would vote for two members (a list taken before
                // another member's refresh occupied would miss what it dials).
                let _one_at_a_time = match unknown.is_empty() {
                    true => None,
                    false => Some(lock(&occupying)),
                };
                let others: Vec<NodeAddr> = match unknown.is_empty() {
                    true => Vec::new(),
                    false => (0..member_of.len())
                        .filter(|&c| member_of[c] != member)
                        .filter_map(|c| occupier.addr(c))
                        .collect(),
                };
                for (host, port) in unknown {
                    let node = addr.node(&host, port);
                    if others.iter().any(|o| o.same_server(&node)) {
                        continue;
                    }
                    let Some(conn) = lock(&table).vacant.pop() else {
                        break; // none left: its slots get no vote from this member until a rebuild
                    };
                    match occupier.occupy(conn, node) {
                        true => lock(&table).add(host, port, conn),
                        // Refused (a TLS node it cannot name): kept for the next new node.
                        false => lock(&table).vacant.push(conn),
                    }
                }
                let now = clock();
                // The quarantine is noted before the table routes anything to the promoted nodes.
                let mut table = lock(&table);
                let fresh = table.preview(&map, &origin, tls_member);
                {
                    let mut promoted = lock(&promoted);
                    for conn in fresh {
                        if let Some(cell) = promoted.get_mut(conn) {
                            *cell = Some(cell.map_or(now, |at| at.max(now)));
                        }
                    }
                }
                table.install(&map, &origin, tls_member, Some(now));
            }
            flag.store(false, Ordering::Release);
        });
        let started = self.fanout.read_map(nodes, wait, &tls, done);
        if started.is_err() {
            cluster.refreshing.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::cluster::{ClusterNode, SlotMap};
    use crate::net::test_peer::{Peer, nobody};
    use bytes::Bytes;

    /// A refresh reads the map from the member's seeds as well as from the nodes of its table: a seed its map
    /// no longer lists (on the same host as a node it does, another port) is asked too, so a member whose
    /// listed nodes are all gone finds its map again.
    #[test]
    fn a_refresh_asks_the_seeds_its_table_does_not_list() {
        let (seed, gone) = (Peer::start(), nobody());
        assert_eq!(seed.addr().host(), gone.host());
        let member: MemberAddr = format!(
            "redis+cluster://{}:{}",
            seed.addr().host(),
            seed.addr().port()
        )
        .parse()
        .expect("a cluster URL");
        let map = Some(Some((
            SlotMap::one_shard(ClusterNode::at(&gone), Vec::new()),
            gone.host().to_owned(),
        )));
        let plan = Plan::with_maps(vec![member], vec![map]);
        assert_eq!(
            plan.member_nodes(0),
            [&gone],
            "the table lists the gone node only"
        );
        let members = Members::new(plan, Options::default()).expect("members");
        members.refresh(0);
        assert!(
            seed.received(&[b"CLUSTER", b"SHARDS"], Duration::from_secs(5)),
            "the seed was asked for the map: {:?}",
            seed.log()
        );
    }

    /// A map of two masters: `low` serves slots 0..=8191, `high` the rest.
    fn halves(low: &NodeAddr, high: &NodeAddr) -> SlotMap {
        let shard = |from: i64, to: i64, n: &NodeAddr| {
            let node = vec![
                Value::BulkString(Bytes::from(n.host().to_owned())),
                Value::Integer(i64::from(n.port())),
            ];
            Value::Array(vec![
                Value::Integer(from),
                Value::Integer(to),
                Value::Array(node),
            ])
        };
        let reply = Value::Array(vec![shard(0, 8191, low), shard(8192, 16383, high)]);
        SlotMap::from_slots_reply(&reply).expect("a map")
    }

    /// A member's connections (what its statistics sum, what its restarts and standing are read from, what
    /// `wait_connected` pings): a plain member's its own alone; a cluster member's its own first, then each other
    /// node of its map once.
    #[test]
    fn a_cluster_members_connections_are_its_own_and_each_other_node_of_its_map_once() {
        let (plain, first, second) = (nobody(), nobody(), nobody());
        let member: MemberAddr = format!("redis+cluster://{}:{}", first.host(), first.port())
            .parse()
            .expect("a cluster URL");
        let map = (halves(&first, &second), first.host().to_owned());
        let plan = Plan::with_maps(
            vec![MemberAddr::Node(plain), member],
            vec![None, Some(Some(map))],
        );
        let members = Members::new(plan, Options::default()).expect("members");
        let cluster = members.cluster(1).expect("a cluster member");
        let other = lock(&cluster.table)
            .conn_of(second.host(), second.port())
            .expect("a connection for the map's second node");
        assert_eq!(members.member_conns(0), [0]);
        assert_eq!(members.member_conns(1), [1, other]);
    }

    /// Connections to nowhere whose map reads answer at once with `map` (read from `host`), and whose vacant
    /// connections take every node they are given, noted as `(connection, address)`.
    #[derive(Debug)]
    struct Mapping {
        fanout: Fanout,
        map: SlotMap,
        host: String,
        occupied: Arc<Mutex<Vec<(usize, NodeAddr)>>>,
    }

    struct Taking(Arc<Mutex<Vec<(usize, NodeAddr)>>>);

    impl Vacancies for Taking {
        fn occupy(&self, conn: usize, addr: NodeAddr) -> bool {
            lock(&self.0).push((conn, addr));
            true
        }
        fn addr(&self, _conn: usize) -> Option<NodeAddr> {
            None
        }
    }

    impl Conns for Mapping {
        type Round<'a> = crate::net::Round<'a>;
        fn round(&self, deadline: Instant) -> crate::net::Round<'_> {
            self.fanout.round(deadline)
        }
        fn release_round(&self, deadline: Instant) -> crate::net::Round<'_> {
            self.fanout.release_round(deadline)
        }
        fn options(&self) -> &Options {
            self.fanout.options()
        }
        fn stats(&self, conn: usize) -> crate::net::NodeCounts {
            self.fanout.stats(conn)
        }
        fn sessions(&self, conn: usize) -> u64 {
            self.fanout.sessions(conn)
        }
        fn next_session(&self, conn: usize) -> u64 {
            self.fanout.next_session(conn)
        }
        fn setup_replies(&self, conn: usize) -> Vec<(crate::resp::Value, Instant)> {
            self.fanout.setup_replies(conn)
        }
        fn now(&self) -> Instant {
            Instant::now()
        }
        fn read_map(
            &self,
            _nodes: Vec<NodeAddr>,
            _wait: Duration,
            _tls: &TlsConfig,
            done: MapDone,
        ) -> Result<(), ()> {
            done(Some((self.map.clone(), self.host.clone())), &Instant::now);
            Ok(())
        }
        fn vacancies(&self) -> Box<dyn Vacancies> {
            Box::new(Taking(Arc::clone(&self.occupied)))
        }
    }

    /// A scale-out: a refresh whose map shows a master the member's table does not know gives it one of the
    /// member's vacant connections, and the table then routes that master's slots to it (until then they have
    /// no owner: no vote of this member for their keys).
    #[test]
    fn a_master_a_refresh_finds_gets_a_vacant_connection_and_its_slots() {
        let (first, added) = (nobody(), nobody());
        let member: MemberAddr = format!("redis+cluster://{}:{}", first.host(), first.port())
            .parse()
            .expect("a cluster URL");
        let host = first.host().to_owned();
        let plan = Plan::with_maps(
            vec![member],
            vec![Some(Some((
                SlotMap::one_shard(ClusterNode::at(&first), Vec::new()),
                host.clone(),
            )))],
        );
        let vacant = plan.conns().len() - plan.vacant()..plan.conns().len();
        assert!(!vacant.is_empty());
        let fanout =
            Fanout::with_vacancies(plan.conns().to_vec(), plan.vacant(), Options::default())
                .expect("fanout");
        // The new map: the first node keeps slots 0..=8191, the added one serves the rest.
        let map = halves(&first, &added);
        let occupied = Arc::new(Mutex::new(Vec::new()));
        let conns = Mapping {
            fanout,
            map,
            host,
            occupied: Arc::clone(&occupied),
        };
        let members = Members::over(plan, conns);
        let cluster = members.cluster(0).expect("a cluster member");
        assert_eq!(lock(&cluster.table).owner(16383), Some(0), "before");
        members.refresh(0);
        let taken = lock(&occupied).clone();
        assert_eq!(taken.len(), 1, "{taken:?}");
        let (conn, addr) = &taken[0];
        assert!(
            vacant.contains(conn) && addr.port() == added.port(),
            "{taken:?}"
        );
        let table = lock(&cluster.table);
        assert_eq!(table.conn_of(added.host(), added.port()), Some(*conn));
        assert_eq!(
            (table.owner(0), table.owner(8192), table.owner(16383)),
            (Some(0), Some(*conn), Some(*conn)),
            "the added master's slots go to its connection"
        );
    }
}
