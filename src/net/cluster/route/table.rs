//! [`Table`]: one cluster member's routing table: which connection serves each slot, and which connections are
//! masters (pure bookkeeping; the connections themselves are the fanout's).

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;

use crate::net::cluster::{ClusterNode, SLOT_COUNT, SlotMap};

/// No connection serves the slot.
const NONE: u32 = u32::MAX;

/// A node of the member, as a connection of the fanout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Its index among the fanout's connections.
    pub(crate) conn: usize,
}

/// What a change of a slot's owner means for the restart guard (see the parent's "Failovers").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Takeover {
    /// The same connection already served it.
    Same,
    /// A connection that was a master of the map (a slot migration: keys moved with `MIGRATE`, not a restart of
    /// the new owner; but what the old owner lost moves with the slot, see [`Table::taken_over`]).
    Master,
    /// A connection the map showed as a replica, or as no master at all (a failover, or a node this table never
    /// saw serve): its data may lack acknowledged grants of the master it replaces.
    Promoted,
}

/// One cluster member's table: the owner connection of each of the 16,384 slots and every node known.
#[derive(Debug)]
pub(crate) struct Table {
    /// Per slot: the connection serving it, or [`NONE`].
    owner: Vec<u32>,
    /// Per known node: whether the table shows it as a master (it serves at least one slot).
    pub(crate) nodes: Vec<(Node, bool)>,
    /// The table was read from a map at least once.
    pub(crate) mapped: bool,
    /// The member's vacant connections not given to a node yet (see `plan.rs`), taken from the back.
    pub(crate) vacant: Vec<usize>,
    /// Per master connection of the last map: how many replicas it showed for that master's shard, all of them (the
    /// replication check waits for that many, `replid.rs`). Those the cluster marked failed too, by decision: one may
    /// come back and take over before the next map is read, and a replica still loading, or one whose first sync has
    /// not happened, may be promoted by a `TAKEOVER`. A shard whose replica died votes no until the replica is back
    /// or forgotten.
    replicas: Vec<(usize, usize)>,
    /// Per connection the last map showed: the node id it gave (the replication check asks the node itself
    /// for its shard's replicas by it, `CLUSTER REPLICAS <id>`).
    ids: Vec<(usize, Bytes)>,
    /// Per slot and connection seen taking it over (a `MOVED`, a map that moved it, an `ASK`): when that was last
    /// seen. At most one entry per (slot, connection): 16,384 times the member's connections at the very most,
    /// a handful per slot a resharding moves in practice.
    taken: HashMap<(u16, usize), Instant>,
}

impl Table {
    /// A table of `nodes` with no slot served (no map read yet).
    pub(crate) fn unmapped(nodes: Vec<Node>) -> Table {
        Table {
            owner: vec![NONE; SLOT_COUNT as usize],
            nodes: nodes.into_iter().map(|n| (n, false)).collect(),
            mapped: false,
            vacant: Vec::new(),
            replicas: Vec::new(),
            ids: Vec::new(),
            taken: HashMap::new(),
        }
    }

    /// When connection `conn` was last seen taking over `slot` from another node (a migration's `MOVED` or
    /// `ASK`, or a map that moved the slot; a failover too), if ever.
    ///
    /// Why the restart guard needs it: the new owner holds only what the old one still had. A master that came
    /// back without its data (its own votes quarantined for the window) and then had the slot migrated off it
    /// hands the new owner a slot without the grants it forgot, and the new owner, up for long, would grant
    /// them again at once: two holders. So its votes for keys of that slot wait the window from this instant,
    /// as a promoted replica's do (`restart/mod.rs`, "Failovers in a cluster member").
    ///
    /// Kept per connection, never overwritten by another taker: a vote is judged when it is counted, not when it
    /// was sent, so a later note for another node (a `MOVED` or `ASK` onward, a map installed late that puts the
    /// slot back on its old owner) must not clear this one while this node's grant is on its way; and a taker
    /// whose slot was about to move on may keep serving it (a migration off it undone with `SETSLOT STABLE`).
    /// (`tests/cluster/slot_migration.rs` shows both with a second holder when the notes were one per slot.)
    pub(crate) fn taken_over(&self, slot: u16, conn: usize) -> Option<Instant> {
        self.taken.get(&(slot, conn)).copied()
    }

    /// Records that `conn` was seen taking `slot` over at `now` (kept if a later instant is already noted).
    pub(crate) fn note_taken(&mut self, slot: u16, conn: usize, now: Instant) {
        let cell = self.taken.entry((slot, conn)).or_insert(now);
        *cell = (*cell).max(now);
    }

    /// The node id the last map gave for `conn`'s node, if it showed that node with one (a master's, if it
    /// showed a master and another node at that address).
    pub(crate) fn id_of(&self, conn: usize) -> Option<&Bytes> {
        self.ids.iter().find(|(c, _)| *c == conn).map(|(_, id)| id)
    }

    /// How many replicas the last map showed serving for `conn`'s shard, if `conn` was one of its masters
    /// (0 otherwise: a master seen only through a `MOVED` since).
    pub(crate) fn replicas_of(&self, conn: usize) -> usize {
        self.replicas
            .iter()
            .find(|(c, _)| *c == conn)
            .map_or(0, |(_, n)| *n)
    }

    /// The nodes of `map` (read from a node dialled at `origin`) this table does not know, as `(host, port)`:
    /// masters first, then replicas, in the map's order.
    pub(crate) fn unknown(&self, map: &SlotMap, origin: &str, tls: bool) -> Vec<(String, u16)> {
        let mut out: Vec<(String, u16)> = Vec::new();
        let masters = map.shards().iter().map(|s| &s.master);
        let replicas = map.shards().iter().flat_map(|s| &s.replicas);
        for node in masters.chain(replicas) {
            let port = port_of(node, tls);
            let (Some(host), Some(port)) = (node.endpoint.host(origin), port) else {
                continue;
            };
            let known = self.conn_of(host, port).is_some()
                || out
                    .iter()
                    .any(|(h, p)| *p == port && h.eq_ignore_ascii_case(host));
            if !known {
                out.push((host.to_owned(), port));
            }
        }
        out
    }

    /// Adds node `host:port` on vacant connection `conn` (not a master until a map or a `MOVED` says so).
    pub(crate) fn add(&mut self, host: String, port: u16, conn: usize) {
        self.nodes.push((Node { host, port, conn }, false));
    }

    /// The connection serving `slot`, if any.
    pub(crate) fn owner(&self, slot: u16) -> Option<usize> {
        match self.owner.get(slot as usize) {
            Some(&c) if c != NONE => Some(c as usize),
            _ => None,
        }
    }

    /// The connection of the node at `host:port`, if this member has one.
    pub(crate) fn conn_of(&self, host: &str, port: u16) -> Option<usize> {
        self.nodes
            .iter()
            .find(|(n, _)| n.port == port && n.host.eq_ignore_ascii_case(host))
            .map(|(n, _)| n.conn)
    }

    /// The host a connection dials (the origin of an empty endpoint in its redirections).
    pub(crate) fn host_of(&self, conn: usize) -> Option<&str> {
        self.nodes
            .iter()
            .find(|(n, _)| n.conn == conn)
            .map(|(n, _)| n.host.as_str())
    }

    /// Whether the table shows `conn` as a master.
    pub(crate) fn is_master(&self, conn: usize) -> bool {
        self.nodes.iter().any(|(n, m)| n.conn == conn && *m)
    }

    /// Records that `conn` serves `slot` now (a `MOVED` seen at `now`); says what kind of takeover it is.
    pub(crate) fn moved(&mut self, slot: u16, conn: usize, now: Instant) -> Takeover {
        let Some(cell) = self.owner.get_mut(slot as usize) else {
            return Takeover::Same;
        };
        if *cell == conn as u32 {
            return Takeover::Same;
        }
        *cell = conn as u32;
        self.note_taken(slot, conn, now);
        let was_master = self.is_master(conn);
        if let Some((_, m)) = self.nodes.iter_mut().find(|(n, _)| n.conn == conn) {
            *m = true;
        }
        match was_master {
            true => Takeover::Master,
            false => Takeover::Promoted,
        }
    }

    /// Replaces the slots' owners with `map`'s (read from a node dialled at `origin`, seen at `seen`: `None` for
    /// the plan's first map); a slot whose master is not a known node is left unserved. Returns the connections
    /// that took over slots as [`Takeover::Promoted`]: on a table that never had a map, every master of `map`
    /// (nothing is known of their past: one may have been promoted since this manager read its `INFO` as a
    /// replica's). The plan's first map, read before any connection exists, ignores that: the connections'
    /// `INFO` covers a promotion before them. On a table that had a map, each slot `map` gives another owner is
    /// noted as taken over by it at `seen` ([`taken_over`](Table::taken_over)).
    pub(crate) fn install(
        &mut self,
        map: &SlotMap,
        origin: &str,
        tls: bool,
        seen: Option<Instant>,
    ) -> Vec<usize> {
        let (owner, masters, promoted) = self.read(map, origin, tls);
        if let (true, Some(now)) = (self.mapped, seen) {
            let changed: Vec<(u16, u32)> = (0..SLOT_COUNT)
                .zip(owner.iter().zip(&self.owner))
                .filter(|&(_, (&new, &old))| new != old && new != NONE)
                .map(|(slot, (&new, _))| (slot, new))
                .collect();
            for (slot, new) in changed {
                self.note_taken(slot, new as usize, now);
            }
        }
        for (n, m) in &mut self.nodes {
            *m = masters.contains(&n.conn);
        }
        self.replicas = map
            .shards()
            .iter()
            .filter_map(|shard| {
                let port = port_of(&shard.master, tls);
                let conn = self.conn_of(shard.master.endpoint.host(origin)?, port?)?;
                Some((conn, shard.replicas.len()))
            })
            .collect();
        // Masters first: a map may show two nodes at one address (one forgotten, or not yet known as failed),
        // and the one `id_of` gives is then the one serving slots there.
        let masters = map.shards().iter().map(|shard| &shard.master);
        let replicas = map.shards().iter().flat_map(|shard| &shard.replicas);
        self.ids = masters
            .chain(replicas)
            .filter_map(|node| {
                let port = port_of(node, tls);
                let conn = self.conn_of(node.endpoint.host(origin)?, port?)?;
                Some((conn, Bytes::from(node.id.clone()?)))
            })
            .collect();
        self.owner = owner;
        self.mapped = true;
        promoted
    }

    /// What [`install`](Table::install) would return, without changing the table.
    pub(crate) fn preview(&self, map: &SlotMap, origin: &str, tls: bool) -> Vec<usize> {
        self.read(map, origin, tls).2
    }

    /// `map` read against this table: the owners per slot, the masters, the promoted connections.
    ///
    /// A master is promoted when the table knew it as neither an owner of slots nor a master: a master whose
    /// slots all went away by `MOVED`s keeps its flag, so slots coming back to it (a resharding undone) do not
    /// quarantine it. A failover and a failback between two maps are not judged here: the promotion gave the
    /// node a new `master_replid`, which the replication check of its next vote sees (`replid.rs`).
    fn read(&self, map: &SlotMap, origin: &str, tls: bool) -> (Vec<u32>, Vec<usize>, Vec<usize>) {
        let mut promoted = Vec::new();
        let mut owner = vec![NONE; SLOT_COUNT as usize];
        let mut masters = Vec::new();
        for r in map.ranges() {
            let Some(shard) = map.shards().get(r.shard) else {
                continue;
            };
            let node = &shard.master;
            let port = port_of(node, tls);
            let conn = match (node.endpoint.host(origin), port) {
                (Some(host), Some(port)) => self.conn_of(host, port),
                _ => None,
            };
            let Some(conn) = conn else { continue };
            for slot in r.start..=r.end {
                owner[slot as usize] = conn as u32;
            }
            masters.push(conn);
        }
        for &conn in &masters {
            let before = self.owner.contains(&(conn as u32));
            let unknown = !self.mapped || (!before && !self.is_master(conn));
            if unknown && !promoted.contains(&conn) {
                promoted.push(conn);
            }
        }
        (owner, masters, promoted)
    }
}

/// The port a client dials for `node`: its TLS port over TLS when it announces one.
fn port_of(node: &ClusterNode, tls: bool) -> Option<u16> {
    match tls {
        true => node.tls_port.or(node.port),
        false => node.port,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::net::cluster::{Endpoint, Health, Shard, SlotRange};

    fn node(port: u16) -> ClusterNode {
        ClusterNode {
            id: None,
            endpoint: Endpoint::Host("127.0.0.1".into()),
            port: Some(port),
            tls_port: None,
            health: Health::Online,
        }
    }

    fn map(owners: &[(u16, u16, u16)], replicas: &[u16]) -> SlotMap {
        let mut shards = Vec::new();
        let mut ranges = Vec::new();
        for (i, &(start, end, port)) in owners.iter().enumerate() {
            shards.push(Shard {
                master: node(port),
                replicas: replicas.iter().map(|&p| node(p)).collect(),
            });
            ranges.push(SlotRange {
                start,
                end,
                shard: i,
            });
        }
        SlotMap::new(shards, ranges).unwrap()
    }

    fn table() -> Table {
        Table::unmapped(
            [7000u16, 7001, 7002]
                .iter()
                .enumerate()
                .map(|(i, &port)| Node {
                    host: "127.0.0.1".into(),
                    port,
                    conn: 10 + i,
                })
                .collect(),
        )
    }

    #[test]
    fn slots_route_to_their_master_and_a_move_says_what_it_is() {
        let mut t = table();
        let now = Instant::now();
        assert_eq!(t.owner(5), None);
        let promoted = t.install(
            &map(&[(0, 8191, 7000), (8192, 16383, 7001)], &[7002]),
            "x",
            false,
            None,
        );
        assert_eq!(
            promoted,
            vec![10, 11],
            "nothing is known of the first map's masters (the plan ignores it: INFO covers them)"
        );
        let again = t.install(
            &map(&[(0, 8191, 7000), (8192, 16383, 7001)], &[7002]),
            "x",
            false,
            None,
        );
        assert!(again.is_empty(), "the same masters again promote nobody");
        assert_eq!(
            (t.owner(0), t.owner(8192), t.owner(16383)),
            (Some(10), Some(11), Some(11))
        );
        assert_eq!(t.moved(0, 10, now), Takeover::Same);
        assert_eq!(
            t.moved(0, 11, now),
            Takeover::Master,
            "a migration between masters"
        );
        assert_eq!(
            t.moved(1, 12, now),
            Takeover::Promoted,
            "the replica took over"
        );
        assert_eq!(t.owner(1), Some(12));
    }

    /// The nodes of a map the table does not list, each once, masters first: what a refresh dials on vacant
    /// connections (a promoted replica, a master added to the cluster), so that the table can route to them.
    #[test]
    fn a_map_s_nodes_the_table_does_not_list_are_named_once_masters_first() {
        let t = table();
        let known = map(&[(0, 8191, 7000), (8192, 16383, 7001)], &[7002]);
        assert!(
            t.unknown(&known, "x", false).is_empty(),
            "every node listed"
        );
        let grown = map(&[(0, 8191, 7004), (8192, 16383, 7005)], &[7003, 7000]);
        let local = |port| ("127.0.0.1".to_owned(), port);
        let unknown = vec![local(7004), local(7005), local(7003)];
        assert_eq!(t.unknown(&grown, "x", false), unknown);
    }

    #[test]
    fn a_slot_s_new_owner_is_noted_with_when_it_was_seen_taking_it_over() {
        let mut t = table();
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        t.install(
            &map(&[(0, 8191, 7000), (8192, 16383, 7001)], &[7002]),
            "x",
            false,
            Some(t0),
        );
        assert_eq!(
            (t.taken_over(0, 10), t.taken_over(8192, 11)),
            (None, None),
            "a first map moves nothing"
        );
        assert_eq!(t.moved(0, 10, t1), Takeover::Same);
        assert_eq!(t.taken_over(0, 10), None, "no change, nothing taken over");
        assert_eq!(t.moved(0, 11, t1), Takeover::Master);
        assert_eq!(
            (
                t.taken_over(0, 11),
                t.taken_over(0, 10),
                t.taken_over(1, 11)
            ),
            (Some(t1), None, None),
            "the slot's new owner, for that slot only"
        );
        // A map that moves slots 100..=200 to 11 at t2: each of them noted; slot 0 stays 11's since t1.
        t.install(
            &map(
                &[
                    (0, 0, 7001),
                    (1, 99, 7000),
                    (100, 200, 7001),
                    (201, 8191, 7000),
                    (8192, 16383, 7001),
                ],
                &[7002],
            ),
            "x",
            false,
            Some(t2),
        );
        assert_eq!(
            (
                t.taken_over(100, 11),
                t.taken_over(200, 11),
                t.taken_over(201, 11)
            ),
            (Some(t2), Some(t2), None),
        );
        assert_eq!(t.taken_over(8192, 11), None, "a slot that stayed");
        assert_eq!(
            t.taken_over(0, 11),
            Some(t1),
            "unchanged by a map that agrees"
        );
        // An `ASK`'s importing node is noted beside the owner, whose note stays (its grants may be on their way,
        // the move may be undone); an earlier instant keeps the later one.
        t.note_taken(0, 12, t2);
        t.note_taken(0, 12, t1);
        assert_eq!(
            (t.taken_over(0, 12), t.taken_over(0, 11)),
            (Some(t2), Some(t1))
        );
    }

    #[test]
    fn a_new_map_names_promoted_replicas() {
        let mut t = table();
        t.install(
            &map(&[(0, 8191, 7000), (8192, 16383, 7001)], &[7002]),
            "x",
            false,
            None,
        );
        let promoted = t.install(
            &map(&[(0, 8191, 7002), (8192, 16383, 7001)], &[]),
            "x",
            false,
            None,
        );
        assert_eq!(promoted, vec![12]);
        assert_eq!(t.owner(0), Some(12));
        // Unknown masters leave their slots unserved.
        let mut u = table();
        u.install(&map(&[(0, 16383, 9999)], &[]), "x", false, None);
        assert_eq!(u.owner(0), None);
    }

    #[test]
    fn a_master_whose_slots_came_back_after_moving_away_is_not_promoted() {
        let mut t = table();
        let now = Instant::now();
        t.install(
            &map(&[(0, 8191, 7000), (8192, 16383, 7001)], &[7002]),
            "x",
            false,
            None,
        );
        for slot in 0..=8191 {
            assert_eq!(t.moved(slot, 11, now), Takeover::Master);
        }
        assert!(
            t.is_master(10),
            "a master that lost its slots keeps its flag"
        );
        let back = map(&[(0, 8191, 7000), (8192, 16383, 7001)], &[7002]);
        assert_eq!(t.preview(&back, "x", false), Vec::<usize>::new());
        assert!(
            t.install(&back, "x", false, Some(now)).is_empty(),
            "slots coming back to a known master quarantine nobody"
        );
        assert_eq!(t.owner(0), Some(10));
    }

    #[test]
    fn a_map_gives_each_nodes_id_and_every_replica_counts() {
        let mut t = table();
        let mut m = map(&[(0, 16383, 7000)], &[7001, 7002]);
        let mut shards = m.shards().to_vec();
        shards[0].master.id = Some("m0".into());
        shards[0].replicas[0].id = Some("r1".into());
        shards[0].replicas[1].health = Health::Failed;
        m = SlotMap::new(shards, m.ranges().to_vec()).unwrap();
        t.install(&m, "x", false, None);
        assert_eq!(t.id_of(10).map(|b| &b[..]), Some(&b"m0"[..]));
        assert_eq!(t.id_of(11).map(|b| &b[..]), Some(&b"r1"[..]));
        assert_eq!(t.id_of(12), None, "the map gave none");
        assert_eq!(
            t.replicas_of(10),
            2,
            "a replica the cluster marked failed is waited for too (it may come back and take over)"
        );
    }
}
