//! Heartbeat files written by the commands `exec` runs, and the processes they started: how the tests of `exec`
//! see whether a command ran past its lease.

use std::fs;
use std::path::{Path, PathBuf};

use super::{RedisServer, cmd};

/// Nanoseconds since the Unix epoch: heartbeats are written by `date +%s%N`, on the same clock.
pub fn wall_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The heartbeats written to `path` (one `date +%s%N` per line), in order.
pub fn heartbeats(path: &Path) -> Vec<u128> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A loop that writes a heartbeat to `hb` every `every_ms` ms, `count` times at most (so that a test of broken
/// code ends), with its output away from muxlock's pipes.
pub fn beat(hb: &Path, every_ms: u32, count: u32) -> String {
    format!(
        "exec >/dev/null 2>&1; i=0; while [ $i -lt {count} ]; do date +%s%N >> {hb}; sleep 0.{every_ms:03}; \
         i=$((i+1)); done",
        hb = hb.display()
    )
}

/// Milliseconds `after` the instant `t` (ns since the epoch), for messages.
pub fn ms_after(t: u128, after: u128) -> i128 {
    (t as i128 - after as i128) / 1_000_000
}

/// `PTTL key` on `node`, in ms (the key must exist).
#[track_caller]
pub fn pttl(node: &RedisServer, key: &str) -> u64 {
    let reply = String::from_utf8_lossy(&node.raw(&cmd(&["PTTL", key]))).into_owned();
    reply
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("PTTL {key}: {reply:?}"))
}

/// The processes a test's commands started, by the PID files they wrote: each one still alive, and its process
/// group, is killed by PID when the test ends, pass or fail.
pub struct Strays(pub Vec<PathBuf>);

impl Drop for Strays {
    fn drop(&mut self) {
        use rustix::process::{Pid, Signal, getpgrp, kill_process, kill_process_group};
        for file in &self.0 {
            let Some(pid) = fs::read_to_string(file)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
                .and_then(Pid::from_raw)
            else {
                continue;
            };
            let group = fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero()))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .and_then(|(_, rest)| rest.split_whitespace().nth(2)?.parse::<i32>().ok())
                })
                .and_then(Pid::from_raw);
            if let Some(group) = group.filter(|g| *g != getpgrp()) {
                let _ = kill_process_group(group, Signal::KILL);
            }
            let _ = kill_process(pid, Signal::KILL);
        }
    }
}
