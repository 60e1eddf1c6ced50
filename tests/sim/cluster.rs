//! Simulated Redis Cluster members: a few simulated nodes that share a slot map, as Redis (`cluster.c`,
//! `getNodeByQuery`) routes keys among them. No more than the library relies on:
//!
//! - a command's keys must share a slot (`-CROSSSLOT` otherwise); keyless commands run anywhere;
//! - a key is served only by its slot's master: a replica, or another master, answers `-MOVED slot host:port`;
//! - while a slot migrates, its old master serves the keys it still has and answers `-ASK slot host:port` for
//!   the others; the new master serves them only right after `ASKING` (the flag lasts one command), else
//!   `-MOVED` back; keys move one at a time (`MIGRATE`, expiry kept), and at the end the slot is the new
//!   master's (`CLUSTER SETSLOT NODE`): clients with the old map then meet `-MOVED`;
//! - replication is the effects of each write on its keys, copied to every replica whose link is up at once
//!   (no lag): `WAIT n t` counts the replicas linked, at once; a replica whose link is down misses the writes
//!   until it is linked again (a full sync);
//! - a failover promotes a replica, with or without the writes its link missed: it gets a new replication id
//!   (the old one as its second), takes the master's slots, and the old master becomes its replica and syncs
//!   from it, losing what the new master lacks; a replica's `master_replid` is its master's; a master deposed
//!   while it stalled may learn of it only later ([`Stale`]): until then it serves its old slots as a master
//!   with its old replication id, still lists its old replicas, and no replica acknowledges its writes;
//! - `CLUSTER MYID`, `CLUSTER REPLICAS id` (one line per replica), `INFO replication` (role, `slaveN` lines,
//!   `master_replid`, `second_repl_offset`); the map is read as `CLUSTER SLOTS` (by the library's parser).

use bytes::Bytes;
use muxlock::net::NodeAddr;
use muxlock::net::cluster::{MapRead, MemberAddr, Plan, SLOT_COUNT, SlotMap, key_slot};
use muxlock::resp::Value;

/// One simulated cluster: its nodes (world indices) and who serves what.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// World node indices.
    pub nodes: Vec<usize>,
    /// Per node (same order): its 40-character id.
    pub ids: Vec<String>,
    /// Per node: `None` for a master, else the master it replicates (index into `nodes`).
    pub replica_of: Vec<Option<usize>>,
    /// Per node: whether its replication link is up (masters: always).
    pub linked: Vec<bool>,
    /// Per node: its `master_replid` as a master (replicas report their master's), and the one before a promotion.
    pub replid: Vec<String>,
    pub replid2: Vec<Option<String>>,
    /// Per slot: the master serving it (index into `nodes`).
    pub owner: Vec<u8>,
    /// A slot migrating: `(slot, from, to)` (indices into `nodes`).
    pub migrating: Option<(u16, usize, usize)>,
    /// Per slot that migrated off a master that had come back without its data: the last such loss (virtual
    /// time). The keys the old master forgot are missing on the new one too: for the checker, the slot lost its
    /// data then, wherever it is served now.
    pub slot_lost_at: std::collections::HashMap<u16, crate::sim::Time>,
    /// Per node: a deposed master that has not learnt it yet, and what it still believes.
    pub unaware: Vec<Option<Stale>>,
}

/// What a deposed master still believes until it learns of its replica's takeover: it serves the slots it
/// served, as a master with its old replication id, and lists its old replicas, none of which follows it now.
#[derive(Debug, Clone)]
pub struct Stale {
    pub owner: Vec<u8>,
    pub replicas: Vec<usize>,
    pub replid: String,
}

/// What the cluster layer makes of a command on one node.
pub enum Route {
    /// Answered by the cluster layer (a redirection, a cluster command, `ASKING`).
    Reply(Value),
    /// Run it on the node, then replicate the effects on these keys to its linked replicas.
    Run(Vec<Bytes>),
}

/// `host:port` of world node `node` (as every address of the simulator is).
pub fn host(node: usize) -> String {
    format!("sim-node-{node}")
}

fn err(text: String) -> Value {
    Value::Error(Bytes::from(text))
}

fn bulk(text: String) -> Value {
    Value::BulkString(Bytes::from(text))
}

/// The keys of a command as a cluster server finds them (`getKeysFromCommand`), for the commands the
/// library sends; `None` for keyless ones.
fn keys<'a>(cmd: &[&'a [u8]]) -> Option<Vec<&'a [u8]>> {
    let verb = cmd.first()?.to_ascii_uppercase();
    let arg = |i: usize| cmd.get(i).copied();
    match &verb[..] {
        b"EVAL" | b"EVALSHA" => {
            let n: usize = std::str::from_utf8(arg(2)?).ok()?.parse().ok()?;
            let keys: Vec<&[u8]> = cmd.get(3..3 + n)?.to_vec();
            (!keys.is_empty()).then_some(keys)
        }
        b"DEL" | b"UNLINK" => Some(cmd.get(1..)?.to_vec()),
        b"SET" | b"GET" | b"PTTL" | b"PEXPIRE" | b"DELIFEQ" | b"DELEX" | b"INCR" => {
            Some(vec![arg(1)?])
        }
        _ => None,
    }
}

impl Cluster {
    fn addr(&self, i: usize) -> String {
        format!("{}:6379", host(self.nodes[i]))
    }

    /// The replicas of master `m`.
    pub fn replicas(&self, m: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(move |&i| self.replica_of[i] == Some(m))
    }

    /// What node `i` does with `cmd` (`asking`: the connection sent `ASKING` just before), given whether it
    /// has each key now (`has`).
    pub fn route(
        &self,
        i: usize,
        cmd: &[&[u8]],
        asking: bool,
        mut has: impl FnMut(&[u8]) -> bool,
    ) -> Route {
        let Some(verb) = cmd.first().map(|v| v.to_ascii_uppercase()) else {
            return Route::Run(Vec::new());
        };
        if let Some(stale) = &self.unaware[i] {
            return self.route_stale(i, stale, cmd, &verb);
        }
        match &verb[..] {
            b"ASKING" => return Route::Reply(Value::SimpleString(Bytes::from_static(b"OK"))),
            b"CLUSTER" => return Route::Reply(self.cluster_command(i, cmd)),
            b"WAIT" => {
                let linked = match self.replica_of[i] {
                    None => self.replicas(i).filter(|&r| self.linked[r]).count(),
                    Some(_) => 0,
                };
                return Route::Reply(Value::Integer(linked as i64));
            }
            _ => {}
        }
        let Some(keys) = keys(cmd) else {
            return Route::Run(Vec::new());
        };
        let slot = key_slot(keys[0]);
        if keys.iter().any(|k| key_slot(k) != slot) {
            return Route::Reply(err(
                "CROSSSLOT Keys in request don't hash to the same slot".into()
            ));
        }
        let owner = self.owner[slot as usize] as usize;
        let owned: Vec<Bytes> = keys.iter().map(|k| Bytes::copy_from_slice(k)).collect();
        match self.migrating {
            Some((s, from, to)) if s == slot && from == i && owner == i => {
                // Keys it still has are its own; for the others the importing node is asked.
                let present = keys.iter().filter(|k| has(k)).count();
                if present == keys.len() {
                    return Route::Run(owned);
                }
                if present > 0 {
                    return Route::Reply(err(
                        "TRYAGAIN Multiple keys request during rehashing of slot".into(),
                    ));
                }
                return Route::Reply(err(format!("ASK {slot} {}", self.addr(to))));
            }
            Some((s, _, to)) if s == slot && to == i && asking => return Route::Run(owned),
            _ => {}
        }
        if owner == i && self.replica_of[i].is_none() {
            return Route::Run(owned);
        }
        Route::Reply(err(format!("MOVED {slot} {}", self.addr(owner))))
    }

    /// [`Cluster::route`] on a deposed master that has not learnt it: its old slots, no replica acknowledging.
    fn route_stale(&self, i: usize, stale: &Stale, cmd: &[&[u8]], verb: &[u8]) -> Route {
        match verb {
            b"ASKING" => return Route::Reply(Value::SimpleString(Bytes::from_static(b"OK"))),
            b"WAIT" => return Route::Reply(Value::Integer(0)),
            b"CLUSTER" => {
                let sub = cmd
                    .get(1)
                    .map(|s| s.to_ascii_uppercase())
                    .unwrap_or_default();
                let own = cmd.get(2).is_some_and(|id| *id == self.ids[i].as_bytes());
                if sub == b"REPLICAS" && own {
                    return Route::Reply(Value::Array(
                        stale
                            .replicas
                            .iter()
                            .map(|&r| {
                                bulk(format!(
                                    "{} {}@16379 slave {} 0 0 1 disconnected",
                                    self.ids[r],
                                    self.addr(r),
                                    self.ids[i]
                                ))
                            })
                            .collect(),
                    ));
                }
                return Route::Reply(self.cluster_command(i, cmd));
            }
            _ => {}
        }
        let Some(keys) = keys(cmd) else {
            return Route::Run(Vec::new());
        };
        let slot = key_slot(keys[0]);
        if keys.iter().any(|k| key_slot(k) != slot) {
            return Route::Reply(err(
                "CROSSSLOT Keys in request don't hash to the same slot".into()
            ));
        }
        let owner = stale.owner[slot as usize] as usize;
        match owner == i {
            true => Route::Run(keys.iter().map(|k| Bytes::copy_from_slice(k)).collect()),
            false => Route::Reply(err(format!("MOVED {slot} {}", self.addr(owner)))),
        }
    }

    fn cluster_command(&self, i: usize, cmd: &[&[u8]]) -> Value {
        let sub = cmd
            .get(1)
            .map(|s| s.to_ascii_uppercase())
            .unwrap_or_default();
        match &sub[..] {
            b"MYID" => bulk(self.ids[i].clone()),
            b"REPLICAS" | b"SLAVES" => {
                let id = cmd.get(2).copied().unwrap_or_default();
                let Some(m) = self.ids.iter().position(|x| x.as_bytes() == id) else {
                    return err(format!("ERR Unknown node {}", String::from_utf8_lossy(id)));
                };
                if self.replica_of[m].is_some() {
                    return err("ERR The specified node is not a master".into());
                }
                Value::Array(
                    self.replicas(m)
                        .map(|r| {
                            bulk(format!(
                                "{} {}@16379 slave {} 0 0 1 connected",
                                self.ids[r],
                                self.addr(r),
                                self.ids[m]
                            ))
                        })
                        .collect(),
                )
            }
            b"SLOTS" => self.slots_reply(),
            _ => err("ERR unknown subcommand".into()),
        }
    }

    /// `CLUSTER SLOTS` as Redis 7 gives it (hostnames as the preferred endpoint).
    pub fn slots_reply(&self) -> Value {
        let node = |i: usize| {
            Value::Array(vec![
                bulk(host(self.nodes[i])),
                Value::Integer(6379),
                bulk(self.ids[i].clone()),
            ])
        };
        let mut ranges = Vec::new();
        let mut start = 0usize;
        while start < SLOT_COUNT as usize {
            let m = self.owner[start];
            let mut end = start;
            while end + 1 < SLOT_COUNT as usize && self.owner[end + 1] == m {
                end += 1;
            }
            let m = m as usize;
            let mut entry = vec![
                Value::Integer(start as i64),
                Value::Integer(end as i64),
                node(m),
            ];
            entry.extend(self.replicas(m).map(node));
            ranges.push(Value::Array(entry));
            start = end + 1;
        }
        Value::Array(ranges)
    }

    /// The replication section of `INFO` for node `i`.
    pub fn info_replication(&self, i: usize) -> String {
        if let Some(stale) = &self.unaware[i] {
            return format!(
                "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_replid:{}\r\nmaster_replid2:{}\r\n\
                 master_repl_offset:0\r\nsecond_repl_offset:-1\r\n",
                stale.replid,
                "0".repeat(40)
            );
        }
        match self.replica_of[i] {
            None => {
                let mut s = String::from("# Replication\r\nrole:master\r\n");
                let replicas: Vec<usize> = self.replicas(i).collect();
                s += &format!("connected_slaves:{}\r\n", replicas.len());
                for (k, r) in replicas.iter().enumerate() {
                    let state = match self.linked[*r] {
                        true => "online",
                        false => "wait_bgsave",
                    };
                    s += &format!(
                        "slave{k}:ip={},port=6379,state={state},offset=0,lag=0\r\n",
                        host(self.nodes[*r])
                    );
                }
                let second = match &self.replid2[i] {
                    Some(_) => "1",
                    None => "-1",
                };
                s += &format!(
                    "master_replid:{}\r\nmaster_replid2:{}\r\nmaster_repl_offset:0\r\nsecond_repl_offset:{second}\r\n",
                    self.replid[i],
                    self.replid2[i].clone().unwrap_or_else(|| "0".repeat(40)),
                );
                s
            }
            Some(m) => format!(
                "# Replication\r\nrole:slave\r\nmaster_host:{}\r\nmaster_port:6379\r\nmaster_link_status:{}\r\n\
                 master_replid:{}\r\nmaster_replid2:{}\r\nmaster_repl_offset:0\r\nsecond_repl_offset:-1\r\n",
                host(self.nodes[m]),
                match self.linked[i] {
                    true => "up",
                    false => "down",
                },
                self.replid[m],
                "0".repeat(40),
            ),
        }
    }
}

/// The members of a world with cluster members: which are clusters, their nodes and maps, in the order the
/// library's plan makes its connections (so that connection `i` is world node `i`; the vacant ones follow).
#[derive(Debug)]
pub struct Layout {
    pub members: Vec<MemberAddr>,
    pub maps: Vec<Option<MapRead>>,
    pub kinds: Vec<super::Member>,
    pub clusters: Vec<Cluster>,
    /// How many world nodes.
    pub nodes: usize,
}

impl Layout {
    /// `members` members, each a cluster of two shards (each a master and, 6 times in 10, a replica) or,
    /// 4 times in 10, a plain node; at least one cluster.
    pub fn draw(rng: &mut super::Rng, members: usize) -> Layout {
        let mut is_cluster: Vec<bool> = (0..members).map(|_| rng.chance(0.6)).collect();
        if !is_cluster.iter().any(|&c| c) {
            let m = rng.range(0, members as u64 - 1) as usize;
            is_cluster[m] = true;
        }
        let mut next = members;
        let (mut kinds, mut clusters, mut addrs, mut maps) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (m, &clustered) in is_cluster.iter().enumerate() {
            let node: NodeAddr = format!("{}:6379", host(m)).parse().expect("address");
            if !clustered {
                kinds.push(super::Member::Node(m));
                addrs.push(MemberAddr::Node(node));
                maps.push(None);
                continue;
            }
            let mut nodes = vec![m];
            let mut replica_of = vec![None];
            if rng.chance(0.6) {
                nodes.push(next);
                replica_of.push(Some(0));
                next += 1;
            }
            let second = nodes.len();
            nodes.push(next);
            replica_of.push(None);
            next += 1;
            if rng.chance(0.6) {
                nodes.push(next);
                replica_of.push(Some(second));
                next += 1;
            }
            let n = nodes.len();
            let id = |rng: &mut super::Rng| {
                format!(
                    "{:016x}{:016x}{:08x}",
                    rng.next(),
                    rng.next(),
                    rng.next() as u32
                )
            };
            let half = (SLOT_COUNT / 2) as usize;
            let cluster = Cluster {
                ids: (0..n).map(|_| id(rng)).collect(),
                replid: (0..n).map(|_| id(rng)).collect(),
                replid2: vec![None; n],
                linked: vec![true; n],
                owner: (0..SLOT_COUNT as usize)
                    .map(|s| if s < half { 0 } else { second as u8 })
                    .collect(),
                migrating: None,
                slot_lost_at: std::collections::HashMap::new(),
                unaware: vec![None; n],
                replica_of,
                nodes,
            };
            let map = SlotMap::from_slots_reply(&cluster.slots_reply()).expect("a map");
            maps.push(Some(Some((map, host(m)))));
            kinds.push(super::Member::Cluster(clusters.len()));
            clusters.push(cluster);
            let seed = format!("redis+cluster://{}:6379", host(m));
            addrs.push(MemberAddr::Cluster(seed.parse().expect("cluster address")));
        }
        let layout = Layout {
            members: addrs,
            maps,
            kinds,
            clusters,
            nodes: next,
        };
        let plan = layout.plan();
        for i in 0..layout.nodes {
            assert_eq!(
                plan.conns()[i].host(),
                host(i),
                "connection {i} is node {i}"
            );
        }
        layout
    }

    /// The plan a client's manager makes of these members (its own: a plan is consumed by its members).
    pub fn plan(&self) -> Plan {
        Plan::with_maps(self.members.clone(), self.maps.clone())
    }
}
