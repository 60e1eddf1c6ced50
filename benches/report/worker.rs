//! A client in a thread of its own ([`Worker`]), told what to do batch by batch, so that a client that blocks
//! (a peer with no read timeout in front of a hung node) is *seen* as blocked after a bounded wait and the report
//! still ends; and what its calls gave ([`CallStats`]).

use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::peers::Locker;

/// What a worker is asked to do.
pub enum Job {
    /// Acquire+release cycles on fresh names `{prefix}{first + i}`, `count` of them or until `budget` has passed.
    Cycles {
        prefix: String,
        first: u64,
        count: u64,
        budget: Duration,
    },
    /// Until `until`: wait for `resource` (at most `max_wait`), hold it `hold`, release it. Counts acquisitions.
    Fair {
        resource: Vec<u8>,
        until: Instant,
        hold: Duration,
        max_wait: Duration,
    },
    /// Wait for `resource` (at most `max_wait`), say when it was acquired, then release it.
    Wait {
        resource: Vec<u8>,
        max_wait: Duration,
    },
}

/// One timed call: acquire, release (zero if the acquire failed), and the error, if any.
pub struct Call {
    pub acquire: Duration,
    pub release: Duration,
    pub error: Option<String>,
}

/// What a worker did.
pub enum Done {
    Cycles(Vec<Call>),
    Fair {
        acquired: u64,
        failed: u64,
        first_error: Option<String>,
    },
    Got(Result<Instant, String>),
}

/// A client in its own thread.
pub struct Worker {
    pub name: String,
    jobs: Sender<Job>,
    done: Receiver<Done>,
    /// Set once a job did not come back in time: the worker is asked nothing more.
    pub blocked: bool,
    next: u64,
}

impl Worker {
    pub fn start(name: impl Into<String>, mut locker: Box<dyn Locker>) -> Worker {
        let name = name.into();
        let (jobs, rx) = channel::<Job>();
        let (tx, done) = channel();
        thread::Builder::new()
            .name(format!("w-{name}"))
            .spawn(move || {
                for job in rx {
                    let result = run(locker.as_mut(), job);
                    if tx.send(result).is_err() {
                        return;
                    }
                }
            })
            .expect("a worker thread");
        Worker {
            name,
            jobs,
            done,
            blocked: false,
            next: 0,
        }
    }

    /// Asks for `job` and waits up to `limit` for it: `None` (and the worker marked blocked) if it did not end.
    pub fn ask(&mut self, job: Job, limit: Duration) -> Option<Done> {
        if self.blocked {
            return None;
        }
        if self.jobs.send(job).is_err() {
            self.blocked = true;
            return None;
        }
        let done = self.done.recv_timeout(limit).ok();
        self.blocked = done.is_none();
        done
    }

    /// Starts `job` without waiting; [`Worker::collect`] waits for it.
    pub fn post(&mut self, job: Job) {
        if self.blocked || self.jobs.send(job).is_err() {
            self.blocked = true;
        }
    }

    /// Waits until `deadline` for the job posted last.
    pub fn collect(&mut self, deadline: Instant) -> Option<Done> {
        if self.blocked {
            return None;
        }
        let done = self
            .done
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .ok();
        self.blocked = done.is_none();
        done
    }

    /// Up to `count` cycles on fresh names, within `budget`, recorded in `stats`; `grace`: how long past the
    /// budget a call may take before the worker counts as blocked.
    pub fn cycles(&mut self, stats: &mut CallStats, count: u64, budget: Duration, grace: Duration) {
        let prefix = format!("report:{}:", self.name);
        let job = Job::Cycles {
            prefix,
            first: self.next,
            count,
            budget,
        };
        match self.ask(job, budget + grace) {
            Some(Done::Cycles(calls)) => {
                self.next += calls.len() as u64;
                for call in calls {
                    stats.record(call);
                }
            }
            _ => stats.blocked = true,
        }
    }
}

fn run(locker: &mut dyn Locker, job: Job) -> Done {
    match job {
        Job::Cycles {
            prefix,
            first,
            count,
            budget,
        } => {
            let start = Instant::now();
            let mut calls = Vec::with_capacity(count as usize);
            for i in 0..count {
                if start.elapsed() >= budget && i > 0 {
                    break;
                }
                let name = format!("{prefix}{}", first + i);
                let t0 = Instant::now();
                let acquired = locker.acquire(name.as_bytes());
                let t1 = Instant::now();
                let released = acquired.is_ok().then(|| locker.release());
                let t2 = Instant::now();
                let error = match (acquired, released) {
                    (Err(e), _) | (_, Some(Err(e))) => Some(e),
                    _ => None,
                };
                calls.push(Call {
                    acquire: t1 - t0,
                    release: t2 - t1,
                    error,
                });
            }
            Done::Cycles(calls)
        }
        Job::Fair {
            resource,
            until,
            hold,
            max_wait,
        } => {
            let (mut acquired, mut failed, mut first_error) = (0, 0, None);
            while Instant::now() < until {
                match locker.acquire_wait(&resource, max_wait) {
                    Ok(()) => {
                        acquired += 1;
                        thread::sleep(hold);
                        if let Err(e) = locker.release() {
                            failed += 1;
                            first_error.get_or_insert(e);
                        }
                    }
                    Err(e) => {
                        failed += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            Done::Fair {
                acquired,
                failed,
                first_error,
            }
        }
        Job::Wait { resource, max_wait } => {
            let got = locker.acquire_wait(&resource, max_wait).map(|()| {
                let at = Instant::now();
                let _ = locker.release();
                at
            });
            Done::Got(got)
        }
    }
}

/// Per-call latencies of the calls that succeeded (ns), and the failures.
pub struct CallStats {
    pub acquire: Histogram<u64>,
    pub release: Histogram<u64>,
    pub cycle: Histogram<u64>,
    pub ok: u64,
    pub failed: u64,
    pub first_error: Option<String>,
    pub blocked: bool,
}

impl CallStats {
    pub fn new() -> CallStats {
        let h = || Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("valid bounds");
        CallStats {
            acquire: h(),
            release: h(),
            cycle: h(),
            ok: 0,
            failed: 0,
            first_error: None,
            blocked: false,
        }
    }

    pub fn calls(&self) -> u64 {
        self.ok + self.failed
    }

    pub fn record(&mut self, call: Call) {
        if let Some(e) = call.error {
            self.failed += 1;
            self.first_error.get_or_insert(e);
            return;
        }
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.ok += 1;
        self.acquire.saturating_record(ns(call.acquire));
        self.release.saturating_record(ns(call.release));
        self.cycle
            .saturating_record(ns(call.acquire + call.release));
    }
}
