//! Read-write locks across N masters, asked with [`Request::read`](crate::redlock::Request::read) and
//! [`Request::write`](crate::redlock::Request::write): any number of readers (up to [`MAX_READERS`] at once) or
//! one writer of a name. Held as a [`Lock`] whose [`Lock::access`] says which ([`Access`]); internally the kinds
//! [`Kind::Read`] and [`Kind::Write`]. Here the keys, the per-node scripts, and why a reader and a writer never
//! both hold.
//!
//! # The design
//!
//! A read-write lock named `name` has three families of keys, all with one hash tag so that on a cluster member
//! they lie in one slot and one script may read them all ([`writer_key`], [`intent_key`], [`reader_key`]):
//! the **writer key** `{name}:write`, the **reader slots** `{name}:read:0` to `{name}:read:<M-1>` with
//! `M` = [`MAX_READERS`] (at most 64 readers at once; more wait), and the writer's **intent key**
//! `{name}:writing`. Every key is a plain key with its own `PX` expiry (no hash-field expiry: Redis 7.0 does).
//!
//! - **Read** is a semaphore of `M` permits on the reader slots, taken by the semaphore's own offer round
//!   (`semaphore.rs`: one offer counted per slot index, the lowest slot held kept, the rest given back, a second
//!   offer on a split), whose per-node script, [`lua::ACQUIRE_READ`], also **takes no slot while the writer key
//!   or the intent key exists on that node**. From then on the reader holds its slot's key as a plain lock: it is
//!   extended by the compare-and-pexpire of that key, released by its compare-and-delete, renewed so by a guard.
//! - **Write** is a plain Redlock mutex on the writer key, whose per-node script, [`lua::ACQUIRE_WRITE`], sets
//!   the writer key (`SET PX`, the value drawn afresh for the attempt) only if the writer key is free **and no
//!   reader slot exists on that node**. Refused because of readers only, it sets the intent key to its value with
//!   `PX` = the lease's TTL (refreshed at each attempt); granted, it deletes the intent key. The writer then holds
//!   the writer key as a plain lock.
//!
//! Every vote of both rounds is counted through the restart guard (`Engine::counted_from`, with a key of the
//! name's slot: per-slot quarantine on cluster members) and the clock check, as every kind's.
//!
//! # Why a reader and a writer never both hold
//!
//! Under the mutex's assumptions (bounded clock drift, the restart guard for nodes that come back without their
//! data, the clock check for nodes whose clocks jump), a holder counts its lock only until its validity, and
//! the key it was granted on a node outlives that validity there. A writer holds only if a majority of the nodes
//! granted it, and each such grant needed **no live reader slot** on that node at that instant; a reader holds
//! only if a majority granted it one slot index, and each such grant needed **no live writer key** there. Any two
//! majorities of the same nodes meet in a node. On that node the two grants were made one after the other (a
//! script runs to its end before any other command); whichever came first set a key (the writer key, or a
//! reader slot) that lives past its holder's validity, so the second, made while the first holds, finds it and is
//! refused. So a reader and a writer that both hold cannot overlap: it is the mutex's own argument, applied to
//! the pair (writer key, reader slot) instead of one key. Whichever is granted second on the common node might be
//! granted after the first's key expired there: then the first's validity has ended too, and they do not overlap.
//!
//! Writers among themselves are a mutex on the writer key. Readers among themselves are not excluded; each
//! reader slot is a mutex of its own, so no two readers share a slot, and at most `M` read at once.
//!
//! **The intent key only refuses more**: a reader is refused while it exists, a writer never looks at it. So it
//! cannot make a grant that the argument above forbids; it is there for liveness, never for safety.
//!
//! # Writers are not starved
//!
//! Without the intent, a stream of overlapping readers keeps some reader slot live on every node, and a writer
//! is refused for as long as the stream lasts. With it, the first refused attempt of a writer marks its intent on
//! every node where readers held it off; new readers are refused there, the readers already in finish (or their
//! leases run out), and the writer's next attempt (a retry, or a wake of [`wait`](crate::redlock::Request::wait))
//! finds no reader. A granted writer deletes the intent key, whichever writer set it: another writer waiting is
//! refused by the writer key meanwhile and marks its intent again at its next attempt that meets readers.
//! The intent lives one lease of the writer's, so a waiting writer tries again within half a lease whatever it
//! is waiting for (`kind::Line::marks`): otherwise a writer with a lease shorter than the readers' (who it
//! waits for) let its intent lapse between tries, and the next reader got in each time
//! (`api::rwlock::a_waiting_writer_with_a_short_lease_is_not_starved_by_readers`). A writer that only retries
//! (`retry`, no `wait`) keeps its intent only if its pause is shorter than its lease.
//!
//! **A writer that gives up withdraws its intent**: a call that ends without the lock (refused with no retry left,
//! out of waiting time, or its future dropped) deletes the intent key on every node where it still holds one of
//! the call's values ([`Intent`](super::Intent)), so readers are not kept out for a lease by a writer that is
//! gone; a node it cannot reach refuses readers until the intent's `PX` ends (or another writer is granted there).
//! Each writer's attempt overwrites the intent key, so a writer that gives up may withdraw the intent another
//! writer marked before it: that writer, still waiting, marks it again at its next attempt (within half a lease).
//! A writer keeps readers out only while its call lasts: an application that tries `once` in a loop of its own
//! should `wait` instead. A writer whose acquisition fails releases its writer key where it may have been granted,
//! as a plain lock's failed attempt does; a reader's failed attempt gives back every slot it may have taken, as a
//! semaphore's does.
//!
//! # Cost
//!
//! A read costs a semaphore's acquisition (one round; a second on a split); a write one round of one script
//! that looks at `M + 2` keys. Release and extension of either cost a plain lock's. Waiting readers line up
//! in one queue of the nodes' and waiting writers in another, across processes (`wait/handoff.rs`: their
//! offers run behind its gate, [`lua::QUEUE_READ`] and [`lua::QUEUE_WRITE`]), each served in the order it came;
//! readers enter one after another, each as the one before leaves the queue, and the writer at the head of its
//! queue keeps new readers out with its intent, as any waiting writer does. The head probes: a reader
//! the writer and intent keys, a writer the writer key and every reader slot, for the latest to come free (both
//! wake early on a release in this process or, on RESP3 nodes, an invalidation of a probed key).
//!
//! # Limits
//!
//! - At most [`MAX_READERS`] readers at once; more are refused (and wait) as a full semaphore's callers are.
//! - A reader slot's key and the writer key are keys like any other: a plain lock named `{name}:write` would be
//!   the writer key (as a plain lock named `{pool}:permit:0` is a semaphore's permit).

use std::time::Duration;

use crate::redlock::engine::Engine;
use crate::redlock::engine::reply::grant_vote;
use crate::redlock::engine::scripted::Reading;
use crate::redlock::engine::seam::{Clock, Nodes};
use crate::redlock::error::Report;
use crate::redlock::kind::queued::Gate;
use crate::redlock::kind::semaphore::{self, MAX_PERMITS, Slots};
use crate::redlock::kind::{Kind, Line, Lock};
use crate::redlock::lua;
use crate::redlock::quorum::Failure;
use crate::redlock::token;
use crate::resp::{Decimal, Value};

/// The most readers of one read-write lock at once (the semaphore's [`MAX_PERMITS`]): more readers wait.
pub const MAX_READERS: u32 = MAX_PERMITS;

/// How a [`Lock`] or a [`Guard`](crate::redlock::Guard) holds a read-write lock: as one of its readers or as its
/// writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// A reader ([`Request::read`](crate::redlock::Request::read)): other readers may hold beside it, no writer.
    Read,
    /// The writer ([`Request::write`](crate::redlock::Request::write)): nobody else holds beside it.
    Write,
}

/// A key of the read-write lock `name`: `{name}:<part>`, or `name:rw:<part>` when the name has a hash tag of its
/// own or a brace without one. Either way every key of a name with a hash tag or no brace lies in one cluster
/// slot. Two names never share a key: the first form's names hold no brace, and the second form's keys end in
/// `:rw:<part>`, which no key of the first form does (its name is followed by `}`).
fn key(name: &[u8], part: &str) -> Vec<u8> {
    let tagged = crate::net::cluster::hash_tag(name).len() != name.len();
    let braced = name.iter().any(|&b| b == b'{' || b == b'}');
    match tagged || braced {
        true => [name, b":rw:", part.as_bytes()].concat(),
        false => [&b"{"[..], name, b"}:", part.as_bytes()].concat(),
    }
}

/// The writer key of the read-write lock `name`: `{name}:write` (`{t}x:rw:write` for a name with a hash tag).
pub fn writer_key(name: &[u8]) -> Vec<u8> {
    key(name, "write")
}

/// The writer's intent key of the read-write lock `name`: `{name}:writing` (`{t}x:rw:writing` for a name with a
/// hash tag). While it exists on a node, readers are refused there.
pub fn intent_key(name: &[u8]) -> Vec<u8> {
    key(name, "writing")
}

/// The key of reader slot `index` (below [`MAX_READERS`]) of the read-write lock `name`: `{name}:read:<index>`
/// (`{t}x:rw:read:<index>` for a name with a hash tag).
pub fn reader_key(name: &[u8], index: u32) -> Vec<u8> {
    key(name, &format!("read:{index}"))
}

/// Every reader slot's key, in index order.
pub(crate) fn reader_keys(name: &[u8]) -> Vec<Vec<u8>> {
    (0..MAX_READERS).map(|i| reader_key(name, i)).collect()
}

/// Every key of `name`, as the scripts take them: the writer key, the intent key, then the reader slots.
pub(crate) fn all_keys(name: &[u8]) -> Vec<Vec<u8>> {
    let mut keys = vec![writer_key(name), intent_key(name)];
    keys.extend(reader_keys(name));
    keys
}

/// A reader's or writer's waiting line: on its name and access, woken by a release of any of its keys; a
/// reader probes the writer and intent keys, a writer the writer key and every reader slot, for the latest to
/// come free.
pub(crate) fn line(name: &[u8], access: Access) -> Line {
    let grouped = all_keys(name);
    let (tag, probed): (&[u8], Vec<Vec<u8>>) = match access {
        Access::Read => (b"\0read\0", vec![writer_key(name), intent_key(name)]),
        Access::Write => {
            let mut keys = vec![writer_key(name)];
            keys.extend(reader_keys(name));
            (b"\0write\0", keys)
        }
    };
    Line {
        key: [tag, name].concat(),
        grouped,
        probed,
        name: name.to_vec(),
        any: false,
        // A refused writer's intent lives one lease: it must try again before then (see the module doc).
        marks: access == Access::Write,
    }
}

/// The reader's offer: the reader slots, refused while the writer or intent key exists.
fn readers(name: &[u8]) -> Slots {
    Slots {
        keys: reader_keys(name),
        blockers: vec![writer_key(name), intent_key(name)],
        script: lua::ACQUIRE_READ,
        queued: lua::QUEUE_READ,
    }
}

/// One reader's acquisition of `name`: a slot of the semaphore of reader slots, offered by
/// [`lua::ACQUIRE_READ`] (module doc), behind the nodes' queue with a `gate` ([`lua::QUEUE_READ`]).
pub(crate) async fn read<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    name: &[u8],
    value: token::Value,
    ttl: (Duration, u64),
    gate: Option<&mut Gate<'_>>,
) -> std::result::Result<Lock, (Failure, Report)> {
    let kind = |slot| Kind::Read(name.to_vec(), slot);
    semaphore::take(engine, &readers(name), (name, &kind), value, ttl, gate).await
}

/// **The simulator's control, unsafe on purpose**: a reader whose offer ignores the writer and intent keys (the
/// semaphore's own script on the reader slots), so that a reader may hold beside a writer.
#[cfg(feature = "sim")]
pub(crate) async fn read_ignoring_writer<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    name: &[u8],
    value: token::Value,
    ttl: (Duration, u64),
) -> std::result::Result<Lock, (Failure, Report)> {
    let kind = |slot| Kind::Read(name.to_vec(), slot);
    let slots = Slots {
        keys: reader_keys(name),
        blockers: Vec::new(),
        script: lua::ACQUIRE_PERMITS,
        queued: lua::QUEUE_PERMITS,
    };
    semaphore::take(engine, &slots, (name, &kind), value, ttl, None).await
}

/// One writer's acquisition of `name`: [`lua::ACQUIRE_WRITE`] on every node (behind the nodes' queue with a
/// `gate`: [`lua::QUEUE_WRITE`]), counted as a mutex on the writer key; on a failure the writer key is released
/// where it was sent (its intent stays for the call's next attempt; the call withdraws it:
/// [`Intent`](super::Intent)).
pub(crate) async fn write<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    name: &[u8],
    value: token::Value,
    (ttl, ttl_ms): (Duration, u64),
    mut gate: Option<&mut Gate<'_>>,
) -> std::result::Result<Lock, (Failure, Report)> {
    let keys = all_keys(name);
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
    let args: [&[u8]; 2] = [&value, ttl_arg.as_bytes()];
    let gated = gate.as_ref().map(|g| g.with(&refs, &args));
    let (script, refs, args): (_, &[&[u8]], &[&[u8]]) = match &gated {
        Some((keys, args)) => (lua::QUEUE_WRITE, keys, args),
        None => (lua::ACQUIRE_WRITE, &refs, &args),
    };
    let reading = match gated {
        Some(_) => Reading::OnAfterRefusal,
        None => Reading::ToVerdict,
    };
    let round = engine
        .acquire_scripted(
            script,
            (refs, args),
            (ttl, ttl_ms),
            reading,
            |node, reply| {
                let (vote, outcome) = match gate.as_deref_mut() {
                    Some(g) => grant_vote(&g.ungate(reply, node, Value::Integer(0))),
                    None => grant_vote(reply),
                };
                (vote, outcome, 0)
            },
        )
        .await;
    let writer = writer_key(name);
    engine
        .conclude(
            round.status,
            &round.quorum,
            round.start,
            (&writer, value),
            (round.nodes, round.untouched),
            round.outcomes,
        )
        .map(|lease| Lock::new(lease, Kind::Write(name.to_vec())))
}

/// Releases, unawaited and on every node, every reader slot an attempt at `name` with `value` may have taken
/// (its [`Undo`](super::Undo)).
pub(crate) fn undo_read<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    name: &[u8],
    value: &token::Value,
) {
    let keys = reader_keys(name);
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    semaphore::give_back(engine, &refs, value, crate::net::NodeSet::ALL);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::cluster::key_slot;

    #[test]
    fn the_keys_of_a_name_share_its_slot_and_no_other_name_s() {
        assert_eq!(writer_key(b"doc"), b"{doc}:write");
        assert_eq!(intent_key(b"doc"), b"{doc}:writing");
        assert_eq!(reader_key(b"doc", 7), b"{doc}:read:7");
        assert_eq!(writer_key(b"{t}x"), b"{t}x:rw:write");
        assert_ne!(writer_key(b"doc"), writer_key(b"{doc}"));
        for name in [&b"doc"[..], b"{t}x", b"a:b"] {
            let slot = key_slot(&writer_key(name));
            assert!(all_keys(name).iter().all(|k| key_slot(k) == slot));
            assert_eq!(all_keys(name).len(), 2 + MAX_READERS as usize);
        }
        // No reader slot or writer key is a semaphore's permit.
        assert_ne!(reader_key(b"doc", 0), semaphore::permit_key(b"doc", 0));
    }
}
