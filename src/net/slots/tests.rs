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

fn id(node: usize, seq: u32) -> CommandId {
    CommandId { node, seq }
}

/// Files a reply from the wire, which must not be out of order.
#[track_caller]
fn file(slots: &mut Slots, r: SlotRef, (node, seq): (usize, u32), reply: Reply) -> Option<Wake> {
    slots
        .file(r, id(node, seq), reply)
        .expect("a reply in its wire order")
}

/// Expects `n` replies of a request queued on `node` at once; returns the id of the first.
fn send(slots: &mut Slots, r: SlotRef, node: usize, n: usize) -> u32 {
    let first = slots.expect(r, node, n);
    slots.queued(r, node, first, n);
    first
}

#[test]
fn outcomes_are_filed_once_under_their_ids_and_settle_the_round() {
    let mut slots = Slots::default();
    let t0 = Instant::now();
    let r = slots.open(3, t0);
    assert_eq!(send(&mut slots, r, 0, 1), 0);
    assert_eq!(send(&mut slots, r, 2, 2), 0);
    assert_eq!(slots.next_seq(r, 2), 2, "a request of two takes two ids");
    assert!(!slots.settled(r));
    assert!(
        file(&mut slots, r, (2, 0), ok(1)).is_none(),
        "nobody sleeps"
    );
    assert!(file(&mut slots, r, (1, 0), ok(9)).is_none());
    assert_eq!(slots.take(r), Some((id(2, 0), ok(1))));
    assert_eq!(slots.take(r), None, "node 1 was not expected");
    file(&mut slots, r, (0, 0), Err(NodeError::Closed));
    file(&mut slots, r, (2, 1), ok(2));
    file(&mut slots, r, (2, 1), ok(3));
    assert!(slots.settled(r));
    assert_eq!(slots.take(r), Some((id(0, 0), Err(NodeError::Closed))));
    assert_eq!(slots.take(r), Some((id(2, 1), ok(2))), "filed once");
    assert_eq!(slots.take(r), None);
}

#[test]
fn a_closed_round_drops_late_outcomes_and_its_slot_is_reused() {
    let mut slots = Slots::default();
    let t0 = Instant::now();
    let old = slots.open(2, t0);
    send(&mut slots, old, 1, 1);
    slots.close(old);
    let new = slots.open(2, t0);
    assert_eq!(new.index, old.index);
    assert_ne!(new.generation, old.generation);
    assert_eq!(send(&mut slots, new, 1, 1), 0, "ids start over");
    // The old round's reply arrives late: it must not be taken for the new round's.
    assert!(file(&mut slots, old, (1, 0), ok(1)).is_none());
    assert_eq!(slots.take(new), None);
    assert!(!slots.settled(new));
    file(&mut slots, new, (1, 0), ok(2));
    assert_eq!(slots.take(new), Some((id(1, 0), ok(2))));
    // Closing twice, or an unknown slot, is harmless.
    slots.close(old);
    let unknown = SlotRef {
        index: 9,
        generation: 0,
    };
    assert_eq!(slots.expect(unknown, 0, 1), 0);
    assert!(slots.settled(unknown));
}

#[test]
fn a_sleeper_that_needs_several_outcomes_is_woken_once() {
    let mut slots = Slots::default();
    let r = slots.open(5, Instant::now());
    (0..5).for_each(|node| {
        send(&mut slots, r, node, 1);
    });
    slots.need(r, 3);
    slots.sleep(r, std::thread::current());
    assert!(file(&mut slots, r, (0, 0), ok(1)).is_none());
    assert!(file(&mut slots, r, (1, 0), ok(1)).is_none());
    assert!(
        file(&mut slots, r, (2, 0), ok(1)).is_some(),
        "the third outcome wakes it"
    );
    // Asking for more than can come: the last outcome wakes it.
    slots.need(r, 9);
    slots.sleep(r, std::thread::current());
    assert!(file(&mut slots, r, (3, 0), ok(1)).is_none());
    assert!(file(&mut slots, r, (4, 0), ok(1)).is_some());
}

#[test]
fn timeouts_take_what_is_still_awaited_and_nothing_else() {
    let mut slots = Slots::default();
    let r = slots.open(3, Instant::now());
    send(&mut slots, r, 0, 1);
    send(&mut slots, r, 1, 1);
    file(&mut slots, r, (0, 0), ok(1));
    assert_eq!(slots.time_out_node(r), Some((1, 1)));
    assert_eq!(slots.time_out_node(r), None);
    assert!(slots.settled(r));
    // A reply after its timeout is not filed twice.
    file(&mut slots, r, (1, 0), ok(1));
    assert_eq!(slots.take(r), Some((id(0, 0), ok(1))));
    assert_eq!(slots.take(r), Some((id(1, 0), Err(NodeError::Timeout))));
    assert_eq!(slots.take(r), None);
}

/// Two commands to one node timed out, then their late replies read by another thread's poll, then a command
/// sent after the timeout: each reply is filed under its own command's id, so a late one is dropped and never
/// stands for the later command.
#[test]
fn a_late_reply_is_never_handed_out_for_a_later_command() {
    let mut slots = Slots::default();
    let r = slots.open(1, Instant::now());
    send(&mut slots, r, 0, 2);
    assert_eq!(
        slots.time_out_node(r),
        Some((0, 2)),
        "both time out at once"
    );
    assert!(slots.settled(r));
    let after = send(&mut slots, r, 0, 1);
    assert_eq!(after, 2);
    assert!(
        file(&mut slots, r, (0, 0), ok(1)).is_none(),
        "the first's late reply"
    );
    assert!(
        file(&mut slots, r, (0, 1), ok(2)).is_none(),
        "the second's late reply"
    );
    file(&mut slots, r, (0, 2), ok(3));
    let got: Vec<_> = std::iter::from_fn(|| slots.take(r)).collect();
    let want = vec![
        (id(0, 0), Err(NodeError::Timeout)),
        (id(0, 1), Err(NodeError::Timeout)),
        (id(0, 2), ok(3)),
    ];
    assert_eq!(got, want);
    assert!(slots.settled(r));
}

/// A refusal is known before the replies of the node's requests on the wire: it is handed out at once under the
/// refused request's ids, whatever else of the node is awaited, and those replies keep their own ids.
#[test]
fn a_refusal_is_filed_under_its_own_ids_at_once() {
    let mut slots = Slots::default();
    let r = slots.open(1, Instant::now());
    send(&mut slots, r, 0, 1); // A, on the wire
    let b = slots.expect(r, 0, 1); // B, refused
    slots.refuse(r, 0, b, 1, Err(NodeError::Overloaded));
    send(&mut slots, r, 0, 2); // C, on the wire (two replies)
    let d = slots.expect(r, 0, 1); // D, refused
    slots.refuse(r, 0, d, 1, Err(NodeError::Refused));
    assert_eq!(slots.take(r), Some((id(0, 1), Err(NodeError::Overloaded))));
    assert_eq!(slots.take(r), Some((id(0, 4), Err(NodeError::Refused))));
    file(&mut slots, r, (0, 0), ok(1));
    file(&mut slots, r, (0, 2), ok(3));
    file(&mut slots, r, (0, 3), ok(4));
    let got: Vec<_> = std::iter::from_fn(|| slots.take(r)).collect();
    assert_eq!(
        got,
        vec![(id(0, 0), ok(1)), (id(0, 2), ok(3)), (id(0, 3), ok(4))]
    );
    assert!(slots.settled(r));
    // A refusal of ids already timed out files nothing.
    let r = slots.open(1, Instant::now());
    let h = slots.expect(r, 0, 1);
    assert_eq!(slots.time_out_node(r), Some((0, 1)));
    assert!(
        slots
            .refuse(r, 0, h, 1, Err(NodeError::Overloaded))
            .is_none()
    );
    assert_eq!(slots.take(r), Some((id(0, 0), Err(NodeError::Timeout))));
    assert_eq!(slots.take(r), None);
}

/// The wire answers a node's requests in the order they were queued, which is the order of their ids: a reply
/// filed for a later id while an older one queued before it is still awaited means the books and the wire
/// disagree, and is refused (the caller drops the connection); a request held for room (not queued) is not
/// ahead of anything on the wire.
#[test]
fn a_reply_out_of_its_wire_order_is_a_disorder() {
    let mut slots = Slots::default();
    let r = slots.open(1, Instant::now());
    let held = slots.expect(r, 0, 1); // held for room: not on a wire
    send(&mut slots, r, 0, 2);
    assert!(matches!(slots.file(r, id(0, 2), ok(2)), Err(Disorder)));
    assert_eq!(slots.take(r), None, "nothing filed");
    file(&mut slots, r, (0, 1), ok(1));
    file(&mut slots, r, (0, 2), ok(2));
    slots.queued(r, 0, held, 1);
    file(&mut slots, r, (0, 0), ok(0));
    let got: Vec<_> = std::iter::from_fn(|| slots.take(r)).collect();
    assert_eq!(
        got,
        vec![(id(0, 1), ok(1)), (id(0, 2), ok(2)), (id(0, 0), ok(0))]
    );
    assert!(slots.settled(r));
}

#[test]
fn sleepers_are_woken_by_their_outcome_their_deadline_or_to_take_over() {
    let mut slots = Slots::default();
    let t0 = Instant::now();
    let me = std::thread::current();
    let early = slots.open(2, t0 + Duration::from_millis(10));
    let late = slots.open(2, t0 + Duration::from_millis(50));
    send(&mut slots, early, 0, 1);
    send(&mut slots, late, 0, 1);
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
    assert!(file(&mut slots, late, (0, 0), ok(1)).is_some());
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
    send(&mut slots, task, 0, 1);
    send(&mut slots, thread, 0, 1);
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
    if let Some(w) = file(&mut slots, task, (0, 0), ok(1)) {
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
        send(&mut slots, *r, 0, 1);
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
        /// Per expected outcome, by id: the outcome once decided.
        outcomes: Vec<Option<Reply>>,
        /// Per expected outcome, by id: whether it was taken from the slot.
        taken: Vec<bool>,
        /// On the wire, in FIFO order: the outcome's index, and whether it was reported timed out.
        wire: VecDeque<(usize, bool)>,
        /// Requests held for room (a release round), in order: their outcomes' indices.
        held: VecDeque<Vec<usize>>,
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
            let given = self.slots.expect(self.r, node, n) as usize;
            let nd = &mut self.nodes[node];
            let first = nd.outcomes.len();
            assert_eq!(given, first, "ids given in order\n{}", self.log.join("\n"));
            nd.outcomes.extend((0..n).map(|_| None));
            nd.taken.extend((0..n).map(|_| false));
            (first..first + n).collect()
        }

        fn wire(&mut self, node: usize, idx: Vec<usize>) {
            if let Some(&first) = idx.first() {
                self.slots.queued(self.r, node, first as u32, idx.len());
            }
            let nd = &mut self.nodes[node];
            for i in idx {
                let dead = nd.outcomes[i].is_some();
                nd.wire.push_back((i, dead));
            }
        }

        fn refuse(&mut self, node: usize, idx: &[usize]) {
            let id = self.next_id;
            self.next_id += 1;
            let reply: Reply = Err(NodeError::Cluster(format!("refused {id}")));
            let first = idx.first().copied().unwrap_or(0) as u32;
            self.slots
                .refuse(self.r, node, first, idx.len(), reply.clone());
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
            let filed = self
                .slots
                .file(self.r, super::id(node, i as u32), reply.clone());
            assert!(
                filed.is_ok(),
                "filed in wire order\n{}",
                self.log.join("\n")
            );
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
            assert_eq!(n, want, "timeouts reported\n{}", self.log.join("\n"));
        }

        fn check(&mut self) {
            while let Some((id, reply)) = self.slots.take(self.r) {
                let (node, seq) = (id.node, id.seq as usize);
                let nd = &mut self.nodes[node];
                let want = nd.outcomes.get(seq).cloned().flatten();
                assert_eq!(
                    Some(&reply),
                    want.as_ref(),
                    "node {node}, outcome {seq}\n{}",
                    self.log.join("\n")
                );
                assert!(!nd.taken[seq], "taken twice\n{}", self.log.join("\n"));
                nd.taken[seq] = true;
            }
            for (node, nd) in self.nodes.iter().enumerate() {
                let waiting =
                    (nd.outcomes.iter().zip(&nd.taken)).position(|(o, t)| o.is_some() && !t);
                assert_eq!(
                    waiting,
                    None,
                    "node {node}: an outcome decided and not handed out\n{}",
                    self.log.join("\n")
                );
            }
            let done = self.nodes.iter().all(|n| n.taken.iter().all(|t| *t));
            assert_eq!(
                self.slots.settled(self.r),
                done,
                "settled\n{}",
                self.log.join("\n")
            );
        }
    }

    /// One random run of `steps` steps over `nodes` nodes, as the fanout drives a slot: requests queued, held,
    /// refused, offered again after a turn; replies read in wire order; connections failing; timeouts. Every
    /// outcome must be handed out once, under its own id, as soon as it is decided.
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
            // A request may go to a node after its timeout (its ids are new).
            match op {
                // `offer`: queued (or held, behind a held request).
                0 | 1 => {
                    run.log.push(format!("send {node} x{n}"));
                    let idx = run.expect(node, n);
                    match holds {
                        true => run.nodes[node].held.push_back(idx),
                        false => run.wire(node, idx),
                    }
                }
                // `offer` in a release round: no room, held.
                2 => {
                    run.log.push(format!("hold {node} x{n}"));
                    let idx = run.expect(node, n);
                    run.nodes[node].held.push_back(idx);
                }
                // `offer`: down, or no room; `ensure` may drop the connection first (its wire fails).
                3 if !holds => {
                    let fail = rng.below(3) == 0;
                    run.log
                        .push(format!("refuse {node} x{n} (fail first: {fail})"));
                    let idx = run.expect(node, n);
                    if fail {
                        while run.file_front(node, true) {}
                    }
                    run.refuse(node, &idx);
                }
                // `send_items`: `Full`, a turn reads some replies, offered again.
                4 if !holds => {
                    let read = rng.below(3);
                    let again = rng.below(2) == 0;
                    run.log
                        .push(format!("full {node} x{n}, read {read}, then sent: {again}"));
                    let idx = run.expect(node, n);
                    for _ in 0..read {
                        run.file_front(node, false);
                    }
                    match again {
                        true => run.wire(node, idx),
                        false => run.refuse(node, &idx),
                    }
                }
                // `retry_held`: the node's first held request goes on the wire, or is refused.
                5 if holds => {
                    let queue = rng.below(2) == 0;
                    run.log.push(format!("judge held {node}: queued {queue}"));
                    let idx = run.nodes[node].held.pop_front().unwrap_or_default();
                    match queue {
                        true => run.wire(node, idx),
                        false => run.refuse(node, &idx),
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
                run.refuse(node, &idx);
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

    /// 3,000 runs of 10 to 99 steps over 1 to 3 nodes (a fraction of a second).
    #[test]
    fn random_rounds_hand_out_every_outcome_once_under_its_id() {
        for seed in 0..3000u64 {
            let seed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            run(seed, 1 + (seed % 3) as usize, 10 + (seed % 90) as usize);
        }
    }
}

/// The count of outcomes filed (the simulator's driver wakes its tasks when it moves) counts each reply, refusal
/// and timeout once, and nothing dropped.
#[cfg(feature = "sim")]
#[test]
fn every_outcome_filed_is_counted_once() {
    let mut slots = Slots::default();
    let r = slots.open(2, Instant::now());
    send(&mut slots, r, 0, 1);
    send(&mut slots, r, 1, 3);
    assert_eq!(slots.filed(), 0);
    file(&mut slots, r, (0, 0), ok(1));
    assert_eq!(slots.filed(), 1, "a reply");
    let refused = slots.expect(r, 0, 2);
    slots.refuse(r, 0, refused, 2, Err(NodeError::Overloaded));
    assert_eq!(slots.filed(), 3, "a refusal of two");
    assert_eq!(slots.time_out(r, 1), Some(3));
    assert_eq!(slots.filed(), 6, "three timeouts");
    file(&mut slots, r, (1, 0), ok(2));
    assert_eq!(slots.filed(), 6, "a late reply is dropped, not filed");
}
