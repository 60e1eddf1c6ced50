//! The seam for tasks (groundwork for the async API, issue #26): [`Async`] runs the engine's rounds over the
//! real [`Fanout`] as true futures (each `next()` is [`Round::poll_next`]: never blocking the executor's
//! thread), and [`AsyncClock`] pauses with a timer future instead of `thread::sleep`. The engine's verbs are
//! already `async fn`s generic over the seam, so `Engine<Async<F>, AsyncClock>` runs them unchanged, on any
//! executor, with no runtime in the library; `Engine<Fanout, SystemClock>` (the blocking API) is untouched.
//!
//! Cancel-safety at the round level: dropping a verb's future drops its round, which abandons the replies still
//! to come exactly as a thread's does (read and dropped when they arrive), and takes the task's waker out of the
//! round's slot. A grant that arrives after an acquire's future is dropped is still held on its node until its
//! lease ends: releasing it at once is for the async API to add.

// Used by the simulator's tests (feature `sim`) until the async API is built on it.
#![cfg_attr(not(feature = "sim"), allow(dead_code))]

use std::borrow::Borrow;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::net::{Fanout, NodeAddr, NodeSet, Reply, Round};
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::resp::Value;

/// A fanout (owned, `&Fanout`, `Arc<Fanout>`: anything that borrows as one) whose rounds are awaited as
/// futures: see the module doc.
#[derive(Clone, Copy, Debug, Default)]
pub struct Async<F>(pub F);

/// A round of an [`Async`] fanout: the same [`Round`], whose `next()` never blocks.
#[derive(Debug)]
pub struct AsyncRound<'a>(Round<'a>);

impl<F: Borrow<Fanout>> Nodes for Async<F> {
    type Round<'a>
        = AsyncRound<'a>
    where
        Self: 'a;

    #[inline]
    fn len(&self) -> usize {
        self.0.borrow().len()
    }

    #[inline]
    fn addrs(&self) -> &[NodeAddr] {
        self.0.borrow().addrs()
    }

    #[inline]
    fn round(&self, deadline: Instant) -> AsyncRound<'_> {
        AsyncRound(self.0.borrow().round(deadline))
    }

    #[inline]
    fn release_round(&self, deadline: Instant) -> AsyncRound<'_> {
        AsyncRound(self.0.borrow().release_round(deadline))
    }

    #[inline]
    fn sessions(&self, node: usize) -> u64 {
        self.0.borrow().sessions(node)
    }

    fn setup_replies(&self, node: usize) -> Vec<(Value, Instant)> {
        self.0.borrow().setup_replies(node)
    }
}

impl NodeRound for AsyncRound<'_> {
    #[inline]
    fn send_to(&mut self, nodes: NodeSet, request: &[u8], replies: usize) -> NodeSet {
        self.0.send_to(nodes, request, replies)
    }

    #[inline]
    fn send_all(&mut self, request: &[u8], replies: usize) -> NodeSet {
        self.0.send_all(request, replies)
    }

    #[inline]
    fn send(&mut self, node: usize, request: &[u8], replies: usize) -> NodeSet {
        self.0.send(node, request, replies)
    }

    #[inline]
    fn need(&mut self, outcomes: usize) {
        self.0.need(outcomes)
    }

    /// Pending until the fanout's driver (a thread's round or the background driver) files an outcome.
    #[inline]
    fn next(&mut self) -> impl Future<Output = Option<(usize, Reply)>> {
        self.0.next_async()
    }
}

/// The real clock for tasks: [`Instant::now`], and pauses that are futures woken by the crate's timer thread
/// (`timer.rs`), so a retry's pause never blocks the executor's thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsyncClock;

impl Clock for AsyncClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, pause: Duration) -> impl Future<Output = ()> {
        crate::timer::sleep(pause)
    }
}
