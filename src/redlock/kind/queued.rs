//! The nodes' waiting queue, for a waiting request of a kind that queues ([`Kind::queues`](super::Kind)): a
//! waiting process's entry in the queue of its waiting line, the gate every queued offer runs behind
//! ([`lua::QUEUE_ACQUIRE`] and the others of [`lua::QUEUED`]: the kind's own offer script, run only for the
//! queue's head), what the gate adds to a reply ([`Gate::ungate`]), and leaving ([`lua::QUEUE_LEAVE`]). The queued
//! attempt itself ([`attempt`]) is the kind's offer with a [`Gate`], decided as the kind decides any attempt. The
//! design and its safety argument are `wait/handoff.rs`'s module doc.

use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::net::{NodeSet, Reply};
use crate::redlock::engine::Engine;
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::error::{Outcome, Report, Result};
use crate::redlock::kind::{self, Ask, Intent, Lock, Undo};
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Quorum, Status, Vote};
use crate::redlock::token;
use crate::resp::{Decimal, Value};
use crate::time::later;

/// The start of every turn key: `muxlock:turn:<24 hex digits of the waiter's id>:<line>`.
pub(crate) const TURN_PREFIX: &[u8] = b"muxlock:turn:";
/// The length of a waiter's id (hex digits): its manager's prefix (8), then its own (16).
const ID_LEN: usize = 24;

/// The waiting line a turn key or a handed marker is about (a plain lock's resource, a kind's `Line::key`), if
/// `key` is one.
pub(crate) fn line_of_turn(key: &[u8]) -> Option<&[u8]> {
    let rest = key.strip_prefix(TURN_PREFIX)?;
    match rest.get(ID_LEN) {
        Some(b':') => rest.get(ID_LEN + 1..),
        Some(b'=') => handed_marker(key).map(|(_, _, line)| line),
        _ => None,
    }
}

/// The waiter id a turn key (not a handed marker) names, if `key` is one.
pub(crate) fn turn_key_id(key: &[u8]) -> Option<&[u8]> {
    let (id, rest) = key.strip_prefix(TURN_PREFIX)?.split_at_checked(ID_LEN)?;
    rest.starts_with(b":").then_some(id)
}

/// The waiter id, the value and the line a **handed marker** names: `muxlock:turn:<id>=<value>:<line>`, which a
/// release writes, with the waiter's TTL, as it hands a plain lock's key on to that waiter set to that value
/// ([`lua::QUEUE_LEAVE`]); nothing else writes it. Its names start as the waiter's turn key does, so the
/// waiter's turn listener is pushed its every change (`guard/turns.rs`).
pub(crate) fn handed_marker(key: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let rest = key.strip_prefix(TURN_PREFIX)?;
    let (id, rest) = rest.split_at_checked(ID_LEN)?;
    let (value, rest) = rest
        .strip_prefix(b"=")?
        .split_at_checked(token::VALUE_LEN)?;
    Some((id, value, rest.strip_prefix(b":")?))
}

/// How long a queue entry lives on a node without a refresh: 4 round timeouts, at least 1 s. A waiter refreshes it
/// every quarter of this; a dead waiter holds up the queue for at most this plus a quarter.
pub(crate) fn entry_lease(round_timeout: Duration) -> Duration {
    round_timeout.saturating_mul(4).max(Duration::from_secs(1))
}

/// A waiting process's place in the nodes' queue of one waiting line (a plain lock's resource, or a kind's line,
/// [`Line::key`](super::Line)).
#[derive(Debug)]
pub(crate) struct Entry {
    id: Vec<u8>,
    ticket: Vec<u8>,
    lease_ms: Vec<u8>,
    pub(crate) lease: Duration,
    queue: Vec<u8>,
    deadlines: Vec<u8>,
    /// The hash of the values the line's waiters last offered (waiter id → value), which a release hands the key
    /// on to ([`lua::QUEUE_LEAVE`]).
    handed: Vec<u8>,
    line: Vec<u8>,
    /// The line is a plain lock's resource, whose releases hand the key on: a waiter that leaves hands on what
    /// was handed to it.
    hands_on: bool,
    pub(crate) turn: Vec<u8>,
}

impl Entry {
    /// A new entry in the queue of the line `line`: id `prefix` (8 hex digits: the manager's, whose turn listener
    /// hears every turn key starting with it, `guard/turns.rs`) then `random` (16), ticket `micros` (when the
    /// waiter began to wait, on the wall clock: the same on every node's copy of the queue, whatever order the
    /// joins reach the nodes in). `hands_on`: the line is a plain lock's resource (see [`Entry::hands_on`]).
    pub(crate) fn new(
        (prefix, random): (u32, u64),
        micros: u128,
        round_timeout: Duration,
        (line, hands_on): (&[u8], bool),
    ) -> Entry {
        let id = format!("{prefix:08x}{random:016x}").into_bytes();
        let lease = entry_lease(round_timeout);
        let decimal = |v: u128| {
            Decimal::new(i64::try_from(v).unwrap_or(i64::MAX))
                .as_bytes()
                .to_vec()
        };
        let with = |prefix: &[u8]| [prefix, line].concat();
        Entry {
            ticket: decimal(micros),
            lease_ms: decimal(lease.as_millis()),
            lease,
            queue: with(b"muxlock:queue:"),
            deadlines: with(b"muxlock:queue-deadlines:"),
            handed: with(b"muxlock:queue-handed:"),
            hands_on,
            turn: [TURN_PREFIX, &id, b":", line].concat(),
            line: line.to_vec(),
            id,
        }
    }

    /// The gate's keys (the queue, its deadlines, its hand-off values), after the kind's in `KEYS`.
    fn keys(&self) -> [&[u8]; 3] {
        [&self.queue, &self.deadlines, &self.handed]
    }

    /// Whether the line is a plain lock's resource, whose releases hand the key on to its waiters.
    pub(crate) fn hands_on(&self) -> bool {
        self.hands_on
    }

    /// The waiter's id (24 hex digits).
    pub(crate) fn id(&self) -> &[u8] {
        &self.id
    }

    /// What a plain lock taken by this waiter is released with.
    fn hand_on(&self) -> HandOn {
        HandOn {
            queue: self.queue.clone(),
            deadlines: self.deadlines.clone(),
            handed: self.handed.clone(),
            id: self.id.clone(),
            ticket: self.ticket.clone(),
            lease_ms: self.lease_ms.clone(),
            line: self.line.clone(),
        }
    }

    /// The gate's arguments (the waiter's id, its ticket, the entry's lease, the line), after the kind's in
    /// `ARGV`.
    fn args(&self) -> [&[u8]; 4] {
        [&self.id, &self.ticket, &self.lease_ms, &self.line]
    }
}

/// What a waiting request's plain lock is released with: its waiter's entry, which the release takes off the
/// queue as a leave does ([`lua::QUEUE_LEAVE`], given the lock's value to hand on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HandOn {
    queue: Vec<u8>,
    deadlines: Vec<u8>,
    handed: Vec<u8>,
    id: Vec<u8>,
    ticket: Vec<u8>,
    /// How long a handed key lives untaken (ms): the entry's lease.
    lease_ms: Vec<u8>,
    line: Vec<u8>,
}

impl HandOn {
    /// The release's `KEYS` before the lock key, and its `ARGV` before the lock's value.
    pub(crate) fn keys_and_args(&self) -> ([&[u8]; 3], [&[u8]; 4]) {
        (
            [&self.queue, &self.deadlines, &self.handed],
            [&self.id, &self.ticket, &self.lease_ms, &self.line],
        )
    }
}

/// What the nodes' gates said of a queued attempt.
#[derive(Debug)]
pub(crate) struct Refusal {
    /// Some node has this waiter at the head of its queue.
    pub(crate) head: bool,
    /// Per node, the turn key's value it reported.
    pub(crate) turns: Vec<Option<i64>>,
    /// The nodes whose gate answered a grant (the waiter did not queue there, unless `joined` says it did with
    /// another offer of the attempt: a semaphore's second), and those whose gate answered a place in the queue.
    /// Nodes from 64 on are never left out of a leave, whatever these say.
    pub(crate) granted: NodeSet,
    pub(crate) joined: NodeSet,
    /// The nodes whose gate granted the key handed to this waiter, and took it off their queue as it did.
    pub(crate) left: NodeSet,
    /// A plain lock's refused attempt: what a grant by push needs of it ([`by_push`]).
    pub(crate) handed: Option<Handed>,
}

/// A plain lock's refused queued attempt, as a grant by push counts it ([`by_push`]; the argument is
/// `wait/handoff.rs`'s, "The grant by push").
#[derive(Debug, Clone)]
pub(crate) struct Handed {
    /// The attempt's value: what a release hands the key on to this waiter as, while this is its last attempt.
    pub(crate) value: token::Value,
    /// When the attempt's round started, and the TTL it asked for (the gate registered it with the value).
    pub(crate) start: Instant,
    pub(crate) ttl: Duration,
    /// The nodes that refused every request of the attempt, each reply read and counted (the clock check
    /// passed): its clean-up skips them, so nothing of the attempt removes a key handed on to it there.
    pub(crate) refused: NodeSet,
}

impl Refusal {
    /// The nodes where the attempt may have queued the waiter: every node but those whose gate answered only
    /// grants.
    fn queued(&self) -> NodeSet {
        NodeSet::ALL.difference(self.granted).union(self.joined)
    }
}

/// A queued attempt's way through the gate: the entry it offers with, and what the nodes' gates answered.
#[derive(Debug)]
pub(crate) struct Gate<'a> {
    pub(crate) entry: &'a Entry,
    pub(crate) refusal: Refusal,
}

impl<'a> Gate<'a> {
    /// A gate for an attempt of `entry` on `n` nodes.
    pub(crate) fn new(entry: &'a Entry, n: usize) -> Gate<'a> {
        Gate {
            entry,
            refusal: Refusal {
                head: false,
                turns: vec![None; n],
                granted: NodeSet::EMPTY,
                joined: NodeSet::EMPTY,
                left: NodeSet::EMPTY,
                handed: None,
            },
        }
    }

    /// A queued offer's `KEYS` and `ARGV`: the kind's `keys` and `args`, then the gate's (see
    /// [`lua::QUEUE_ACQUIRE`]).
    pub(crate) fn with<'k>(
        &self,
        keys: &[&'k [u8]],
        args: &[&'k [u8]],
    ) -> (Vec<&'k [u8]>, Vec<&'k [u8]>)
    where
        'a: 'k,
    {
        let entry: &'a Entry = self.entry;
        (
            keys.iter().copied().chain(entry.keys()).collect(),
            args.iter().copied().chain(entry.args()).collect(),
        )
    }

    /// What node `node`'s reply to a queued offer says of the kind's offer: the kind's script's own reply where
    /// it ran, `refused` (what the kind's script answers when it takes nothing) where the queue kept it from
    /// running; an error or a reply that is no array as it came, and an array of another shape as an error reply
    /// (the kind would read it as its own: a semaphore's as a list of permits taken). The gate's part (the
    /// waiter's rank and turn, or that it did not queue there) goes into the refusal.
    pub(crate) fn ungate(&mut self, reply: &Reply, node: usize, refused: Value) -> Reply {
        let Ok(Value::Array(items)) = reply.as_ref().map(Value::without_attributes) else {
            return reply.clone();
        };
        let unexpected = || Ok(Value::Error(format!("unexpected reply {items:?}").into()));
        let [ran, rank, turn] = &items[..] else {
            return unexpected();
        };
        let (Value::Integer(rank), Value::Integer(turn)) =
            (rank.without_attributes(), turn.without_attributes())
        else {
            return unexpected();
        };
        let refusal = &mut self.refusal;
        match *rank {
            -2 => {
                refusal.granted.insert(node);
                refusal.left.insert(node);
            }
            r if r < 0 => refusal.granted.insert(node),
            r => {
                refusal.joined.insert(node);
                refusal.head |= r == 0;
                if let Some(t) = refusal.turns.get_mut(node) {
                    *t = Some(*turn);
                }
            }
        }
        match ran.without_attributes() {
            Value::Null | Value::NullBulk | Value::Boolean(false) => Ok(refused),
            v => Ok(v.clone()),
        }
    }
}

/// One queued attempt of `ask` (a kind that queues): the kind's offer behind the gate with `entry`, decided as
/// the kind decides any attempt. On a failure, the offer's partial grants are released as the kind releases them,
/// and the refusal says the waiter's rank and turn; a task's future dropped before the offer is decided releases
/// what it may have set (as [`kind::attempt`]). `joined`: the waiter queued with an earlier attempt; `intent`:
/// the call's, told the attempt's value.
#[allow(clippy::type_complexity)]
pub(crate) async fn attempt<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    ask: &Ask,
    (entry, joined): (&Entry, bool),
    intent: &Intent<'_, N, C>,
) -> Result<std::result::Result<Lock, (Failure, Report, Refusal)>> {
    let fresh = engine
        .tokens
        .draw("drawing the lock value from the OS's randomness")?;
    intent.offered(fresh);
    let mut undo = Undo::new(engine, &ask.resource, &ask.kind, fresh);
    let mut gate = Gate::new(entry, engine.fanout.len());
    let got = kind::offer(engine, ask, fresh, Some(&mut gate)).await;
    undo.disarm();
    let refusal = gate.refusal;
    match got {
        Ok(mut lock) => {
            // With the lock, the waiter leaves the queue wherever it may be in it, or its entry would head those
            // nodes' queues, unattended, for a lease: a waiter that never queued where this very offer may have
            // queued it (the nodes whose gate did not answer a grant: not read, or another waiter headed them a
            // moment ago), one that queued before everywhere but where the gate took it off as it granted the
            // key handed to it. A plain lock's release takes the entry off every node it reaches
            // (`release_handing_on`): it leaves now only where a reply read says the entry is there (the gate
            // queued it, or granted by `SET NX`, which keeps it), and the nodes whose reply was not read (most
            // often a take, which took it off) wait for the release, or the entry's lease.
            let known = refusal.joined;
            let stay = match (entry.hands_on && engine.fanout.len() <= 64, joined) {
                (true, false) => known,
                (true, true) => known.union(refusal.granted.difference(refusal.left)),
                (false, false) => refusal.queued(),
                (false, true) => NodeSet::ALL.difference(refusal.left),
            };
            if (0..engine.fanout.len()).any(|node| stay.contains(node)) {
                leave(engine, entry, stay);
            }
            if entry.hands_on {
                // Its lease covers every node, not only those this attempt was queued for (a node known down
                // then was not): an earlier attempt of its waiter may have queued it there, and a release may
                // have handed the key to it there, which its release must take off and hand on.
                lock.lease.nodes = NodeSet::ALL;
                lock.hand_on = Some(Box::new(entry.hand_on()));
            }
            Ok(Ok(lock))
        }
        Err((failure, report)) => Ok(Err((failure, report, refusal))),
    }
}

/// The lock of a waiter whose last attempt (`handed`) was refused, if the keys handed on to it since make it
/// its: `pushed` are the nodes whose turn listener pushed the attempt's handed marker on a connection set up
/// before the attempt was sent (`guard/turns.rs`), `listening` those whose listener is still on that connection. A node votes if it also refused the whole
/// attempt with its reply read and counted (`handed.refused`), the restart guard would count a grant from it
/// now, and the clock check has not seen its clock ahead since; the votes are counted as the attempt's own
/// round would have counted grants: a majority, from the attempt's start, within its validity, and no later
/// than a third of the TTL after its start (as a patient round: a guard's first renewal is due then). `None`:
/// not (yet) a majority, or too late; the waiter's next attempt then takes what was handed to it. The argument
/// is `wait/handoff.rs`'s, "The grant by push".
pub(crate) fn by_push<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    (entry, resource): (&Entry, &[u8]),
    handed: &Handed,
    (pushed, listening): (NodeSet, NodeSet),
) -> ByPush {
    let n = engine.fanout.len();
    let now = engine.clock.now();
    if !entry.hands_on || n > 64 || now > later(handed.start, handed.ttl / 3) {
        return ByPush::No;
    }
    let allowance = engine.config.allowance(handed.ttl);
    let mut quorum = Quorum::new(n, handed.start, handed.ttl, allowance);
    let mut status = Status::Pending;
    let votes = pushed.intersection(handed.refused);
    for node in (0..n).filter(|&node| votes.contains(node)) {
        let (vote, _) =
            engine.counted_from((node, resource), (Vote::Yes, Outcome::Granted), now, None);
        let seen_ahead =
            engine.config.clock_check && engine.restart.clocks.recently_ahead(node, now).is_some();
        if vote == Vote::Yes && !seen_ahead {
            status = quorum.vote(node, Vote::Yes, now);
        }
    }
    let Status::Acquired { valid_until } = status else {
        // A release hands the key on at every node at once, and the waiter may be woken by one node's push (or
        // by the key's change, on the tracker) before the others' markers are in.
        let coming = handed
            .refused
            .intersection(listening)
            .difference(pushed)
            .count(n);
        return match quorum.yes() + coming >= quorum.quorum() {
            true => ByPush::Coming(markers_wait(&engine.config, quorum.yes() > 0)),
            false => ByPush::No,
        };
    };
    let lease = Lease::new(
        resource.to_vec(),
        handed.value,
        (handed.start, valid_until),
        NodeSet::ALL,
    );
    let mut lock = Lock::new(lease, kind::Kind::Plain);
    lock.hand_on = Some(Box::new(entry.hand_on()));
    ByPush::Granted(Box::new(lock))
}

/// How long a waiter woken after a refusal waits, at most, for the handed markers that could still make its grant
/// by push, once per attempt. A release hands the key on at every node at once, but the key's change on the
/// tracker, or one node's marker, may wake the waiter before the others' markers are taken (a listener thread
/// late for a CPU takes them late). With a marker in (`some`), a hand-off to this waiter is under way: it waits a
/// quarter of the round timeout, which costs only where the hand-off went to a minority of nodes (their queues
/// had another head: the split is resolved by attempts). With none, the wake-up may be no hand-off at all (a holder
/// that did not wait released, a renewal), and it waits [`MARKERS_WAIT`] (or a tenth of the round timeout, if
/// less).
fn markers_wait(config: &crate::redlock::Config, some: bool) -> Duration {
    let round = config.round_timeout;
    match some {
        true => round / 4,
        false => MARKERS_WAIT.min(round / 10),
    }
}

/// How long a waiter woken with no handed marker in waits for them, at most ([`markers_wait`]).
const MARKERS_WAIT: Duration = Duration::from_millis(2);

/// What [`by_push`] found.
#[derive(Debug)]
pub(crate) enum ByPush {
    /// The lock: a majority of nodes handed the key on to the waiter in time.
    Granted(Box<Lock>),
    /// Not yet: the nodes that may still push a marker would make a majority; how long to wait for them at most
    /// ([`markers_wait`]), from the waiter's first look.
    Coming(Duration),
    /// Not a grant.
    No,
}

/// Takes `entry` off the queue on `nodes` ([`lua::QUEUE_LEAVE`]), handing on a plain lock's key that was
/// handed to it, without waiting for the replies: in full, as every release (nobody reads a `NOSCRIPT` here).
pub(crate) fn leave<N: Nodes, C: Clock>(engine: &Engine<N, C>, entry: &Entry, nodes: NodeSet) {
    let mut request = BytesMut::with_capacity(160 + 5 * entry.line.len());
    let [queue, deadlines, handed] = entry.keys();
    let keys: &[&[u8]] = match entry.hands_on {
        true => &[queue, deadlines, handed, &entry.line],
        false => &[queue, deadlines, handed],
    };
    lua::eval(&mut request, lua::QUEUE_LEAVE, true, keys, &entry.args());
    let mut round = engine.fanout.release_round(engine.clock.now());
    round.send_to(nodes, &request, 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributed(value: Value) -> Value {
        Value::Attribute {
            attributes: vec![],
            value: Box::new(value),
        }
    }

    /// A refused semaphore offer off the wire (RESP3, the gate's rank annotated): no grant.
    #[test]
    fn a_refused_semaphore_offer_whose_rank_carries_an_attribute_is_no_grant() {
        let entry = Entry::new(
            (0, 1),
            1,
            Duration::from_millis(200),
            (b"\0semaphore\0pool", false),
        );
        let mut gate = Gate::new(&entry, 3);
        let mut wire = BytesMut::from(&b"*3\r\n_\r\n|1\r\n+k\r\n+v\r\n:0\r\n:0\r\n"[..]);
        let refused = crate::resp::decode(&mut wire).map(|v| v.expect("a whole reply"));
        let read = gate.ungate(
            &refused.map_err(|e| panic!("{e:?}")),
            0,
            Value::Array(vec![]),
        );
        let (vote, ..) = crate::redlock::kind::semaphore::offer_vote(&read, 2);
        assert_eq!(vote, crate::redlock::quorum::Vote::Taken);
        assert!(gate.refusal.head);
    }

    #[test]
    fn a_gate_s_reply_gives_the_kind_s_reply_and_notes_the_waiter_s_place() {
        let entry = Entry::new((0, 7), 1, Duration::from_millis(50), (b"jobs", true));
        let mut gate = Gate::new(&entry, 4);
        let arr = |v: Vec<Value>| Ok(Value::Array(v));
        // Granted (the kind's reply, not queued there).
        let got = gate.ungate(
            &arr(vec![
                Value::Integer(1),
                Value::Integer(-1),
                Value::Integer(0),
            ]),
            0,
            Value::Integer(0),
        );
        assert_eq!(got.ok(), Some(Value::Integer(1)));
        // The kind's script ran and took nothing: its reply, and the waiter heads the queue there.
        let took_none = arr(vec![
            Value::Array(vec![]),
            Value::Integer(0),
            Value::Integer(3),
        ]);
        let got = gate.ungate(&took_none, 1, Value::Array(vec![]));
        assert_eq!(got.ok(), Some(Value::Array(vec![])));
        // Kept out by the queue (RESP2's nil, RESP3's null, attributes anywhere): what the kind refuses with.
        for kept in [Value::NullBulk, Value::Null, Value::Boolean(false)] {
            let reply = attributed(Value::Array(vec![
                attributed(kept),
                attributed(Value::Integer(2)),
                Value::Integer(5),
            ]));
            let got = gate.ungate(&Ok(reply), 2, Value::Integer(0));
            assert_eq!(got.ok(), Some(Value::Integer(0)));
        }
        assert!(gate.refusal.head);
        assert_eq!(gate.refusal.turns, vec![None, Some(3), Some(5), None]);
        // An array of another shape is an error (a semaphore would read it as permits taken); anything else is
        // passed on as it came (the kind's vote fails it).
        let odd = arr(vec![Value::Integer(0), Value::Integer(1)]);
        let read = gate.ungate(&odd, 3, Value::Array(vec![]));
        assert!(matches!(read, Ok(Value::Error(_))), "{read:?}");
        let (vote, ..) = crate::redlock::kind::semaphore::offer_vote(&read, 2);
        assert_eq!(vote, crate::redlock::quorum::Vote::Failed);
        let error = Ok(Value::Error("NOPERM".into()));
        assert_eq!(gate.ungate(&error, 3, Value::Integer(0)).ok(), error.ok());
        // Queued on every node but the one that only granted (node 3 answered nothing the gate knows).
        let queued = gate.refusal.queued();
        assert_eq!(
            (0..5).map(|n| queued.contains(n)).collect::<Vec<_>>(),
            [false, true, true, true, true]
        );
        // A node that granted one offer and queued the waiter with another (a semaphore's second) is left too.
        let got = gate.ungate(&took_none, 0, Value::Array(vec![]));
        assert_eq!(got.ok(), Some(Value::Array(vec![])));
        assert!(gate.refusal.queued().contains(0));
    }

    #[test]
    fn a_handed_marker_names_its_waiter_its_value_and_its_line() {
        let value = "0123456789abcdef0123456789abcdef01234567";
        let marker = format!("muxlock:turn:abcd01230000000000000007={value}:jobs:42");
        let (id, v, line) = handed_marker(marker.as_bytes()).expect("a marker");
        assert_eq!(id, b"abcd01230000000000000007");
        assert_eq!(v, value.as_bytes());
        assert_eq!(line, b"jobs:42");
        // Its line is woken as the turn key's.
        assert_eq!(line_of_turn(marker.as_bytes()), Some(&b"jobs:42"[..]));
        // A value of another length, no line, a turn key: no marker.
        let short = format!("muxlock:turn:abcd01230000000000000007={}:jobs", &value[1..]);
        assert_eq!(handed_marker(short.as_bytes()), None);
        let lineless = format!("muxlock:turn:abcd01230000000000000007={value}");
        assert_eq!(handed_marker(lineless.as_bytes()), None);
        assert_eq!(
            handed_marker(b"muxlock:turn:abcd01230000000000000007:jobs"),
            None
        );
    }

    #[test]
    fn a_turn_key_names_its_resource() {
        let entry = Entry::new(
            (0xabcd_0123, 7),
            1,
            Duration::from_millis(50),
            (b"jobs:42", true),
        );
        assert_eq!(entry.turn, b"muxlock:turn:abcd01230000000000000007:jobs:42");
        assert_eq!(line_of_turn(&entry.turn), Some(&b"jobs:42"[..]));
        assert_eq!(
            line_of_turn(b"muxlock:turn:abcd01230123456789abcdef:"),
            Some(&b""[..])
        );
        assert_eq!(line_of_turn(b"muxlock:turn:0123456789abcdef:jobs"), None);
        assert_eq!(line_of_turn(b"jobs"), None);
        assert_eq!(
            entry_lease(Duration::from_millis(50)),
            Duration::from_secs(1)
        );
        assert_eq!(entry_lease(Duration::from_secs(1)), Duration::from_secs(4));
    }
}
