//! A first lock: a job that must run on one machine at a time, however long it takes.
//!
//! MUXLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 \
//!     cargo run --example first_lock

use std::time::Duration;

use muxlock::{Error, LockManager};

fn main() -> Result<(), Error> {
    // The nodes' URLs, comma-separated, as the `muxlock` command takes them.
    let nodes = std::env::var("MUXLOCK_NODES").expect("set MUXLOCK_NODES=redis://host:port,...");
    let locks = LockManager::new(nodes.split(','))?;

    // Wait up to a minute for the lock. The guard renews its 30 s lease in the background while the job runs.
    let guard = match locks
        .request("nightly-report")
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(60))
        .hold()
    {
        Ok(guard) => guard,
        Err(Error::Held(report)) => {
            eprintln!("another run had the lock for the whole minute: {report}");
            return Ok(());
        }
        Err(e) => return Err(e), // the message names each node and what happened to it
    };
    for step in 0..20 {
        // No I/O: true as soon as the holder can no longer rely on the lock, before its lease can have ended.
        if guard.is_lost() {
            eprintln!("lock lost at step {step}: {:?}", guard.lost());
            return Ok(()); // stop touching what the lock protects: someone else may hold it soon
        }
        do_step(step);
    }
    guard.release()?; // compare-and-delete on every node; dropping the guard releases it too

    // The same with a closure: it runs under a guard, and its result comes back unless the lock was lost.
    let rows = locks
        .request("compaction")
        .ttl(Duration::from_secs(10))
        .run(|guard| {
            let mut rows = 0;
            while !guard.is_lost() && rows < 1_000 {
                rows += 1; // one step of work
            }
            rows
        })?;
    println!("done: 20 steps of the report, {rows} rows compacted");
    Ok(())
}

fn do_step(_step: u32) {
    std::thread::sleep(Duration::from_millis(10));
}
