//! The `tracing` and `metrics` features against real redis-servers: one span per lock operation with
//! its outcome, an event per node outcome named as OpenTelemetry's Redis conventions name them, counters and
//! histograms through the `metrics` facade — and no resource name anywhere.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};
use muxlock::Error;
use support::{Cluster, locks};

/// What the formatter writes, kept.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The trace of every test of this file: one global subscriber (a thread-local one would race with tests that run
/// without it: `tracing` caches each call site's interest process-wide), every level, spans printed when they
/// close (with the fields recorded at the end: outcome, elapsed, validity).
fn trace() -> Captured {
    static OUT: OnceLock<Captured> = OnceLock::new();
    OUT.get_or_init(|| {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        out
    })
    .clone()
}

fn counter(
    snapshot: &[(
        CompositeKey,
        Option<metrics::Unit>,
        Option<metrics::SharedString>,
        DebugValue,
    )],
    name: &str,
    labels: &[(&str, &str)],
) -> u64 {
    snapshot
        .iter()
        .filter(|(k, ..)| k.kind() == MetricKind::Counter && k.key().name() == name)
        .filter(|(k, ..)| {
            labels.iter().all(|(l, v)| {
                k.key()
                    .labels()
                    .any(|label| label.key() == *l && label.value() == *v)
            })
        })
        .map(|(.., v)| match v {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

#[test]
fn spans_events_and_metrics_of_lock_operations() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(
        cluster.urls(),
        locks::one_attempt(Duration::from_millis(500)),
    );
    let out = trace();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    {
        metrics::with_local_recorder(&recorder, || {
            let mut lock = locks
                .request("secret:invoice-42")
                .ttl(Duration::from_secs(5))
                .acquire()
                .expect("granted");
            locks
                .extend(&mut lock, Duration::from_secs(5))
                .expect("extended");
            let refused = locks.request("secret:invoice-42").once().acquire();
            assert!(matches!(refused, Err(Error::Held(_))), "{refused:?}");
            locks.unlock(lock).expect("released");
            let set = locks
                .request_all(["secret:a", "secret:b"])
                .once()
                .acquire()
                .expect("set");
            locks.unlock(set).expect("released");
        })
    }
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    println!("{text}");
    // One span per operation, with its fields; node events inside, named after OTel's Redis conventions.
    for needle in [
        "muxlock.lock{",
        "db.system.name=\"redis\"",
        "muxlock.operation=\"acquire\"",
        "muxlock.operation=\"extend\"",
        "muxlock.operation=\"release\"",
        "muxlock.kind=\"plain\"",
        "muxlock.kind=\"set\"",
        "muxlock.nodes=3",
        "muxlock.quorum=2",
        "node outcome",
        "server.address=127.0.0.1",
        "muxlock.vote=\"granted\"",
        "muxlock.vote=\"taken\"",
        "muxlock.outcome=\"ok\"",
        "muxlock.outcome=\"held\"",
        "muxlock.validity_ms=",
        "muxlock.elapsed_us=",
    ] {
        assert!(text.contains(needle), "no {needle:?} in the trace");
    }
    assert!(
        !text.contains("secret"),
        "a resource name leaked into the trace"
    );
    let snapshot = snapshotter.snapshot().into_vec();
    let ops = |operation, kind, outcome| {
        counter(
            &snapshot,
            "muxlock_operations_total",
            &[
                ("operation", operation),
                ("kind", kind),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(ops("acquire", "plain", "ok"), 1);
    assert_eq!(ops("acquire", "plain", "held"), 1);
    assert_eq!(ops("extend", "plain", "ok"), 1);
    assert_eq!(ops("release", "plain", "ok"), 1);
    assert_eq!(ops("acquire", "set", "ok"), 1);
    assert_eq!(ops("release", "set", "ok"), 1);
    let histograms: Vec<&str> = snapshot
        .iter()
        .filter(|(k, ..)| k.kind() == MetricKind::Histogram)
        .map(|(k, ..)| k.key().name())
        .collect();
    assert!(
        histograms.contains(&"muxlock_operation_seconds"),
        "{histograms:?}"
    );
    assert!(
        histograms.contains(&"muxlock_validity_seconds"),
        "{histograms:?}"
    );
    for (k, ..) in &snapshot {
        assert!(
            k.key().labels().all(|l| !l.value().contains("secret")),
            "a resource name leaked into a metric label: {k:?}"
        );
    }
}

/// A node that refuses connections: its failures are counted per node, labelled by its address.
#[test]
fn node_errors_are_counted_per_node() {
    trace();
    let cluster = Cluster::start(2);
    let mut urls = cluster.urls();
    urls.push("127.0.0.1:1".to_owned()); // nothing listens there
    let locks = locks::manager(urls, locks::one_attempt(Duration::from_millis(300)));
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let lock = locks.request("job").acquire().expect("2 of 3");
        locks.unlock(lock).expect("released");
    });
    let snapshot = snapshotter.snapshot().into_vec();
    assert!(
        counter(
            &snapshot,
            "muxlock_node_errors_total",
            &[("server", "127.0.0.1:1")]
        ) >= 1,
        "{snapshot:?}"
    );
}

/// A waiting request on nodes younger than the restart window (fresh servers that do not persist every write)
/// says it waits for them: an event naming each node and the time until its grants count, once per wait. A wait
/// that ends first says the same in its error's report; a longer one gets the lock once they count.
#[test]
fn a_wait_held_back_by_young_nodes_says_for_whom_and_how_long() {
    let out = trace();
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(2);
    let config = muxlock::Config::default()
        .with_round_timeout(Duration::from_millis(500))
        .with_restart_window(ttl);
    assert!(config.restart_guard(), "on by default");
    let locks = locks::manager(cluster.urls(), config);
    let e = locks
        .request("secret:young")
        .ttl(ttl)
        .wait(Duration::from_millis(600))
        .acquire()
        .expect_err("no node counts yet");
    assert!(e.is_quorum(), "{e}");
    let report = e.report().expect("a report");
    let left = report
        .restart_wait()
        .expect("the wait for young nodes is in the report");
    assert!(left > Duration::ZERO && left <= ttl, "{left:?}");
    assert!(report.not_counted().count() >= 2, "{e}");
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let events: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("waiting for young nodes"))
        .collect();
    // Once for the first young nodes, then again only when a node joins them (an attempt whose replies from
    // one node came too late names the others only): never twice for the same nodes.
    assert!(!events.is_empty(), "no event for the wait");
    let named =
        |addr: &str, events: &[&str]| events.iter().any(|e| e.contains(&format!("{addr} up ")));
    for (i, event) in events.iter().enumerate() {
        for needle in [
            "INFO",
            "muxlock.wait=\"young nodes\"",
            "muxlock.counted_in_ms=",
            "counted in ",
        ] {
            assert!(event.contains(needle), "no {needle:?} in {event}");
        }
        assert!(!event.contains("secret"), "a resource name leaked: {event}");
        let new = cluster
            .urls()
            .iter()
            .map(|url| url.trim_start_matches("redis://").to_owned())
            .any(|addr| named(&addr, &events[i..=i]) && !named(&addr, &events[..i]));
        assert!(new, "an event names no node new to the wait: {events:#?}");
    }
    for (addr, ..) in report.not_counted() {
        assert!(
            named(&addr.to_string(), &events),
            "{addr} not named: {events:#?}"
        );
    }
    // Waiting long enough, the nodes count and the lock is granted.
    let start = std::time::Instant::now();
    let lock = locks
        .request("secret:young")
        .ttl(ttl)
        .wait(Duration::from_secs(10))
        .acquire()
        .expect("granted once the nodes count");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    locks.unlock(lock).expect("released");
}
