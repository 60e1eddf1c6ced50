//! Compare-and-X requests (the release's compare-and-delete, the extension's compare-and-pexpire) as each node takes
//! them most cheaply and correctly: its native command where it has one (`DELIFEQ`, `DELEX ... IFEQ`, `SET ... IFEQ
//! ... PX`), else the script by hash; a node that refuses one way (a lost script, an ACL without the command: nothing
//! ran) is sent the next, so no vote is lost to a refusal.

use std::time::Instant;

use bytes::BytesMut;

use crate::net::{NodeSet, Reply};
use crate::redlock::engine::Engine;
use crate::redlock::engine::reply::{Refused, compare_vote, refused};
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::quorum::Vote;
use crate::redlock::scripts::{self, Native, Script, Via};
use crate::resp::Value;

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// Runs `script` on `nodes` until the round ends by `deadline` or `on_reply` says to stop: it returns how many
    /// more replies are worth waiting for before it is called again (`need` at first), 0 to stop. Each node gets
    /// the cheapest correct request it has ([`Engine::via`]: its native command, else the script by hash); a node
    /// that refuses it (see [`Refused`]: nothing ran) gets it once another way, so no vote is lost to a refusal
    /// ([`Engine::next_via`]). A release must reach every reachable node: it goes in a release round (see
    /// [`Fanout::release_round`]).
    pub(crate) async fn script_round(
        &self,
        script: Script,
        resource: &[u8],
        value: &[u8],
        ttl_ms: u64,
        (nodes, deadline, need): (NodeSet, Instant, usize),
        mut on_reply: impl FnMut((usize, usize), Reply) -> usize,
    ) {
        let mut round = match script {
            Script::Release => self.unchecked(self.fanout.release_round(deadline)),
            Script::Extend => self.lease_round(deadline),
        };
        // A release waits for nodes still answering (overload), a few round lengths; an extension must be decided
        // in its lease and keeps its deadline.
        if script == Script::Release {
            round.patient_until(self.patient_from(self.clock.now()));
        }
        let mut request = BytesMut::with_capacity(128 + resource.len());
        let sent = self.send_compare(
            &mut round,
            &mut request,
            script,
            nodes,
            (resource, value, ttl_ms),
        );
        round.need(need);
        // Nodes sent a native command they have not run yet on this connection (the first of each kind on a new
        // connection): their answer is awaited even once `on_reply` has had enough, so that a refusal (an ACL
        // without `+delifeq`) is seen and the script sent instead. Unseen, that node would keep the key until
        // its lease ends, and be sent the refused command again next time. The cost: a node that hangs at its
        // first native command holds that one round to its deadline (once per connection: a timeout counts as
        // "ran").
        // Nodes sent the script before their set-up was read (`blind`) may refuse it (a user without `+eval`): a
        // refusal read in the round is followed by their native command; one not read (the round decided first,
        // the node is slow) by their native commands after the round (below).
        let mut unsure: u64 = 0;
        for (_, set) in &sent[1..] {
            for node in (0..self.fanout.len().min(64)).filter(|&n| set.contains(n)) {
                if !self.restart.natives.ran(node, script) {
                    unsure |= 1 << node;
                }
            }
        }
        let natives = &self.restart.natives;
        let mut blind: u64 = 0;
        for node in (0..self.fanout.len().min(64)).filter(|&n| sent[0].1.contains(n)) {
            if natives.unknown(&self.fanout, node) {
                blind |= 1 << node;
            }
        }
        let mut enough = false;
        // Per node, the ways tried (allocated only if some node refused one: after a SCRIPT FLUSH, on a node whose
        // ACL lacks a command), so that a release or an extension allocates nothing for it.
        let mut tried: Vec<Tried> = Vec::new();
        // One request awaited per node at a time (a resend goes after its node's refusal): an outcome is its
        // node's latest request's, sent the way `tried` (or `sent`) last names.
        while let Some((id, reply)) = round.next().await {
            let node = id.node;
            let via = tried
                .get(node)
                .map_or_else(|| first_via(&sent, node), |t| t.last);
            let why = refused(&reply);
            if node < 64 {
                unsure &= !(1 << node);
                // Answered: a refusal is followed here. Timed out or dropped: it may run later, refused.
                if reply.is_ok() {
                    blind &= !(1 << node);
                }
            }
            if let Some(why) = why {
                if tried.is_empty() {
                    tried = (0..self.fanout.len())
                        .map(|n| Tried::new(first_via(&sent, n)))
                        .collect();
                }
                if let Some(next) = tried
                    .get_mut(node)
                    .and_then(|t| self.next_via(node, script, t, via, why))
                {
                    request.clear();
                    scripts::compare(&mut request, script, next, resource, value, ttl_ms);
                    round.send(node, &request, 1);
                    if !enough {
                        continue;
                    }
                }
            } else if matches!(via, Via::Native(_)) {
                // Ran, or no answer (a hung node is waited for once per connection, not every round).
                self.restart.natives.note_ran(node, script);
            }
            if !enough {
                match on_reply(
                    (node, round.source(node)),
                    compare_reply(script, via, reply),
                ) {
                    0 => enough = true,
                    more => round.need(more),
                }
            }
            if enough {
                if unsure == 0 {
                    break;
                }
                round.need(unsure.count_ones() as usize);
            }
        }
        // A release sent by script to a node whose set-up was not read, and not answered in the round (a node
        // slow to set up, paused): it may refuse the script unread (a user without `+eval`). Its native releases
        // follow, unawaited: each compares and deletes the same value, so whichever the node allows deletes the
        // key, and the others find nothing or are refused (a server without them answers an error).
        if script == Script::Release && blind != 0 {
            drop(round);
            let mut nodes = NodeSet::EMPTY;
            (0..64)
                .filter(|n| blind & (1 << n) != 0)
                .for_each(|n| nodes.insert(n));
            let mut late = self.fanout.release_round(self.clock.now());
            let both = [Native::DelIfEq, Native::DelEx];
            natives_unawaited(&mut late, &mut request, nodes, &both, [(resource, value)]);
        }
    }

    /// Releases `resource` (held with `value`) on `nodes` without waiting for the replies (a failed attempt's
    /// partial grants). Nobody sees a refusal there, so a node whose native release has not run yet on its
    /// connection (its ACL may lack it) is sent the script (in full, as every release) as well: both
    /// compare-and-delete the same value, so whichever is allowed deletes the key and the other finds nothing.
    pub(crate) fn release_unawaited(
        &self,
        request: &mut BytesMut,
        nodes: NodeSet,
        resource: &[u8],
        value: &[u8],
    ) {
        let mut round = self.fanout.release_round(self.clock.now());
        let sent = self.send_compare(
            &mut round,
            request,
            Script::Release,
            nodes,
            (resource, value, 0),
        );
        let mut unsure = NodeSet::EMPTY;
        for (_, set) in &sent[1..] {
            for node in (0..self.fanout.len()).filter(|&n| set.contains(n)) {
                if !self.restart.natives.ran(node, Script::Release) {
                    unsure.insert(node);
                }
            }
        }
        if unsure != NodeSet::EMPTY {
            request.clear();
            scripts::compare(request, Script::Release, Via::Full, resource, value, 0);
            round.send_to(unsure, request, 1);
        }
    }

    /// Sends `script`'s compare-and-X request to `nodes`, each the cheapest way it has: one encoding and one send
    /// per way in use (one of each on a uniform cluster). Returns which nodes were sent which way.
    pub(crate) fn send_compare(
        &self,
        round: &mut impl NodeRound,
        request: &mut BytesMut,
        script: Script,
        nodes: NodeSet,
        (resource, value, ttl_ms): (&[u8], &[u8], u64),
    ) -> [(Via, NodeSet); 3] {
        let mut ways: [(Via, NodeSet); 3] = [
            (script.scripted(), NodeSet::EMPTY),
            (Via::Native(Native::DelIfEq), NodeSet::EMPTY),
            (Via::Native(Native::DelEx), NodeSet::EMPTY),
        ];
        for node in (0..self.fanout.len()).filter(|&n| nodes.contains(n)) {
            let via = self.via(script, node);
            // Both natives extend alike (`SET IFEQ`): one request for them.
            let i = match via {
                Via::Native(Native::DelIfEq) => 1,
                Via::Native(Native::DelEx) if script == Script::Release => 2,
                Via::Native(_) => 1,
                Via::Sha | Via::Full => 0,
            };
            ways[i].1.insert(node);
        }
        for (via, set) in ways {
            if set != NodeSet::EMPTY {
                request.clear();
                scripts::compare(request, script, via, resource, value, ttl_ms);
                round.send_to(set, request, 1);
            }
        }
        ways
    }

    /// How `script` goes to `node` first: its native command if its current connection has one, else the script
    /// ([`Script::scripted`]: a release in full, an extension by hash).
    #[inline]
    pub(crate) fn via(&self, script: Script, node: usize) -> Via {
        match self.restart.natives.of(&self.fanout, node, script) {
            Some(native) => Via::Native(native),
            None => script.scripted(),
        }
    }

    /// The way to try after `node` refused `refused` for `why`, if one is left: a lost script in full; the
    /// script after a refused native command (and the node keeps to the scripts for that connection); the
    /// node's native command after a refused script (`NOPERM` without `+eval` or `+evalsha`, Lua disabled), read again
    /// now that its set-up is surely done. Each way is tried once per round.
    pub(crate) fn next_via(
        &self,
        node: usize,
        script: Script,
        tried: &mut Tried,
        refused: Via,
        why: Refused,
    ) -> Option<Via> {
        let next = match (refused, why) {
            (Via::Sha, Refused::NoScript) => Via::Full,
            (Via::Native(_), _) => {
                self.restart.natives.refused(node, script);
                match script.scripted() {
                    Via::Sha if tried.has(Via::Sha) => Via::Full,
                    way => way,
                }
            }
            (Via::Sha | Via::Full, _) => {
                Via::Native(self.restart.natives.of(&self.fanout, node, script)?)
            }
        };
        if tried.has(next) {
            return None;
        }
        tried.add(next);
        Some(next)
    }
}

/// The ways a compare-and-X request was tried on one node in a round, and the last.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tried {
    pub(crate) last: Via,
    mask: u8,
}

impl Tried {
    pub(crate) fn new(first: Via) -> Tried {
        Tried {
            last: first,
            mask: Tried::bit(first),
        }
    }

    fn bit(via: Via) -> u8 {
        match via {
            Via::Sha => 1,
            Via::Full => 2,
            Via::Native(Native::DelIfEq) => 4,
            Via::Native(Native::DelEx) => 8,
        }
    }

    fn has(&self, via: Via) -> bool {
        self.mask & Tried::bit(via) != 0
    }

    fn add(&mut self, via: Via) {
        self.mask |= Tried::bit(via);
        self.last = via;
    }
}

/// The way [`Engine::send_compare`] sent to `node` (the script by hash if it sent nothing there).
fn first_via(sent: &[(Via, NodeSet); 3], node: usize) -> Via {
    sent.iter()
        .find(|(_, set)| set.contains(node))
        .map_or(Via::Sha, |(via, _)| *via)
}

/// A compare-and-X reply made readable by the scripts' reader: the native extension's `+OK` / nil become 1 / 0
/// (the scripts' and `DELIFEQ`'s replies are that already).
fn compare_reply(script: Script, via: Via, reply: Reply) -> Reply {
    match (script, via) {
        (Script::Extend, Via::Native(_)) => match compare_vote(script, via, &reply).0 {
            Vote::Yes => Ok(Value::Integer(1)),
            Vote::Taken => Ok(Value::Integer(0)),
            _ => reply,
        },
        _ => reply,
    }
}

/// Sends each native command of `natives` to `nodes` in `round`, unawaited: one request per command, the
/// compare-and-delete of every `(key, value)` of `pairs`. The release of last resort for nodes that may refuse
/// what they were sent, unread (the script to a node whose set-up was not read yet, a native command not run yet
/// on its connection): each command compares and deletes the same values, so whichever the node allows deletes
/// the keys, and the others find nothing or are refused (a server without them answers an error).
pub(crate) fn natives_unawaited<'k>(
    round: &mut impl NodeRound,
    request: &mut BytesMut,
    nodes: NodeSet,
    natives: &[Native],
    pairs: impl IntoIterator<Item = (&'k [u8], &'k [u8])> + Clone,
) {
    for &native in natives {
        request.clear();
        let mut replies = 0;
        for (key, value) in pairs.clone() {
            scripts::compare(request, Script::Release, Via::Native(native), key, value, 0);
            replies += 1;
        }
        if replies > 0 {
            round.send_to(nodes, request, replies);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Fanout;
    use crate::redlock::engine::reply::script_vote;
    use crate::redlock::engine::seam::SystemClock;
    use bytes::Bytes;

    /// An engine over three nodes nobody listens on: enough for the decisions that read no reply.
    fn engine() -> Engine<Fanout, SystemClock> {
        crate::redlock::engine::test_engine(
            (0..3).map(|_| crate::net::test_peer::nobody()).collect(),
        )
    }

    /// An extension refused natively goes as the script by hash, or in full if it was refused by hash already;
    /// a lost script goes in full; no way is tried twice in a round.
    #[test]
    fn a_refused_extension_goes_the_next_way_once_per_way() {
        let e = engine();
        let native = Via::Native(Native::DelIfEq);
        let mut tried = Tried::new(native);
        let next = |t: &mut Tried, refused, why| e.next_via(0, Script::Extend, t, refused, why);
        assert_eq!(next(&mut tried, native, Refused::Command), Some(Via::Sha));
        assert_eq!(tried.last, Via::Sha);
        assert_eq!(
            next(&mut tried, Via::Sha, Refused::NoScript),
            Some(Via::Full)
        );
        // (No native command known on a node never connected: nothing left.)
        assert_eq!(next(&mut tried, Via::Full, Refused::Command), None);
        // Refused by hash first (`-evalsha`), then natively: in full.
        let mut tried = Tried::new(Via::Sha);
        tried.add(native);
        assert_eq!(next(&mut tried, native, Refused::Command), Some(Via::Full));
        assert_eq!(
            next(&mut tried, native, Refused::Command),
            None,
            "every way tried"
        );
        // A release refused natively goes in full.
        let mut tried = Tried::new(native);
        let release = e.next_via(1, Script::Release, &mut tried, native, Refused::Command);
        assert_eq!(release, Some(Via::Full));
    }

    /// A native extension's `+OK` reads as the script's 1 and its nil as 0, so that the extension's tally (which
    /// reads the scripts' replies) counts it; an error passes as it is; any other way's reply is untouched.
    #[test]
    fn a_native_extensions_ok_counts_as_the_scripts_one_and_its_nil_as_zero() {
        let native = Via::Native(Native::DelEx);
        let ok = Ok(Value::SimpleString(Bytes::from_static(b"OK")));
        assert_eq!(
            compare_reply(Script::Extend, native, ok.clone()),
            Ok(Value::Integer(1))
        );
        assert_eq!(
            script_vote(&compare_reply(Script::Extend, native, ok.clone())).0,
            Vote::Yes
        );
        assert_eq!(
            compare_reply(Script::Extend, native, Ok(Value::NullBulk)),
            Ok(Value::Integer(0))
        );
        let refused = Ok(Value::Error(Bytes::from_static(b"NOPERM no")));
        assert_eq!(
            compare_reply(Script::Extend, native, refused.clone()),
            refused
        );
        assert_eq!(compare_reply(Script::Extend, Via::Sha, ok.clone()), ok);
        let deleted = Ok(Value::Integer(1));
        assert_eq!(
            compare_reply(Script::Release, native, deleted.clone()),
            deleted
        );
    }

    /// Three nodes over a fanout to nowhere, each connection set up (session 1) with its native probe's reply:
    /// node 0's server has `DELIFEQ`, node 1's `DELEX`, node 2's neither.
    struct Probed(Fanout);

    impl Nodes for Probed {
        type Round<'a> = crate::net::Round<'a>;

        fn len(&self) -> usize {
            3
        }

        fn addrs(&self) -> &[crate::net::NodeAddr] {
            self.0.addrs()
        }

        fn round(&self, deadline: Instant) -> crate::net::Round<'_> {
            self.0.round(deadline)
        }

        fn release_round(&self, deadline: Instant) -> crate::net::Round<'_> {
            self.0.release_round(deadline)
        }

        fn sessions(&self, _conn: usize) -> u64 {
            1
        }

        fn setup_replies(&self, conn: usize) -> Vec<(Value, Instant)> {
            let info = |name: &'static [u8]| {
                Value::Array(vec![
                    Value::BulkString(Bytes::from_static(name)),
                    Value::Integer(3),
                ])
            };
            let probe = match conn {
                0 => Value::Array(vec![Value::NullBulk, info(b"delifeq")]),
                1 => Value::Array(vec![info(b"delex"), Value::NullBulk]),
                _ => Value::Array(vec![Value::NullBulk, Value::NullBulk]),
            };
            vec![(probe, Instant::now())]
        }
    }

    /// A round that keeps what is sent to each node, as its commands' names.
    #[derive(Default)]
    struct Sent(Vec<Vec<String>>);

    impl NodeRound for Sent {
        fn send_to(&mut self, nodes: NodeSet, request: &[u8], replies: usize) -> NodeSet {
            for node in 0..3 {
                if nodes.contains(node) {
                    self.send(node, request, replies);
                }
            }
            nodes
        }
        fn send(&mut self, node: usize, request: &[u8], _: usize) -> NodeSet {
            self.0.resize(self.0.len().max(node + 1), Vec::new());
            let mut buf = BytesMut::from(request);
            while let Ok(Some(Value::Array(args))) = crate::resp::decode(&mut buf) {
                let name = match args.first() {
                    Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                    _ => String::new(),
                };
                self.0[node].push(name);
            }
            NodeSet::ALL
        }
        fn need(&mut self, _: usize) {}
        fn patient_until(&mut self, _: Instant) {}
        fn cut_short(&mut self, _: Instant) {}
        fn next_seq(&self, _: usize) -> u32 {
            0
        }
        async fn next(&mut self) -> Option<(crate::net::CommandId, Reply)> {
            None
        }
    }

    /// Once its probe is read, each node is sent the compare-and-X its server has: a release `DELIFEQ` on the
    /// first, `DELEX` on the second (sent `DELIFEQ`, which it lacks, it would refuse it and turn to the scripts),
    /// the script in full on the third; an extension `SET IFEQ` on both native servers, the script by hash on the
    /// third.
    #[test]
    fn each_node_is_sent_the_native_command_its_server_has() {
        let config = crate::redlock::Config::default();
        let (_, mut restart) = crate::redlock::engine::restart::connection_setup(&config, 3);
        restart.natives = crate::redlock::engine::native::Natives::new(3, 0);
        let e = Engine {
            fanout: Probed(
                Fanout::new(
                    (0..3).map(|_| crate::net::test_peer::nobody()).collect(),
                    crate::net::Options::default(),
                )
                .expect("fanout"),
            ),
            clock: SystemClock,
            config,
            tokens: crate::redlock::token::Tokens::new(),
            restart,
            votes: (0..3).map(|_| Default::default()).collect(),
            fold: Default::default(),
        };
        let names = |script| {
            let mut round = Sent::default();
            e.send_compare(
                &mut round,
                &mut BytesMut::new(),
                script,
                NodeSet::ALL,
                (b"k", b"v", 1_000),
            );
            round.0
        };
        assert_eq!(names(Script::Release), [["DELIFEQ"], ["DELEX"], ["EVAL"]]);
        assert_eq!(names(Script::Extend), [["SET"], ["SET"], ["EVALSHA"]]);
    }
}
