//! The probe of `scripts/latency-ab` (not a cargo bench target: the script builds it as its own package): lone-caller acquire and release latency on the nodes in `NODES` (comma
//! separated URLs; the first `N`, default 5), `CALLS` calls (default 2000) after 200 warm-up calls. Prints the
//! acquire and release p50 in nanoseconds. It uses only the API that every revision since the request API has,
//! so that the script can build it against an older one.

use std::time::{Duration, Instant};

use muxlock::redlock::LockManager;

fn main() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let urls: Vec<String> = var("NODES").split(',').map(str::to_owned).collect();
    let n: usize = var("N").parse().unwrap_or(5).min(urls.len());
    let calls: usize = var("CALLS").parse().unwrap_or(2000).max(1);
    let tag = var("TAG");
    // The defaults (the restart guard on, a 50 ms round timeout): `Config` is built differently across revisions.
    // With a 1 s lease the guard trusts freshly started nodes a second or two after they started.
    let locks = LockManager::new(urls[..n].to_vec()).expect("valid nodes");
    let ttl = Duration::from_secs(1);
    let until = Instant::now() + Duration::from_secs(15);
    let mut warm = 0;
    while warm < 200 {
        match locks
            .request(format!("ab:{tag}:w{warm}"))
            .ttl(ttl)
            .once()
            .acquire()
        {
            Ok(lock) => {
                let _ = locks.unlock(lock);
                warm += 1;
            }
            _ => assert!(Instant::now() < until, "the nodes never became usable"),
        }
    }
    let (mut acquire, mut release) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    let mut failed = 0;
    for i in 0..calls {
        let t0 = Instant::now();
        // One attempt: a call that fails (a frozen thread past the 50 ms round) is counted, not timed.
        let Ok(lock) = locks
            .request(format!("ab:{tag}:{i}"))
            .ttl(ttl)
            .once()
            .acquire()
        else {
            failed += 1;
            continue;
        };
        let t1 = Instant::now();
        if locks.unlock(lock).is_err() {
            failed += 1;
            continue;
        }
        acquire.push((t1 - t0).as_nanos());
        release.push(t1.elapsed().as_nanos());
    }
    assert!(!acquire.is_empty(), "every call failed");
    acquire.sort_unstable();
    release.sort_unstable();
    println!("{} {} {failed}", acquire[acquire.len() / 2], release[release.len() / 2]);
}
