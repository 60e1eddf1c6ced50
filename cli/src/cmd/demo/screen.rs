//! Where the demo writes as it runs: the live line (redrawn in place on a terminal) and a line per event.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use super::cluster::Cluster;
use super::worker::Shared;
use crate::duration;

/// Where the live lines and events go: stdout, or stderr with `--json`; redrawn in place on a terminal.
pub(super) struct Screen {
    pub(super) to_stderr: bool,
    pub(super) terminal: bool,
    pub(super) start: Instant,
    pub(super) live_shown: bool,
}

impl Screen {
    pub(super) fn write(&mut self, text: &str) {
        let _ = if self.to_stderr {
            io::stderr().lock().write_all(text.as_bytes())
        } else {
            io::stdout()
                .lock()
                .write_all(text.as_bytes())
                .and_then(|()| io::stdout().flush())
        };
    }

    /// A line that stays: an event, a note.
    pub(super) fn line(&mut self, text: &str) {
        let clear = if self.terminal && self.live_shown {
            "\r\x1b[2K"
        } else {
            ""
        };
        self.live_shown = false;
        let at = self.start.elapsed().as_secs_f64();
        self.write(&format!("{clear}{at:6.1}s  {text}\n"));
    }

    /// The live line: redrawn on a terminal, a new line otherwise.
    pub(super) fn live(&mut self, text: &str) {
        let at = self.start.elapsed().as_secs_f64();
        if self.terminal {
            self.live_shown = true;
            self.write(&format!("\r\x1b[2K{at:6.1}s  {text}"));
        } else {
            self.write(&format!("{at:6.1}s  {text}\n"));
        }
    }

    pub(super) fn end_live(&mut self) {
        if self.terminal && self.live_shown {
            self.write("\n");
            self.live_shown = false;
        }
    }
}

pub(super) fn live_line(
    shared: &Shared,
    total: u64,
    last_second: u64,
    cluster: &Cluster,
) -> String {
    let tally = shared
        .tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut sorted = tally.latencies_us.clone();
    let (violations, errors) = (tally.violations, tally.errors);
    drop(tally);
    sorted.sort_unstable();
    let pct = |p: f64| {
        sorted
            .get(((sorted.len() as f64 - 1.0) * p).round().max(0.0) as usize)
            .copied()
            .unwrap_or(0)
    };
    let nodes = if cluster.nodes.is_empty() {
        String::new()
    } else {
        let words: Vec<&str> = cluster.nodes.iter().map(|n| n.state.word()).collect();
        format!("  nodes [{}]", words.join(" "))
    };
    let shown = |p: f64| {
        if sorted.is_empty() {
            "-".to_owned()
        } else {
            duration::human(Duration::from_micros(pct(p)))
        }
    };
    format!(
        "locks {total} ({last_second}/s)  time to lock p50 {} p99 {}{nodes}  errors {errors}  violations {violations}",
        shown(0.5),
        shown(0.99),
    )
}
