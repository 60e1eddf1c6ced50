//! [`NodeStats`]: what happened on one node's connections, counted with relaxed atomics (no lock, always on).
//!
//! The counters are updated where the fanout already does the work (under its lock or by the thread that owns
//! the socket), so counting costs one uncontended atomic add per event. A snapshot ([`NodeCounts`]) is a plain
//! copy that can be subtracted from a later one.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Round-trip buckets: four per doubling, from 1 µs up; the last one takes everything longer (about 67 s).
const SUB: u32 = 4;
const BUCKETS: usize = 26 * SUB as usize;

/// Live counters of one node, shared by the fanout and whoever reads them.
#[derive(Debug)]
pub(crate) struct NodeStats {
    requests: AtomicU64,
    replies: AtomicU64,
    writes: AtomicU64,
    reads: AtomicU64,
    connects: AtomicU64,
    drops: AtomicU64,
    timeouts: AtomicU64,
    refused: AtomicU64,
    detached: AtomicU64,
    given_up: AtomicU64,
    rtt: Box<[AtomicU64]>,
}

impl Default for NodeStats {
    fn default() -> NodeStats {
        NodeStats {
            requests: AtomicU64::new(0),
            replies: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            connects: AtomicU64::new(0),
            drops: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            detached: AtomicU64::new(0),
            given_up: AtomicU64::new(0),
            rtt: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Relaxed);
}

/// The bucket of a round trip of `us` microseconds.
fn bucket(us: u64) -> usize {
    if us <= 1 {
        return 0;
    }
    let octave = 63 - us.leading_zeros(); // floor(log2(us)), at least 1
    // The two bits below the leading one pick one of four sub-buckets.
    let sub = if octave >= 2 {
        (us >> (octave - 2)) & 3
    } else {
        (us << (2 - octave)) & 3
    };
    ((octave * SUB) as usize + sub as usize).min(BUCKETS - 1)
}

/// The largest round trip (µs) a bucket holds. Below 4 µs a doubling is too narrow for four whole-microsecond
/// buckets: 1 µs and less share bucket 0, 2 µs and 3 µs have one each.
/// The top of the bucket under which a fraction `q` (0 to 1) of the round trips `counts` (per bucket) fall.
fn quantile(counts: impl Iterator<Item = u64> + Clone, q: f64) -> Option<Duration> {
    let total: u64 = counts.clone().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (b, n) in counts.enumerate() {
        seen += n;
        if seen >= rank {
            return Some(Duration::from_micros(bucket_top(b)));
        }
    }
    None
}

fn bucket_top(b: usize) -> u64 {
    let (octave, sub) = (b as u32 / SUB, b as u64 % u64::from(SUB));
    match octave {
        0 => 1,
        1 if sub < 2 => 2,
        1 => 3,
        _ => {
            let base = 1u64 << octave;
            base + (sub + 1) * (base >> 2) - 1
        }
    }
}

impl NodeStats {
    pub(crate) fn requests(&self, n: usize) {
        add(&self.requests, n as u64);
    }
    pub(crate) fn write(&self) {
        add(&self.writes, 1);
    }
    pub(crate) fn read(&self) {
        add(&self.reads, 1);
    }
    pub(crate) fn connect(&self) {
        add(&self.connects, 1);
    }
    pub(crate) fn dropped(&self) {
        add(&self.drops, 1);
    }
    pub(crate) fn timeout(&self) {
        add(&self.timeouts, 1);
    }
    pub(crate) fn refused(&self, n: usize) {
        add(&self.refused, n as u64);
    }
    pub(crate) fn detached(&self, n: usize) {
        add(&self.detached, n as u64);
    }
    pub(crate) fn given_up(&self, n: usize) {
        add(&self.given_up, n as u64);
    }

    /// A reply came, `rtt` after its request was queued.
    pub(crate) fn reply(&self, rtt: Duration) {
        add(&self.replies, 1);
        let us = u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX);
        add(&self.rtt[bucket(us)], 1);
    }

    /// The round trip under which a fraction `q` of the replies so far came (see [`NodeCounts::rtt_quantile`]),
    /// read without a copy.
    pub(crate) fn rtt_quantile(&self, q: f64) -> Option<Duration> {
        quantile(self.rtt.iter().map(|c| c.load(Relaxed)), q)
    }

    /// A copy of the counters now.
    pub(crate) fn snapshot(&self) -> NodeCounts {
        let get = |c: &AtomicU64| c.load(Relaxed);
        NodeCounts {
            requests: get(&self.requests),
            replies: get(&self.replies),
            writes: get(&self.writes),
            reads: get(&self.reads),
            connects: get(&self.connects),
            drops: get(&self.drops),
            timeouts: get(&self.timeouts),
            refused: get(&self.refused),
            detached: get(&self.detached),
            given_up: get(&self.given_up),
            rtt: self.rtt.iter().map(get).collect(),
        }
    }
}

/// What one node's connections did, counted since the fanout was created: a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeCounts {
    /// Requests queued for the node (set-up commands included).
    pub requests: u64,
    /// Replies read (set-up replies included).
    pub replies: u64,
    /// Write system calls: `requests / writes` is how many requests a write carried on average.
    pub writes: u64,
    /// Read system calls that returned bytes.
    pub reads: u64,
    /// Connections dialled: 1 for a node that never went away.
    pub connects: u64,
    /// Connections dropped (closed or reset by the node, refused, hung, protocol errors).
    pub drops: u64,
    /// Requests whose round ended before the reply came.
    pub timeouts: u64,
    /// Requests not sent because the node already had too many without replies.
    pub refused: u64,
    /// Release requests (counted by reply) that were held for room on the node when their round ended, and kept
    /// to be sent once it has room (see [`Fanout::release_round`](super::Fanout::release_round)).
    pub detached: u64,
    /// Of those, the ones given up unsent: no room came within `hung_timeout`, too many were waiting already, or
    /// the fanout was dropped first.
    pub given_up: u64,
    rtt: Vec<u64>,
}

impl NodeCounts {
    /// The round trip under which a fraction `q` (0 to 1) of the replies came, from queueing the request to
    /// reading its reply; `None` before any reply. Exact to within a quarter of a doubling (the bucket's top).
    pub fn rtt_quantile(&self, q: f64) -> Option<Duration> {
        quantile(self.rtt.iter().copied(), q)
    }

    /// The counts of `self` minus those of an `earlier` snapshot: what happened in between.
    #[must_use]
    pub fn since(&self, earlier: &NodeCounts) -> NodeCounts {
        NodeCounts {
            requests: self.requests.saturating_sub(earlier.requests),
            replies: self.replies.saturating_sub(earlier.replies),
            writes: self.writes.saturating_sub(earlier.writes),
            reads: self.reads.saturating_sub(earlier.reads),
            connects: self.connects.saturating_sub(earlier.connects),
            drops: self.drops.saturating_sub(earlier.drops),
            timeouts: self.timeouts.saturating_sub(earlier.timeouts),
            refused: self.refused.saturating_sub(earlier.refused),
            detached: self.detached.saturating_sub(earlier.detached),
            given_up: self.given_up.saturating_sub(earlier.given_up),
            rtt: self
                .rtt
                .iter()
                .zip(earlier.rtt.iter().chain(std::iter::repeat(&0)))
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
        }
    }

    /// Adds `other`'s counts to these (a cluster member's connections, summed into the member's).
    pub(crate) fn absorb(&mut self, other: &NodeCounts) {
        self.requests += other.requests;
        self.replies += other.replies;
        self.writes += other.writes;
        self.reads += other.reads;
        self.connects += other.connects;
        self.drops += other.drops;
        self.timeouts += other.timeouts;
        self.refused += other.refused;
        self.detached += other.detached;
        self.given_up += other.given_up;
        if self.rtt.len() < other.rtt.len() {
            self.rtt.resize(other.rtt.len(), 0);
        }
        for (a, b) in self.rtt.iter_mut().zip(&other.rtt) {
            *a += b;
        }
    }
}

impl fmt::Display for NodeCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per_write = match self.writes {
            0 => 0.0,
            w => self.requests as f64 / w as f64,
        };
        write!(
            f,
            "{} requests in {} writes ({per_write:.1} per write), {} replies in {} reads, {} connects, {} drops, \
             {} timeouts, {} refused",
            self.requests,
            self.writes,
            self.replies,
            self.reads,
            self.connects,
            self.drops,
            self.timeouts,
            self.refused
        )?;
        if let (Some(p50), Some(p99)) = (self.rtt_quantile(0.5), self.rtt_quantile(0.99)) {
            write!(f, ", round trip p50 {p50:?} p99 {p99:?}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_cover_their_values() {
        let mut last = 0;
        for us in [
            1u64,
            2,
            3,
            4,
            5,
            7,
            8,
            9,
            15,
            16,
            100,
            1000,
            65_535,
            1 << 30,
            u64::MAX,
        ] {
            let b = bucket(us);
            assert!(b >= last, "{us}");
            last = b;
            if b < BUCKETS - 1 {
                assert!(
                    bucket_top(b) >= us,
                    "{us} above its bucket's top {}",
                    bucket_top(b)
                );
                assert!(b == 0 || bucket_top(b - 1) < us, "{us} belongs lower");
            }
        }
    }

    #[test]
    fn quantiles_and_differences() {
        let s = NodeStats::default();
        for us in [10, 20, 30, 40, 1000] {
            s.reply(Duration::from_micros(us));
        }
        s.requests(5);
        s.write();
        let first = s.snapshot();
        assert_eq!(first.rtt_quantile(0.0), Some(Duration::from_micros(11)));
        let p50 = first.rtt_quantile(0.5).expect("replies");
        assert!(
            p50 >= Duration::from_micros(30) && p50 < Duration::from_micros(36),
            "{p50:?}"
        );
        assert!(first.rtt_quantile(1.0).expect("replies") >= Duration::from_micros(1000));
        s.reply(Duration::from_micros(5));
        let later = s.snapshot().since(&first);
        assert_eq!((later.replies, later.requests), (1, 0));
        assert_eq!(later.rtt_quantile(0.5), Some(Duration::from_micros(5)));
        assert!(
            first
                .to_string()
                .contains("5 requests in 1 writes (5.0 per write)")
        );
        assert_eq!(NodeCounts::default().rtt_quantile(0.5), None);
    }
}
