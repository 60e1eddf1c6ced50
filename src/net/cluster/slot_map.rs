//! [`SlotMap`]: which master of one Redis Cluster owns each of the 16,384 slots, with the replicas of each.
//!
//! Built by the parsers of `CLUSTER SHARDS` ([`SlotMap::from_shards_reply`]) and `CLUSTER SLOTS`
//! ([`SlotMap::from_slots_reply`]); checked when built: every range lies in 0..=16383 with its start not after its
//! end, no slot is claimed twice, every shard that owns slots has one master. A map may leave slots uncovered (a
//! cluster being set up, or one whose master failed with no replica to promote): [`SlotMap::master_of`] then says
//! `None` for them and [`SlotMap::uncovered`] lists them.

use std::fmt;

use super::SLOT_COUNT;
use super::reply::MapError;

/// Where a cluster node accepts clients, as the cluster announces it (its *preferred endpoint*).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// An IP address (IPv6 without brackets) or a host name.
    Host(String),
    /// The host the client sent the command to: Redis announces this as a null (`CLUSTER SLOTS`) or an empty
    /// string (`CLUSTER SHARDS`, `MOVED`), e.g. with `cluster-preferred-endpoint-type unknown-endpoint`.
    SameHost,
    /// Unknown to the cluster (`?`: `cluster-preferred-endpoint-type hostname` on a node that announced none); the
    /// node cannot be reached by it.
    Unknown,
}

impl Endpoint {
    /// Reads an announced endpoint: empty is [`Endpoint::SameHost`], `?` is [`Endpoint::Unknown`]; an IPv6
    /// address in brackets loses them (brackets around anything else stay: `[]` is not the same host).
    pub(crate) fn from_announced(host: &str) -> Endpoint {
        match host {
            "" => Endpoint::SameHost,
            "?" => Endpoint::Unknown,
            _ => match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                // One pair, around an IPv6 literal (which holds no bracket): a host `[[2::]]` is kept as it is,
                // so that it prints and reads back the same.
                Some(v6) if v6.contains(':') && !v6.contains(['[', ']']) => {
                    Endpoint::Host(v6.to_owned())
                }
                _ => Endpoint::Host(host.to_owned()),
            },
        }
    }

    /// The host to dial, given the host the announcing reply came from; `None` for [`Endpoint::Unknown`].
    pub fn host<'a>(&'a self, origin: &'a str) -> Option<&'a str> {
        match self {
            Endpoint::Host(host) => Some(host),
            Endpoint::SameHost => Some(origin),
            Endpoint::Unknown => None,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Host(host) if host.contains(':') => write!(f, "[{host}]"),
            Endpoint::Host(host) => f.write_str(host),
            Endpoint::SameHost => f.write_str("(same host)"),
            Endpoint::Unknown => f.write_str("?"),
        }
    }
}

/// A node's health as `CLUSTER SHARDS` reports it (`CLUSTER SLOTS` does not say).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Health {
    /// `online`: serving.
    Online,
    /// `failed`: the cluster has marked it failed.
    Failed,
    /// `loading`: loading its data set (a replica's initial sync, a restart).
    Loading,
    /// Any other word, or not reported.
    Unknown,
}

/// One node of a cluster: its id, where it listens, its health.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClusterNode {
    /// The 40-character node id, when the reply gives it (`CLUSTER SLOTS` before Redis 4.0 did not).
    pub id: Option<String>,
    /// Where it accepts clients.
    pub endpoint: Endpoint,
    /// The port to dial: `CLUSTER SHARDS`' `port` (`None` if the node listens for TLS only), or `CLUSTER SLOTS`'
    /// port, which is the TLS port on a cluster run with `tls-cluster yes`.
    pub port: Option<u16>,
    /// The TLS port, if `CLUSTER SHARDS` gave one.
    pub tls_port: Option<u16>,
    /// Its health, [`Health::Unknown`] from `CLUSTER SLOTS`.
    pub health: Health,
}

#[cfg(test)]
impl ClusterNode {
    /// An online node at `addr`'s host and port, with no id (tests of the routing above the map).
    pub(crate) fn at(addr: &crate::net::NodeAddr) -> ClusterNode {
        ClusterNode {
            id: None,
            endpoint: Endpoint::Host(addr.host().to_owned()),
            port: Some(addr.port()),
            tls_port: None,
            health: Health::Online,
        }
    }
}

impl fmt::Display for ClusterNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.endpoint)?;
        match (self.port, self.tls_port) {
            (Some(port), _) => write!(f, ":{port}")?,
            (None, Some(tls)) => write!(f, ":{tls} (tls)")?,
            (None, None) => f.write_str(":?")?,
        }
        if let Some(id) = &self.id {
            write!(f, " ({})", id.get(..8).unwrap_or(id))?;
        }
        Ok(())
    }
}

/// A master and its replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The master: the node that owns the shard's slots and takes writes for them.
    pub master: ClusterNode,
    /// Its replicas, in reply order.
    pub replicas: Vec<ClusterNode>,
}

/// Slots `start..=end`, owned by shard number `shard` of the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlotRange {
    /// The first slot.
    pub start: u16,
    /// The last slot (inclusive, as the cluster commands write ranges).
    pub end: u16,
    /// The index of the owner in [`SlotMap::shards`].
    pub shard: usize,
}

/// Which shard owns each slot of one Redis Cluster.
///
/// # Examples
///
/// ```
/// use muxlock::net::cluster::{SlotMap, key_slot};
/// use muxlock::resp::Value;
///
/// // CLUSTER SLOTS of a one-master cluster, as RESP2 sends it.
/// let node = Value::Array(vec![
///     Value::BulkString("127.0.0.1".into()),
///     Value::Integer(7000),
///     Value::BulkString("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca".into()),
/// ]);
/// let reply = Value::Array(vec![Value::Array(vec![Value::Integer(0), Value::Integer(16383), node])]);
/// let map = SlotMap::from_slots_reply(&reply)?;
/// assert!(map.uncovered().is_empty());
/// assert_eq!(map.master_of(key_slot(b"invoice:42")).unwrap().port, Some(7000));
/// # Ok::<(), muxlock::net::cluster::MapError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SlotMap {
    shards: Vec<Shard>,
    /// Sorted by `start`, disjoint.
    ranges: Vec<SlotRange>,
}

impl SlotMap {
    /// A map of `shards` owning `ranges` (each range naming its shard by index), checked.
    ///
    /// # Errors
    /// [`MapError::Malformed`] if a range is out of 0..=16383, starts after its end, names no shard, or overlaps
    /// another.
    pub fn new(shards: Vec<Shard>, mut ranges: Vec<SlotRange>) -> Result<SlotMap, MapError> {
        for r in &ranges {
            let at = || format!("slots {}-{}", r.start, r.end);
            if r.start > r.end || r.end >= SLOT_COUNT {
                return Err(MapError::malformed(
                    "a slot range must lie in 0..=16383 and start before its end",
                )
                .within(at()));
            }
            if r.shard >= shards.len() {
                return Err(MapError::malformed("the range names no shard").within(at()));
            }
        }
        ranges.sort_unstable_by_key(|r| (r.start, r.end));
        for pair in ranges.windows(2) {
            if pair[1].start <= pair[0].end {
                return Err(MapError::malformed("slots claimed twice").within(format!(
                    "slots {}-{} and {}-{}",
                    pair[0].start, pair[0].end, pair[1].start, pair[1].end
                )));
            }
        }
        Ok(SlotMap { shards, ranges })
    }

    /// A map of one shard, `master` with `replicas`, owning every slot (tests of the routing above the map).
    #[cfg(test)]
    pub(crate) fn one_shard(master: ClusterNode, replicas: Vec<ClusterNode>) -> SlotMap {
        SlotMap {
            shards: vec![Shard { master, replicas }],
            ranges: vec![SlotRange {
                start: 0,
                end: SLOT_COUNT - 1,
                shard: 0,
            }],
        }
    }

    /// The shards, masters with their replicas (including masters that own no slot).
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// The owned ranges, sorted by their first slot, disjoint.
    pub fn ranges(&self) -> &[SlotRange] {
        &self.ranges
    }

    /// The index in [`shards`](Self::shards) of the shard owning `slot`; `None` if no shard owns it or `slot` is not
    /// below 16,384. `O(log ranges)`.
    pub fn shard_index_of(&self, slot: u16) -> Option<usize> {
        // The last range starting at or before `slot`, if it reaches it.
        let after = self.ranges.partition_point(|r| r.start <= slot);
        let range = self.ranges.get(after.checked_sub(1)?)?;
        (slot <= range.end).then_some(range.shard)
    }

    /// The shard owning `slot`, if any.
    pub fn shard_of(&self, slot: u16) -> Option<&Shard> {
        self.shards.get(self.shard_index_of(slot)?)
    }

    /// The master owning `slot`, if any.
    pub fn master_of(&self, slot: u16) -> Option<&ClusterNode> {
        self.shard_of(slot).map(|s| &s.master)
    }

    /// The slot ranges no shard owns, as `(start, end)` inclusive; empty when the map covers every slot.
    pub fn uncovered(&self) -> Vec<(u16, u16)> {
        let mut gaps = Vec::new();
        let mut next = 0u16;
        for r in &self.ranges {
            if r.start > next {
                gaps.push((next, r.start - 1));
            }
            next = r.end.saturating_add(1);
        }
        if next < SLOT_COUNT {
            gaps.push((next, SLOT_COUNT - 1));
        }
        gaps
    }
}
