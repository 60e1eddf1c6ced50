//! Unit tests of [`Slots`](super::Slots): plain bookkeeping, no sockets.

use super::*;
use std::time::Duration;

fn ok(n: i64) -> Reply {
    Ok(Value::Integer(n))
}

/// The waiters' index holds exactly the slots that have a waiter, each under its own instant and kind.
#[track_caller]
fn consistent(slots: &Slots) {
    let key = |s: &Slot| (s.wake_at, s.index);
    let threads: BTreeSet<_> = (slots.slots.iter())
        .filter(|s| matches!(s.waiter, Some(Wake::Thread(_))))
        .map(key)
        .collect();
    let tasks: BTreeSet<_> = (slots.slots.iter())
        .filter(|s| matches!(s.waiter, Some(Wake::Task(_))))
        .map(key)
        .collect();
    assert_eq!(slots.waiting.threads, threads);
    assert_eq!(slots.waiting.tasks, tasks);
}

#[test]
fn outcomes_are_filed_once_in_order_and_settle_the_round() {
    let mut slots = Slots::default();
    let t0 = Instant::now();
    let r = slots.open(3, t0);
    slots.expect(r, 0, 1);
    slots.expect(r, 2, 2);
    assert!(!slots.settled(r));
    assert!(slots.file(r, 2, ok(1)).is_none(), "nobody sleeps");
    assert!(slots.file(r, 1, ok(9)).is_none());
    assert_eq!(slots.take(r), Some((2, ok(1))));
    assert_eq!(slots.take(r), None, "node 1 was not expected");
    slots.file(r, 0, Err(NodeError::Closed));
    slots.file(r, 2, ok(2));
    assert!(slots.settled(r));
    assert_eq!(slots.take(r), Some((0, Err(NodeError::Closed))));
    assert_eq!(slots.take(r), Some((2, ok(2))));
    assert_eq!(slots.take(r), None);
}

#[test]
fn a_closed_round_drops_late_outcomes_and_its_slot_is_reused() {
    let mut slots = Slots::default();
    let t0 = Instant::now();
    let old = slots.open(2, t0);
    slots.expect(old, 1, 1);
    slots.close(old);
    let new = slots.open(2, t0);
    assert_eq!(new.index, old.index);
    assert_ne!(new.generation, old.generation);
    slots.expect(new, 1, 1);
    // The old round's reply arrives late: it must not be taken for the new round's.
    assert!(slots.file(old, 1, ok(1)).is_none());
    assert_eq!(slots.take(new), None);
    assert!(!slots.settled(new));
    slots.file(new, 1, ok(2));
    assert_eq!(slots.take(new), Some((1, ok(2))));
    // Closing twice, or an unknown slot, is harmless.
    slots.close(old);
    slots.expect(
        SlotRef {
            index: 9,
            generation: 0,
        },
        0,
        1,
    );
    assert!(slots.settled(SlotRef {
        index: 9,
        generation: 0
    }));
}

#[test]
fn a_sleeper_that_needs_several_outcomes_is_woken_once() {
    let mut slots = Slots::default();
    let r = slots.open(5, Instant::now());
    (0..5).for_each(|node| slots.expect(r, node, 1));
    slots.need(r, 3);
    slots.sleep(r, std::thread::current());
    assert!(slots.file(r, 0, ok(1)).is_none());
    assert!(slots.file(r, 1, ok(1)).is_none());
    assert!(
        slots.file(r, 2, ok(1)).is_some(),
        "the third outcome wakes it"
    );
    // Asking for more than can come: the last outcome wakes it.
    slots.need(r, 9);
    slots.sleep(r, std::thread::current());
    assert!(slots.file(r, 3, ok(1)).is_none());
    assert!(slots.file(r, 4, ok(1)).is_some());
}

#[test]
fn timeouts_take_what_is_still_pending_and_nothing_else() {
    let mut slots = Slots::default();
    let r = slots.open(3, Instant::now());
    slots.expect(r, 0, 1);
    slots.expect(r, 1, 1);
    slots.file(r, 0, ok(1));
    assert_eq!(slots.time_out_node(r), Some((1, 1)));
    assert_eq!(slots.time_out_node(r), None);
    assert!(slots.settled(r));
    // A reply after its timeout is not filed twice.
    slots.file(r, 1, ok(1));
    assert_eq!(slots.take(r), Some((0, ok(1))));
    assert_eq!(slots.take(r), Some((1, Err(NodeError::Timeout))));
    assert_eq!(slots.take(r), None);
}

/// The review's finding: two commands to one node, the first timed out, then its late reply read by another
/// thread's poll. The late reply must not come out in the second command's position.
#[test]
fn a_late_reply_is_never_handed_out_for_a_later_command() {
    let mut slots = Slots::default();
    let r = slots.open(1, Instant::now());
    slots.expect(r, 0, 2);
    assert_eq!(
        slots.time_out_node(r),
        Some((0, 2)),
        "both time out at once"
    );
    assert!(slots.settled(r));
    assert!(slots.file(r, 0, ok(1)).is_none(), "the first's late reply");
    assert!(slots.file(r, 0, ok(2)).is_none(), "the second's late reply");
    assert_eq!(slots.take(r), Some((0, Err(NodeError::Timeout))));
    assert_eq!(slots.take(r), Some((0, Err(NodeError::Timeout))));
    assert_eq!(slots.take(r), None);
    // A command sent after the timeout gets its own reply, not a stale one: the stale replies come first
    // on the wire and are dropped.
    let r = slots.open(1, Instant::now());
    slots.expect(r, 0, 1);
    assert_eq!(slots.time_out_node(r), Some((0, 1)));
    slots.expect(r, 0, 1);
    slots.file(r, 0, ok(1)); // the timed-out command's reply
    slots.file(r, 0, ok(2)); // the new command's
    assert_eq!(slots.take(r), Some((0, Err(NodeError::Timeout))));
    assert_eq!(slots.take(r), Some((0, ok(2))));
    assert!(slots.settled(r));
}

#[test]
fn a_refusal_waits_behind_the_requests_on_the_wire() {
    let mut slots = Slots::default();
    let r = slots.open(2, Instant::now());
    slots.expect(r, 0, 1);
    slots.expect(r, 1, 1);
    // Node 0 has no room for the round's second request: its refusal is known now, its first reply later.
    slots.expect(r, 0, 2);
    assert!(
        slots
            .refuse(r, 0, 2, 0, Err(NodeError::Overloaded))
            .is_none()
    );
    slots.expect(r, 1, 1);
    slots.refuse(r, 1, 1, 0, Err(NodeError::Overloaded));
    assert!(!slots.settled(r));
    slots.file(r, 1, ok(10));
    assert_eq!(slots.take(r), Some((1, ok(10))));
    assert_eq!(slots.take(r), Some((1, Err(NodeError::Overloaded))));
    assert_eq!(
        slots.take(r),
        None,
        "node 0's refusals wait for its first reply"
    );
    slots.file(r, 0, ok(1));
    assert_eq!(slots.take(r), Some((0, ok(1))));
    assert_eq!(slots.take(r), Some((0, Err(NodeError::Overloaded))));
    assert_eq!(slots.take(r), Some((0, Err(NodeError::Overloaded))));
    assert!(slots.settled(r));
    // A refusal on a node with nothing on the wire comes out at once; behind a timeout, after it.
    let r = slots.open(1, Instant::now());
    slots.expect(r, 0, 2);
    slots.refuse(r, 0, 1, 0, Err(NodeError::Overloaded));
    assert_eq!(slots.take(r), None);
    assert_eq!(slots.time_out_node(r), Some((0, 1)));
    assert_eq!(slots.take(r), Some((0, Err(NodeError::Timeout))));
    assert_eq!(slots.take(r), Some((0, Err(NodeError::Overloaded))));
    assert!(slots.settled(r));
}

/// The read-only review of #27, finding 1: a request accepted after a refusal on the same node (a routed round's
/// resend after `MOVED`/`ASK`, a `send_each` whose smaller request fits where a larger one did not) has its
/// outcome after the refusal's, in wire order; the refusal once waited until the node had *nothing* on the wire,
/// so the later request's `OK` was handed out in the refused command's position (and its `Overloaded` in the
/// later one's).
#[test]
fn a_refusal_keeps_its_place_before_later_requests_of_the_node() {
    let mut slots = Slots::default();
    let r = slots.open(1, Instant::now());
    slots.expect(r, 0, 1); // A, on the wire
    slots.expect(r, 0, 1); // B, refused
    slots.refuse(r, 0, 1, 0, Err(NodeError::Overloaded));
    slots.expect(r, 0, 2); // C, on the wire (two replies)
    slots.expect(r, 0, 1); // D, refused
    slots.refuse(r, 0, 1, 0, Err(NodeError::Refused));
    slots.file(r, 0, ok(1));
    slots.file(r, 0, ok(3));
    slots.file(r, 0, ok(4));
    let order: Vec<_> = std::iter::from_fn(|| slots.take(r)).collect();
    let want = vec![
        (0, ok(1)),
        (0, Err(NodeError::Overloaded)),
        (0, ok(3)),
        (0, ok(4)),
        (0, Err(NodeError::Refused)),
    ];
    assert_eq!(order, want);
    assert!(slots.settled(r));
    // The same order when the wire's requests time out: each refusal between the timeouts ahead of and behind it.
    let r = slots.open(1, Instant::now());
    slots.expect(r, 0, 2);
    slots.expect(r, 0, 1);
    slots.refuse(r, 0, 1, 0, Err(NodeError::Overloaded));
    slots.expect(r, 0, 1);
    assert_eq!(slots.time_out_node(r), Some((0, 3)));
    let order: Vec<_> = std::iter::from_fn(|| slots.take(r)).collect();
    let want = vec![
        (0, Err(NodeError::Timeout)),
        (0, Err(NodeError::Timeout)),
        (0, Err(NodeError::Overloaded)),
        (0, Err(NodeError::Timeout)),
    ];
    assert_eq!(order, want);
    assert!(slots.settled(r));
}

/// A release round holds a node's later requests behind one held for room; when the held one is refused (past
/// the deadline, or its node down), its outcome comes before theirs, whether they go on the wire after it or are
/// refused too: the held ones behind it are not ahead of it (`behind`).
#[test]
fn a_held_request_refused_comes_before_the_ones_held_behind_it() {
    let mut slots = Slots::default();
    let r = slots.open(1, Instant::now());
    slots.expect(r, 0, 1); // W, on the wire
    slots.expect(r, 0, 1); // H1, held
    slots.expect(r, 0, 2); // H2, held behind H1
    slots.refuse(r, 0, 1, 2, Err(NodeError::Overloaded)); // H1 refused, H2 still held behind it
    // H2 goes on the wire: its replies come after W's.
    slots.file(r, 0, ok(1));
    slots.file(r, 0, ok(2));
    slots.file(r, 0, ok(3));
    let order: Vec<_> = std::iter::from_fn(|| slots.take(r)).collect();
    let want = vec![
        (0, ok(1)),
        (0, Err(NodeError::Overloaded)),
        (0, ok(2)),
        (0, ok(3)),
    ];
    assert_eq!(order, want);
    assert!(slots.settled(r));
}

#[test]
fn sleepers_are_woken_by_their_outcome_their_deadline_or_to_take_over() {
    let mut slots = Slots::default();
    let t0 = Instant::now();
    let me = std::thread::current();
    let early = slots.open(2, t0 + Duration::from_millis(10));
    let late = slots.open(2, t0 + Duration::from_millis(50));
    slots.expect(early, 0, 1);
    slots.expect(late, 0, 1);
    assert_eq!(slots.earliest_sleeper(), None);
    slots.sleep(early, me.clone());
    slots.sleep(late, me.clone());
    assert_eq!(
        slots.earliest_sleeper(),
        Some(t0 + Duration::from_millis(10))
    );
    // A turn that read at 20 ms wakes the round due at 10 ms, not the one due at 50.
    let mut wake = Vec::new();
    slots.wake_due(t0 + Duration::from_millis(20), &mut wake);
    assert_eq!(wake.len(), 1);
    assert_eq!(
        slots.earliest_sleeper(),
        Some(t0 + Duration::from_millis(50))
    );
    // An outcome wakes its round once.
    assert!(slots.file(late, 0, ok(1)).is_some());
    assert!(slots.any_sleeper().is_none());
    slots.sleep(late, me.clone());
    slots.awake(late);
    assert!(slots.any_sleeper().is_none());
    slots.sleep(early, me);
    assert!(slots.any_sleeper().is_some());
    assert!(slots.any_sleeper().is_none());
    consistent(&slots);
}

/// A waker that counts its wake-ups.
struct Count(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Count {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn counting() -> (std::sync::Arc<Count>, Waker) {
    let count = std::sync::Arc::new(Count(std::sync::atomic::AtomicUsize::new(0)));
    (count.clone(), Waker::from(count))
}

#[test]
fn tasks_wait_beside_threads_and_a_closed_round_gives_its_waker_back() {
    let mut slots = Slots::default();
    let t0 = Instant::now();
    let (count, waker) = counting();
    let task = slots.open(2, t0 + Duration::from_millis(50));
    let thread = slots.open(2, t0 + Duration::from_millis(80));
    slots.expect(task, 0, 1);
    slots.expect(thread, 0, 1);
    assert!(matches!(slots.successor(), Successor::Nobody));
    // A task that looks again in 1 ms (a release holding requests for room) is due then, not at its deadline.
    assert!(
        slots
            .wait(task, &waker, t0 + Duration::from_millis(1))
            .is_none()
    );
    assert!(
        slots
            .wait(task, &waker, t0 + Duration::from_millis(1))
            .is_none(),
        "the same waker is kept"
    );
    assert_eq!(slots.earliest_task(), Some(t0 + Duration::from_millis(1)));
    assert!(
        matches!(slots.successor(), Successor::Tasks),
        "its waker stays"
    );
    slots.sleep(thread, std::thread::current());
    assert_eq!(
        slots.earliest_sleeper(),
        Some(t0 + Duration::from_millis(1))
    );
    assert_eq!(slots.earliest_task(), Some(t0 + Duration::from_millis(1)));
    // A poll handed back goes to the thread first; the task keeps waiting.
    consistent(&slots);
    assert!(matches!(slots.successor(), Successor::Thread(_)));
    consistent(&slots);
    assert!(matches!(slots.successor(), Successor::Tasks));
    // A turn that read at 2 ms wakes the task (due at 1 ms).
    let mut wake = Vec::new();
    slots.wake_due(t0 + Duration::from_millis(2), &mut wake);
    assert_eq!(wake.len(), 1);
    wake.drain(..).for_each(Wake::wake);
    consistent(&slots);
    assert_eq!(count.0.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(slots.earliest_task(), None);
    // Waiting again till its deadline, then an outcome wakes it.
    slots.wait(task, &waker, t0 + Duration::from_secs(9));
    assert_eq!(
        slots.earliest_task(),
        Some(t0 + Duration::from_millis(50)),
        "never past the deadline"
    );
    if let Some(w) = slots.file(task, 0, ok(1)) {
        w.wake();
    }
    assert_eq!(count.0.load(std::sync::atomic::Ordering::Relaxed), 2);
    // Another task's waker replaces it, handed back to be dropped outside the lock; closing hands back the last.
    let (other_count, other) = counting();
    slots.wait(task, &waker, t0 + Duration::from_millis(50));
    assert!(matches!(
        slots.wait(task, &other, t0 + Duration::from_millis(50)),
        Some(Wake::Task(_))
    ));
    consistent(&slots);
    assert!(matches!(slots.close(task), Some(Wake::Task(_))));
    consistent(&slots);
    assert_eq!(slots.earliest_task(), None);
    assert!(slots.close(task).is_none(), "closed already");
    assert!(
        slots.wait(task, &other, t0).is_none(),
        "a closed round's slot takes no waker"
    );
    assert_eq!(
        other_count.0.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "never woken"
    );
}

/// The waiters' index follows a task that waits again under another instant, and many waiters are woken in the
/// order they are due, only the ones due, whatever their slots' order.
#[test]
fn waiters_are_found_by_when_they_are_due() {
    let mut slots = Slots::default();
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let (count, waker) = counting();
    // 1,000 rounds, due from the last opened to the first.
    let rounds: Vec<SlotRef> = (0..1000).map(|i| slots.open(1, ms(2000 - i))).collect();
    for r in &rounds {
        slots.expect(*r, 0, 1);
        slots.wait(*r, &waker, ms(5000));
    }
    consistent(&slots);
    assert_eq!(slots.earliest_task(), Some(ms(1001)));
    // The same task waiting again sooner is filed under the new instant (its waker kept).
    assert!(slots.wait(rounds[0], &waker, ms(10)).is_none());
    consistent(&slots);
    assert_eq!(slots.earliest_task(), Some(ms(10)));
    assert_eq!(slots.earliest_sleeper(), Some(ms(10)));
    let mut wake = Vec::new();
    slots.wake_due(ms(1010), &mut wake);
    assert_eq!(
        wake.len(),
        11,
        "the one re-timed and the 10 due by 1,010 ms"
    );
    wake.drain(..).for_each(Wake::wake);
    assert_eq!(count.0.load(std::sync::atomic::Ordering::Relaxed), 11);
    consistent(&slots);
    assert_eq!(slots.earliest_task(), Some(ms(1011)));
    // A thread that sleeps is the successor, and the tasks stay.
    slots.sleep(rounds[0], std::thread::current());
    assert_eq!(slots.earliest_sleeper(), Some(ms(1011)));
    consistent(&slots);
    assert!(matches!(slots.successor(), Successor::Thread(_)));
    assert!(matches!(slots.successor(), Successor::Tasks));
    for r in rounds {
        slots.close(r);
    }
    consistent(&slots);
    assert_eq!(slots.earliest_sleeper(), None);
    assert!(matches!(slots.successor(), Successor::Nobody));
}

/// A model of what the callers do with one round's slot (`fanout`'s `offer`, `send_items`, `retry_held`,
/// `time_out_due`, a connection's `fail`), checked against [`Slots`] step by step: every node's outcomes come
/// out in the order its requests were expected, each as soon as every earlier one has come, never one twice or
/// one of another request, and the round settles exactly when every request has its outcome.
mod model {
    use super::*;

    /// xorshift64*: deterministic, no dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// One node as the callers see it.
    #[derive(Default)]
    struct Node {
        /// Per expected outcome, in expect order: the outcome once decided.
        outcomes: Vec<Option<Reply>>,
        /// How many were taken from the slot.
        taken: usize,
        /// On the wire, in FIFO order: the outcome's index, and whether it was reported timed out.
        wire: VecDeque<(usize, bool)>,
        /// Requests held for room (a release round), in order: their outcomes' indices.
        held: VecDeque<Vec<usize>>,
        /// A timeout was reported for the node.
        timed_out: bool,
    }

    struct Run {
        slots: Slots,
        r: SlotRef,
        nodes: Vec<Node>,
        next_id: i64,
        log: Vec<String>,
    }

    impl Run {
        /// Expects `n` outcomes of a new request on `node`; returns their indices.
        fn expect(&mut self, node: usize, n: usize) -> Vec<usize> {
            self.slots.expect(self.r, node, n);
            let nd = &mut self.nodes[node];
            let first = nd.outcomes.len();
            nd.outcomes.extend((0..n).map(|_| None));
            (first..first + n).collect()
        }

        fn wire(&mut self, node: usize, idx: Vec<usize>) {
            let nd = &mut self.nodes[node];
            for i in idx {
                let dead = nd.outcomes[i].is_some();
                nd.wire.push_back((i, dead));
            }
        }

        fn refuse(&mut self, node: usize, idx: &[usize], behind: usize) {
            let id = self.next_id;
            self.next_id += 1;
            let reply: Reply = Err(NodeError::Cluster(format!("refused {id}")));
            self.slots
                .refuse(self.r, node, idx.len(), behind, reply.clone());
            for &i in idx {
                let o = &mut self.nodes[node].outcomes[i];
                if o.is_none() {
                    *o = Some(reply.clone());
                }
            }
        }

        /// The node's next wire outcome: a reply (or, `fail`, the error that broke the connection).
        fn file_front(&mut self, node: usize, fail: bool) -> bool {
            let Some((i, dead)) = self.nodes[node].wire.pop_front() else {
                return false;
            };
            let id = self.next_id;
            self.next_id += 1;
            let reply: Reply = match fail {
                false => Ok(Value::Integer(id)),
                true => Err(NodeError::Cluster(format!("failed {id}"))),
            };
            self.slots.file(self.r, node, reply.clone());
            if !dead {
                self.nodes[node].outcomes[i] = Some(reply);
            }
            true
        }

        fn time_out(&mut self, node: usize) {
            let n = self.slots.time_out(self.r, node).unwrap_or(0);
            let nd = &mut self.nodes[node];
            let mut want = 0;
            for o in nd.outcomes.iter_mut().filter(|o| o.is_none()) {
                *o = Some(Err(NodeError::Timeout));
                want += 1;
            }
            for w in nd.wire.iter_mut() {
                w.1 = true;
            }
            nd.timed_out = true;
            assert_eq!(n, want, "timeouts reported\n{}", self.log.join("\n"));
        }

        fn check(&mut self) {
            while let Some((node, reply)) = self.slots.take(self.r) {
                let nd = &mut self.nodes[node];
                let want = nd.outcomes.get(nd.taken).cloned().flatten();
                assert_eq!(
                    Some(&reply),
                    want.as_ref(),
                    "node {node}, outcome {}\n{}",
                    nd.taken,
                    self.log.join("\n")
                );
                nd.taken += 1;
            }
            for (node, nd) in self.nodes.iter().enumerate() {
                let ready = nd.outcomes[nd.taken..]
                    .iter()
                    .take_while(|o| o.is_some())
                    .count();
                assert_eq!(
                    ready,
                    0,
                    "node {node}: outcome {} decided and not handed out\n{}",
                    nd.taken,
                    self.log.join("\n")
                );
            }
            let done = self.nodes.iter().all(|n| n.taken == n.outcomes.len());
            assert_eq!(
                self.slots.settled(self.r),
                done,
                "settled\n{}",
                self.log.join("\n")
            );
        }
    }

    /// One random run of `steps` steps over `nodes` nodes. No request is sent to a node once it was reported timed
    /// out: the callers never do (held requests are judged before their node times out but for a race that sends
    /// nothing after, a redirection is not followed past the deadline, a `NOSCRIPT` resend needs a reply that was
    /// not stale). If one were, a held request timed out and then refused would take the later request's place
    /// (`refuse` counts from the node's newest pending outcomes): see `Slots::refuse`.
    fn run(seed: u64, nodes: usize, steps: usize) {
        let mut rng = Rng(seed | 1);
        let mut slots = Slots::default();
        let r = slots.open(nodes, Instant::now());
        let mut run = Run {
            slots,
            r,
            nodes: (0..nodes).map(|_| Node::default()).collect(),
            next_id: 1,
            log: vec![format!("seed {seed:#x}")],
        };
        for _ in 0..steps {
            let node = rng.below(nodes as u64) as usize;
            let n = 1 + rng.below(3) as usize;
            let op = rng.below(9);
            let nd = &run.nodes[node];
            let holds = !nd.held.is_empty();
            let sendable = !nd.timed_out;
            match op {
                // `offer`: queued (or held, behind a held request).
                0 | 1 if sendable => {
                    run.log.push(format!("send {node} x{n}"));
                    let idx = run.expect(node, n);
                    match holds {
                        true => run.nodes[node].held.push_back(idx),
                        false => run.wire(node, idx),
                    }
                }
                // `offer` in a release round: no room, held.
                2 if sendable => {
                    run.log.push(format!("hold {node} x{n}"));
                    let idx = run.expect(node, n);
                    run.nodes[node].held.push_back(idx);
                }
                // `offer`: down, or no room; `ensure` may drop the connection first (its wire fails).
                3 if sendable && !holds => {
                    let fail = rng.below(3) == 0;
                    run.log
                        .push(format!("refuse {node} x{n} (fail first: {fail})"));
                    let idx = run.expect(node, n);
                    if fail {
                        while run.file_front(node, true) {}
                    }
                    run.refuse(node, &idx, 0);
                }
                // `send_items`: `Full`, taken back, a turn reads some replies, offered again.
                4 if sendable && !holds => {
                    let read = rng.below(3);
                    let again = rng.below(2) == 0;
                    run.log
                        .push(format!("full {node} x{n}, read {read}, then sent: {again}"));
                    let idx = run.expect(node, n);
                    run.slots.unexpect(run.r, node, n);
                    run.nodes[node].outcomes.truncate(idx[0]);
                    for _ in 0..read {
                        run.file_front(node, false);
                    }
                    let idx = run.expect(node, n);
                    match again {
                        true => run.wire(node, idx),
                        false => run.refuse(node, &idx, 0),
                    }
                }
                // `retry_held`: the node's first held request goes on the wire, or is refused.
                5 if holds => {
                    let queue = rng.below(2) == 0;
                    run.log.push(format!("judge held {node}: queued {queue}"));
                    let idx = run.nodes[node].held.pop_front().unwrap_or_default();
                    match queue {
                        true => run.wire(node, idx),
                        false => {
                            let behind = run.nodes[node].held.iter().map(Vec::len).sum();
                            run.refuse(node, &idx, behind);
                        }
                    }
                }
                // A reply from the wire.
                6 | 7 => {
                    run.log.push(format!("file {node}"));
                    run.file_front(node, false);
                }
                // The connection drops: its wire fails in order.
                8 if rng.below(4) == 0 => {
                    run.log.push(format!("fail {node}"));
                    while run.file_front(node, true) {}
                }
                // Past the deadline: the node's requests without an outcome time out.
                8 => {
                    run.log.push(format!("time out {node}"));
                    run.time_out(node);
                }
                _ => continue,
            }
            run.check();
        }
        // The end of the round: held requests judged, the wire answered or timed out.
        for node in 0..nodes {
            while let Some(idx) = run.nodes[node].held.pop_front() {
                run.log.push(format!("end: judge held {node}"));
                let behind = run.nodes[node].held.iter().map(Vec::len).sum();
                run.refuse(node, &idx, behind);
                run.check();
            }
            if rng.below(2) == 0 {
                run.log.push(format!("end: time out {node}"));
                run.time_out(node);
            }
            run.log.push(format!("end: file all of {node}"));
            while run.file_front(node, false) {}
            run.check();
        }
        assert!(run.slots.settled(run.r), "{}", run.log.join("\n"));
    }

    /// 3,000 runs of 10 to 99 steps over 1 to 3 nodes (a fraction of a second; 200,000 found nothing either).
    /// Catches the order before 91f41a7 (a refusal held until nothing of its node was on the wire) and before
    /// d020bdb (`behind` ignored) within the first seeds.
    #[test]
    fn random_rounds_hand_out_each_nodes_outcomes_in_order() {
        for seed in 0..3000u64 {
            let seed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            run(seed, 1 + (seed % 3) as usize, 10 + (seed % 90) as usize);
        }
    }
}
