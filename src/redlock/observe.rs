//! Tracing and metrics, each behind an off-by-default cargo feature. Without the features every function here is
//! empty and inlined away: a build without them pays nothing.
//!
//! - **`tracing`**: one span per lock operation, `muxlock.lock` (kind `CLIENT` in OpenTelemetry's terms, via
//!   `otel.kind`), with `db.system.name = "redis"`, `muxlock.operation` (`acquire`, `extend`, `release`),
//!   `muxlock.kind` (`plain`, `set`, `fenced`, `owned`, `semaphore`, `read`, `write`), `muxlock.nodes`, `muxlock.quorum`, and when it ends
//!   `muxlock.outcome` (`ok`, `held`, `quorum`, `lost`, `expired`, `config`, `error`), `muxlock.elapsed_us`,
//!   `muxlock.validity_ms` (what is left of the lease; acquisitions and extensions) and `muxlock.granted` (the
//!   nodes that said yes, for a failure). Inside it, one event per node outcome: `server.address`,
//!   `server.port`, `db.system.name`, `muxlock.vote` (`granted`, `taken`, `failed`, `quarantined`) and, for an
//!   error reply, `db.response.status_code` (its prefix: `ERR`, `NOPERM`, `READONLY`, ...). A guard's renewal
//!   and loss are events too (`muxlock.guard`). A [waiting](super::Request::wait) request held back by the
//!   restart guard says so at `INFO`, once per wait and again when more nodes hold it back: `muxlock.wait =
//!   "young nodes"`, `muxlock.young` (each such node, how long it has been up and until its grants count) and
//!   `muxlock.counted_in_ms` (until the last of them counts). Resource names never appear: they may be user
//!   data; the span carries none.
//! - **`metrics`**, through the `metrics` facade (bring any recorder/exporter): counter
//!   `muxlock_operations_total{operation, kind, outcome}`, histograms `muxlock_operation_seconds{operation,
//!   kind}` and `muxlock_validity_seconds{kind}` (the lease left after an acquisition), counters
//!   `muxlock_renewals_total`, `muxlock_losses_total{cause}` (`taken`, `down`, `expired`) and
//!   `muxlock_node_errors_total{server}` (a node's failed or error replies, labelled by its `host:port`, never by
//!   resource).
//!
//! `examples/observe.rs` prints both (`cargo run --example observe --features tracing,metrics`).

use std::time::Duration;
#[cfg(any(feature = "tracing", feature = "metrics"))]
use std::time::Instant;

#[cfg(any(feature = "tracing", feature = "metrics"))]
use crate::redlock::error::Error;
use crate::redlock::error::{Outcome, Report, Result};
use crate::redlock::lost::Lost;

/// What a node's outcomes are labelled with.
#[derive(Debug, Default, Clone)]
pub(crate) struct Server {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    host: String,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    port: u16,
}

impl Server {
    /// The label of the node at `addr`.
    #[allow(unused_variables)]
    pub(crate) fn of(addr: &crate::net::NodeAddr) -> Server {
        Server {
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            host: addr.host().to_owned(),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            port: addr.port(),
        }
    }
}

/// One lock operation being observed: its span, and when it started.
#[derive(Debug)]
#[must_use]
pub(crate) struct Op {
    #[cfg(feature = "tracing")]
    span: tracing::Span,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    start: Instant,
    #[cfg(feature = "metrics")]
    labels: (&'static str, &'static str),
}

/// Starts observing `operation` of a lock of `kind` over `nodes` nodes with majority `quorum`.
#[inline]
#[allow(unused_variables)]
pub(crate) fn start(
    operation: &'static str,
    kind: &'static str,
    nodes: usize,
    quorum: usize,
) -> Op {
    Op {
        #[cfg(feature = "tracing")]
        span: tracing::info_span!(
            "muxlock.lock",
            otel.kind = "client",
            db.system.name = "redis",
            muxlock.operation = operation,
            muxlock.kind = kind,
            muxlock.nodes = nodes,
            muxlock.quorum = quorum,
            muxlock.outcome = tracing::field::Empty,
            muxlock.elapsed_us = tracing::field::Empty,
            muxlock.validity_ms = tracing::field::Empty,
            muxlock.granted = tracing::field::Empty,
        ),
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        start: Instant::now(),
        #[cfg(feature = "metrics")]
        labels: (operation, kind),
    }
}

impl Op {
    /// `f` inside the operation's span, entered at each of its polls (a future may move between threads).
    #[inline]
    pub(crate) fn instrument<F: std::future::Future>(
        &self,
        f: F,
    ) -> impl std::future::Future<Output = F::Output> {
        #[cfg(feature = "tracing")]
        {
            tracing::Instrument::instrument(f, self.span.clone())
        }
        #[cfg(not(feature = "tracing"))]
        {
            f
        }
    }

    /// Ends the operation with `result`; `validity`: the lease left, if it holds one.
    #[inline]
    #[allow(unused_variables)]
    pub(crate) fn finish<T>(self, result: &Result<T>, validity: Option<Duration>) {
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        {
            let outcome = outcome(result);
            let elapsed = self.start.elapsed();
            #[cfg(feature = "tracing")]
            {
                self.span.record("muxlock.outcome", outcome);
                self.span
                    .record("muxlock.elapsed_us", elapsed.as_micros() as u64);
                if let Some(v) = validity {
                    self.span
                        .record("muxlock.validity_ms", v.as_millis() as u64);
                }
                if let Err(e) = result
                    && let Some(report) = e.report()
                {
                    self.span.record("muxlock.granted", report.granted());
                }
            }
            #[cfg(feature = "metrics")]
            {
                let (operation, kind) = self.labels;
                metrics::counter!("muxlock_operations_total", "operation" => operation, "kind" => kind, "outcome" => outcome)
                    .increment(1);
                metrics::histogram!("muxlock_operation_seconds", "operation" => operation, "kind" => kind)
                    .record(elapsed.as_secs_f64());
                if let (Some(v), "acquire") = (validity, operation) {
                    metrics::histogram!("muxlock_validity_seconds", "kind" => kind)
                        .record(v.as_secs_f64());
                }
            }
        }
    }
}

/// The outcome label of a result.
#[cfg(any(feature = "tracing", feature = "metrics"))]
fn outcome<T>(result: &Result<T>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(Error::Held(_)) => "held",
        Err(Error::Quorum(_)) => "quorum",
        Err(Error::LockLost(_)) => "lost",
        Err(Error::Expired) => "expired",
        Err(Error::Config(_)) => "config",
        Err(_) => "error",
    }
}

/// One node's outcome in a round: an event in the current span, and a per-node error count.
#[inline]
#[allow(unused_variables)]
pub(crate) fn node(server: &Server, outcome: &Outcome) {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    {
        let vote = match outcome {
            Outcome::Granted => "granted",
            Outcome::Taken => "taken",
            Outcome::NotHeld => "not_held",
            Outcome::Quarantined => "quarantined",
            Outcome::ErrorReply(_) | Outcome::Failed(_) => "failed",
            Outcome::NotAwaited | Outcome::NotSent => return,
        };
        #[cfg(feature = "tracing")]
        match outcome {
            Outcome::ErrorReply(msg) => tracing::debug!(
                server.address = %server.host,
                server.port = server.port,
                db.system.name = "redis",
                muxlock.vote = vote,
                db.response.status_code = msg.split(' ').next().unwrap_or_default(),
                "node outcome"
            ),
            Outcome::Failed(e) => tracing::debug!(
                server.address = %server.host,
                server.port = server.port,
                db.system.name = "redis",
                muxlock.vote = vote,
                error.type = %e,
                "node outcome"
            ),
            _ => tracing::trace!(
                server.address = %server.host,
                server.port = server.port,
                db.system.name = "redis",
                muxlock.vote = vote,
                "node outcome"
            ),
        }
        #[cfg(feature = "metrics")]
        if vote == "failed" {
            metrics::counter!("muxlock_node_errors_total", "server" => format!("{}:{}", server.host, server.port))
                .increment(1);
        }
    }
}

/// A guard's lease was renewed.
#[inline]
#[allow(unused_variables)]
pub(crate) fn renewed(validity: Duration) {
    #[cfg(feature = "tracing")]
    tracing::trace!(
        muxlock.guard = "renewed",
        muxlock.validity_ms = validity.as_millis() as u64
    );
    #[cfg(feature = "metrics")]
    metrics::counter!("muxlock_renewals_total").increment(1);
}

/// A guard was lost (not released).
#[inline]
#[allow(unused_variables)]
pub(crate) fn lost(why: &Lost) {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    {
        let cause = match why {
            Lost::Taken(_) => "taken",
            Lost::Down(_) => "down",
            Lost::Clock(_) => "clock",
            Lost::Expired(_) => "expired",
            Lost::Released => return,
        };
        #[cfg(feature = "tracing")]
        tracing::warn!(muxlock.guard = "lost", muxlock.cause = cause, "{why}");
        #[cfg(feature = "metrics")]
        metrics::counter!("muxlock_losses_total", "cause" => cause).increment(1);
    }
}

/// A waiting request's attempt failed with grants the restart guard did not count (nodes younger than the
/// window): the wait goes on, and says for whom and for how long.
#[inline]
#[allow(unused_variables)]
pub(crate) fn waiting_for_young(report: &Report) {
    #[cfg(feature = "tracing")]
    {
        let young = report
            .not_counted()
            .map(|(addr, up, left)| {
                format!(
                    "{addr} up {:.1}s, counted in {:.1}s",
                    up.as_secs_f64(),
                    left.as_secs_f64()
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let left = report.restart_wait().unwrap_or_default();
        tracing::info!(
            muxlock.wait = "young nodes",
            muxlock.young = %young,
            muxlock.counted_in_ms = left.as_millis() as u64,
            "waiting for young nodes: their grants count in {:.1}s (the restart guard; nodes that persist every \
             write are trusted at once)",
            left.as_secs_f64()
        );
    }
}
