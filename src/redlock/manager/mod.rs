//! [`LockManager`]: the lock API, a cheap handle on what its clones and guards share (the guard room's
//! `Keeper`: the engine, the watchdog, the waiters). Every public verb is in this room (here the basic ones,
//! `request.rs` the [`Request`] and its terminals, `holding.rs` cancelling waits and the guards' TTL check,
//! `kinds.rs` batches and owners): the only room that knows the engine, the guards and waiting together.

mod holding;
mod kinds;
mod request;

pub use request::Request;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::net::cluster::{MemberAddr, Members, Plan};
use crate::net::{NodeAddr, Options};
use crate::redlock::config::Config;
use crate::redlock::engine::seam::{SystemClock, block};
use crate::redlock::engine::{Engine, restart};
use crate::redlock::error::{Error, Result};
use crate::redlock::guard::Keeper;
use crate::redlock::guard::turns::Turns;
use crate::redlock::inspect::Inspection;
use crate::redlock::kind::{self, Lock};
use crate::redlock::observe;
use crate::redlock::stats::{Activity, Stats, Votes};
use crate::redlock::token::Tokens;
use crate::redlock::waiters::WaitRoom;

/// A distributed lock manager over N independent Redis masters (the Redlock algorithm).
///
/// Every operation sends its request to all N nodes at once and decides as soon as the outcome is certain: an
/// acquisition costs about one round trip to the majority's slowest node, and a node that is down or hung costs
/// nothing unless the majority needs it.
///
/// A `LockManager` is a cheap handle: clone it to share it between threads, guards and tasks (the clones share
/// one set of connections, and concurrent calls share writes on them). The connections close when the last clone
/// and the last [`Guard`](super::Guard) are gone.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use muxlock::LockManager;
///
/// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
/// let lock = locks.request("invoice:42").ttl(Duration::from_secs(10)).acquire()?;
/// // ... work while lock.is_valid() ...
/// locks.unlock(lock)?;
/// # Ok::<(), muxlock::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LockManager {
    keeper: Arc<Keeper>,
}

/// Builds a [`LockManager`]: nodes, then an optional [`Config`].
#[derive(Debug, Default)]
#[must_use]
pub struct Builder {
    nodes: Vec<String>,
    config: Config,
}

impl Builder {
    /// Adds a node: `redis://[user:pass@]host:port[/db]`, `rediss://...` (TLS: see [`Config::with_tls`]) or
    /// `host:port` (see [`NodeAddr`]); or a member that is a Redis Cluster, `redis+cluster://host:port,host:port`
    /// (see [`cluster`](Builder::cluster)).
    pub fn node(mut self, url: impl Into<String>) -> Builder {
        self.nodes.push(url.into());
        self
    }

    /// Adds several nodes (each may be a cluster's `redis+cluster://` URL, as in [`node`](Builder::node)).
    pub fn nodes<S: Into<String>>(mut self, urls: impl IntoIterator<Item = S>) -> Builder {
        self.nodes.extend(urls.into_iter().map(Into::into));
        self
    }

    /// Adds a member that is a whole Redis Cluster, given by some of its nodes (`host:port`, its *seeds*): the
    /// same as [`node`](Builder::node) with `redis+cluster://host:port,host:port`. Use the URL form for
    /// credentials or TLS (`rediss+cluster://user:password@host:port,...`).
    ///
    /// The member counts as **one** Redlock vote, given by the master owning the lock's slot; see
    /// [`Builder::build`] for what building reads, and the README ("Cluster members") for what is supported.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::builder()
    ///     .cluster(["10.0.1.1:7000", "10.0.1.2:7000"])
    ///     .cluster(["10.0.2.1:7000", "10.0.2.2:7000"])
    ///     .node("redis://10.0.3.1:6379") // plain members and cluster members mix
    ///     .build()?;
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn cluster<S: AsRef<str>>(mut self, seeds: impl IntoIterator<Item = S>) -> Builder {
        let seeds: Vec<String> = seeds.into_iter().map(|s| s.as_ref().to_owned()).collect();
        self.nodes
            .push(format!("redis+cluster://{}", seeds.join(",")));
        self
    }

    /// Replaces the configuration (default: [`Config::default`]).
    pub fn config(mut self, config: Config) -> Builder {
        self.config = config;
        self
    }

    /// Checks everything and starts connecting to the nodes (without waiting for them). Cluster members' maps
    /// are read first, every member's at once, waiting up to the connect timeout
    /// ([`Config::with_connect_timeout`]) in all: they say which nodes to connect to.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for no nodes, an invalid address, the same node listed twice (also a server that two
    /// members share through a cluster member's map), an invalid setting, or TLS files ([`Config::with_tls`])
    /// that cannot be read or hold nothing usable.
    /// An even number of nodes is allowed: the majority is then `N/2 + 1`, so 4 nodes tolerate one failure, like 3.
    pub fn build(self) -> Result<LockManager> {
        self.config.validate()?;
        if self.nodes.is_empty() {
            return Err(Error::config(
                "no nodes: give at least one redis://host:port",
            ));
        }
        let mut addrs: Vec<NodeAddr> = Vec::with_capacity(self.nodes.len());
        let mut members: Vec<MemberAddr> = Vec::with_capacity(self.nodes.len());
        for url in &self.nodes {
            let member: MemberAddr = url.parse().map_err(Error::addr)?;
            // Every node a member may send to: a plain node, or a cluster's seeds.
            let own: Vec<NodeAddr> = match &member {
                MemberAddr::Node(node) => vec![node.clone()],
                MemberAddr::Cluster(c) => c.seeds().to_vec(),
            };
            for addr in own {
                if let Some(twin) = addrs.iter().find(|a| a.same_server(&addr)) {
                    return Err(Error::config(format!(
                        "node {addr} is listed twice (also as {twin}): a majority must span distinct servers"
                    )));
                }
                addrs.push(addr);
            }
            members.push(member);
        }
        // A cluster member's map is read now (waiting up to the connect timeout): it says which connections to
        // make. Plain members read nothing.
        let plan =
            Plan::read(members, self.config.connect_timeout, &self.config.tls).map_err(|e| {
                Error::Os {
                    doing: "reading a cluster member's slot map",
                    error: e.into(),
                }
            })?;
        // A cluster member's nodes are known now, from its map: no server may vote for two members (a cluster
        // given twice through different seeds, a plain member that is a node of a cluster member). Plain members
        // were compared above.
        if let Some((addr, twin)) = plan.is_routed().then(|| shared_server(&plan)).flatten() {
            return Err(Error::config(format!(
                "node {addr} is listed twice (also as {twin}, in another member; a cluster member's nodes are \
                 read from its map): a majority must span distinct servers"
            )));
        }
        let (setup, restart) = restart::connection_setup_for(
            &self.config,
            plan.members(),
            plan.connections(),
            plan.is_routed(),
        );
        let opts = fanout_options(&self.config, setup, &restart);
        let mut fanout = Members::new(plan, opts).map_err(|e| match e.kind() {
            // The input is unusable (TLS files, too many nodes): the message names what.
            std::io::ErrorKind::InvalidInput => Error::config(e.to_string()),
            _ => Error::Os {
                doing: "creating the event poll",
                error: e.into(),
            },
        })?;
        let routed = fanout.is_routed();
        if let Some((_, ids)) = &restart.guard {
            // A cluster node's votes are handed up only after an `INFO replication` read after them shows the
            // master its connection's set-up read: a failover and failback this manager never saw quarantines
            // the node before they count (`net/cluster/route/replid.rs`).
            fanout.check_replication(ids.info());
        }
        if routed && self.config.fold_releases {
            return Err(Error::config(
                "folded releases are not supported on cluster members (their one script spans many slots): \
                 leave Config::with_fold_releases off",
            ));
        }
        let waits = WaitRoom::default();
        if routed {
            // The nodes' queue keys are not colocated with the resource's slot: waits line up in this process.
            waits.set_unqueued();
        }
        let tokens = Tokens::new();
        // The manager's part of its waiters' ids (`guard/turns.rs`): another manager with the same one only costs
        // this one stray wake-ups.
        let turns = Turns::new(tokens.random_u64().map_or(0, |r| (r >> 32) as u32));
        Ok(LockManager {
            keeper: Arc::new(Keeper {
                engine: Engine {
                    votes: fanout.addrs().iter().map(Votes::of).collect(),
                    fanout,
                    clock: SystemClock,
                    config: self.config,
                    tokens,
                    restart,
                    fold: Default::default(),
                },
                watchdog: Arc::default(),
                waits,
                turns,
                activity: Activity::default(),
            }),
        })
    }
}

/// A server that two members of `plan` share, as `(one member's address, the other's)`: names that match, or
/// that resolve to a common socket address (each resolved once). Names that do not resolve now are compared as
/// written, as [`NodeAddr::same_server`] does.
fn shared_server(plan: &Plan) -> Option<(NodeAddr, NodeAddr)> {
    let mut known: Vec<(usize, &NodeAddr, Vec<std::net::SocketAddr>)> = Vec::new();
    for member in 0..plan.members() {
        for addr in plan.member_nodes(member) {
            let resolved = addr.resolve().unwrap_or_default();
            let twin = known.iter().find(|(owner, other, theirs)| {
                *owner != member
                    && other.port() == addr.port()
                    && (other.host().eq_ignore_ascii_case(addr.host())
                        || theirs.iter().any(|s| resolved.contains(s)))
            });
            if let Some((_, twin, _)) = twin {
                return Some((addr.clone(), (*twin).clone()));
            }
            known.push((member, addr, resolved));
        }
    }
    None
}

/// Wakes this process' waiters of `resources` when dropped: after a release, finished or abandoned.
struct NotifyOnDrop<'a> {
    waits: &'a WaitRoom,
    resources: &'a [Vec<u8>],
}

impl Drop for NotifyOnDrop<'_> {
    fn drop(&mut self) {
        for resource in self.resources {
            self.waits.notify(resource);
        }
    }
}

impl LockManager {
    /// The engine: every round goes through it.
    #[inline]
    fn engine(&self) -> &Engine {
        &self.keeper.engine
    }

    /// A manager for `nodes` (URLs or `host:port`) with the default [`Config`].
    ///
    /// # Errors
    ///
    /// As [`Builder::build`].
    pub fn new<S: Into<String>>(nodes: impl IntoIterator<Item = S>) -> Result<LockManager> {
        LockManager::builder().nodes(nodes).build()
    }

    /// A builder, to set a [`Config`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.engine().config
    }

    /// The nodes, in configuration order.
    pub fn nodes(&self) -> &[NodeAddr] {
        self.engine().fanout.addrs()
    }

    /// What this manager saw of each node so far: votes granted, taken and failed, grants not counted after a
    /// restart, restarts seen, timeouts, reconnects, requests per write and round-trip percentiles. Cheap enough to
    /// call at any time (no lock is taken); `Display` prints it as a table.
    pub fn stats(&self) -> Stats {
        self.engine().stats(&self.keeper.activity)
    }

    /// The majority: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.engine().quorum()
    }

    /// Extends `lock`'s lease to `ttl` from now, on all nodes at once. On success the new validity is measured
    /// from the start of this call. On failure `lock` keeps its current validity, or less: the extension may
    /// still have run on nodes whose replies did not count, so a `ttl` shorter than the time left cuts the
    /// validity to `ttl` (less the drift allowance) from the start of this call, which is when those nodes may
    /// now let the key go. An extension that some node did not answer (a round decided without it, a timeout)
    /// may also run there after a later one: from then on no extension counts a lease longer than the shortest
    /// such `ttl` from its own start. Extending always to the same `ttl` (as a guard renews) loses nothing.
    ///
    /// # Errors
    ///
    /// - [`Error::Expired`] if the lease had already run out (nothing is sent: an extension never re-creates an
    ///   expired lock);
    /// - [`Error::ExtendLimit`] after [`Config::max_extensions`] extensions;
    /// - [`Error::LockLost`] if a majority no longer holds our value;
    /// - [`Error::Quorum`] if too few nodes answered within the current lease.
    pub fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<()> {
        block(self.extend_async(lock, ttl))
    }

    /// As [`extend`](LockManager::extend), as a future that never blocks the executor's thread (see
    /// [`Request::acquire_async`](super::Request::acquire_async)). Dropped before it ends, it leaves `lock` as
    /// a failed extension does: the requests it sent may still run on the nodes.
    ///
    /// # Errors
    ///
    /// As [`extend`](LockManager::extend).
    pub async fn extend_async(&self, lock: &mut Lock, ttl: Duration) -> Result<()> {
        let engine = self.engine();
        let op = observe::start(
            "extend",
            lock.kind.label(),
            engine.fanout.len(),
            engine.quorum(),
        );
        let extended = op.instrument(kind::extend(engine, lock, ttl)).await;
        op.finish(&extended, extended.is_ok().then(|| lock.validity()));
        extended
    }
    /// Extends the lock on `resource` whose value is `value` to `ttl` from now, on all nodes at once, and returns
    /// the instant the new lease ends on this process' monotonic clock (measured from the start of this call, less
    /// the drift allowance, as for an acquisition).
    ///
    /// This is [`extend`](LockManager::extend) for a caller that holds the lock by its value alone, such as a
    /// script that acquired it in another process (`muxlock acquire` prints the value). It sends the same
    /// compare-and-pexpire script, which only extends a key that still holds `value`: **an extension by value
    /// cannot revive an expired key**, and never touches another holder's. Unlike `extend`, it does not know when
    /// the lease ends, so it cannot refuse an expired lock before sending; the nodes refuse it instead
    /// ([`Error::LockLost`]). It is not counted against [`Config::max_extensions`]. A failed extension may still
    /// have run on some nodes: with a `ttl` shorter than the time left, count the lease as ending `ttl` after
    /// the call began (less the drift allowance) at the latest. And since an extension some node did not answer
    /// may run there after a later one, a caller that extends with different TTLs should count every later
    /// lease as at most the shortest of them from its own call's start (a [`Lock`] extended with
    /// [`extend`](LockManager::extend) keeps that count itself).
    ///
    /// # Errors
    ///
    /// - [`Error::LockLost`] if a majority does not hold `value` under `resource` (it expired, was released, or
    ///   was never taken);
    /// - [`Error::Quorum`] if too few nodes answered in time;
    /// - [`Error::Config`] for an empty resource name or value, or an invalid `ttl`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// // The value printed by `muxlock acquire nightly-report --ttl 30s` in another process:
    /// let value = "6f1c0e3a9b2d4c5e8f7a6b5c4d3e2f1a0b9c8d7e";
    /// let valid_until = locks.extend_value("nightly-report", value, Duration::from_secs(30))?;
    /// println!("valid for {:?} more", valid_until.saturating_duration_since(std::time::Instant::now()));
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn extend_value(
        &self,
        resource: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Instant> {
        block(
            self.engine()
                .extend_value(resource.as_ref(), value.as_ref(), ttl),
        )
    }

    /// Releases `lock` on all nodes at once (compare-and-delete: a node only deletes the key if it still holds this
    /// lock's value, so an expired lock never deletes its next holder's key).
    ///
    /// Returns once a majority confirmed, or every node answered, or the round timed out. `Ok` means a majority
    /// deleted the key: it is the number of nodes that had by then (at least [`quorum`](LockManager::quorum)).
    /// Nodes that had not answered still delete it when the request reaches them.
    ///
    /// # Errors
    ///
    /// - [`Error::LockLost`] if so many nodes answered that they no longer held it (or were never reached) that
    ///   no majority can have held it: its lease had run out, so the work it protected may have overlapped
    ///   another holder's. Nothing is left to release.
    /// - [`Error::Quorum`] if fewer than a majority confirmed but the nodes that did not answer may have held it
    ///   with them: the release may not have happened there, and the lock will end with its lease.
    ///
    /// Both carry every node's outcome.
    pub fn unlock(&self, lock: Lock) -> Result<usize> {
        block(self.unlock_async(lock))
    }

    /// As [`unlock`](LockManager::unlock), as a future that never blocks the executor's thread.
    ///
    /// # Errors
    ///
    /// As [`unlock`](LockManager::unlock).
    pub async fn unlock_async(&self, lock: Lock) -> Result<usize> {
        let engine = self.engine();
        let op = observe::start(
            "release",
            lock.kind.label(),
            engine.fanout.len(),
            engine.quorum(),
        );
        // Whatever the outcome, the keys may be free now: this process' waiters look, also if this future is
        // dropped part-way (what was sent still runs on the nodes).
        let _notify = NotifyOnDrop {
            waits: &self.keeper.waits,
            resources: lock.resources(),
        };
        let released = op.instrument(kind::release(engine, &lock)).await;
        op.finish(&released, None);
        released
    }
    /// Releases the lock on `resource` whose value is `value`, on all nodes at once: [`unlock`](LockManager::unlock)
    /// for a caller that holds the lock by its value alone (a script, another process). The same compare-and-delete
    /// script: a node deletes the key only if it still holds `value`, so another holder's lock is never touched.
    ///
    /// Returns the number of nodes that deleted the key before the round ended, at least
    /// [`quorum`](LockManager::quorum) (as `unlock`).
    ///
    /// # Errors
    ///
    /// - [`Error::LockLost`] if so many nodes answered that they did not hold `value` that no majority can have
    ///   held it (the lock had expired, was released already, or was never taken), so the work it protected may
    ///   have overlapped another holder's;
    /// - [`Error::Quorum`] if fewer than a majority confirmed but the silent nodes may have held it;
    /// - [`Error::Config`] for an empty resource name or value.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// match locks.unlock_value("nightly-report", "6f1c0e3a9b2d4c5e8f7a6b5c4d3e2f1a0b9c8d7e") {
    ///     Ok(released) => println!("released on {released} nodes"),
    ///     Err(e) if e.is_lost() => {
    ///         eprintln!("the lock had already expired: the work it protected may have overlapped another holder's")
    ///     }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn unlock_value(
        &self,
        resource: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<usize> {
        let released = block(
            self.engine()
                .unlock_value(resource.as_ref(), value.as_ref()),
        );
        // A release refused before its round (an empty name or value) released nothing: nobody to wake.
        if !matches!(released, Err(Error::Config(_))) {
            self.keeper.waits.notify(resource.as_ref());
        }
        released
    }

    /// Reads what every node holds under `resource`'s key, in one round to all nodes (`GET` and `PTTL`, pipelined),
    /// without taking or changing anything: for a status display, or to find who holds a lock.
    ///
    /// Nodes that are down or do not answer within [`Config::round_timeout`] appear as [`KeyState::Failed`](super::KeyState::Failed); the
    /// call itself fails only for an invalid argument.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty resource name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::{KeyState, LockManager};
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// let seen = locks.inspect("invoice:42")?;
    /// match seen.holder() {
    ///     Some(value) => println!("held by {} on {} nodes", String::from_utf8_lossy(value), seen.holding(value)),
    ///     None => println!("not held by a majority"),
    /// }
    /// for (node, state) in seen.nodes() {
    ///     if let KeyState::Held { ttl: Some(ttl), .. } = state {
    ///         println!("{node}: expires in {ttl:?}");
    ///     }
    /// }
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn inspect(&self, resource: impl AsRef<[u8]>) -> Result<Inspection> {
        block(self.engine().inspect(resource.as_ref()))
    }

    /// Waits until every node's connection is set up (dialled, its TLS handshake done, its set-up commands
    /// answered) or has failed, for at most the connect timeout ([`Config::with_connect_timeout`]); `true` if
    /// every node answered. Nothing else is read or changed (one `PING` per connection, behind its set-up).
    ///
    /// A manager connects in the background once built, and a round's deadline
    /// ([`Config::round_timeout`]) counts from the round's start whatever its connections are doing: a round
    /// made at once after [`build`](Builder::build) includes connecting, and on a loaded machine or a distant
    /// TLS node that alone may outlast a short round timeout, failing nodes that were only slow to connect. A
    /// process that makes one or two rounds and exits (a command-line tool) calls this first, so that its rounds
    /// wait for the nodes' answers only. A long-lived service need not: its later rounds find the connections
    /// ready.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// locks.wait_connected();
    /// let seen = locks.inspect("invoice:42")?;
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn wait_connected(&self) -> bool {
        let members = &self.engine().fanout;
        // Every member's connections (a cluster member's: every node of its map), not the vacant ones kept for
        // nodes its later maps show (never dialled: nothing to wait for).
        let conns: Vec<usize> = (0..members.len())
            .flat_map(|m| members.member_conns(m))
            .collect();
        let pings: Vec<(usize, &[u8], usize)> = conns.iter().map(|&c| (c, PING, 1)).collect();
        let deadline = crate::time::later(Instant::now(), self.engine().config.connect_timeout);
        let mut round = members.fanout().round(deadline);
        round.send_each(&pings);
        round.need(pings.len());
        let mut answered = 0;
        while let Some((_, reply)) = round.next() {
            answered += usize::from(reply.is_ok());
        }
        answered == pings.len()
    }
}

/// `PING`, encoded.
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// The fanout's options for a manager of `config` whose connections run `setup` first (the restart guard's
/// `restart` says which of those commands may be refused).
pub(crate) fn fanout_options(
    config: &Config,
    setup: Vec<bytes::Bytes>,
    restart: &restart::Setup,
) -> Options {
    Options {
        connect_timeout: config.connect_timeout,
        max_in_flight: config.max_in_flight,
        hung_timeout: config.hung_timeout,
        spin: config.spin,
        setup,
        tls: config.tls.clone(),
        // The scripts' loading, the native probe, `CONFIG GET *append*` and the persistence marker may be refused.
        optional_setup: restart.optional(),
        ..Options::default()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::net::cluster::SlotMap;
    use crate::net::test_peer::nobody;
    use crate::resp::Value;

    /// A plain member that is a node of a cluster member's map other than its seed shares that member's server:
    /// the configuration is refused, since one server would vote for two members.
    #[test]
    fn a_plain_member_on_a_non_seed_node_of_a_cluster_members_map_shares_its_server() {
        let (seed, other) = (nobody(), nobody());
        let node = |n: &NodeAddr| {
            Value::Array(vec![
                Value::BulkString(Bytes::from(n.host().to_owned())),
                Value::Integer(i64::from(n.port())),
            ])
        };
        let shard = |from: i64, to: i64, n: &NodeAddr| {
            Value::Array(vec![Value::Integer(from), Value::Integer(to), node(n)])
        };
        let map = SlotMap::from_slots_reply(&Value::Array(vec![
            shard(0, 8191, &seed),
            shard(8192, 16383, &other),
        ]))
        .expect("a map");
        let cluster: MemberAddr = format!("redis+cluster://{}:{}", seed.host(), seed.port())
            .parse()
            .expect("a cluster URL");
        let plan = Plan::with_maps(
            vec![MemberAddr::Node(other.clone()), cluster],
            vec![None, Some(Some((map, seed.host().to_owned())))],
        );
        let shared = shared_server(&plan).expect("the server both members name");
        assert!(
            [&shared.0, &shared.1]
                .iter()
                .all(|a| a.port() == other.port()),
            "{shared:?}"
        );
    }
}
