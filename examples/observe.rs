//! Prints what muxlock's `tracing` and `metrics` features emit for a few lock operations.
//!
//! ```sh
//! muxlock cluster up            # or any Redis nodes; pass their URLs as arguments
//! cargo run --example observe --features tracing,metrics -- 127.0.0.1:7001 127.0.0.1:7002 127.0.0.1:7003
//! ```
//!
//! Spans and node events go to stderr (`tracing-subscriber`'s formatter, every level); the metrics are read back
//! from an in-memory recorder (`metrics-util`'s debugging recorder) and printed at the end. In a service, install
//! your own subscriber (e.g. `tracing-opentelemetry`) and exporter instead.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use muxlock::{Config, LockManager};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes: Vec<String> = std::env::args().skip(1).collect();
    if nodes.is_empty() {
        eprintln!(
            "usage: observe NODE_URL...   (e.g. 127.0.0.1:7001 127.0.0.1:7002 127.0.0.1:7003)"
        );
        std::process::exit(64);
    }
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(std::io::stderr)
        .init();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install()?;

    let locks = LockManager::builder()
        .nodes(nodes)
        // A demo on nodes just started: the restart guard would not count them for a lease (see the README's
        // first-run note). Keep it on in a service.
        .config(
            Config::default()
                .with_retry_count(0)
                .with_restart_guard(false),
        )
        .build()?;
    let mut lock = locks
        .request("observe:demo")
        .ttl(Duration::from_secs(5))
        .acquire()?;
    locks.extend(&mut lock, Duration::from_secs(5))?;
    // A second holder is refused: an operation with outcome "held".
    let refused = locks.request("observe:demo").once().acquire();
    println!(
        "second request: {}",
        refused
            .map(|_| "granted".to_owned())
            .unwrap_or_else(|e| e.to_string())
    );
    locks.unlock(lock)?;
    let guard = locks
        .request("observe:guarded")
        .ttl(Duration::from_secs(1))
        .hold()?;
    std::thread::sleep(Duration::from_millis(800)); // a renewal or two
    guard.release()?;

    println!("metrics:");
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let shown = match value {
            DebugValue::Counter(n) => format!("{n}"),
            DebugValue::Gauge(g) => format!("{}", g.into_inner()),
            DebugValue::Histogram(h) => format!("{} samples", h.len()),
        };
        println!(
            "  {} {:?} = {shown}",
            key.key().name(),
            key.key().labels().collect::<Vec<_>>()
        );
    }
    Ok(())
}
