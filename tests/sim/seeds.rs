//! Seeds run side by side: a seed's run shares nothing with another's (its world, clients and nodes live on the
//! thread that runs it, and every choice comes from its own streams), so worker threads, one per CPU, take the
//! seeds in turn, and [`in_order`] hands their results back in seed order, as a loop over the seeds would: the
//! first violation reported is the same seed's, and a panic in a seed's run surfaces when its turn comes.
//!
//! `MUXLOCK_SIM_THREADS=N` sets the number of workers (1: one seed after the other, on one worker).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::thread::{self, JoinHandle};

/// How many workers run seeds: `MUXLOCK_SIM_THREADS`, else one per CPU.
pub fn threads() -> usize {
    std::env::var("MUXLOCK_SIM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

/// The results of [`in_order`], seed by seed.
#[derive(Debug)]
pub struct InOrder<R> {
    seeds: Arc<[u64]>,
    next: usize,
    /// Results that came before their turn, by index.
    early: BTreeMap<usize, thread::Result<R>>,
    results: Receiver<(usize, thread::Result<R>)>,
    /// Set when the results are no longer wanted: the workers take no more seeds.
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

/// Runs `run(seed)` for each of `seeds` on [`threads`] workers; yields `(seed, result)` in the order of `seeds`.
/// Dropping the iterator stops the workers once their current seeds are done.
pub fn in_order<R, F>(seeds: impl IntoIterator<Item = u64>, run: F) -> InOrder<R>
where
    R: Send + 'static,
    F: Fn(u64) -> R + Send + Sync + 'static,
{
    let seeds: Arc<[u64]> = seeds.into_iter().collect();
    let (tx, results) = channel();
    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicUsize::new(0));
    let run = Arc::new(run);
    let workers = (0..threads().min(seeds.len()))
        .map(|_| {
            let (seeds, tx, stop, taken, run) = (
                Arc::clone(&seeds),
                tx.clone(),
                Arc::clone(&stop),
                Arc::clone(&taken),
                Arc::clone(&run),
            );
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let i = taken.fetch_add(1, Ordering::Relaxed);
                    let Some(&seed) = seeds.get(i) else { break };
                    let result =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(seed)));
                    if tx.send((i, result)).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    InOrder {
        seeds,
        next: 0,
        early: BTreeMap::new(),
        results,
        stop,
        workers,
    }
}

impl<R> Iterator for InOrder<R> {
    type Item = (u64, R);

    fn next(&mut self) -> Option<(u64, R)> {
        let seed = *self.seeds.get(self.next)?;
        let result = loop {
            if let Some(r) = self.early.remove(&self.next) {
                break r;
            }
            let (i, r) = self
                .results
                .recv()
                .expect("a worker sends every seed's result");
            self.early.insert(i, r);
        };
        self.next += 1;
        match result {
            Ok(r) => Some((seed, r)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl<R> Drop for InOrder<R> {
    fn drop(&mut self) {
        // Each worker ends after its current seed (its result, if any, is dropped with the channel).
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}
