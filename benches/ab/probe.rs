//! The probe of `scripts/latency-ab` (not a cargo bench target: the script builds it as its own package): lone-caller acquire and release latency on the nodes in `NODES` (comma
//! separated URLs; the first `N`, default 5), `CALLS` calls (default 2000) after 200 warm-up calls. Prints the
//! acquire and release p50 in nanoseconds. It uses only the API that every revision has, so that the script can
//! build it against an older one.

use std::time::{Duration, Instant};

use muxlock::redlock::{Config, LockManager};

fn main() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let urls: Vec<String> = var("NODES").split(',').map(str::to_owned).collect();
    let n: usize = var("N").parse().unwrap_or(5).min(urls.len());
    let calls: usize = var("CALLS").parse().unwrap_or(2000).max(1);
    let tag = var("TAG");
    let config = Config {
        restart_guard: false,
        retry_count: 0,
        round_timeout: Duration::from_secs(1),
        ..Config::default()
    };
    let locks = LockManager::builder()
        .nodes(urls[..n].to_vec())
        .config(config)
        .build()
        .expect("a valid configuration");
    let ttl = Duration::from_secs(30);
    for i in 0..200 {
        let lock = locks.lock(format!("ab:{tag}:w{i}"), ttl).expect("warm-up");
        locks.unlock(lock).expect("warm-up release");
    }
    let (mut acquire, mut release) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for i in 0..calls {
        let t0 = Instant::now();
        let lock = locks.lock(format!("ab:{tag}:{i}"), ttl).expect("lock");
        let t1 = Instant::now();
        locks.unlock(lock).expect("unlock");
        acquire.push((t1 - t0).as_nanos());
        release.push(t1.elapsed().as_nanos());
    }
    acquire.sort_unstable();
    release.sort_unstable();
    println!("{} {}", acquire[calls / 2], release[calls / 2]);
}
