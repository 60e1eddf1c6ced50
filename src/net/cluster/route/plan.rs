//! [`Plan`]: a manager's members before their connections exist: each cluster member's slot map read from its
//! seeds at build time, and the connections to make, in order (see the parent's "Connections").

use std::io;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::table::{Node, Table};
use crate::net::cluster::{ClusterAddr, MemberAddr, SlotMap};
use crate::net::{Fanout, NodeAddr, Options, TlsConfig};
use crate::resp::{Value, encode_command};

/// A manager's members before their connections exist: every cluster member's map read (or not), and the
/// connections to make, in order.
#[derive(Debug)]
pub struct Plan {
    pub(super) members: Vec<MemberAddr>,
    /// The connections, `0..members.len()` the members' own.
    pub(super) conns: Vec<NodeAddr>,
    /// Per member: for a cluster, its table.
    pub(super) tables: Vec<Option<Table>>,
    /// How many of `conns` (the last ones) are vacant: kept for nodes the members' maps show later.
    pub(super) vacant: usize,
}

/// Vacant connections kept per cluster member for nodes its maps show later (a scale-out, a replica added, or
/// the nodes of a member whose map could not be read at build): as many as its map has nodes, at least
/// [`MIN_VACANT`] and at most [`MAX_VACANT`]. A vacant connection costs a few hundred bytes and no socket.
const MIN_VACANT: usize = 8;
const MAX_VACANT: usize = 64;

impl Plan {
    /// Reads each cluster member's slot map from its seeds (`CLUSTER SHARDS`, or `CLUSTER SLOTS` where that is
    /// refused, both pipelined to every seed at once; every member's at once), waiting up to `wait` in all; plans
    /// the connections. A member whose map cannot be read within `wait` is planned with its seeds only and votes
    /// no (no slot is served) until a map is read; its other nodes are then dialled on vacant connections (below).
    /// A plan of plain nodes only reads nothing.
    ///
    /// Each cluster member also gets vacant connections (as many as its map has nodes, at least 8 and at most 64)
    /// for the nodes its later maps show that this one did not (a scale-out, a replica added, the nodes of a
    /// member unmapped at build): they are dialled when a map names them (`Members::refresh`). Once a member's
    /// are used up, a further new node gets no connection and its slots no vote from that member until the
    /// manager is built again.
    ///
    /// # Errors
    ///
    /// Only if the OS refuses an event poll or a thread, or the TLS settings are unusable (as [`Fanout::new`]).
    pub fn read(members: Vec<MemberAddr>, wait: Duration, tls: &TlsConfig) -> io::Result<Plan> {
        // Every cluster member's map at once, each on a thread of its own: read one after the other, members
        // whose seeds are slow would make building wait the connect timeout once per member.
        let maps = read_maps(&members, wait, tls)?;
        Ok(Plan::with_maps(members, maps))
    }

    /// Plans `members` with the maps read for them: per member, for a cluster, its map with the host it was
    /// read from (`Some(None)`: none could be read); `None` for a plain node. What [`Plan::read`] does once
    /// it has the maps (the simulator reads its clusters' maps without sockets).
    pub fn with_maps(members: Vec<MemberAddr>, mut maps: Vec<Option<MapRead>>) -> Plan {
        let n = members.len();
        maps.resize_with(n, || None);
        // First the maps and each member's nodes, then the connections: the members' own first (`0..n`), then
        // every cluster member's other nodes.
        let mut planned: Vec<Option<Planned>> = Vec::with_capacity(n);
        for (member, map) in members.iter().zip(&mut maps) {
            let MemberAddr::Cluster(cluster) = member else {
                planned.push(None);
                continue;
            };
            let map = map.take().flatten();
            // The member's nodes: every node of its map with an address (masters first), else its seeds.
            let mut nodes: Vec<(String, u16)> = Vec::new();
            if let Some((map, origin)) = &map {
                let tls = cluster.seeds()[0].tls();
                for shard in map.shards() {
                    for node in std::iter::once(&shard.master).chain(&shard.replicas) {
                        let port = match tls {
                            true => node.tls_port.or(node.port),
                            false => node.port,
                        };
                        if let (Some(host), Some(port)) = (node.endpoint.host(origin), port) {
                            if !nodes.iter().any(|(h, p)| *p == port && h == host) {
                                nodes.push((host.to_owned(), port));
                            }
                        }
                    }
                }
            }
            if nodes.is_empty() {
                nodes = cluster
                    .seeds()
                    .iter()
                    .map(|s| (s.host().to_owned(), s.port()))
                    .collect();
            }
            planned.push(Some((nodes, map)));
        }
        let mut conns: Vec<NodeAddr> = Vec::with_capacity(n);
        let mut extra: Vec<NodeAddr> = Vec::new();
        let mut tables = Vec::with_capacity(n);
        for (m, (member, plan)) in members.iter().zip(planned).enumerate() {
            let (MemberAddr::Cluster(cluster), Some((nodes, map))) = (member, plan) else {
                if let MemberAddr::Node(node) = member {
                    conns.push(node.clone());
                }
                tables.push(None);
                continue;
            };
            let mut table_nodes = Vec::with_capacity(nodes.len());
            for (i, (host, port)) in nodes.into_iter().enumerate() {
                let conn = match i {
                    0 => {
                        conns.push(cluster.node(&host, port));
                        m
                    }
                    _ => {
                        extra.push(cluster.node(&host, port));
                        n + extra.len() - 1
                    }
                };
                table_nodes.push(Node { host, port, conn });
            }
            let spares = table_nodes.len().clamp(MIN_VACANT, MAX_VACANT);
            let mut table = Table::unmapped(table_nodes);
            if let Some((map, origin)) = &map {
                table.install(map, origin, cluster.seeds()[0].tls(), None);
            }
            tables.push(Some((table, spares, cluster.seeds()[0].clone())));
        }
        conns.extend(extra);
        // The vacant connections last, each cluster member's in a run; a placeholder address (the member's first
        // seed: its TLS setting is the member's) until a map names a node for it.
        let mut vacant = 0;
        let tables = tables
            .into_iter()
            .map(|t| {
                t.map(|(mut table, spares, seed)| {
                    for _ in 0..spares {
                        table.vacant.push(conns.len());
                        conns.push(seed.clone());
                        vacant += 1;
                    }
                    table
                })
            })
            .collect();
        Plan {
            members,
            conns,
            tables,
            vacant,
        }
    }

    /// The connections to make, in order (`0..members()` the members' own; the vacant ones last, see
    /// [`Plan::vacant`]).
    pub fn conns(&self) -> &[NodeAddr] {
        &self.conns
    }

    /// How many of [`conns`](Plan::conns), the last ones, are vacant: never dialled until a map names a node
    /// for them.
    pub fn vacant(&self) -> usize {
        self.vacant
    }

    /// Every server member `member` may send to: a plain member's node; a cluster member's nodes (those of its
    /// map, or its seeds if its map could not be read).
    pub fn member_nodes(&self, member: usize) -> Vec<&NodeAddr> {
        match self.tables.get(member) {
            Some(Some(table)) => table
                .nodes
                .iter()
                .filter_map(|(node, _)| self.conns.get(node.conn))
                .collect(),
            _ => self.conns.get(member).into_iter().collect(),
        }
    }

    /// How many connections the plan makes (the restart guard keeps one record per connection).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// How many members.
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Whether some member is a cluster.
    pub fn is_routed(&self) -> bool {
        self.tables.iter().any(Option::is_some)
    }
}

/// A cluster member's nodes (`host`, `port`: every node of its map, or its seeds) and its map with the host it
/// was read from, if it could be read.
type Planned = (Vec<(String, u16)>, Option<(SlotMap, String)>);

/// What reading one cluster member's map gave: the map with the host it was read from, or `None`.
pub type MapRead = Option<(SlotMap, String)>;

/// Per member, a cluster member's map as [`read_map`] reads it (`None` for a plain member), every cluster
/// member's read at once: building waits up to `wait` in all, not once per member.
fn read_maps(
    members: &[MemberAddr],
    wait: Duration,
    tls: &TlsConfig,
) -> io::Result<Vec<Option<MapRead>>> {
    std::thread::scope(|scope| {
        let mut reading = Vec::with_capacity(members.len());
        for member in members {
            reading.push(match member {
                MemberAddr::Cluster(cluster) => Some(
                    std::thread::Builder::new()
                        .name("muxlock-cluster-map".into())
                        .spawn_scoped(scope, move || read_map(cluster, wait, tls))?,
                ),
                MemberAddr::Node(_) => None,
            });
        }
        reading
            .into_iter()
            .map(|thread| match thread {
                None => Ok(None),
                Some(thread) => match thread.join() {
                    Ok(map) => map.map(Some),
                    Err(panic) => std::panic::resume_unwind(panic),
                },
            })
            .collect()
    })
}

/// Reads a cluster's map from its seeds: the first seed whose `CLUSTER SHARDS` reads, else whose `CLUSTER SLOTS`
/// does; with the host of that seed (the origin of empty endpoints).
fn read_map(
    cluster: &ClusterAddr,
    wait: Duration,
    tls: &TlsConfig,
) -> io::Result<Option<(SlotMap, String)>> {
    read_map_from(cluster.seeds().to_vec(), wait, tls)
}

/// Reads a map from the first of `nodes` whose `CLUSTER SHARDS` reads, else whose `CLUSTER SLOTS` does (both
/// asked of every node at once), waiting up to `wait`; with the host of that node.
pub(super) fn read_map_from(
    nodes: Vec<NodeAddr>,
    wait: Duration,
    tls: &TlsConfig,
) -> io::Result<Option<(SlotMap, String)>> {
    let opts = Options::default()
        .with_connect_timeout(wait)
        .with_tls(tls.clone());
    let fanout = Fanout::new(nodes, opts)?;
    let mut request = BytesMut::new();
    encode_command(&[b"CLUSTER", b"SHARDS"], &mut request);
    encode_command(&[b"CLUSTER", b"SLOTS"], &mut request);
    let mut round = fanout.round(crate::time::later(Instant::now(), wait));
    round.send_all(&request, 2);
    let mut replies: Vec<[Option<Value>; 2]> = vec![[None, None]; fanout.len()];
    // Each node's two replies by id: `CLUSTER SHARDS`'s is 0, `CLUSTER SLOTS`' 1.
    while let Some((id, reply)) = round.next() {
        let cell = replies
            .get_mut(id.node)
            .and_then(|r| r.get_mut(id.seq as usize));
        if let (Ok(v), Some(cell)) = (reply, cell) {
            *cell = Some(v);
        }
    }
    drop(round);
    let host = |node: usize| fanout.addrs()[node].host().to_owned();
    for (node, [shards, _]) in replies.iter().enumerate() {
        if let Some(Ok(map)) = shards.as_ref().map(SlotMap::from_shards_reply) {
            return Ok(Some((map, host(node))));
        }
    }
    for (node, [_, slots]) in replies.iter().enumerate() {
        if let Some(Ok(map)) = slots.as_ref().map(SlotMap::from_slots_reply) {
            return Ok(Some((map, host(node))));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::net::NodeSet;
    use crate::net::cluster::Members;
    use crate::net::test_peer::{Peer, command, nobody};

    fn cluster(seed: &NodeAddr) -> MemberAddr {
        format!("redis+cluster://{}:{}", seed.host(), seed.port())
            .parse()
            .expect("a cluster URL")
    }

    /// Building reads each cluster member's map from its seeds (`CLUSTER SLOTS` where `CLUSTER SHARDS` is
    /// unknown) and plans a connection per node of it, and vacant ones; a member whose map cannot be read is
    /// planned with its seeds. The members then route each command to its slot's master.
    #[test]
    fn a_cluster_members_map_is_read_at_build_and_its_commands_routed() {
        let (plain, seed) = (Peer::start(), Peer::start());
        let unread = nobody();
        let members = vec![
            MemberAddr::Node(plain.addr()),
            cluster(&seed.addr()),
            cluster(&unread),
        ];
        let plan =
            Plan::read(members, Duration::from_secs(2), &TlsConfig::default()).expect("plan");
        assert!(plan.is_routed());
        assert_eq!(plan.members(), 3);
        assert_eq!(
            plan.conns()[..3],
            [plain.addr(), seed.addr(), unread.clone()]
        );
        assert_eq!(plan.member_nodes(1), [&seed.addr()]);
        assert_eq!(plan.member_nodes(2), [&unread]);
        assert_eq!(
            plan.member_nodes(0),
            [&plain.addr()],
            "a plain member's own node"
        );
        assert_eq!(plan.vacant(), 16, "eight a cluster member");
        assert_eq!(plan.connections(), 3 + 16);
        let asked: Vec<Vec<u8>> = seed
            .log()
            .into_iter()
            .flat_map(|(_, c)| c.get(1).cloned())
            .collect();
        assert!(
            asked.contains(&b"SHARDS".to_vec()) && asked.contains(&b"SLOTS".to_vec()),
            "{asked:?}"
        );
        let members = Members::new(plan, Options::default()).expect("members");
        assert!(members.is_routed() && members.is_cluster(1) && !members.is_cluster(0));
        let mut round = members.round(Instant::now() + Duration::from_secs(5));
        round.send(0, &command(&[b"ECHO", b"plain"]), 1);
        let mut one = NodeSet::EMPTY;
        one.insert(1);
        round.send_to(one, &command(&[b"GET", b"k"]), 1);
        round.send(2, &command(&[b"GET", b"k"]), 1);
        let mut got = std::collections::BTreeMap::new();
        while let Some((id, reply)) = round.next() {
            got.insert(id.node, reply);
        }
        assert_eq!(
            got.get(&0),
            Some(&Ok(Value::BulkString(Bytes::from_static(b"plain"))))
        );
        assert!(
            matches!(got.get(&1), Some(Ok(Value::Error(_)))),
            "the routed GET reached the slot's master: {got:?}"
        );
        assert!(
            matches!(got.get(&2), Some(Err(_))),
            "an unmapped member votes no: {got:?}"
        );
        assert!(seed.received(&[b"GET", b"k"], Duration::from_secs(1)));
    }

    /// A plan of plain nodes reads nothing and routes nothing.
    #[test]
    fn plain_members_are_planned_without_reading() {
        let plain = nobody();
        let plan = Plan::read(
            vec![MemberAddr::Node(plain.clone())],
            Duration::from_millis(100),
            &TlsConfig::default(),
        )
        .expect("plan");
        assert!(!plan.is_routed());
        assert_eq!(
            (plan.conns(), plan.vacant(), plan.connections()),
            (&[plain][..], 0, 1)
        );
    }
}
