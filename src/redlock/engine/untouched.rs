//! [`Untouched`]: the nodes an acquisition attempt provably left as they were, which its clean-up skips.
//!
//! A failed attempt releases, without waiting, wherever the key may have been set (the spec's "unlock all the
//! instances"). A node that answered every request the attempt sent it, each time with a refusal of the kind
//! that writes nothing (a `SET NX`'s nil, an acquisition script's "taken"), holds nothing this attempt set: its
//! release there would only compare and find another value. Under contention that is most of a failed
//! attempt's nodes, and each such release is a request and a script run on a node for nothing.
//!
//! # Why skipping is safe
//!
//! A clean-up only deletes; leaving one out can never give a second holder, only leave a key set longer than
//! needed, and only where the key holds this attempt's value. A node that refused every request of the attempt
//! (every one answered: none still queued, none lost to a timeout, a reset or a refusal for room, which all
//! count as touched) did not set the key to the attempt's value. After its last refusal the key can come to
//! hold that value only by a hand-off to this waiter (`wait/handoff.rs`: a release sets the key to the value
//! the queue's head last offered), which the waiter's next attempt takes and which its leave hands on: the
//! clean-up used to delete such a key as it came, and the next waiter then lost its turn to whoever asked first.
//! A `NOSCRIPT` or a refused native command ran nothing; it is answered, and the request sent again counts on
//! its own.

use crate::net::NodeSet;

/// Per node (below 64), whether every request an attempt sent it was answered with a refusal that wrote
/// nothing. Nodes from 64 on are never untouched: they are always cleaned up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Untouched {
    /// Per node, the outcomes still owed to the attempt (requests sent, each counted by its replies, less the
    /// outcomes read).
    owed: [u16; 64],
    /// Nodes sent a request.
    asked: NodeSet,
    /// Nodes with an outcome that was not a refusal (a grant, an error, a failure, an unexpected reply).
    touched: NodeSet,
}

impl Untouched {
    pub(crate) fn new() -> Untouched {
        Untouched {
            owed: [0; 64],
            asked: NodeSet::EMPTY,
            touched: NodeSet::EMPTY,
        }
    }

    /// Counts a request of `replies` outcomes sent to each of `nodes`, whether or not it was queued (a node it
    /// was not queued for gets its outcome all the same).
    pub(crate) fn sent(&mut self, nodes: NodeSet, replies: usize) {
        let replies = u16::try_from(replies).unwrap_or(u16::MAX);
        for (node, owed) in self.owed.iter_mut().enumerate() {
            if nodes.contains(node) {
                *owed = owed.saturating_add(replies);
                self.asked.insert(node);
            }
        }
    }

    /// Counts an outcome read from `node`: `refusal` if it says the request wrote nothing of this attempt's.
    pub(crate) fn answered(&mut self, node: usize, refusal: bool) {
        if let Some(owed) = self.owed.get_mut(node) {
            *owed = owed.saturating_sub(1);
        }
        if !refusal {
            self.touched.insert(node);
        }
    }

    /// How many outcomes `nodes` still owe.
    pub(crate) fn owed(&self, nodes: NodeSet) -> usize {
        self.owed
            .iter()
            .enumerate()
            .filter(|(node, _)| nodes.contains(*node))
            .map(|(_, owed)| usize::from(*owed))
            .sum()
    }

    /// Of `nodes`, those sent a request whose every outcome was read and a refusal.
    pub(crate) fn of(&self, nodes: NodeSet) -> NodeSet {
        let mut untouched = NodeSet::EMPTY;
        for (node, owed) in self.owed.iter().enumerate() {
            let refused_all = self.asked.contains(node) && !self.touched.contains(node);
            if *owed == 0 && refused_all && nodes.contains(node) {
                untouched.insert(node);
            }
        }
        untouched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(nodes: &[usize]) -> NodeSet {
        let mut s = NodeSet::EMPTY;
        nodes.iter().for_each(|&n| s.insert(n));
        s
    }

    /// Only a node whose every request was answered, each time with a refusal, is untouched: one still owed
    /// an answer (asked again, the second unanswered), one that granted once, one that failed, and one never
    /// sent anything are not.
    #[test]
    fn a_node_is_untouched_only_when_every_request_sent_it_was_refused() {
        let mut u = Untouched::new();
        u.sent(set(&[0, 1, 2, 3]), 1);
        for node in [0, 1, 2] {
            u.answered(node, true);
        }
        u.sent(set(&[1, 2]), 1);
        u.answered(2, false);
        u.answered(3, false);
        assert_eq!(u.of(set(&[0, 1, 2, 3, 4])), set(&[0]));
        u.answered(1, true);
        assert_eq!(u.of(NodeSet::ALL), set(&[0, 1]));
    }

    /// A request of several replies is owed each of them.
    #[test]
    fn a_request_of_several_replies_is_owed_each() {
        let mut u = Untouched::new();
        u.sent(set(&[0]), 2);
        u.answered(0, true);
        assert_eq!(u.of(NodeSet::ALL), NodeSet::EMPTY);
        u.answered(0, true);
        assert_eq!(u.of(NodeSet::ALL), set(&[0]));
    }
}
