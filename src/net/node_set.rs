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

    /// The nodes of this set below 64 that are not in `other`, and every node from 64 on.
    pub(crate) fn difference(self, other: NodeSet) -> NodeSet {
        NodeSet(self.0 & !other.0)
    }
}
