//! Threads left by managers that served tasks: after 20 managers each used by tasks (guards, waiting, the
//! tracker) are dropped, the process has no more threads than before but the process-wide ones. It runs alone
//! ([`crate::alone`]): it counts the process' threads, which other tests running beside it would change.

use crate::support;

use std::time::{Duration, Instant};

use support::rt::{config, current_thread};
use support::{Cluster, locks};

/// Many managers, each used by a task (background driver, timer, watchdog started), then dropped: their threads
/// end (no thread leak per manager).
#[test]
fn dropped_managers_leave_no_threads() {
    let _alone = crate::alone();
    let cluster = Cluster::start(3);
    let threads = || {
        std::fs::read_dir("/proc/self/task")
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let rt = current_thread();
    // Warm-up (timer thread, runtime).
    rt.block_on(async {
        let locks = locks::manager(cluster.urls(), config());
        let g = locks.request("w").hold_async().await.expect("guard");
        g.release_async().await.expect("release");
    });
    std::thread::sleep(Duration::from_millis(200));
    let before = threads();
    for i in 0..20 {
        rt.block_on(async {
            let locks = locks::manager(cluster.urls(), config());
            let g = locks
                .request(format!("t{i}"))
                .hold_async()
                .await
                .expect("guard");
            let held = locks.request(format!("t{i}")).acquire_async().await;
            assert!(held.is_err());
            // A waiter too (probe: tracker and its driver).
            let _ = locks
                .request(format!("t{i}"))
                .wait(Duration::from_millis(50))
                .acquire_async()
                .await;
            g.release_async().await.expect("release");
        });
    }
    let until = Instant::now() + Duration::from_secs(5);
    while threads() > before + 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        threads() <= before + 2,
        "threads: {before} before, {} after 20 managers",
        threads()
    );
}
