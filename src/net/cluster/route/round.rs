//! [`MembersRound`]: one round over a manager's members: plain members' requests pass through to their
//! connection; a cluster member's are cut into commands, each sent to the master of its slot, and each outcome
//! handed up under its command's id once final (redirections followed, replication checks read; see the parent's
//! invariants).
//!
//! Every reply awaited on a connection is known by the id the fanout's round gave it ([`CommandId`]), never by
//! its place: a command's reply, an `ASKING`'s, and the readings and verdict of a write's replication check are
//! each looked up by id, and the check's readings and the outcomes it judges are tied to their write by the
//! write's number on that connection.

use std::collections::VecDeque;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::clock::{self, Bracket};
use super::command;
use super::replid::{self, Verdict};
use super::{ConnRound, Conns, Members};
use crate::net::cluster::{Redirect, RedirectKind};
use crate::net::{CommandId, Fanout, NodeError, NodeSet, Reply};
use crate::resp::Value;

/// A command follows at most this many redirections; the next one is a failed vote.
pub(crate) const MAX_REDIRECTS: u8 = 2;

/// One round over the members. Dropping it abandons the replies still to come (their requests still run).
#[derive(Debug)]
#[must_use = "a round does nothing until requests are sent and replies collected with next()"]
pub struct MembersRound<'a, F: Conns = Fanout> {
    round: F::Round<'a>,
    members: &'a Members<F>,
    /// `None` for a manager of plain members: the round is the fanout's, untouched.
    routing: Option<Box<Routing>>,
}

/// What a routed round keeps.
#[derive(Debug)]
struct Routing {
    deadline: Instant,
    /// Per connection: what this round awaits from it, by the id the fanout's round gives each reply (ascending).
    wire: Vec<VecDeque<(u32, Expect)>>,
    /// Per connection: the id the next reply expected there gets. The fanout's round numbers a connection's
    /// replies the same way: every request of this round to a cluster member's connection goes through here.
    next: Vec<u32>,
    /// Per connection: writes sent there so far (a write's number ties its check to what it judges).
    writes: Vec<u32>,
    /// Per member: its commands and whether each has its final outcome (cluster members only).
    queues: Vec<Queue>,
    /// Outcomes ready to hand up: `(member, command, reply, connection, clock bracket)`.
    ready: VecDeque<Ready>,
    /// Per member: the connection of the last outcome handed up.
    sources: Vec<usize>,
    /// Per member, when bracketing: the clock readings around the last outcome handed up (taken once).
    brackets: Vec<Option<Bracket>>,
    /// Whether its outcomes may be votes (not a release round's).
    votes: bool,
    /// Whether every write to a cluster node goes between two `TIME`s (`clock.rs`).
    clock: bool,
    /// How many more outcomes the caller needs before it can decide ([`MembersRound::need`]).
    want: usize,
    /// Whether every command sent to a cluster node is followed by the replication check (`replid.rs`).
    check: bool,
    /// Every member is a cluster (no outcome passes through without a check).
    clusters_only: bool,
    /// Per connection, when checking or bracketing: the outcomes read there that wait for their write's check
    /// (or its second `TIME`, without the check), `(write, member, seq, outcome)`.
    held: Vec<Vec<(u32, usize, usize, Reply)>>,
    /// Per connection, when checking or bracketing: the readings of writes whose check (or second `TIME`) is
    /// still to come, by write.
    readings: Vec<Vec<(u32, Readings)>>,
}

/// An outcome ready to hand up: `(member, command, reply, connection, clock bracket)`.
type Ready = (usize, u32, Reply, usize, Option<Bracket>);

/// The replies read before a write's check (`replid.rs`), taken by that check.
#[derive(Debug, Default, Clone)]
struct Readings {
    /// How many replicas acknowledged the `WAIT` (`None`: none was sent, or its reply was no count).
    acks: Option<i64>,
    /// Whether the write carried a `WAIT` (answered or not): without one while replicas were asked for, the
    /// connection's replicas fell short less than a pause ago (`replid.rs`).
    waited: bool,
    /// How many replicas the node's own `CLUSTER REPLICAS` listed (`None`: none was sent, or no list).
    listed: Option<usize>,
    /// The node's id, when the write asked it (`CLUSTER MYID`: no check of its session has it yet).
    myid: Option<Bytes>,
    /// The first of those commands the node refused, with its error (`WAIT: NOPERM ...`): said in the check's
    /// verdict, where it would otherwise read as "0 of n replicas acknowledged" or "no replica list".
    refused: Option<String>,
    /// The replies of the `TIME`s before and after the write's commands, when bracketing (`clock.rs`).
    time_before: Option<Reply>,
    time_after: Option<Reply>,
}

/// `command: error` if `reply` is an error reply (a refusal: `NOPERM`, `LOADING`, an unknown command...).
fn refusal(command: &str, reply: &Reply) -> Option<String> {
    match reply.as_ref().ok()?.without_attributes() {
        Value::Error(text) | Value::BulkError(text) => {
            Some(format!("{command}: {}", String::from_utf8_lossy(text)))
        }
        _ => None,
    }
}

impl Routing {
    /// The fewest connection outcomes that can bring the caller the outcomes it [wants](Routing::want): each
    /// needs one, except those already made (ready to hand up, or held for their write's check). A lower bound, so the caller is never left asleep when it could decide; a redirection or an
    /// `ASKING`'s reply only wakes it early. With the replication check and cluster members only, an outcome
    /// not read yet also needs the check after it: one more at least (a check covers all of its write's
    /// commands, so not one per outcome); a plain member's outcome needs none, so not with plain members.
    fn conn_need(&self) -> usize {
        // An outcome held for its check needs that check's reply only (one per write, for all it covers).
        let held: usize = self.held.iter().map(Vec::len).sum();
        let unread = self.want.saturating_sub(self.ready.len() + held);
        let check = usize::from(self.check && self.clusters_only && unread > 0);
        // Likewise the second `TIME` of a bracketed write (its first may have been read already).
        let time = usize::from(self.clock && self.clusters_only && unread > 0);
        (unread + check + time).max(1)
    }
}

/// One awaited reply on a connection. `write`: the number of the write it came in on that connection.
#[derive(Debug)]
enum Expect {
    /// The reply to command `seq` of cluster member `member`.
    Reply {
        member: usize,
        seq: usize,
        write: u32,
    },
    /// The `+OK` of an `ASKING` sent before a command: swallowed.
    Asking,
    /// `WAIT` before the check (`replid.rs`): its count is kept for its write's check.
    Wait { write: u32 },
    /// `CLUSTER REPLICAS <id>` before the check: how many it lists is kept for its write's check.
    Replicas { write: u32 },
    /// `CLUSTER MYID` before the check, when no check of the session has the node's id yet: kept for it.
    MyId { write: u32 },
    /// The `TIME` before a bracketed write's commands (`clock.rs`): kept for the outcomes of the write.
    TimeBefore { write: u32 },
    /// The `TIME` after them: kept for the check after it, or, without one, it releases the outcomes held
    /// before it with both readings.
    TimeAfter { write: u32 },
    /// The replication check after commands (`replid.rs`): it releases the outcomes held before it, which
    /// count only if `replicas` replicas (and every one it shows online, and every one the node lists for
    /// node id `id`, which must be its own) acknowledged them. `session`: the connection session the write
    /// was meant for ([`Members::next_session`]); readings of the write are the node's own only if it is still
    /// the connection's session when the check is read.
    Check {
        write: u32,
        replicas: usize,
        id: Option<Bytes>,
        session: u64,
    },
}

/// A cluster member's commands in this round, and which have their final outcome (handed up, never twice).
#[derive(Debug, Default)]
struct Queue {
    commands: Vec<Sent>,
    /// Per command: whether its final outcome was handed up.
    finished: Vec<bool>,
}

/// One command of a cluster member: its bytes (for a resend) and how often it was redirected.
#[derive(Debug)]
struct Sent {
    bytes: Bytes,
    slot: u16,
    redirects: u8,
}

impl<'a, F: Conns> MembersRound<'a, F> {
    #[inline]
    pub(super) fn new(
        members: &'a Members<F>,
        round: F::Round<'a>,
        deadline: Instant,
        votes: bool,
    ) -> Self {
        let routing = match members.routes.is_some() {
            false => None,
            true => Some(Routing::new(members, deadline, votes)),
        };
        MembersRound {
            round,
            members,
            routing,
        }
    }
}

impl Routing {
    /// The books of a routed round over `members` (kept out of line: plain managers never call it); `votes`:
    /// whether its outcomes may be votes (not a release round's), which then carry the replication check if
    /// the members have it on.
    #[inline(never)]
    fn new<F: Conns>(members: &Members<F>, deadline: Instant, votes: bool) -> Box<Routing> {
        let conns = members.routes.as_ref().map_or(0, |r| r.member_of.len());
        let check = votes && members.routes.as_ref().is_some_and(|r| r.check.is_some());
        Box::new(Routing {
            deadline,
            wire: (0..conns).map(|_| VecDeque::new()).collect(),
            next: vec![0; conns],
            writes: vec![0; conns],
            queues: (0..members.len()).map(|_| Queue::default()).collect(),
            ready: VecDeque::new(),
            sources: (0..members.len()).collect(),
            brackets: Vec::new(),
            votes,
            clock: false,
            want: 1,
            check,
            clusters_only: (0..members.len()).all(|m| members.is_cluster(m)),
            held: match check {
                true => (0..conns).map(|_| Vec::new()).collect(),
                false => Vec::new(),
            },
            readings: match check {
                true => (0..conns).map(|_| Vec::new()).collect(),
                false => Vec::new(),
            },
        })
    }

    /// Expects `what` as the next reply on `conn`, under the id the fanout's round gives it.
    fn expect(&mut self, conn: usize, what: Expect) {
        if let (Some(wire), Some(next)) = (self.wire.get_mut(conn), self.next.get_mut(conn)) {
            wire.push_back((*next, what));
            *next = next.wrapping_add(1);
        }
    }

    /// A new write to `conn`: its number.
    fn new_write(&mut self, conn: usize) -> u32 {
        match self.writes.get_mut(conn) {
            Some(w) => {
                *w = w.wrapping_add(1);
                *w
            }
            None => 0,
        }
    }

    /// Takes what was awaited on `conn` under id `seq` (`None`: nothing of this round, which cannot happen).
    fn awaited(&mut self, conn: usize, seq: u32) -> Option<Expect> {
        let wire = self.wire.get_mut(conn)?;
        let at = wire.partition_point(|(s, _)| *s < seq);
        match wire.get(at) {
            Some((s, _)) if *s == seq => wire.remove(at).map(|(_, e)| e),
            _ => None,
        }
    }

    /// Whether what releases the outcomes of `write` on `conn` is still awaited: its check, or without one
    /// its second `TIME`.
    fn release_awaited(&self, conn: usize, write: u32) -> bool {
        let check = self.check;
        self.wire.get(conn).is_some_and(|w| {
            w.iter().any(|(_, e)| match e {
                Expect::Check { write: c, .. } => check && *c == write,
                Expect::TimeAfter { write: c } => !check && *c == write,
                _ => false,
            })
        })
    }

    /// Opens a write of `write` on `conn` in `bytes`: its first `TIME`, when bracketing. Returns the replies added.
    fn open_write(&mut self, conn: usize, write: u32, bytes: &mut BytesMut) -> usize {
        if !self.clock {
            return 0;
        }
        clock::append_time(bytes);
        self.expect(conn, Expect::TimeBefore { write });
        1
    }

    /// Closes the commands of `write` on `conn` in `bytes`: its second `TIME`, when bracketing. Returns the
    /// replies added.
    fn close_write(&mut self, conn: usize, write: u32, bytes: &mut BytesMut) -> usize {
        if !self.clock {
            return 0;
        }
        clock::append_time(bytes);
        self.expect(conn, Expect::TimeAfter { write });
        1
    }

    /// The readings gathered so far for `write` on `conn`.
    fn readings(&mut self, conn: usize, write: u32) -> Option<&mut Readings> {
        let list = self.readings.get_mut(conn)?;
        let at = match list.iter().position(|(w, _)| *w == write) {
            Some(at) => at,
            None => {
                list.push((write, Readings::default()));
                list.len() - 1
            }
        };
        list.get_mut(at).map(|(_, r)| r)
    }
}

impl<'a, F: Conns> MembersRound<'a, F> {
    /// The instant by which every outcome of this round is known.
    pub fn deadline(&self) -> Instant {
        self.round.deadline()
    }

    /// Makes the round patient ([`Round::patient_until`]): past its deadline the fanout keeps waiting for
    /// connections still answering, up to `hard`. A cluster member's redirections are still followed only before
    /// the first deadline (a resend after it would be a new request the deadline was meant to bound), so a
    /// redirection met later is that member's failed vote, as it was.
    pub fn patient_until(&mut self, hard: Instant) {
        self.round.patient_until(hard);
    }

    /// Ends the round by `at` if sooner than its deadline ([`Round::cut_short`]).
    pub fn cut_short(&mut self, at: Instant) {
        self.round.cut_short(at);
    }

    /// Sends `request` (encoded commands expecting `replies` replies in all) to the members in `nodes`: to a plain
    /// member as is, to a cluster member each command to its slot's master (commands for one master in one
    /// write). Returns the members it was queued for (a cluster member: at least one of its commands).
    #[inline]
    pub fn send_to(&mut self, nodes: NodeSet, request: &[u8], replies: usize) -> NodeSet {
        match self.routing.is_some() {
            false => self.round.send_to(nodes, request, replies),
            true => self.send_routed(|m| nodes.contains(m), request, replies),
        }
    }

    /// Sends `request` to member `member` only.
    #[inline]
    pub fn send(&mut self, member: usize, request: &[u8], replies: usize) -> NodeSet {
        match self.routing.is_some() {
            false => self.round.send(member, request, replies),
            true => self.send_routed(|m| m == member, request, replies),
        }
    }

    /// See [`Round::need`]. A routed round asks the fanout for the fewest connection outcomes that can make
    /// `outcomes` (see `Routing::conn_need`): a member's outcome takes one, or several (a redirection's, an
    /// `ASKING`'s), or none (a command refused before it was sent, an outcome waiting behind its member's
    /// earlier command); asked again before each wait.
    #[inline]
    pub fn need(&mut self, outcomes: usize) {
        match self.routing.as_deref_mut() {
            None => self.round.need(outcomes),
            Some(routing) => {
                routing.want = outcomes.max(1);
                self.round.need(routing.conn_need());
            }
        }
    }

    /// The connection the last outcome handed up for `member` came from (the member's own index for a plain
    /// member, or without routing).
    #[inline]
    pub fn source(&self, member: usize) -> usize {
        match &self.routing {
            None => member,
            Some(r) => r.sources.get(member).copied().unwrap_or(member),
        }
    }

    /// Brackets every write of this round to a cluster node with `TIME` (`clock.rs`), if the round's outcomes
    /// may be votes (not a release round's): each outcome of a cluster member is then handed up with the clock
    /// readings of the node it ran on, around it ([`take_bracket`](MembersRound::take_bracket)). Call before
    /// anything is sent. Returns the members so bracketed (the cluster members; none without routing, or in a
    /// release round), as a flag per member: a plain member's requests pass through as ever, their caller
    /// brackets them itself.
    pub fn time_writes(&mut self) -> Vec<bool> {
        let members = self.members;
        let Some(routing) = self.routing.as_deref_mut().filter(|r| r.votes) else {
            return Vec::new();
        };
        routing.clock = true;
        let conns = routing.wire.len();
        if routing.held.is_empty() {
            routing.held = (0..conns).map(|_| Vec::new()).collect();
            routing.readings = (0..conns).map(|_| Vec::new()).collect();
        }
        routing.brackets = vec![None; members.len()];
        (0..members.len()).map(|m| members.is_cluster(m)).collect()
    }

    /// The clock readings around the last outcome handed up for `member` (see
    /// [`time_writes`](MembersRound::time_writes)), once: `None` if that outcome ran in no bracketed write (it is
    /// a failure or a timeout then, or the round brackets nothing).
    pub fn take_bracket(&mut self, member: usize) -> Option<Bracket> {
        self.routing
            .as_deref_mut()?
            .brackets
            .get_mut(member)?
            .take()
    }

    // Out of line: the plain members' path (the `None` branch of the dispatchers) stays small.
    #[inline(never)]
    fn send_routed(
        &mut self,
        include: impl Fn(usize) -> bool,
        request: &[u8],
        replies: usize,
    ) -> NodeSet {
        let mut sent = NodeSet::EMPTY;
        let mut commands = None;
        let mut plain = Vec::new();
        let mut groups = Vec::new();
        for member in (0..self.members.len()).filter(|&m| include(m)) {
            if !self.members.is_cluster(member) {
                // A plain member's connection is its own index; its outcomes pass through.
                plain.push(member);
                continue;
            }
            // Cut once per call, whatever the number of cluster members.
            let commands = commands.get_or_insert_with(|| command::split(request));
            if self.send_cluster(member, request, commands, replies, &mut groups) {
                sent.insert(member);
            }
        }
        // Every connection's bytes in one call: one lock and one pass of writes, as a plain round's `send_to`.
        let mut each: Vec<(usize, &[u8], usize)> = Vec::with_capacity(plain.len() + groups.len());
        each.extend(plain.iter().map(|&m| (m, request, replies)));
        each.extend(
            groups
                .iter()
                .map(|(conn, bytes, n)| (*conn, &bytes[..], *n)),
        );
        let queued = self.round.send_each(&each);
        for m in plain {
            if queued.contains(m) {
                sent.insert(m);
            }
        }
        sent
    }

    /// Books a cluster member's commands, grouped per master in send order, and adds the groups to `out` as
    /// `(connection, bytes, replies)` for the caller to send. Returns whether any was booked.
    fn send_cluster(
        &mut self,
        member: usize,
        request: &[u8],
        commands: &[command::Command],
        replies: usize,
        out: &mut Vec<(usize, BytesMut, usize)>,
    ) -> bool {
        let Some(routing) = self.routing.as_deref_mut() else {
            return false;
        };
        let Some(cluster) = self.members.cluster(member) else {
            return false;
        };
        // A request whose commands do not match its replies cannot be matched up: every reply fails.
        if commands.len() != replies {
            for _ in 0..replies {
                let queue = &mut routing.queues[member];
                let seq = queue.commands.len();
                queue.commands.push(Sent {
                    bytes: Bytes::new(),
                    slot: 0,
                    redirects: 0,
                });
                let why = NodeError::Cluster(format!(
                    "{} commands for {replies} replies",
                    commands.len()
                ));
                finish(routing, member, seq, Err(why), (member, None));
            }
            return false;
        }
        let queue = &mut routing.queues[member];
        let mut groups: Vec<(usize, BytesMut, Vec<usize>)> = Vec::new();
        let mut refresh = false;
        let mut failed: Vec<(usize, NodeError)> = Vec::new();
        {
            let table = crate::sync::lock(&cluster.table);
            for c in commands {
                let seq = queue.commands.len();
                let bytes = Bytes::copy_from_slice(&request[c.bytes.clone()]);
                let slot = match c.slot {
                    Ok(slot) => slot,
                    Err(why) => {
                        queue.commands.push(Sent {
                            bytes,
                            slot: 0,
                            redirects: 0,
                        });
                        failed.push((seq, NodeError::Cluster(why.describe().to_owned())));
                        continue;
                    }
                };
                queue.commands.push(Sent {
                    bytes: bytes.clone(),
                    slot,
                    redirects: 0,
                });
                let Some(conn) = table.owner(slot) else {
                    refresh = true;
                    let why = match table.mapped {
                        true => format!("no master serves slot {slot}"),
                        false => "no slot map read yet".to_owned(),
                    };
                    failed.push((seq, NodeError::Cluster(why)));
                    continue;
                };
                match groups.iter_mut().find(|g| g.0 == conn) {
                    Some(g) => {
                        g.1.extend_from_slice(&bytes);
                        g.2.push(seq);
                    }
                    None => groups.push((conn, BytesMut::from(&bytes[..]), vec![seq])),
                }
            }
        }
        if refresh {
            self.members.refresh(member);
        }
        let any = !groups.is_empty();
        for (conn, commands, seqs) in groups {
            let write = routing.new_write(conn);
            let mut bytes = BytesMut::with_capacity(commands.len() + 2 * clock::TIME.len());
            let mut replies = routing.open_write(conn, write, &mut bytes) + seqs.len();
            bytes.extend_from_slice(&commands);
            for &seq in &seqs {
                routing.expect(conn, Expect::Reply { member, seq, write });
            }
            replies += routing.close_write(conn, write, &mut bytes);
            replies += append_check(routing, self.members, member, (conn, write), &mut bytes);
            // A refusal (down, overloaded) comes back under the ids of this write's replies.
            out.push((conn, bytes, replies));
        }
        for (seq, why) in failed {
            finish(routing, member, seq, Err(why), (member, None));
        }
        any
    }

    /// The id the next reply expected from member `member` gets: its place among every reply this round
    /// expected from the member (a cluster member's commands are numbered as sent to the member, wherever they
    /// were routed).
    pub fn next_seq(&self, member: usize) -> u32 {
        match self.routing.as_deref() {
            Some(r) if self.members.is_cluster(member) => r
                .queues
                .get(member)
                .map_or(0, |q| u32::try_from(q.commands.len()).unwrap_or(u32::MAX)),
            _ => self.round.next_seq(member),
        }
    }

    /// The next outcome, with the id of the command it answers (`node`: the member); `None` once every request
    /// of the round has its outcome. Blocks as [`Round::next`] does.
    #[allow(clippy::should_implement_trait)] // blocking, with a deadline: not an Iterator
    #[inline]
    pub fn next(&mut self) -> Option<(CommandId, Reply)> {
        match self.routing.is_none() {
            true => self.round.next(),
            false => self.next_routed(),
        }
    }

    // Out of line: the plain members' path (the `None` branch of the dispatchers) stays small.
    #[inline(never)]
    fn next_routed(&mut self) -> Option<(CommandId, Reply)> {
        loop {
            if let Some(out) = self.take_ready() {
                return Some(out);
            }
            if let Some(routing) = self.routing.as_deref() {
                self.round.need(routing.conn_need());
            }
            match self.round.next() {
                Some((id, reply)) => self.arrived(id, reply),
                None => return self.conclude(),
            }
        }
    }

    /// [`next`](MembersRound::next) for a task: never blocks (see [`Round::poll_next`]).
    #[inline]
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(CommandId, Reply)>> {
        match self.routing.is_none() {
            true => self.round.poll_next(cx),
            false => self.poll_routed(cx),
        }
    }

    // Out of line: the plain members' path (the `None` branch of the dispatchers) stays small.
    #[inline(never)]
    fn poll_routed(&mut self, cx: &mut Context<'_>) -> Poll<Option<(CommandId, Reply)>> {
        loop {
            if let Some(out) = self.take_ready() {
                return Poll::Ready(Some(out));
            }
            if let Some(routing) = self.routing.as_deref() {
                self.round.need(routing.conn_need());
            }
            match self.round.poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some((id, reply))) => self.arrived(id, reply),
                Poll::Ready(None) => return Poll::Ready(self.conclude()),
            }
        }
    }

    fn take_ready(&mut self) -> Option<(CommandId, Reply)> {
        let routing = self.routing.as_deref_mut()?;
        let (member, seq, reply, conn, bracket) = routing.ready.pop_front()?;
        routing.want = routing.want.saturating_sub(1).max(1);
        if let Some(s) = routing.sources.get_mut(member) {
            *s = conn;
        }
        if let Some(b) = routing.brackets.get_mut(member) {
            *b = bracket;
        }
        Some((CommandId { node: member, seq }, reply))
    }

    /// The fanout's round is over: a command still without an outcome (none should be) times out, and so does
    /// one still held for its check (never counted unchecked).
    fn conclude(&mut self) -> Option<(CommandId, Reply)> {
        let routing = self.routing.as_deref_mut()?;
        for conn in 0..routing.held.len() {
            for (_, member, seq, _) in std::mem::take(&mut routing.held[conn]) {
                finish(routing, member, seq, Err(NodeError::Timeout), (conn, None));
            }
        }
        for member in 0..routing.queues.len() {
            let q = &routing.queues[member];
            let open: Vec<usize> = (0..q.commands.len())
                .filter(|&seq| !q.finished.get(seq).copied().unwrap_or(false))
                .collect();
            for seq in open {
                finish(
                    routing,
                    member,
                    seq,
                    Err(NodeError::Timeout),
                    (member, None),
                );
            }
        }
        self.take_ready()
    }

    /// An outcome of the fanout's round: `id.node` is the connection it came from.
    fn arrived(&mut self, id: CommandId, reply: Reply) {
        let conn = id.node;
        let member = self.members.member_of(conn);
        let Some(routing) = self.routing.as_deref_mut() else {
            return;
        };
        if !self.members.is_cluster(member) {
            routing.ready.push_back((member, id.seq, reply, conn, None));
            return;
        }
        let Some(expect) = routing.awaited(conn, id.seq) else {
            return; // nothing of this round awaited under that id: cannot happen
        };
        let (member, seq, write) = match expect {
            Expect::Reply { member, seq, write } => (member, seq, write),
            // ASKING's +OK (an error there shows in the command's own reply)
            Expect::Asking => return,
            Expect::Wait { write } => {
                if let Some(r) = routing.readings(conn, write) {
                    r.waited = true;
                    r.acks = match &reply {
                        Ok(Value::Integer(n)) => Some(*n),
                        _ => None,
                    };
                    r.refused = r.refused.take().or_else(|| refusal("WAIT", &reply));
                }
                return;
            }
            Expect::Replicas { write } => {
                if let Some(r) = routing.readings(conn, write) {
                    r.listed = reply.as_ref().ok().and_then(replid::listed_replicas);
                    r.refused = (r.refused.take()).or_else(|| refusal("CLUSTER REPLICAS", &reply));
                }
                return;
            }
            Expect::MyId { write } => {
                if let Some(r) = routing.readings(conn, write) {
                    r.myid = reply.as_ref().ok().and_then(replid::node_id);
                    r.refused = r.refused.take().or_else(|| refusal("CLUSTER MYID", &reply));
                }
                return;
            }
            Expect::TimeBefore { write } => {
                if let Some(r) = routing.readings(conn, write) {
                    r.time_before = Some(reply);
                }
                return;
            }
            Expect::TimeAfter { write } => {
                if routing.check {
                    // Read before the check after it, which hands the outcomes up with both readings.
                    if let Some(r) = routing.readings(conn, write) {
                        r.time_after = Some(reply);
                    }
                    return;
                }
                return self.timed((conn, write), reply);
            }
            Expect::Check {
                write,
                replicas,
                id,
                session,
            } => return self.checked((conn, write), reply, replicas, id, session),
        };
        let redirect = match &reply {
            Ok(v) => match v.without_attributes() {
                Value::Error(text) | Value::BulkError(text) => Some(Redirect::parse(text)),
                _ => None,
            },
            Err(_) => None,
        };
        if matches!(&reply, Err(e) if !matches!(e, NodeError::Overloaded | NodeError::Cluster(_))) {
            // The master may be gone (a failover): a new map, for the next rounds.
            self.members.refresh(member);
        }
        let outcome = match redirect {
            None | Some(Ok(None)) => reply,
            Some(Err(e)) => Err(NodeError::Cluster(format!("unreadable redirection: {e}"))),
            Some(Ok(Some(r))) => match self.follow(member, seq, conn, &r) {
                Ok(()) => return,
                Err(why) => Err(why),
            },
        };
        if let Some(routing) = self.routing.as_deref_mut() {
            if !routing.check && !routing.clock {
                return finish(routing, member, seq, outcome, (conn, None));
            }
            // Handed up once its write's check (or second `TIME`) is read. One already read (never so on one
            // wire, whose replies come in the order sent) judged without it: nothing proves it was replicated,
            // or that the node's clock was read after it.
            match routing.release_awaited(conn, write) {
                true => {
                    if let Some(held) = routing.held.get_mut(conn) {
                        held.push((write, member, seq, outcome));
                    }
                }
                false => {
                    let why = match routing.check {
                        true => "read after its write's replication check",
                        false => "read after its write's second TIME",
                    };
                    let outcome = outcome.and(Err(NodeError::Cluster(why.to_owned())));
                    finish(routing, member, seq, outcome, (conn, None));
                }
            }
        }
    }

    /// The replication check's outcome on `conn`: the outcomes held for it are handed up, after the node is
    /// quarantined if it shows another history than before, and as failed votes if it proves nothing
    /// (`replid.rs`).
    fn checked(
        &mut self,
        (conn, write): (usize, u32),
        reply: Reply,
        asked: usize,
        id: Option<Bytes>,
        written: u64,
    ) {
        let members = self.members;
        let Some(routing) = self.routing.as_deref_mut() else {
            return;
        };
        // The outcomes of this write's commands, and its readings.
        let held: Vec<(u32, usize, usize, Reply)> = match routing.held.get_mut(conn) {
            Some(held) => {
                let (mine, others) = std::mem::take(held).into_iter().partition(|h| h.0 == write);
                *held = others;
                mine
            }
            None => Vec::new(),
        };
        let Readings {
            acks: wait,
            waited,
            listed,
            myid,
            refused,
            time_before,
            time_after,
        } = routing
            .readings
            .get_mut(conn)
            .and_then(|list| {
                let at = list.iter().position(|(w, _)| *w == write)?;
                Some(list.swap_remove(at).1)
            })
            .unwrap_or_default();
        let check = members.routes.as_ref().and_then(|r| r.check.as_ref());
        // On a change, the node is quarantined before any outcome is handed up (the restart guard must find it
        // so), and before the check's lock is let go (another thread's check of the new id must too).
        let verdict = match (&reply, check) {
            (Ok(v), Some(check)) => check.judge(
                conn,
                members.sessions(conn),
                || members.setup_replies(conn),
                v,
                || members.note_promoted(conn, members.fanout.now()),
            ),
            _ => Verdict::Unproven,
        };
        // The commands before it are on every replica the map shows for this shard, and on every one this
        // reading shows online: a failover to any of them keeps them (and a deposed master that has not learnt
        // it yet has lost the replica that took over: it cannot say so). And on every replica the node itself
        // lists for its shard, whatever the map and the last reading showed (a replica that joined since both,
        // its link down, can take over a stalled master; the deposed master still lists it), a list trusted only
        // if asked by the node's own id.
        //
        // The readings are this session's only if the write was meant for it and it is still the connection's:
        // otherwise a reply of session N read after session N+1 began, to another node at that address, would
        // be noted as N+1's id, and that session's votes would fail until it dropped. `note_myid` and
        // `is_own_id` compare `written` with the session `judge` just noted.
        if let (Some(myid), Some(check), Verdict::Same | Verdict::Changed) = (myid, check, verdict)
        {
            // Asked in this write: the node's id for the rest of its session.
            check.note_myid(conn, written, myid);
        }
        let own = match (&id, check) {
            (Some(id), Some(check)) => check.is_own_id(conn, written, id),
            _ => false,
        };
        if let (false, Some(_), Some(check)) = (own, &id, check) {
            // Not the map's id (the node was reset, or the map is behind): asked again in the next write,
            // whatever was noted: a stored id that is never asked again within a session would stay wrong.
            check.forget_id(conn);
        }
        let listed = listed.filter(|_| own);
        let online = match (&reply, check) {
            (Ok(v), Some(check)) => {
                let online = replid::online_replicas(v);
                // The next writes wait for as many (before the map shows them).
                check.note_seen(conn, online.max(listed.unwrap_or(0)));
                online
            }
            _ => 0,
        };
        let needed = asked.max(online).max(listed.unwrap_or(0));
        let acked = wait.map_or(0, |n| usize::try_from(n).unwrap_or(0));
        let replicated = acked >= needed;
        if let (Ok(_), Some(check)) = (&reply, check) {
            // A replica short: the next writes skip `WAIT` for a while (it would block the connection for
            // nothing), and prove nothing meanwhile. Only a check that was answered says so: one refused for
            // room, timed out or cut by a dropped connection read no replica (counted as short, one refusal
            // under overload would silence the master's votes for a second).
            check.note_short(conn, !replicated && needed > 0, members.fanout.now());
        }
        let why = match (&reply, verdict, replicated) {
            (Err(e), _, _) => Some(e.to_string()),
            (Ok(_), Verdict::Unproven, _) => Some("not a master, or no replication id".to_owned()),
            (Ok(_), Verdict::Same, _) if id.is_none() => {
                Some("the member's map gave no id for the node".to_owned())
            }
            (Ok(_), Verdict::Same, _) if !own => {
                Some("the node's own id (CLUSTER MYID) is unknown or not the map's".to_owned())
            }
            (Ok(_), Verdict::Same, _) if listed.is_none() => {
                Some("no replica list from the node (CLUSTER REPLICAS)".to_owned())
            }
            (Ok(_), Verdict::Same, false) if !waited && asked > 0 => Some(format!(
                "{acked} of {needed} replicas acknowledged: no WAIT sent, this connection's replicas fell \
                 short less than a second ago"
            )),
            (Ok(_), Verdict::Same, false) => {
                Some(format!("{acked} of {needed} replicas acknowledged"))
            }
            _ => None,
        };
        // A refusal says why the reading it stood for is missing.
        let why = why.map(|why| match &refused {
            Some(refused) => format!("{why}; {refused}"),
            None => why,
        });
        if why.is_some() {
            // The map may be behind (a replica gone, a failover): a new one, for the next rounds.
            members.refresh(members.member_of(conn));
        }
        let bracket = routing.clock.then(|| Bracket::of(time_before, time_after));
        for (_, member, seq, outcome) in held {
            let outcome = match (&why, outcome) {
                (Some(why), Ok(_)) => Err(NodeError::Cluster(format!(
                    "the node's replication check proved nothing ({why})"
                ))),
                (_, outcome) => outcome,
            };
            finish(routing, member, seq, outcome, (conn, bracket.clone()));
        }
    }

    /// The second `TIME` of a bracketed write on `conn`, without the replication check: the outcomes held for
    /// it are handed up with the node's clock readings around them (`clock.rs`), to be judged above.
    fn timed(&mut self, (conn, write): (usize, u32), after: Reply) {
        let Some(routing) = self.routing.as_deref_mut() else {
            return;
        };
        let held: Vec<(u32, usize, usize, Reply)> = match routing.held.get_mut(conn) {
            Some(held) => {
                let (mine, others) = std::mem::take(held).into_iter().partition(|h| h.0 == write);
                *held = others;
                mine
            }
            None => Vec::new(),
        };
        let before = routing.readings.get_mut(conn).and_then(|list| {
            let at = list.iter().position(|(w, _)| *w == write)?;
            list.swap_remove(at).1.time_before
        });
        let bracket = Bracket::of(before, Some(after));
        for (_, member, seq, outcome) in held {
            finish(routing, member, seq, outcome, (conn, Some(bracket.clone())));
        }
    }

    /// Sends command `seq` of `member` where redirection `r` (read from connection `conn`) says, if it may go:
    /// at most [`MAX_REDIRECTS`] times, before the deadline, to a node of the member's map. `Err`: its outcome.
    fn follow(
        &mut self,
        member: usize,
        seq: usize,
        conn: usize,
        r: &Redirect,
    ) -> Result<(), NodeError> {
        let members = self.members;
        let routing = self.routing.as_deref_mut().ok_or(NodeError::Timeout)?;
        let cluster = members.cluster(member).ok_or(NodeError::Timeout)?;
        let sent = routing.queues[member]
            .commands
            .get_mut(seq)
            .ok_or(NodeError::Timeout)?;
        sent.redirects += 1;
        if sent.redirects > MAX_REDIRECTS {
            return Err(NodeError::Cluster(format!(
                "redirected more than {MAX_REDIRECTS} times (last: {r})"
            )));
        }
        if r.slot != sent.slot {
            return Err(NodeError::Cluster(format!(
                "redirected for slot {} where the command's is {} ({r})",
                r.slot, sent.slot
            )));
        }
        let now = members.fanout.now();
        if now >= routing.deadline {
            return Err(NodeError::Timeout);
        }
        let target = {
            let table = crate::sync::lock(&cluster.table);
            let origin = table.host_of(conn).unwrap_or_default().to_owned();
            r.endpoint
                .host(&origin)
                .and_then(|h| table.conn_of(h, r.port))
        };
        let Some(target) = target else {
            // A node added to the member since its last map: the next map gives it a vacant connection.
            members.refresh(member);
            return Err(NodeError::Cluster(format!(
                "redirected to a node this member's map did not show ({r})"
            )));
        };
        let bytes = sent.bytes.clone();
        let write = routing.new_write(target);
        let reply = Expect::Reply { member, seq, write };
        match r.kind {
            // A write of its own, bracketed again: the node it goes to is read around it (`clock.rs`).
            RedirectKind::Moved => {
                members.moved(member, r.slot, target, now);
                let room = bytes.len() + replid::CHECK.len() + 2 * clock::TIME.len();
                let mut out = BytesMut::with_capacity(room);
                let mut replies = routing.open_write(target, write, &mut out) + 1;
                out.extend_from_slice(&bytes);
                routing.expect(target, reply);
                replies += routing.close_write(target, write, &mut out);
                replies += append_check(routing, members, member, (target, write), &mut out);
                self.round.send(target, &out, replies);
            }
            RedirectKind::Ask => {
                members.asked(member, r.slot, target, now);
                // `ASKING` and the command in one write, nothing between them: the flag lasts for the next
                // command only (so the first `TIME` goes before `ASKING`).
                let room = 20 + bytes.len() + replid::CHECK.len() + 2 * clock::TIME.len();
                let mut both = BytesMut::with_capacity(room);
                let mut replies = routing.open_write(target, write, &mut both) + 2;
                crate::resp::encode_command(&[b"ASKING"], &mut both);
                both.extend_from_slice(&bytes);
                routing.expect(target, Expect::Asking);
                routing.expect(target, reply);
                replies += routing.close_write(target, write, &mut both);
                replies += append_check(routing, members, member, (target, write), &mut both);
                self.round.send(target, &both, replies);
            }
        }
        Ok(())
    }
}

/// Appends the replication check to `bytes` going to `conn` of `member`, if the round has it on: `WAIT` for
/// as many replicas as the member's map shows for that master's shard or its last reading showed online
/// (if any), then `INFO replication`; expects their replies on `conn`'s wire. Returns how many replies it
/// added. `WAIT` blocks the connection until they acknowledge: half of what is left of the round, at most.
fn append_check<F: Conns>(
    routing: &mut Routing,
    members: &Members<F>,
    member: usize,
    (conn, write): (usize, u32),
    bytes: &mut BytesMut,
) -> usize {
    if !routing.check {
        return 0;
    }
    let Some(check) = members.routes.as_ref().and_then(|r| r.check.as_ref()) else {
        return 0;
    };
    let (mapped, id) = members.cluster(member).map_or((0, None), |c| {
        let table = crate::sync::lock(&c.table);
        let id = table.id_of(conn).cloned();
        (table.replicas_of(conn), id)
    });
    let replicas = mapped.max(check.seen(conn));
    let mut added = 1;
    // After a write whose replicas fell short, `WAIT` is sent again only once in a while (its outcomes prove
    // nothing meanwhile): a replica down but still in the map must not block its master's connection (and
    // every release behind it) for half a round per write.
    let now = members.fanout.now();
    if replicas > 0 && !check.is_short(conn, now) {
        let left = routing.deadline.saturating_duration_since(now) / 2;
        let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1);
        bytes.extend_from_slice(&replid::wait_command(replicas, ms));
        routing.expect(conn, Expect::Wait { write });
        added += 1;
    }
    let session = members.next_session(conn);
    if let Some(id) = &id {
        if !check.knows_id(conn, session) {
            // No check of this session has the node's id yet (its first write, or the last answer was
            // `-LOADING`): asked here, until one has it.
            bytes.extend_from_slice(replid::MYID);
            routing.expect(conn, Expect::MyId { write });
            added += 1;
        }
        // The node's own view of its shard, after the commands and the `WAIT`: a replica the map and the last
        // reading miss is still listed there (a link down, failed), and must have acknowledged too.
        bytes.extend_from_slice(&replid::replicas_command(id));
        routing.expect(conn, Expect::Replicas { write });
        added += 1;
    }
    bytes.extend_from_slice(replid::CHECK);
    routing.expect(
        conn,
        Expect::Check {
            write,
            replicas,
            id,
            session,
        },
    );
    added
}

/// Hands up the final outcome of command `seq` of `member`, read from `conn` with the clock readings `bracket`
/// around it (never twice).
fn finish(
    routing: &mut Routing,
    member: usize,
    seq: usize,
    reply: Reply,
    (conn, bracket): (usize, Option<Bracket>),
) {
    let Some(q) = routing.queues.get_mut(member) else {
        return;
    };
    if q.finished.len() <= seq {
        q.finished.resize(seq + 1, false);
    }
    if q.finished[seq] {
        return;
    }
    q.finished[seq] = true;
    let seq = u32::try_from(seq).unwrap_or(u32::MAX);
    routing.ready.push_back((member, seq, reply, conn, bracket));
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::net::cluster::{ClusterNode, MapDone, MemberAddr, Plan, SlotMap, Vacancies};
    use crate::net::test_peer::{Peer, command, nobody};
    use crate::net::{NodeAddr, NodeCounts, Options, Round, TlsConfig};

    /// The fanout's connections, whose rounds note every `need` they are asked, and every lone `send`'s
    /// connection and replies.
    #[derive(Debug)]
    struct Noting {
        fanout: Fanout,
        needs: Arc<Mutex<Vec<usize>>>,
        sends: Arc<Mutex<Vec<(usize, usize)>>>,
    }

    #[derive(Debug)]
    struct NotingRound<'a> {
        round: Round<'a>,
        needs: Arc<Mutex<Vec<usize>>>,
        sends: Arc<Mutex<Vec<(usize, usize)>>>,
    }

    impl Conns for Noting {
        type Round<'a> = NotingRound<'a>;
        fn round(&self, deadline: Instant) -> NotingRound<'_> {
            NotingRound {
                round: self.fanout.round(deadline),
                needs: Arc::clone(&self.needs),
                sends: Arc::clone(&self.sends),
            }
        }
        fn release_round(&self, deadline: Instant) -> NotingRound<'_> {
            NotingRound {
                round: self.fanout.release_round(deadline),
                needs: Arc::clone(&self.needs),
                sends: Arc::clone(&self.sends),
            }
        }
        fn options(&self) -> &Options {
            self.fanout.options()
        }
        fn stats(&self, conn: usize) -> NodeCounts {
            self.fanout.stats(conn)
        }
        fn sessions(&self, conn: usize) -> u64 {
            self.fanout.sessions(conn)
        }
        fn next_session(&self, conn: usize) -> u64 {
            self.fanout.next_session(conn)
        }
        fn setup_replies(&self, conn: usize) -> Vec<(Value, Instant)> {
            self.fanout.setup_replies(conn)
        }
        fn now(&self) -> Instant {
            Instant::now()
        }
        fn read_map(
            &self,
            _nodes: Vec<NodeAddr>,
            _wait: Duration,
            _tls: &TlsConfig,
            _done: MapDone,
        ) -> Result<(), ()> {
            Err(())
        }
        fn vacancies(&self) -> Box<dyn Vacancies> {
            Box::new(self.fanout.occupier())
        }
    }

    impl ConnRound for NotingRound<'_> {
        fn deadline(&self) -> Instant {
            self.round.deadline()
        }
        fn patient_until(&mut self, hard: Instant) {
            self.round.patient_until(hard)
        }
        fn cut_short(&mut self, at: Instant) {
            self.round.cut_short(at)
        }
        fn send(&mut self, conn: usize, request: &[u8], replies: usize) -> NodeSet {
            crate::sync::lock(&self.sends).push((conn, replies));
            self.round.send(conn, request, replies)
        }
        fn send_to(&mut self, conns: NodeSet, request: &[u8], replies: usize) -> NodeSet {
            self.round.send_to(conns, request, replies)
        }
        fn send_each(&mut self, requests: &[(usize, &[u8], usize)]) -> NodeSet {
            self.round.send_each(requests)
        }
        fn need(&mut self, outcomes: usize) {
            crate::sync::lock(&self.needs).push(outcomes);
            self.round.need(outcomes)
        }
        fn next_seq(&self, conn: usize) -> u32 {
            self.round.next_seq(conn)
        }
        fn next(&mut self) -> Option<(CommandId, Reply)> {
            self.round.next()
        }
        fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(CommandId, Reply)>> {
            self.round.poll_next(cx)
        }
    }

    /// With cluster members only, each outcome still to come needs its connection's reply, the replication
    /// check after it (one per write), and the second `TIME` of its bracket: a routed round asks the fanout to
    /// wake its caller no earlier than all can have come, and asks again as outcomes arrive.
    #[test]
    fn a_routed_round_is_woken_once_its_outcomes_and_their_checks_can_have_come() {
        let seeds: Vec<NodeAddr> = (0..3).map(|_| nobody()).collect();
        let members: Vec<MemberAddr> = seeds
            .iter()
            .map(|s| {
                format!("redis+cluster://{}:{}", s.host(), s.port())
                    .parse()
                    .expect("URL")
            })
            .collect();
        let maps = seeds
            .iter()
            .map(|s| {
                Some(Some((
                    SlotMap::one_shard(ClusterNode::at(s), Vec::new()),
                    s.host().to_owned(),
                )))
            })
            .collect();
        let plan = Plan::with_maps(members, maps);
        let fanout =
            Fanout::with_vacancies(plan.conns().to_vec(), plan.vacant(), Options::default())
                .expect("fanout");
        let needs = Arc::new(Mutex::new(Vec::new()));
        let conns = Noting {
            fanout,
            needs: Arc::clone(&needs),
            sends: Arc::default(),
        };
        let mut members = Members::over(plan, conns);
        members.check_replication(0);
        let mut round = members.round(Instant::now() + Duration::from_secs(2));
        assert_eq!(round.time_writes(), [true, true, true]);
        round.send_to(NodeSet::ALL, &command(&[b"GET", b"k"]), 1);
        round.need(2);
        round.need(3);
        assert_eq!(
            *crate::sync::lock(&needs),
            [2 + 1 + 1, 3 + 1 + 1],
            "each outcome, its write's check, its bracket's last TIME"
        );
    }

    /// A `GET` of `key` (which the first test peer redirects to the second: `ask:<port>`, `moved:<port>`), sent
    /// by a member of both peers' map with the clock check's brackets: the second peer, its connection, and
    /// every write as `(connection, replies)`.
    fn sent_on_after_a_redirect(redirect: &str) -> (Peer, usize, String, Vec<(usize, usize)>) {
        let (from, to) = (Peer::start(), Peer::start());
        let map = SlotMap::one_shard(
            ClusterNode::at(&from.addr()),
            vec![ClusterNode::at(&to.addr())],
        );
        let member: MemberAddr = format!(
            "redis+cluster://{}:{}",
            from.addr().host(),
            from.addr().port()
        )
        .parse()
        .expect("URL");
        let plan = Plan::with_maps(
            vec![member],
            vec![Some(Some((map, from.addr().host().to_owned())))],
        );
        let conn_to = plan
            .conns()
            .iter()
            .position(|c| c.port() == to.addr().port())
            .expect("a connection to the node redirected to");
        let fanout =
            Fanout::with_vacancies(plan.conns().to_vec(), plan.vacant(), Options::default())
                .expect("fanout");
        let sends = Arc::new(Mutex::new(Vec::new()));
        let conns = Noting {
            fanout,
            needs: Arc::default(),
            sends: Arc::clone(&sends),
        };
        let members = Members::over(plan, conns);
        let mut round = members.round(Instant::now() + Duration::from_secs(5));
        assert_eq!(round.time_writes(), [true]);
        let key = format!("{redirect}:{}", to.addr().port());
        round.send_to(NodeSet::ALL, &command(&[b"GET", key.as_bytes()]), 1);
        while round.next().is_some() {}
        drop(round);
        let sent: Vec<(usize, usize)> = crate::sync::lock(&sends).clone();
        (to, conn_to, key, sent)
    }

    /// A command sent on after `-ASK`, with the clock check's brackets, goes in one write of its own to the
    /// node named: its first `TIME`, `ASKING`, the command and its second `TIME`, four replies, all awaited (one
    /// fewer and the rest would be read as nobody's, and the connection dropped).
    #[test]
    fn a_command_sent_on_after_ask_awaits_its_times_asking_and_its_reply() {
        let (to, conn_to, _, sent) = sent_on_after_a_redirect("ask");
        assert!(
            to.received(&[b"ASKING"], Duration::from_secs(1)),
            "{:?}",
            to.log()
        );
        assert_eq!(
            sent.iter().find(|(c, _)| *c == conn_to),
            Some(&(conn_to, 4)),
            "TIME, ASKING, the command, TIME: {sent:?}"
        );
    }

    /// A command sent on after `-MOVED`, with the clock check's brackets, goes in one write of its own to the
    /// node named: its first `TIME`, the command and its second `TIME`, three replies, all awaited (fewer and the
    /// rest would be read as nobody's, and the connection dropped).
    #[test]
    fn a_command_sent_on_after_moved_awaits_its_times_and_its_reply() {
        let (to, conn_to, key, sent) = sent_on_after_a_redirect("moved");
        assert!(
            to.received(&[b"GET", key.as_bytes()], Duration::from_secs(1)),
            "{:?}",
            to.log()
        );
        assert_eq!(
            sent.iter().find(|(c, _)| *c == conn_to),
            Some(&(conn_to, 3)),
            "TIME, the command, TIME: {sent:?}"
        );
    }

    /// Connections whose rounds hand up the outcomes a test files, as it files them: the fanout's contract
    /// promises no order (a refusal or a timeout is filed under its request's ids, whatever else is on the
    /// wire), and the routing must keep each outcome with its command in every order. Each connection's replies
    /// are numbered as the fanout numbers them; every write is noted as `(connection, replies)`.
    #[derive(Debug)]
    struct Filed {
        fanout: Fanout,
        outcomes: Arc<Mutex<VecDeque<(CommandId, Reply)>>>,
        writes: Arc<Mutex<Vec<(usize, usize)>>>,
    }

    #[derive(Debug)]
    struct FiledRound {
        deadline: Instant,
        next: Vec<u32>,
        outcomes: Arc<Mutex<VecDeque<(CommandId, Reply)>>>,
        writes: Arc<Mutex<Vec<(usize, usize)>>>,
    }

    impl Filed {
        fn round(&self, deadline: Instant) -> FiledRound {
            FiledRound {
                deadline,
                next: vec![0; self.fanout.len()],
                outcomes: Arc::clone(&self.outcomes),
                writes: Arc::clone(&self.writes),
            }
        }
    }

    impl Conns for Filed {
        type Round<'a> = FiledRound;
        fn round(&self, deadline: Instant) -> FiledRound {
            Filed::round(self, deadline)
        }
        fn release_round(&self, deadline: Instant) -> FiledRound {
            Filed::round(self, deadline)
        }
        fn options(&self) -> &Options {
            self.fanout.options()
        }
        fn stats(&self, conn: usize) -> NodeCounts {
            self.fanout.stats(conn)
        }
        fn sessions(&self, _conn: usize) -> u64 {
            1
        }
        fn next_session(&self, _conn: usize) -> u64 {
            1
        }
        fn setup_replies(&self, _conn: usize) -> Vec<(Value, Instant)> {
            Vec::new()
        }
        fn now(&self) -> Instant {
            Instant::now()
        }
        fn read_map(
            &self,
            _nodes: Vec<NodeAddr>,
            _wait: Duration,
            _tls: &TlsConfig,
            _done: MapDone,
        ) -> Result<(), ()> {
            Err(())
        }
        fn vacancies(&self) -> Box<dyn Vacancies> {
            Box::new(self.fanout.occupier())
        }
    }

    impl ConnRound for FiledRound {
        fn deadline(&self) -> Instant {
            self.deadline
        }
        fn patient_until(&mut self, _hard: Instant) {}
        fn cut_short(&mut self, _at: Instant) {}
        fn send(&mut self, conn: usize, request: &[u8], replies: usize) -> NodeSet {
            self.send_each(&[(conn, request, replies)])
        }
        fn send_to(&mut self, conns: NodeSet, request: &[u8], replies: usize) -> NodeSet {
            let each: Vec<(usize, &[u8], usize)> = (0..self.next.len())
                .filter(|&c| conns.contains(c))
                .map(|c| (c, request, replies))
                .collect();
            self.send_each(&each)
        }
        fn send_each(&mut self, requests: &[(usize, &[u8], usize)]) -> NodeSet {
            let mut sent = NodeSet::EMPTY;
            for &(conn, _, replies) in requests {
                if let Some(next) = self.next.get_mut(conn) {
                    *next += u32::try_from(replies).expect("replies");
                    crate::sync::lock(&self.writes).push((conn, replies));
                    sent.insert(conn);
                }
            }
            sent
        }
        fn need(&mut self, _outcomes: usize) {}
        fn next_seq(&self, conn: usize) -> u32 {
            self.next.get(conn).copied().unwrap_or(0)
        }
        fn next(&mut self) -> Option<(CommandId, Reply)> {
            crate::sync::lock(&self.outcomes).pop_front()
        }
        fn poll_next(&mut self, _cx: &mut Context<'_>) -> Poll<Option<(CommandId, Reply)>> {
            Poll::Ready(self.next())
        }
    }

    /// A command whose write's second `TIME` was filed before it (the write refused whole, its outcomes filed
    /// `TIME` first) is handed up at once with what it was filed as, and not held for a `TIME` of a later write
    /// of the same connection (which would keep its vote back until the round ends, as a timeout). The later
    /// write's outcome is handed up with its own bracket when its second `TIME` comes.
    #[test]
    fn an_outcome_filed_after_its_writes_second_time_is_not_held_for_a_later_write() {
        let seed = nobody();
        let member: MemberAddr = format!("redis+cluster://{}:{}", seed.host(), seed.port())
            .parse()
            .expect("URL");
        let map = SlotMap::one_shard(ClusterNode::at(&seed), Vec::new());
        let plan = Plan::with_maps(
            vec![member],
            vec![Some(Some((map, seed.host().to_owned())))],
        );
        let fanout =
            Fanout::with_vacancies(plan.conns().to_vec(), plan.vacant(), Options::default())
                .expect("fanout");
        let (outcomes, writes) = (Arc::default(), Arc::default());
        let conns = Filed {
            fanout,
            outcomes: Arc::clone(&outcomes),
            writes: Arc::clone(&writes),
        };
        // The replication check off (a manager without the restart guard): only the `TIME`s release outcomes.
        let members = Members::over(plan, conns);
        let mut round = members.round(Instant::now() + Duration::from_secs(60));
        assert_eq!(round.time_writes(), [true]);
        round.send(0, &command(&[b"GET", b"a"]), 1);
        round.send(0, &command(&[b"GET", b"b"]), 1);
        assert_eq!(
            *crate::sync::lock(&writes),
            [(0, 3), (0, 3)],
            "TIME, the command, TIME: each a write of its own"
        );
        let time = || {
            Ok(Value::Array(vec![
                Value::BulkString(Bytes::from_static(b"1700000000")),
                Value::BulkString(Bytes::from_static(b"0")),
            ]))
        };
        let id = |seq| CommandId { node: 0, seq };
        crate::sync::lock(&outcomes).extend([
            // The first write, refused whole, its second `TIME` filed first.
            (id(2), Err(NodeError::Overloaded)),
            (id(0), Err(NodeError::Overloaded)),
            (id(1), Err(NodeError::Overloaded)),
            // The second, answered.
            (id(3), time()),
            (id(4), Ok(Value::BulkString(Bytes::from_static(b"vb")))),
            (id(5), time()),
        ]);
        let mut got = Vec::new();
        while let Some((id, reply)) = round.next() {
            got.push((id.seq, reply, round.take_bracket(0).is_some()));
        }
        assert_eq!(
            got,
            [
                (0, Err(NodeError::Overloaded), false),
                (1, Ok(Value::BulkString(Bytes::from_static(b"vb"))), true),
            ]
        );
    }

    /// A reply of the check's commands that is an error (`NOPERM`, `LOADING`...) is that command's refusal, named
    /// with its error, to be said in the check's verdict ("0 of 1 replicas acknowledged; WAIT: NOPERM ..."); a
    /// reply that is none, or a failure to get one, is no refusal.
    #[test]
    fn an_error_reply_to_a_checks_command_is_its_refusal() {
        let wait = Ok(Value::Error(Bytes::from_static(
            b"NOPERM User checker has no permissions to run the 'wait' command",
        )));
        let myid = Ok(Value::BulkError(Bytes::from_static(b"LOADING loading")));
        let said = [
            refusal("WAIT", &wait),
            refusal("CLUSTER MYID", &myid),
            refusal("WAIT", &Ok(Value::Integer(1))),
            refusal("WAIT", &Err(NodeError::Timeout)),
        ];
        assert_eq!(
            said,
            [
                Some(
                    "WAIT: NOPERM User checker has no permissions to run the 'wait' command"
                        .to_owned()
                ),
                Some("CLUSTER MYID: LOADING loading".to_owned()),
                None,
                None,
            ]
        );
    }

    /// With the replication check, a write whose `WAIT` found its replicas short (none of the map's one
    /// acknowledged) makes the connection's next writes skip `WAIT` for a while: it would block the connection
    /// for half a round each time, for votes that prove nothing meanwhile. The next write is the command and the
    /// check alone.
    #[test]
    fn a_write_whose_replicas_fell_short_makes_the_next_skip_wait() {
        let (seed, replica) = (nobody(), nobody());
        let member: MemberAddr = format!("redis+cluster://{}:{}", seed.host(), seed.port())
            .parse()
            .expect("URL");
        let map = SlotMap::one_shard(ClusterNode::at(&seed), vec![ClusterNode::at(&replica)]);
        let plan = Plan::with_maps(
            vec![member],
            vec![Some(Some((map, seed.host().to_owned())))],
        );
        let fanout =
            Fanout::with_vacancies(plan.conns().to_vec(), plan.vacant(), Options::default())
                .expect("fanout");
        let (outcomes, writes) = (Arc::default(), Arc::default());
        let conns = Filed {
            fanout,
            outcomes: Arc::clone(&outcomes),
            writes: Arc::clone(&writes),
        };
        let mut members = Members::over(plan, conns);
        members.check_replication(0);
        let mut round = members.round(Instant::now() + Duration::from_secs(60));
        round.send(0, &command(&[b"GET", b"a"]), 1);
        let id = |seq| CommandId { node: 0, seq };
        crate::sync::lock(&outcomes).extend([
            (id(0), Ok(Value::NullBulk)),
            // `WAIT`: no replica acknowledged.
            (id(1), Ok(Value::Integer(0))),
            (
                id(2),
                Ok(Value::BulkString(Bytes::from_static(
                    b"# Replication\r\nrole:master\r\nconnected_slaves:0\r\n",
                ))),
            ),
        ]);
        while round.next().is_some() {}
        drop(round);
        let mut round = members.round(Instant::now() + Duration::from_secs(60));
        round.send(0, &command(&[b"GET", b"b"]), 1);
        assert_eq!(
            *crate::sync::lock(&writes),
            [(0, 3), (0, 2)],
            "the command, WAIT and the check; then the command and the check"
        );
    }
}
