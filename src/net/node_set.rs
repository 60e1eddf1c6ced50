//! [`NodeSet`]: which nodes a request goes to or reached.

/// A set of node indexes, for saying which nodes a request goes to or reached. Nodes from 64 on are always
/// members: the set exists to skip work, never to skip a node that might need a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeSet(u64);

impl NodeSet {
    /// Every node.
    pub const ALL: NodeSet = NodeSet(u64::MAX);
    /// No node (below 64).
    pub const EMPTY: NodeSet = NodeSet(0);

    /// Adds `node`.
    pub fn insert(&mut self, node: usize) {
        if node < 64 {
            self.0 |= 1 << node;
        }
    }

    /// Whether `node` is a member.
    pub fn contains(&self, node: usize) -> bool {
        node >= 64 || self.0 & (1 << node) != 0
    }

    /// The nodes in either set.
    pub(crate) fn union(self, other: NodeSet) -> NodeSet {
        NodeSet(self.0 | other.0)
    }

    /// The nodes in both sets (every node from 64 on).
    pub(crate) fn intersection(self, other: NodeSet) -> NodeSet {
        NodeSet(self.0 & other.0)
    }

    /// How many of the first `n` nodes (at most 64) are members.
    pub(crate) fn count(self, n: usize) -> usize {
        let below = match n {
            0 => 0,
            n if n >= 64 => u64::MAX,
            n => (1u64 << n) - 1,
        };
        (self.0 & below).count_ones() as usize
    }

    /// The nodes of this set below 64 that are not in `other`, and every node from 64 on.
    pub(crate) fn difference(self, other: NodeSet) -> NodeSet {
        NodeSet(self.0 & !other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::NodeSet;

    #[test]
    fn count_counts_the_members_among_the_first_nodes() {
        let mut set = NodeSet::EMPTY;
        for node in [0, 3, 63, 70] {
            set.insert(node);
        }
        assert_eq!(set.count(0), 0);
        assert_eq!(set.count(1), 1);
        assert_eq!(set.count(4), 2);
        assert_eq!(set.count(63), 2);
        assert_eq!(set.count(64), 3);
        assert_eq!(set.count(100), 3);
        assert_eq!(NodeSet::ALL.count(5), 5);
    }
}
