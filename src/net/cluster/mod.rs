//! Redis Cluster groundwork (issue #27): the pure pieces a Redlock member that is a whole Redis Cluster will be
//! routed with. Nothing here opens a socket or knows of locks, and nothing in the lock paths uses it yet.
//!
//! # Layout
//!
//! - `key_slot`: [`key_slot`](fn@key_slot), [`crc16`] and [`hash_tag`]: the slot of a key, as `CLUSTER KEYSLOT` computes it;
//! - `slot_map`: [`SlotMap`] (slot ranges to [`Shard`]s: a master and its replicas, each a [`ClusterNode`] at an
//!   [`Endpoint`]), read from `CLUSTER SHARDS` (`shards`) or `CLUSTER SLOTS` (`slots_reply`) in RESP2 or RESP3,
//!   with a [`MapError`] naming the faulty part of a reply (`reply`: reading the replies' values);
//! - `redirect`: [`Redirect`], a `-MOVED` or `-ASK` error read;
//! - `seeds`: [`ClusterAddr`], `redis+cluster://host:port,host:port`, and [`MemberAddr`], a node or a cluster.
//!
//! Every parser takes any input without panicking (`tests/` feeds them arbitrary and mutated values);
//! `tests/cluster_map.rs` reads live clusters (started by `tests/support/redis_cluster/`) with them.
//!
//! # Routing (the design; not built)
//!
//! What the rest of issue #27 is to build on these pieces, and what it changes. Nothing of it is wired in yet.
//!
//! **Members and connections.** A manager's Redlock *members* stay what the engine counts: N of them, a majority
//! N/2 + 1, one vote each. A plain member is one connection, as today; a cluster member ([`MemberAddr::Cluster`])
//! is one connection per master of its slot map, all on the same [`Fanout`](crate::net::Fanout) and poll: the
//! fanout's node indexes become *connections*, and a routing layer between the engine's seam and the fanout
//! (`net/cluster/route.rs`, a `Members` type that implements the seam's `Nodes` over a `Fanout`) keeps, per
//! member, its connections and, for a cluster, its [`SlotMap`] and each master's connection index. At build time
//! each cluster member's map is read from its seeds (`CLUSTER SHARDS`; on [`MapError::Refused`], `CLUSTER
//! SLOTS`), bounded by `connect_timeout`; a member whose map cannot be read starts with no map and votes no (an
//! unreachable member, as a plain node that is down) until a later round reads one.
//!
//! **A member's vote.** Every key a lock request touches lies in one slot (below), so a request has one slot,
//! [`key_slot`](fn@key_slot) of its resource, computed once per request by the engine. To a cluster member the routing layer
//! sends it on the connection of the master owning that slot; the reply from that master is the member's vote,
//! whichever master it was. The engine keeps counting members, so one vote per member holds by construction: a
//! member never answers twice for one request, since the routing layer hands up exactly one outcome per expected
//! reply per member (the seam's contract), redirects included.
//!
//! **Redirections, within the round's deadline.** The routing layer keeps a request's bytes until its member's
//! outcome is final (a copy per cluster send; plain members pay nothing). On `-MOVED` ([`Redirect::parse`]) the
//! member's map is stale: the routing layer patches the slot's owner at once (dialling the named master if it is
//! new, [`ClusterAddr::node`] giving it the seeds' credentials and TLS), resends the request there in the same
//! round, and queues one map refresh per member (`CLUSTER SHARDS` on any live master of that member, coalesced:
//! at most one in flight per member), whose reply replaces the map when it comes. On `-ASK` it sends `ASKING` and
//! the request, together in one write, to the named node, without touching the map, and swallows the `+OK` of
//! `ASKING`. A request follows at most two redirections; a third, a redirection that cannot be read
//! ([`RedirectError`]), an endpoint it cannot dial ([`Endpoint::Unknown`]) or the round's deadline make that
//! member's outcome a failed vote, as a node error is today. Nothing waits past the deadline: a resend is made
//! only if the deadline has not passed, and an outcome still missing then is a timeout, as for a plain node.
//! `TRYAGAIN` (a multi-key command mid-migration) and `CLUSTERDOWN` are failed votes, not retried.
//!
//! **One slot per lock.** A lock's keys must share a slot or its scripts fail with `CROSSSLOT`. The lock key is
//! the resource's name; the derived keys (fencing counter, reentrant holds, the waiting queue's keys) are today
//! `prefix + resource`. A resource holding a hash tag (`{invoice}:42`) already shares it with them. For a cluster
//! member the engine names the derived keys of an untagged resource `prefix + "{" + resource + "}"`, which hashes
//! like the resource itself ([`hash_tag`]); a resource with a `{` or `}` but no hash tag cannot be colocated that
//! way and is refused on cluster members (`Error::Config`, before anything is sent). Plain members keep today's
//! names, so nothing changes for them. A *set* of resources spans slots: on a cluster member a set is refused
//! unless its names share a slot (name them with one tag), since its all-or-none script must run on one master.
//! A *batch* of independent locks is split per master inside each member and still goes out as one write per
//! connection; the routing layer hands its outcomes up in send order per member (it buffers a later master's
//! replies until the earlier ones are in), so the engine's batch code is unchanged.
//!
//! **The restart guard across failovers.** A vote is judged by the connection that gave it, not by the member:
//! the set-up replies (`INFO server`'s `run_id` and uptime, the persistence probe) are per connection, so
//! `Nodes::sessions`/`setup_replies` take the connection the outcome came from (the routing layer's outcome
//! carries it). A slot whose owner changed to a node that was a replica in the member's map (a failover) or to a
//! node the map never showed is quarantined for the window, as a restarted node is, unless the new owner proves
//! it forgets nothing (`appendfsync always` and the persistence marker, `engine/persist.rs`): replication is
//! asynchronous, so a promoted replica may lack a grant its master acknowledged, which is the spec's restart
//! without persistence. An owner that was already a master of the map (a slot migration: `MIGRATE` moves keys
//! with their expiry, and the source answers `ASK` for a key only once it no longer holds it) is trusted as it was.
//! `WAIT 1 <timeout>` after each grant (a grant counts once a replica has it) would narrow the failover gap at a
//! round trip per grant, and `WAITAOF` (Redis >= 7.2; not on this machine's 7.0.15) close it for fsynced
//! replicas; both are left as options for later.
//!
//! **What changes below and above the seam.** In [`Fanout`](crate::net::Fanout): connections added at run time
//! (`add_node`, registered with the poll by the driver's next turn; a connection whose master left the map is
//! kept idle, not torn down mid-round), and `NodeSet` over connections (members stay below 64; connections may
//! not, and a set from 64 on already means "every node"). In the seam (`engine/seam.rs`): a request carries its
//! slot (`send_to(nodes, slot, request, replies)`; plain members ignore it), and the set-up replies are asked per
//! connection. In the engine: the slot computed per request, the derived keys' names for cluster members, and the
//! set refusal; the quorum, the kinds' scripts and the retry loop do not change. The watchdog's tracker
//! connections (`CLIENT TRACKING`) become one per master of each cluster member, and a guard's key is read on its
//! slot's master.

mod key_slot;
mod redirect;
mod reply;
mod route;
mod seeds;
mod shards;
mod slot_map;
mod slots_reply;
#[cfg(test)]
mod tests;

pub use key_slot::{SLOT_COUNT, crc16, hash_tag, key_slot};
pub use redirect::{Redirect, RedirectError, RedirectKind};
pub use reply::MapError;
pub use route::{Members, MembersRound, Plan};
pub use seeds::{ClusterAddr, MemberAddr};
pub use slot_map::{ClusterNode, Endpoint, Health, Shard, SlotMap, SlotRange};
