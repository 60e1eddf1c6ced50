//! Redis Cluster members: the pure pieces a Redlock member that is a whole Redis Cluster is routed
//! with, and the routing itself (`route/`: [`Members`], [`MembersRound`]).
//!
//! # Layout
//!
//! - `key_slot`: [`key_slot`](fn@key_slot), [`crc16`] and [`hash_tag`]: the slot of a key, as `CLUSTER KEYSLOT` computes it;
//! - `slot_map`: [`SlotMap`] (slot ranges to [`Shard`]s: a master and its replicas, each a [`ClusterNode`] at an
//!   [`Endpoint`]), read from `CLUSTER SHARDS` (`shards`) or `CLUSTER SLOTS` (`slots_reply`) in RESP2 or RESP3,
//!   with a [`MapError`] naming the faulty part of a reply (`reply`: reading the replies' values);
//! - `redirect`: [`Redirect`], a `-MOVED` or `-ASK` error read;
//! - `seeds`: [`ClusterAddr`], `redis+cluster://host:port,host:port`, and [`MemberAddr`], a node or a cluster;
//! - `route/`: [`Members`] and [`MembersRound`], the members over one fanout (see "Routing" below).
//!
//! Every parser takes any input without panicking (`tests/` feeds them arbitrary and mutated values);
//! `tests/cluster/slot_map.rs` reads live clusters (started by `tests/support/redis_cluster/`) with them.
//!
//! # Routing (built: `route/`)
//!
//! [`Members`] puts a manager's Redlock members over one [`Fanout`](crate::net::Fanout): a plain member is one
//! connection, a cluster member ([`MemberAddr::Cluster`]) one connection per node of its slot map, and
//! [`MembersRound`] routes every command to the master owning its slot, follows `MOVED` and `ASK` within the
//! round's deadline (at most twice), and hands up exactly one outcome per command per member, in send order.
//! The module doc of `route/` states the invariants (one outcome per member from one connection, a
//! redirection never a vote, nothing sent after the deadline, order per member, the vote's source). A manager
//! of plain members has no routing: its rounds are the fanout's, behind one branch on an `Option`.
//!
//! The choices a reader might not expect, and why:
//!
//! - **The slot is read from the request's bytes**, not handed down by the engine (`send_to(nodes, slot,
//!   ...)`): every engine path (the guards' pipelined renewals, batches, `inspect`, the undo of a failed
//!   attempt) sends several keys' commands in one request, and each would have to be taught to split them.
//!   `route/command.rs` cuts a cluster member's request into commands and reads each one's keys (`SET`,
//!   `GET`, `PTTL`, `DEL*`, the declared keys of `EVAL`/`EVALSHA`); a command it cannot route (unknown,
//!   keyless, `CROSSSLOT`) is a failed vote, never a guess. Plain members never reach it.
//! - **Every node of a member's map is dialled at build time** (masters and replicas), instead of connections
//!   added to the fanout at run time: a failover promotes a replica whose connection is already up, and the
//!   fanout's delicate bookkeeping (`Slots`, the driver's read sides, lock-free `addrs`) stays fixed-size. A
//!   node the map never showed (added to the cluster later, or any node of a member unmapped at build) gets one
//!   of the member's **vacant connections** (`Fanout::with_vacancies`, made at build, never dialled until
//!   `Fanout::occupy` gives one an address) when a map refresh names it: the number of connections never
//!   changes, so nothing else has to learn to grow. Once they are used up, a further new node's slots fail
//!   their votes until the manager is built again.
//! - **A map refresh runs on a short thread of its own** (`Members::refresh`: `CLUSTER SHARDS`, else `CLUSTER
//!   SLOTS`, asked of every known node and seed; at most one per member at a time, 100 ms apart), after a
//!   `MOVED`, a failed connection of the member or a slot no master serves. It is not a request on the
//!   round's fanout: the engine drops a round the moment it is decided, and with it any reply still to
//!   come, so a member whose master died would rarely get its new map while the two others decide. A `MOVED`
//!   still patches the slot at once.
//! - **Derived keys are named per manager, not per member**: with a cluster member anywhere, an untagged resource's
//!   fencing counter and hold count are `prefix{resource}` on every member, plain ones included
//!   (`redlock::kind::derived_key`): the engine encodes one request for all members. Plain-only managers name them
//!   the prefix followed by the resource, unwrapped. The nodes' waiting queue (whose script builds undeclared turn
//!   keys) and the watchdog's tracker connections are off on such managers (waits line up in the process and wake at
//!   the holder's expiry; guards are checked at each renewal), folded releases are refused, and a batch is released
//!   one lock at a time.
//! - **The restart guard across failovers** is per connection (`NodeRound::source` names the
//!   connection a vote came on), but **no persistence proof lets a promoted replica count sooner**: its
//!   `appendfsync always` covers its own writes, not those its master acknowledged before replicating them, and
//!   the persistence marker it holds was replicated from the old master. A promotion is seen at run time (a
//!   `MOVED` to, or a new map naming, a node the member's map showed as a replica; every master of the first
//!   map of a member whose map could not be read at build) and by a manager built after
//!   it (`INFO server replication` on every connection: a promoted master's `second_repl_offset` is set), and
//!   either way starts the window. See `redlock::engine::restart`, "Failovers in a cluster member". A
//!   promotion seen by neither (a failover and failback of a shard this manager sent nothing to meanwhile) is
//!   seen by the replication check after each vote (`route/replid.rs`): the design had no such check.
//!
//! `WAIT` after grants is built, inside the replication check (`route/replid.rs`: every replica of the shard
//! must have a grant for it to count); a promoted replica still waits out its window (other clients, or
//! managers with the restart guard off, may have been granted without it). Not built yet: `WAITAOF`; a
//! per-connection persistence marker (the marker key lives in one slot, so on a cluster member only the master
//! serving it can prove persistence; the others get the window rule); a redirection that comes after the
//! engine stopped reading the round (a failed attempt's unawaited undo, or a release already confirmed by a
//! majority) is not followed, so that member's key ends with its lease (`tests/cluster/members.rs` saw it for a
//! release mid-migration). Following them would need someone to read abandoned rounds (the fanout's driver).

mod key_slot;
mod redirect;
mod reply;
mod route;
pub(crate) use route::TIME;
mod seeds;
mod shards;
mod slot_map;
mod slots_reply;
#[cfg(test)]
mod tests;

pub use key_slot::{SLOT_COUNT, crc16, hash_tag, key_slot};
pub use redirect::{Redirect, RedirectError, RedirectKind};
pub use reply::MapError;
pub use route::{
    Bracket, ConnRound, Conns, MapDone, MapRead, Members, MembersRound, Plan, Vacancies,
};
pub use seeds::{ClusterAddr, MemberAddr};
pub use slot_map::{ClusterNode, Endpoint, Health, Shard, SlotMap, SlotRange};
