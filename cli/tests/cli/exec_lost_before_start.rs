//! `muxlock exec` never starts the command once the lock is lost (part of its guarantee: no process of the
//! command's group runs past the lease), even when the loss falls while its reaper starts and its stderr blocks.
//! The reaper is held stopped by an `LD_PRELOAD` shim while a majority of nodes stall past the lease, and another
//! client takes the lock before the reaper goes on.
// `std::io::pipe` (1.87) in a test of the CLI: the tests run on the project's own toolchain, not the library's MSRV.
#![allow(clippy::incompatible_msrv)]

use crate::support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use support::heartbeat::{Strays, beat, heartbeats, ms_after, pttl, wall_ns};
use support::{Cluster, TempDir, on};

/// `/proc/PID/stat`: (state, ppid).
fn stat(pid: u32) -> Option<(char, u32)> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = s.rsplit_once(')')?;
    let mut it = rest.split_whitespace();
    let state = it.next()?.chars().next()?;
    let ppid = it.next()?.parse().ok()?;
    Some((state, ppid))
}

/// The children of `parent` whose command line contains `word`.
fn children_with(parent: u32, word: &str) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|(_, pp)| pp == parent))
        .filter(|&pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(word))
        })
        .collect()
}

/// Builds an `LD_PRELOAD` shim into `dir`: a `muxlock __reaper` started with `SHIM_STOP_REAPER` set stops itself
/// (SIGSTOP) before its first instruction, as a reaper slow to start would (a loaded machine, swap): the test
/// decides when it goes on.
fn shim(dir: &Path) -> PathBuf {
    let src = dir.join("shim.c");
    let so = dir.join("shim.so");
    fs::write(
        &src,
        r#"#include <signal.h>
#include <string.h>
#include <stdlib.h>
__attribute__((constructor)) static void shim(int argc, char **argv, char **envp) {
    (void)envp;
    if (argc > 1 && strcmp(argv[1], "__reaper") == 0 && getenv("SHIM_STOP_REAPER")) raise(SIGSTOP);
}
"#,
    )
    .unwrap();
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(status.success(), "cc failed");
    so
}

/// Waits (bounded) until a child of `parent` running `word` is stopped; its PID.
#[track_caller]
fn wait_stopped_child(parent: u32, word: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(&pid) = children_with(parent, word)
            .iter()
            .find(|&&p| stat(p).is_some_and(|(s, _)| s == 'T'))
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "no stopped {word} child of {parent}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// A pipe for muxlock's stderr, already full (64 KiB nobody reads yet), as a terminal after Ctrl-S (XOFF) or a
/// stuck log reader: every note muxlock writes blocks. [`Blocked::drain`] unblocks it and returns what it wrote.
struct Blocked {
    reader: std::io::PipeReader,
}

impl Blocked {
    /// `room` bytes left in the last page of the 64 KiB pipe (a write that does not fit blocks).
    fn new(room: usize) -> (Blocked, std::process::Stdio) {
        use std::io::Write;
        let (reader, mut writer) = std::io::pipe().unwrap();
        writer.write_all(&vec![b'.'; 65536 - room]).unwrap();
        (Blocked { reader }, writer.into())
    }

    /// Reads everything until muxlock and its children closed the pipe (bounded by their exit).
    fn drain(self) -> thread::JoinHandle<String> {
        use std::io::Read;
        let mut reader = self.reader;
        thread::spawn(move || {
            let mut all = Vec::new();
            let _ = reader.read_to_end(&mut all);
            String::from_utf8_lossy(&all)
                .trim_start_matches('.')
                .to_owned()
        })
    }
}

/// The command is never started once the lock is lost, however long the reaper took to start. `exec` waits up to
/// 10 s for its reaper to be ready; a lock lost meanwhile (and granted to another client) must be seen after that
/// wait, before the spawn: `guard.lost()` and the kill deadline are checked again once `Reaper::start` returns,
/// and the current deadline is sent to the reaper. A check made only before the reaper starts, with a kill
/// deadline computed before the wait, lets the command start after the lease ended. With stderr blocked (a
/// terminal after Ctrl-S, a stuck log reader), a note written before a kill would block the kill: muxlock's loop
/// kills before any note and writes its notes from a thread; the reaper gives its note 100 ms at most before it
/// kills its group. Both variants: stderr with room for the reaper's note only, and stderr full.
#[test]
fn the_command_never_starts_after_the_lock_was_lost_while_the_reaper_started() {
    // stderr: room for the reaper's note (168 bytes) but not for muxlock's next one; full.
    for blocked_stderr in [Some(200), Some(0)] {
        let mut cluster = Cluster::start(3);
        let state = TempDir::new();
        let dir = state.path();
        let so = shim(dir);
        let (hb, pid) = (dir.join("hb"), dir.join("pid"));
        let _strays = Strays(vec![pid.clone()]);
        let script = format!("echo $$ > {}; {}", pid.display(), beat(&hb, 20, 1000));
        let mut mux = on(
            &cluster,
            dir,
            &["exec", "--ttl", "3s", "job", "--", "sh", "-c", &script],
        )
        .env("LD_PRELOAD", &so)
        .env("SHIM_STOP_REAPER", "1");
        let mut blocked = None;
        if let Some(room) = blocked_stderr {
            let (b, stdio) = Blocked::new(room);
            mux = mux.stderr(stdio);
            blocked = Some(b);
        }
        let run = mux.spawn();
        let reaper = wait_stopped_child(run.pid(), "__reaper");
        // Held: muxlock waits for its reaper. A majority hangs until just after its keys expired.
        let mut expiries = Vec::new();
        for i in [0, 1] {
            let before = wall_ns();
            let ms = pttl(cluster.node(i), "job");
            cluster.pause(i);
            expiries.push(before + u128::from(ms) * 1_000_000);
        }
        let last_expiry = expiries.iter().copied().max().unwrap();
        while wall_ns() < last_expiry + 100_000_000 {
            thread::sleep(Duration::from_millis(10));
        }
        cluster.resume(0);
        cluster.resume(1);
        let asked = wall_ns();
        on(
            &cluster,
            dir,
            &["acquire", "job", "--ttl", "10s", "-w", "5s"],
        )
        .run()
        .expect(0);
        support::process::signal(reaper, "CONT");
        thread::sleep(Duration::from_millis(2500));
        let beats = heartbeats(&hb);
        let alive = fs::read_to_string(&pid)
            .ok()
            .and_then(|p| stat(p.trim().parse().ok()?))
            .is_some_and(|(s, _)| s != 'Z');
        let err = blocked.map(|b| b.drain());
        let run = run.finish();
        let stderr = err
            .map(|h| h.join().unwrap())
            .unwrap_or_else(|| run.stderr.clone());
        eprintln!(
            "variant {blocked_stderr:?}: {} beats, alive {alive}, {:?}: {stderr}",
            beats.len(),
            run.status
        );
        assert!(
            beats.is_empty(),
            "blocked stderr: {blocked_stderr:?}: the command started and beat {} times, from {} ms to {} ms after \
             another client asked for (and got) the lock; still running 2.5 s after: {alive}; muxlock {:?}: \
             {stderr}",
            beats.len(),
            ms_after(beats[0], asked),
            ms_after(*beats.last().unwrap(), asked),
            run.status,
        );
        assert_eq!(run.code(), 75, "{stderr}");
    }
}
