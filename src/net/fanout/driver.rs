//! The [`Driver`]: what only the thread that polls touches (the poll, every connection's read side, scratch
//! space), and its turn: poll, read and decode without the lock, then file what was read, wake the rounds
//! concerned and write the batches queued meanwhile (see the [parent](super)'s "How threads share it").

use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use mio::{Events, Poll};

use super::{Inner, MAX_PUSHES, NODE_BITS, NODE_MASK, Shared, WAKER, unpark_all};
use crate::net::conn::WriteJob;
use crate::net::inbound::Item;
use crate::net::machine::Link;
use crate::net::options::Options;
use crate::net::read::ReadSide;
use crate::net::slots::Wake;
use crate::net::stats::NodeStats;
use crate::net::transport::READ_CHUNK;
use crate::sync::lock;
use crate::time::later;

/// What only the driver touches: the poll and every connection's read side, with reusable scratch space.
#[derive(Debug)]
pub(super) struct Driver {
    poll: Poll,
    events: Events,
    /// Every socket read lands here first.
    scratch: Box<[u8]>,
    reads: Vec<ReadSide>,
    /// Per turn: connections to read (node, peer closed), events of connections not followed yet, what was read.
    ready: Vec<(usize, bool)>,
    fresh: Vec<(usize, u32, bool)>,
    items: Vec<(usize, u32, Item)>,
    progressed: Vec<(usize, u32)>,
    wake: Vec<Wake>,
    jobs: Vec<WriteJob>,
}

impl std::fmt::Debug for WriteJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteJob")
            .field("node", &self.write.node)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// One turn of the driver: polls (until the earliest deadline of a round that waits), reads and decodes what
    /// arrived without the lock, files it, and wakes the rounds concerned. Called with the lock, returns with it.
    pub(super) fn turn<'g>(
        &'g self,
        mut inner: MutexGuard<'g, Inner>,
        d: &mut Driver,
        deadline: Instant,
    ) -> MutexGuard<'g, Inner> {
        let now = Instant::now();
        let until = inner
            .m
            .slots
            .earliest_sleeper()
            .map_or(deadline, |t| t.min(deadline));
        let timeout = match d.reads.iter().any(|r| r.backlog) {
            true => Duration::ZERO,
            false => until.saturating_duration_since(now),
        };
        inner.polling_until = Some(later(now, timeout));
        drop(inner);

        let polled = d.poll(timeout, self.opts.spin);
        let read_at = Instant::now();
        d.sort_events(polled);
        if !d.fresh.is_empty() {
            let mut inner = lock(&self.inner);
            self.follow_new_connections(&mut inner, d, read_at);
        }
        d.read_ready(&self.opts);

        let mut inner = lock(&self.inner);
        inner.polling_until = None;
        self.file_turn(&mut inner, d, read_at, polled);
        if polled {
            inner.m.slots.wake_due(read_at, &mut d.wake);
        }
        if d.wake.is_empty() && d.jobs.is_empty() {
            return inner;
        }
        drop(inner);
        unpark_all(&mut d.wake);
        self.run_writes(&mut d.jobs);
        lock(&self.inner)
    }

    /// Events of connections the read side does not follow yet: completes their connect and follows them.
    fn follow_new_connections(&self, inner: &mut Inner, d: &mut Driver, now: Instant) {
        let m = &mut inner.m;
        for &(node, generation, closed) in &d.fresh {
            let Some(conn) = m
                .conns
                .get_mut(node)
                .filter(|c| c.state.generation == generation)
            else {
                continue; // an event of a connection since replaced
            };
            if conn.state.is_connecting() {
                match conn.link.connect_outcome() {
                    Ok(None) => {}
                    Ok(Some(tls)) => m.connected(node, generation, tls, now),
                    Err(e) => m.connect_failed(node, generation, e, now, &mut d.wake),
                }
            }
            let conn = &m.conns[node];
            // Connected: read it from now on (a TLS connection's first read sends its ClientHello).
            if conn.state.generation == generation && conn.state.is_open() {
                d.reads[node].attach(generation, conn.link.handle());
                d.ready.push((node, closed));
            } else {
                d.reads[node].attach(generation, None);
            }
        }
    }

    /// Files what the turn read (the machine files replies, drops connections that failed or hung, places detached
    /// releases where there is room now), keeps the pushes, lets the read side forget connections that were
    /// dropped, and takes the writer role where bytes wait with no writer (a write the socket cut short, a
    /// connection that just came up, a batch clocked by replies).
    fn file_turn(&self, inner: &mut Inner, d: &mut Driver, now: Instant, polled: bool) {
        let Inner {
            m,
            pushes: inner_pushes,
            pushes_dropped: inner_dropped,
            push_waiter,
            ..
        } = inner;
        let pushes_before = (inner_pushes.len(), *inner_dropped);
        // Replies are dated when decoded, after the server sent them (a set-up reply such as INFO's uptime needs
        // its date to be late, never early).
        let decoded_at = Instant::now();
        for &(node, generation) in &d.progressed {
            m.progress(node, generation, now);
        }
        for (node, generation, item) in d.items.drain(..) {
            match item {
                Item::Push(value) => {
                    if self.opts.pushes
                        && m.conns
                            .get(node)
                            .is_some_and(|c| c.state.generation == generation)
                    {
                        if inner_pushes.len() < MAX_PUSHES {
                            inner_pushes.push_back((node, value));
                        } else {
                            *inner_dropped = true;
                        }
                    }
                }
                item => m.read((node, generation), item, decoded_at, &mut d.wake),
            }
        }
        if (inner_pushes.len(), *inner_dropped) != pushes_before {
            d.wake.extend(push_waiter.take().map(Wake::Thread));
        }
        m.after_read(now, polled, &mut d.wake);
        for (conn, read) in m.conns.iter().zip(&mut d.reads) {
            if read.generation != conn.state.generation {
                read.attach(conn.state.generation, None);
            }
        }
        let mut writes = Vec::new();
        m.take_writes(&mut writes);
        d.jobs.extend(writes.into_iter().map(WriteJob::new));
    }
}

impl Driver {
    /// The driver of a fanout of `nodes` nodes polled by `poll`, with a read side per node.
    pub(super) fn new(
        poll: Poll,
        nodes: usize,
        opts: &Options,
        stats: &[Arc<NodeStats>],
    ) -> Driver {
        Driver {
            poll,
            events: Events::with_capacity(256.max(nodes + 1)),
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            reads: stats
                .iter()
                .map(|s| ReadSide::new(opts, Arc::clone(s)))
                .collect(),
            ready: Vec::new(),
            fresh: Vec::new(),
            items: Vec::new(),
            progressed: Vec::new(),
            wake: Vec::new(),
            jobs: Vec::new(),
        }
    }

    /// Polls for up to `timeout`, busy-polling (without blocking) for up to `spin` first. False if the poll failed
    /// (interrupted): the turn then reads nothing.
    fn poll(&mut self, timeout: Duration, spin: Duration) -> bool {
        let spin = spin.min(timeout);
        if !spin.is_zero() {
            let start = Instant::now();
            loop {
                if self
                    .poll
                    .poll(&mut self.events, Some(Duration::ZERO))
                    .is_err()
                {
                    return false;
                }
                if !self.events.is_empty() {
                    return true;
                }
                if start.elapsed() >= spin {
                    break;
                }
                std::hint::spin_loop();
            }
            let left = timeout.saturating_sub(start.elapsed());
            return self.poll.poll(&mut self.events, Some(left)).is_ok();
        }
        self.poll.poll(&mut self.events, Some(timeout)).is_ok()
    }

    /// Sorts the poll's events into connections to read now and events of connections not followed yet; adds the
    /// connections with bytes left from their read budget.
    fn sort_events(&mut self, polled: bool) {
        self.ready.clear();
        self.fresh.clear();
        for event in self.events.iter().filter(|_| polled) {
            if event.token() == WAKER {
                continue;
            }
            let node = event.token().0 & NODE_MASK;
            let generation = (event.token().0 >> NODE_BITS) as u32;
            let closed = event.is_read_closed() || event.is_error();
            match self.reads.get(node) {
                Some(r) if r.reads(generation) => self.ready.push((node, closed)),
                Some(_) => self.fresh.push((node, generation, closed)),
                None => {}
            }
        }
        for (node, r) in self.reads.iter().enumerate() {
            if r.backlog && !self.ready.iter().any(|&(n, _)| n == node) {
                self.ready.push((node, false));
            }
        }
    }

    /// Reads and decodes every ready connection (without the fanout's lock).
    fn read_ready(&mut self, opts: &Options) {
        self.items.clear();
        self.progressed.clear();
        let mut decoded = Vec::new();
        for &(node, closed) in &self.ready {
            let r = &mut self.reads[node];
            let generation = r.generation;
            if r.read(closed, &mut self.scratch, opts, &mut decoded) > 0 {
                self.progressed.push((node, generation));
            }
            self.items
                .extend(decoded.drain(..).map(|item| (node, generation, item)));
        }
    }
}
