//! The guards' batched renewal round: [`Renewal`]s in, one compare-and-pexpire each pipelined in one request per
//! node, a verdict per lease out ([`Renewed`]). What a verdict means for a guard is the guard room's business.

use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::net::NodeSet;
use crate::redlock::engine::compare::Tried;
use crate::redlock::engine::reply::{compare_vote, refused};
use crate::redlock::engine::scripted::Scripted;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::{Engine, settle};
use crate::redlock::error::Outcome;
use crate::redlock::quorum::{Failure, Quorum, Status};
use crate::redlock::scripts::{self, Native, Script, Via};
use crate::time::later;

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// One renewal of each of `renewals`, all in one round: every compare-and-pexpire pipelined in one request
    /// per node. Returns when the round started, and per renewal its verdict (the new lease's end, or why not)
    /// and every node's outcome. A renewal counts only if a majority confirms it before its `decide_by`; what a
    /// verdict means for a guard is the guard room's business (`guard/mod.rs`).
    pub(crate) async fn renew(&self, renewals: &[Renewal<'_>]) -> (Instant, Vec<Renewed>) {
        let n = self.fanout.len();
        let start = self.clock.now();
        let k = renewals.len();
        if k == 0 {
            return (start, Vec::new());
        }
        let mut quorums: Vec<Quorum> = renewals
            .iter()
            .map(|r| {
                Quorum::new(n, start, r.ttl, self.config.allowance(r.ttl)).decide_by(r.decide_by)
            })
            .collect();
        for r in renewals {
            self.note_ttl(r.ttl_ms);
        }
        // Per node, the way its batch goes (its native `SET IFEQ` for single keys where it has one; the sets'
        // renewals are scripts either way): one encoding per way in use.
        let mut tried: Vec<Tried> = (0..n)
            .map(|node| Tried::new(self.via(Script::Extend, node)))
            .collect();
        let mut round = self.lease_round(later(start, self.config.round_timeout));
        let mut request = BytesMut::with_capacity(k * 128);
        for via in [Via::Sha, Via::Native(Native::DelIfEq)] {
            let mut set = NodeSet::EMPTY;
            for (node, t) in tried.iter().enumerate() {
                if matches!(
                    (t.last, via),
                    (Via::Sha, Via::Sha) | (Via::Native(_), Via::Native(_))
                ) {
                    set.insert(node);
                }
            }
            if set != NodeSet::EMPTY {
                request.clear();
                for r in renewals {
                    r.encode(&mut request, via);
                }
                round.send_to(set, &request, k);
            }
        }
        round.need(k);
        // Every request to a node is the whole batch of `k`: the outcome with id `seq` is for renewals[seq % k],
        // of the batch sent the (seq / k)-th time. Per node, how many batches were sent: a batch refused somewhere
        // (a lost script, a refused native command) goes again whole, the next way (`next_via`), once per way.
        let mut batches = vec![1; n];
        let mut ways: Vec<Vec<Via>> = tried.iter().map(|t| vec![t.last]).collect();
        let mut outcomes = vec![vec![Outcome::NotAwaited; n]; k];
        let mut status = vec![Status::Pending; k];
        let mut undecided = k;
        while let Some((id, reply)) = round.next().await {
            let node = id.node;
            let (j, batch) = (id.seq as usize % k, id.seq as usize / k);
            if node >= n {
                continue;
            }
            // The way this reply's request went: a scripted renewal is a script even in a native batch.
            let via = match ways[node].get(batch).copied().unwrap_or(Via::Sha) {
                Via::Native(_) if renewals[j].scripted() => Via::Sha,
                via => via,
            };
            if let Some(why) = refused(&reply) {
                if batch + 1 == batches[node] {
                    if let Some(next) =
                        self.next_via(node, Script::Extend, &mut tried[node], via, why)
                    {
                        request.clear();
                        for r in renewals {
                            r.encode(&mut request, next);
                        }
                        round.send(node, &request, k);
                        batches[node] += 1;
                        ways[node].push(next);
                    }
                }
                if batch + 1 < batches[node] {
                    continue; // the renewal's vote on this node comes with the batch sent again
                }
            }
            if matches!(via, Via::Native(_)) && reply.is_ok() {
                self.restart.natives.note_ran(node, Script::Extend);
            }
            // A reply from a batch that worked in part, then the same from the next: once.
            if outcomes[j][node] != Outcome::NotAwaited || status[j] != Status::Pending {
                continue;
            }
            let now = self.clock.now();
            let (vote, outcome) = self.counted_from(
                (round.source(node), renewals[j].resource),
                compare_vote(Script::Extend, via, &reply),
                now,
                Some(renewals[j].acquired),
            );
            self.votes[node].count(&outcome);
            outcomes[j][node] = outcome;
            status[j] = quorums[j].vote(node, vote, now);
            if status[j] != Status::Pending {
                undecided -= 1;
                if undecided == 0 {
                    break;
                }
            }
        }
        drop(round);
        let now = self.clock.now();
        let renewed = quorums
            .iter()
            .zip(status)
            .zip(outcomes)
            .map(|((q, status), outcomes)| Renewed {
                verdict: settle(status, q, now),
                outcomes,
            })
            .collect();
        (start, renewed)
    }
}

/// One lease to renew in [`Engine::renew`]: a key and its value, extended by compare-and-pexpire or by its kind's
/// script.
pub(crate) struct Renewal<'a> {
    pub(crate) resource: &'a [u8],
    pub(crate) value: &'a [u8],
    /// The kind's extension script (a set's keys together, an owned hold), or `None`: the compare-and-pexpire of
    /// `resource`, native or scripted per node.
    pub(crate) script: Option<Scripted>,
    pub(crate) ttl: Duration,
    pub(crate) ttl_ms: u64,
    /// When the lock was acquired (the restart guard's `since`).
    pub(crate) acquired: Instant,
    /// The renewal counts only if confirmed before this instant (the holder's deadline).
    pub(crate) decide_by: Instant,
}

impl Renewal<'_> {
    /// Whether its renewal is a script whatever way its node takes.
    fn scripted(&self) -> bool {
        self.script.is_some()
    }

    /// The renewal's command, the way `via` says: the compare-and-pexpire of its key (native or script), or its
    /// kind's script (always a script: by hash unless `via` is [`Via::Full`]).
    fn encode(&self, buf: &mut BytesMut, via: Via) {
        match &self.script {
            None => scripts::compare(
                buf,
                Script::Extend,
                via,
                self.resource,
                self.value,
                self.ttl_ms,
            ),
            Some(script) => {
                let ttl = crate::resp::Decimal::new(i64::try_from(self.ttl_ms).unwrap_or(i64::MAX));
                script.encode(buf, via == Via::Full, ttl.as_bytes());
            }
        }
    }
}

/// What [`Engine::renew`] found for one renewal.
#[derive(Debug)]
pub(crate) struct Renewed {
    /// The new lease's end, or why there is none.
    pub(crate) verdict: std::result::Result<Instant, Failure>,
    /// Every node's outcome (those not awaited: `NotAwaited`).
    pub(crate) outcomes: Vec<Outcome>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind's renewal (a set's, here) goes by its script's hash in every batch but one sent in full (after a
    /// `NOSCRIPT`): a guard renewed every few seconds does not send the script's body each time, and the batch
    /// sent again after a lost script carries it.
    #[test]
    fn a_scripted_renewal_goes_by_hash_unless_its_batch_goes_in_full() {
        let names = [b"a".to_vec(), b"b".to_vec()];
        let now = Instant::now();
        let renewal = Renewal {
            resource: b"a",
            value: b"v",
            script: Some(crate::redlock::kind::set::extension(&names, b"v")),
            ttl: Duration::from_secs(10),
            ttl_ms: 10_000,
            acquired: now,
            decide_by: now,
        };
        // The command's name: the first bulk string of the request (`*n`, `$len`, the name).
        let name = |via| {
            let mut buf = BytesMut::new();
            renewal.encode(&mut buf, via);
            let parts: Vec<&[u8]> = buf[..].split(|&b| b == b'\n').collect();
            String::from_utf8_lossy(parts[2].strip_suffix(b"\r").unwrap_or(parts[2])).into_owned()
        };
        assert_eq!(
            [Via::Sha, Via::Native(Native::DelIfEq), Via::Full].map(name),
            ["EVALSHA", "EVALSHA", "EVAL"]
        );
    }
}
