//! The first lock, awaited: any executor works (this one is tokio's), the library has no runtime of its own.
//!
//! MUXLOCK_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 \
//!     cargo run --example first_lock_async
//!
//! Dependencies: `muxlock`, `tokio` (features `rt`, `time`), `futures-util`.

use std::pin::pin;
use std::time::Duration;

use futures_util::future::{Either, select};
use muxlock::{Error, LockManager};

fn main() -> Result<(), Error> {
    let nodes = std::env::var("MUXLOCK_NODES").expect("set MUXLOCK_NODES=redis://host:port,...");
    let locks = LockManager::new(nodes.split(','))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(job(locks))
}

async fn job(locks: LockManager) -> Result<(), Error> {
    let guard = locks
        .request("nightly-report")
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(60))
        .hold_async()
        .await?;
    // The work races the guard's loss, which completes with why, before the lease can have ended.
    match select(pin!(do_the_work()), pin!(guard.until_lost())).await {
        Either::Left((steps, _)) => println!("done: {steps} steps under the lock"),
        Either::Right((why, _)) => {
            eprintln!("lock lost: {why}"); // the work was dropped mid-way: stop touching the resource
            return Ok(());
        }
    }
    guard.release_async().await?; // dropping the guard releases it too
    Ok(())
}

async fn do_the_work() -> u32 {
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    20
}
