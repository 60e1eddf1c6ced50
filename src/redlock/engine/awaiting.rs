//! [`Awaiting`]: what each outcome of a round answers, looked up by the outcome's id.
//!
//! A round that sends a node more than one request (a batch and its resend after a refusal, a release key by
//! key) notes, before each send, the id the request's first reply gets ([`NodeRound::next_seq`]) and what each
//! of its replies answers. An outcome is then taken by its [`CommandId`]: whatever order outcomes come in, and
//! whatever became of the requests before it (refused, timed out, resent), it is counted for the command it
//! answers or, if nothing was noted under its id, for nothing.
//!
//! [`NodeRound::next_seq`]: super::seam::NodeRound::next_seq

use std::collections::VecDeque;

use crate::net::CommandId;

/// Per node, what the replies still awaited answer, by id (ascending).
#[derive(Debug)]
pub(crate) struct Awaiting<T> {
    nodes: Vec<VecDeque<(u32, T)>>,
}

impl<T> Awaiting<T> {
    /// Nothing awaited yet from any of `nodes` nodes.
    pub(crate) fn new(nodes: usize) -> Awaiting<T> {
        Awaiting {
            nodes: (0..nodes).map(|_| VecDeque::new()).collect(),
        }
    }

    /// Notes that `node`'s replies from id `first` on answer `what`, one each, in order.
    pub(crate) fn expect(&mut self, node: usize, first: u32, what: impl IntoIterator<Item = T>) {
        if let Some(q) = self.nodes.get_mut(node) {
            for (i, w) in (0u32..).zip(what) {
                q.push_back((first.wrapping_add(i), w));
            }
        }
    }

    /// Takes what the outcome `id` answers (`None`: nothing was noted under that id).
    pub(crate) fn take(&mut self, id: CommandId) -> Option<T> {
        let q = self.nodes.get_mut(id.node)?;
        let at = q.partition_point(|(s, _)| *s < id.seq);
        match q.get(at) {
            Some((s, _)) if *s == id.seq => q.remove(at).map(|(_, w)| w),
            _ => None,
        }
    }

    /// What is still awaited from `node`.
    pub(crate) fn of(&self, node: usize) -> impl Iterator<Item = &T> {
        self.nodes.get(node).into_iter().flatten().map(|(_, w)| w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(node: usize, seq: u32) -> CommandId {
        CommandId { node, seq }
    }

    #[test]
    fn outcomes_are_taken_by_id_in_any_order_and_once() {
        let mut a = Awaiting::new(2);
        a.expect(0, 0, ["batch"]);
        a.expect(0, 1, ["k0", "k1"]);
        a.expect(1, 0, ["other"]);
        assert_eq!(a.take(id(0, 2)), Some("k1"));
        assert_eq!(a.take(id(1, 0)), Some("other"));
        assert_eq!(a.take(id(0, 0)), Some("batch"));
        assert_eq!(a.take(id(0, 0)), None, "taken once");
        assert_eq!(a.of(0).copied().collect::<Vec<_>>(), ["k0"]);
        assert_eq!(a.take(id(0, 7)), None, "an id nothing was noted under");
        assert_eq!(a.take(id(5, 0)), None, "a node out of range");
    }
}
