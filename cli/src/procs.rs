//! Processes by PID: is it still the one we started, what state is it in, and signals to it. Linux (`/proc`).
//!
//! A PID alone can be reused by an unrelated process once ours has exited. A node of the local cluster is recorded
//! with its PID *and* its start time (clock ticks since boot, field 22 of `/proc/PID/stat`): a process counts as
//! ours only if both match, so `cluster down` never signals a stranger that inherited the number.

use std::fs;
use std::io;
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

/// What `/proc/PID/stat` says of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// `R` running, `S` sleeping, `T` stopped (`SIGSTOP`), `Z` zombie, ...
    pub state: char,
    /// When it started, in clock ticks since boot.
    pub start_ticks: u64,
}

/// The process' state and start time, or `None` if there is no such process.
pub fn stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The command name is in parentheses and may hold spaces and ')': the fields follow the last ')'.
    let mut fields = text.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state (field 3) comes field 4; the start time is field 22.
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some(Stat { state, start_ticks })
}

/// The live (not zombie) processes whose process group is `group`, from `/proc`.
pub fn group_members(group: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|text| parse_group(&text))
                .is_some_and(|(state, pgrp)| pgrp == group && !matches!(state, 'Z' | 'X'))
        })
        .collect()
}

/// The state and process group (field 5) of a `/proc/PID/stat` line.
fn parse_group(text: &str) -> Option<(char, u32)> {
    let mut fields = text.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let pgrp = fields.nth(1)?.parse().ok()?;
    Some((state, pgrp))
}

/// Whether `pid` is still the process that started at `start_ticks`, and not a zombie waiting to be reaped (a
/// zombie has exited: it holds no port and serves nothing).
pub fn is_alive(pid: u32, start_ticks: u64) -> bool {
    stat(pid).is_some_and(|s| s.start_ticks == start_ticks && !matches!(s.state, 'Z' | 'X'))
}

/// Sends `signal` to `pid`.
///
/// # Errors
///
/// The OS's error (no such process, not permitted), or `InvalidInput` for PID 0.
pub fn signal(pid: u32, signal: Signal) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a process id"))?;
    kill_process(pid, signal).map_err(io::Error::from)
}

/// Waits until none of `procs` (PID, start time) is alive, polling every 20 ms, for at most `limit`. Returns those
/// still alive then.
pub fn wait_gone(procs: &[(u32, u64)], limit: Duration) -> Vec<(u32, u64)> {
    let deadline = Instant::now() + limit;
    loop {
        let alive: Vec<(u32, u64)> = procs
            .iter()
            .copied()
            .filter(|&(pid, ticks)| is_alive(pid, ticks))
            .collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_even_with_odd_names() {
        let line = "4242 (redis-server *:7000) S 1 4242 4242 0 -1 4194624 100 0 0 0 1 2 0 0 20 0 5 0 \
                    987654 123 456";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: 'S',
                start_ticks: 987_654
            })
        );
        let odd = "7 (a) b) T 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 1 2";
        assert_eq!(
            parse_stat(odd).map(|s| (s.state, s.start_ticks)),
            Some(('T', 55))
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_group(line), Some(('S', 4242)));
        assert_eq!(parse_group(odd), Some(('T', 7)));
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = std::process::id();
        let s = stat(me).unwrap();
        assert!(is_alive(me, s.start_ticks));
        assert!(!is_alive(me, s.start_ticks + 1));
        assert!(wait_gone(&[(me, s.start_ticks + 1)], Duration::ZERO).is_empty());
    }
}
