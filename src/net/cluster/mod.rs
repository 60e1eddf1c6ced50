//! Redis Cluster groundwork (issue #27): the pure pieces a Redlock member that is a whole Redis Cluster will be
//! routed with. Nothing here opens a socket or knows of locks, and nothing in the lock paths uses it yet.
//!
//! # Layout
//!
//! - `key_slot`: [`key_slot`], [`crc16`] and [`hash_tag`]: the slot of a key, as `CLUSTER KEYSLOT` computes it;
//! - `slot_map`: [`SlotMap`] (slot ranges to [`Shard`]s: a master and its replicas, each a [`ClusterNode`] at an
//!   [`Endpoint`]), read from `CLUSTER SHARDS` (`shards`) or `CLUSTER SLOTS` (`slots_reply`) in RESP2 or RESP3,
//!   with a [`MapError`] naming the faulty part of a reply (`reply`: reading the replies' values);
//! - `redirect`: [`Redirect`], a `-MOVED` or `-ASK` error read;
//! - `seeds`: [`ClusterAddr`], `redis+cluster://host:port,host:port`, and [`MemberAddr`], a node or a cluster.
//!
//! Every parser takes any input without panicking (`tests.rs` feeds them arbitrary and mutated values);
//! `tests/cluster_map.rs` reads live clusters (started by `tests/support/redis_cluster.rs`) with them.

mod key_slot;
mod redirect;
mod reply;
mod seeds;
mod shards;
mod slot_map;
mod slots_reply;
#[cfg(test)]
mod tests;

pub use key_slot::{SLOT_COUNT, crc16, hash_tag, key_slot};
pub use redirect::{Redirect, RedirectError, RedirectKind};
pub use reply::MapError;
pub use seeds::{ClusterAddr, MemberAddr};
pub use slot_map::{ClusterNode, Endpoint, Health, Shard, SlotMap, SlotRange};
