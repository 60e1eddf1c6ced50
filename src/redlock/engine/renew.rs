//! The guards' batched renewal round: [`Renewal`]s in, one compare-and-pexpire each pipelined in one request per
//! node, a verdict per lease out ([`Renewed`]). What a verdict means for a guard is the guard room's business.

use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::{Engine, settle};
use crate::redlock::error::Outcome;
use crate::redlock::kind::{is_noscript, script_vote};
use crate::redlock::quorum::{Failure, Quorum, Status, drift};
use crate::redlock::scripts::{self, Script};
use crate::time::later;

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// One renewal of each of `renewals`, all in one round: every compare-and-pexpire pipelined in one request
    /// per node. Returns when the round started, and per renewal its verdict (the new lease's end, or why not)
    /// and every node's outcome. A renewal counts only if a majority confirms it before its `decide_by`; what a
    /// verdict means for a guard is the guard room's business (`guard.rs`).
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
                Quorum::new(n, start, r.ttl, drift(r.ttl, self.config.drift_factor))
                    .decide_by(r.decide_by)
            })
            .collect();
        let mut request = BytesMut::with_capacity(k * 128);
        for r in renewals {
            self.note_ttl(r.ttl_ms);
            r.encode(&mut request, false);
        }
        let mut round = self.fanout.round(later(start, self.config.round_timeout));
        round.send_all(&request, k);
        round.need(k);
        // Per node: how many replies came (the i-th reply is for renewals[i % k]; from k on, for the batch sent
        // again in full after a NOSCRIPT).
        let mut index = vec![0; n];
        let mut resent = vec![false; n];
        let mut outcomes = vec![vec![Outcome::NotAwaited; n]; k];
        let mut status = vec![Status::Pending; k];
        let mut undecided = k;
        while let Some((node, reply)) = round.next().await {
            let (j, first) = (index[node] % k, index[node] < k);
            index[node] += 1;
            if first && is_noscript(&reply) {
                if !resent[node] {
                    resent[node] = true;
                    let mut full = BytesMut::with_capacity(k * 256);
                    for r in renewals {
                        r.encode(&mut full, true);
                    }
                    round.send(node, &full, k);
                }
                continue; // the renewal's vote on this node comes with the script in full
            }
            // A reply from the first batch that worked before a flush, then the same from the second: once.
            if outcomes[j][node] != Outcome::NotAwaited || status[j] != Status::Pending {
                continue;
            }
            let now = self.clock.now();
            let (vote, outcome) =
                self.counted(node, script_vote(&reply), now, Some(renewals[j].acquired));
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

/// One lease to renew in [`Engine::renew`]: a lock's key (or every key of a set) and value.
#[derive(Debug)]
pub(crate) struct Renewal<'a> {
    pub(crate) resource: &'a [u8],
    /// Every key of a set, renewed together (`resource` is the first); `None` for one key.
    pub(crate) set: Option<&'a [Vec<u8>]>,
    pub(crate) value: &'a [u8],
    pub(crate) ttl: Duration,
    pub(crate) ttl_ms: u64,
    /// When the lock was acquired (the restart guard's `since`).
    pub(crate) acquired: Instant,
    /// The renewal counts only if confirmed before this instant (the holder's deadline).
    pub(crate) decide_by: Instant,
}

impl Renewal<'_> {
    /// The renewal's command: compare-and-pexpire of its key, or of every key of its set together.
    fn encode(&self, buf: &mut BytesMut, full: bool) {
        match self.set {
            None => scripts::call(
                buf,
                Script::Extend,
                full,
                self.resource,
                self.value,
                self.ttl_ms,
            ),
            Some(set) => {
                let keys: Vec<&[u8]> = set.iter().map(|k| &k[..]).collect();
                let ttl = crate::resp::Decimal::new(i64::try_from(self.ttl_ms).unwrap_or(i64::MAX));
                crate::redlock::lua::eval(
                    buf,
                    crate::redlock::lua::EXTEND_MANY,
                    full,
                    &keys,
                    &[self.value, ttl.as_bytes()],
                );
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
