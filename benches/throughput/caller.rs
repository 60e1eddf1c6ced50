//! One caller of `benches/throughput.rs`: a loop of acquire+release cycles on its own resource names until the
//! case's window ends, and what it records ([`Tally`]). One function per client, so that each calls its client as
//! that client's users would: muxlock from an OS thread, the peers from a tokio task with a timeout per call.

use std::io::Write as _;
use std::time::Instant;

use hdrhistogram::Histogram;
use muxlock::LockManager;
use tokio::time::timeout;

use super::{CALL_TIMEOUT, Client, TTL};
use crate::peers::Locker;
use crate::peers::quorum::RedisQuorum;

/// The measured window of a case.
#[derive(Clone, Copy)]
pub struct Window {
    pub start: Instant,
    pub end: Instant,
}

#[derive(Clone, Copy)]
pub enum Step {
    Acquire,
    Release,
}

/// What callers did: cycles in the window and their latencies, failed calls over the whole case.
pub struct Tally {
    pub cycles: u64,
    pub latency: Histogram<u64>,
    /// Indexed by [`Step`].
    pub failures: [u64; 2],
    pub first_error: [Option<String>; 2],
}

impl Tally {
    pub fn new() -> Tally {
        Tally {
            cycles: 0,
            // 1 µs to 60 s at 2 significant figures (1 %): 17 KB a caller. At 3 figures from 1 ns a histogram
            // took 220 KB, and 10,000 callers zeroed 2.2 GB as a case started.
            latency: Histogram::new_with_bounds(1_000, 60_000_000_000, 2).expect("valid bounds"),
            failures: [0; 2],
            first_error: [None, None],
        }
    }

    /// A cycle that started at `t0` and ended now.
    fn done(&mut self, t0: Instant, window: Window) {
        let t1 = Instant::now();
        if t1 >= window.start && t1 < window.end {
            self.cycles += 1;
            let ns = u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX);
            self.latency.saturating_record(ns.max(1));
        }
    }

    fn failed(&mut self, step: Step, error: impl ToString) {
        self.failures[step as usize] += 1;
        self.first_error[step as usize].get_or_insert_with(|| error.to_string());
    }

    pub fn merge(&mut self, other: Tally) {
        self.cycles += other.cycles;
        self.latency
            .add(&other.latency)
            .expect("histograms of the same bounds");
        for step in 0..2 {
            self.failures[step] += other.failures[step];
            if self.first_error[step].is_none() {
                self.first_error[step] = other.first_error[step].clone();
            }
        }
    }
}

/// One caller's resource names: a fixed prefix, then a counter.
pub struct Names {
    buf: Vec<u8>,
    prefix: usize,
    next: u64,
}

impl Names {
    pub fn new(client: Client, case: &str, k: usize) -> Names {
        let buf = format!("tp:{}:{case}:{k}:", client.tag()).into_bytes();
        Names {
            prefix: buf.len(),
            buf,
            next: 0,
        }
    }

    fn next(&mut self) -> &[u8] {
        self.buf.truncate(self.prefix);
        write!(self.buf, "{}", self.next).expect("writing to a Vec");
        self.next += 1;
        &self.buf
    }
}

pub fn muxlock_caller(manager: &LockManager, mut names: Names, window: Window) -> Tally {
    let mut tally = Tally::new();
    let quorum = manager.quorum();
    loop {
        let t0 = Instant::now();
        if t0 >= window.end {
            return tally;
        }
        match manager.request(names.next()).ttl(TTL).acquire() {
            Err(e) => tally.failed(Step::Acquire, e),
            Ok(lock) => match manager.unlock(lock) {
                Ok(n) if n >= quorum => tally.done(t0, window),
                Ok(n) => tally.failed(Step::Release, format!("released on {n} nodes only")),
                Err(e) => tally.failed(Step::Release, e),
            },
        }
    }
}

/// muxlock's async API from a task: one attempt per acquisition (the manager's retry count is 0), each call under
/// the same 2 s timeout as the peers' (dropping the future part-way is cancel-safe).
pub async fn async_caller(
    manager: std::sync::Arc<LockManager>,
    mut names: Names,
    window: Window,
) -> Tally {
    let mut tally = Tally::new();
    let quorum = manager.quorum();
    loop {
        let t0 = Instant::now();
        if t0 >= window.end {
            return tally;
        }
        let request = manager.request(names.next()).ttl(TTL).once();
        match timeout(CALL_TIMEOUT, request.acquire_async()).await {
            Err(_) => tally.failed(Step::Acquire, "muxlock/async: acquire timed out after 2 s"),
            Ok(Err(e)) => tally.failed(Step::Acquire, e),
            Ok(Ok(lock)) => match timeout(CALL_TIMEOUT, manager.unlock_async(lock)).await {
                Err(_) => tally.failed(Step::Release, "muxlock/async: release timed out after 2 s"),
                Ok(Ok(n)) if n >= quorum => tally.done(t0, window),
                Ok(Ok(n)) => tally.failed(Step::Release, format!("released on {n} nodes only")),
                Ok(Err(e)) => tally.failed(Step::Release, e),
            },
        }
    }
}

pub async fn rslock_caller(
    manager: rslock::LockManager,
    mut names: Names,
    window: Window,
) -> Tally {
    let mut tally = Tally::new();
    loop {
        let t0 = Instant::now();
        if t0 >= window.end {
            return tally;
        }
        match timeout(CALL_TIMEOUT, manager.lock(names.next(), TTL)).await {
            Err(_) => tally.failed(Step::Acquire, "rslock: lock timed out after 2 s"),
            Ok(Err(e)) => tally.failed(Step::Acquire, format!("rslock: {e}")),
            // rslock's release is best effort and says nothing: only a timeout is a failure.
            Ok(Ok(lock)) => match timeout(CALL_TIMEOUT, manager.unlock(&lock)).await {
                Err(_) => tally.failed(Step::Release, "rslock: unlock timed out after 2 s"),
                Ok(()) => tally.done(t0, window),
            },
        }
    }
}

pub async fn quorum_caller(mut client: RedisQuorum, mut names: Names, window: Window) -> Tally {
    let mut tally = Tally::new();
    loop {
        let t0 = Instant::now();
        if t0 >= window.end {
            return tally;
        }
        let name = names.next();
        match timeout(CALL_TIMEOUT, client.acquire(name)).await {
            Err(_) => tally.failed(
                Step::Acquire,
                "redis-rs/quorum: acquire timed out after 2 s",
            ),
            Ok(Err(e)) => tally.failed(Step::Acquire, e),
            Ok(Ok(value)) => match timeout(CALL_TIMEOUT, client.release(name, &value)).await {
                Err(_) => tally.failed(
                    Step::Release,
                    "redis-rs/quorum: release timed out after 2 s",
                ),
                Ok(Err(e)) => tally.failed(Step::Release, e),
                Ok(Ok(())) => tally.done(t0, window),
            },
        }
    }
}

/// A caller with a [`Locker`] of its own, from an OS thread (the `redlock` crate, redis-rs/single).
pub fn locker_caller(locker: &mut dyn Locker, mut names: Names, window: Window) -> Tally {
    let mut tally = Tally::new();
    loop {
        let t0 = Instant::now();
        if t0 >= window.end {
            return tally;
        }
        match locker.acquire(names.next()) {
            Err(e) => tally.failed(Step::Acquire, e),
            Ok(()) => match locker.release() {
                Ok(()) => tally.done(t0, window),
                Err(e) => tally.failed(Step::Release, e),
            },
        }
    }
}

/// The floor (see [`Client::Floor`]): `SET name value NX PX ttl` to every node, then `DEL name`, each round decided
/// when a majority answered as wanted, on a fanout shared by every caller.
pub fn floor_caller(fanout: &muxlock::net::Fanout, mut names: Names, window: Window) -> Tally {
    use muxlock::resp::{Value, encode_command};
    let mut tally = Tally::new();
    let quorum = fanout.len() / 2 + 1;
    let ttl = TTL.as_millis().to_string();
    let mut request = bytes::BytesMut::new();
    // Each round: the request to all, then wait until `quorum` replies satisfy `ok` (or the round ends).
    let round = |request: &[u8], ok: fn(&Value) -> bool| {
        let mut round = fanout.round(Instant::now() + CALL_TIMEOUT);
        round.send_all(request, 1);
        round.need(quorum);
        let mut good = 0;
        while let Some((_, reply)) = round.next() {
            good += usize::from(reply.as_ref().is_ok_and(ok));
            if good >= quorum {
                return true;
            }
        }
        false
    };
    loop {
        let t0 = Instant::now();
        if t0 >= window.end {
            return tally;
        }
        let name = names.next().to_vec();
        request.clear();
        encode_command(
            &[b"SET", &name, b"v", b"NX", b"PX", ttl.as_bytes()],
            &mut request,
        );
        if !round(
            &request,
            |v| matches!(v, Value::SimpleString(s) if &s[..] == b"OK"),
        ) {
            tally.failed(Step::Acquire, "floor: SET NX PX: no majority");
            continue;
        }
        request.clear();
        encode_command(&[b"DEL", &name], &mut request);
        if round(&request, |v| matches!(v, Value::Integer(1))) {
            tally.done(t0, window);
        } else {
            tally.failed(Step::Release, "floor: DEL: no majority");
        }
    }
}
