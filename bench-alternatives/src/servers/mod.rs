//! The servers the bench starts, fails and stops: PostgreSQL, MariaDB and ZooKeeper here; Redis comes from
//! `tests/support` (`RedisServer`, `Cluster`).
//!
//! Each server runs from its own data directory under one temp dir ([`Scratch`]), on free loopback ports, in a
//! process group of its own ([`Proc`]). PostgreSQL forks a backend per connection, and each backend makes itself
//! a session (and group) leader (`setsid` in `InitPostmasterChild`), so pausing or killing "the server" means
//! signalling the server's whole process tree (its descendants by parent PID), not only its group. Every process is stopped by its group id when its guard drops, and
//! recorded (with [`record_pid`]) in the file `$MUXLOCK_ALT_PIDFILE` names, so that `scripts/bench-alternatives`
//! can stop what a crashed bench left behind. Nothing here touches a system instance the Debian packages may
//! have started: the ports, directories and configuration files are all our own.

pub mod mariadb;
pub mod postgres;
pub mod zookeeper;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};

/// How long a server may take to become ready (a JVM on a busy 2-vCPU machine is slow).
pub const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// What the fault scenarios do to a server, or to one node of an ensemble.
pub trait Target: Send {
    /// What is failed, for the report ("the server", "node 1 of 3 (the leader)").
    fn what(&self) -> String;
    /// SIGKILL, whole process group.
    fn kill(&mut self);
    /// Starts it again after [`kill`](Target::kill), on the same port and data, and waits until it is ready.
    fn restart(&mut self);
    /// SIGSTOP, whole process group.
    fn pause(&mut self);
    /// SIGCONT.
    fn resume(&mut self);
}

/// The temp dir every server's data lives in; removed on drop.
#[derive(Debug)]
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new() -> Scratch {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("muxlock-alt-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&dir).expect("create the bench's temp dir");
        Scratch { dir }
    }

    /// A new subdirectory.
    pub fn sub(&self, name: &str) -> PathBuf {
        let dir = self.dir.join(name);
        fs::create_dir_all(&dir).expect("create a server's dir");
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A port the kernel just had free on 127.0.0.1. A server binds it a moment later; a start that loses the race
/// fails and is retried on another port.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// `n` distinct ports the kernel just had free on 127.0.0.1 (all bound at once, so no two are the same).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local_addr").port())
        .collect()
}

/// Appends `pgid` to `$MUXLOCK_ALT_PIDFILE`, if set, for the script's clean-up after a crash.
pub fn record_pid(kind: &str, pid: u32) {
    let Some(path) = std::env::var_os("MUXLOCK_ALT_PIDFILE") else {
        return;
    };
    if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{kind} {pid}");
    }
}

/// The user a server must run as: PostgreSQL refuses to run as root, so when we are root it runs as the
/// `postgres` user the Debian package created.
pub fn user_ids(name: &str) -> Option<(u32, u32)> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() > 3 && f[0] == name {
            Some((f[2].parse().ok()?, f[3].parse().ok()?))
        } else {
            None
        }
    })
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// One server process, the leader of its own process group.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Option<Child>,
    pid: u32,
    log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` in a new process group, its output appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> io::Result<Proc> {
        let out = OpenOptions::new().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()?;
        let pid = child.id();
        record_pid("pgid", pid);
        Ok(Proc {
            name: name.into(),
            child: Some(child),
            pid,
            log: log.to_path_buf(),
        })
    }

    /// The process group (= the leader's PID).
    pub fn pgid(&self) -> u32 {
        self.pid
    }

    /// Whether the leader has exited.
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| !matches!(c.try_wait(), Ok(None)))
    }

    pub fn log(&self) -> String {
        fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// `sig` to the group and to every process of the tree (the backends PostgreSQL forks live in sessions
    /// of their own), the leader first.
    fn signal(&self, sig: Signal) -> Vec<u32> {
        if let Some(pid) = Pid::from_raw(self.pid as i32) {
            let _ = kill_process(pid, sig);
            let _ = kill_process_group(pid, sig);
        }
        let mut all = descendants(self.pid);
        all.extend(group_members(self.pid));
        all.sort_unstable();
        all.dedup();
        for &p in &all {
            if let Some(pid) = Pid::from_raw(p as i32) {
                let _ = kill_process(pid, sig);
            }
        }
        all
    }

    /// SIGKILL to the whole tree and group; waits until the leader is reaped and no member is left (bounded).
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // The tree is listed before the leader dies: its orphans are reparented, and no longer found by PPID.
        let members = self.signal(Signal::KILL);
        let _ = child.wait();
        // Orphaned members are reaped by init: wait until they are gone, so that a restart finds its port and
        // shared memory free.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let left: Vec<u32> = members.iter().copied().filter(|&p| alive(p)).collect();
            if left.is_empty() {
                break;
            }
            for p in left {
                if let Some(pid) = Pid::from_raw(p as i32) {
                    let _ = kill_process(pid, Signal::KILL);
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGSTOP to the whole tree; returns once every member is stopped (bounded).
    pub fn pause(&mut self) {
        self.signal(Signal::STOP);
        // A fork under way when the leader stopped: stop the tree as it is now.
        for p in self.signal(Signal::STOP) {
            wait_state(p, |s| s == 'T');
        }
    }

    /// SIGCONT to the whole tree.
    pub fn resume(&mut self) {
        for p in self.signal(Signal::CONT) {
            wait_state(p, |s| s != 'T');
        }
    }

    /// Waits until `ready` holds, the process exits, or [`READY_TIMEOUT`] passes.
    pub fn wait_ready(&mut self, mut ready: impl FnMut(&Proc) -> bool) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if ready(self) {
                return Ok(());
            }
            if self.exited() {
                return Err(format!(
                    "{} exited during start-up; log:\n{}",
                    self.name,
                    self.tail()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} not ready within {READY_TIMEOUT:?}; log:\n{}",
                    self.name,
                    self.tail()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A stopped process still dies of SIGKILL.
        self.kill();
    }
}

/// PIDs whose process group is `pgid` (from `/proc/<pid>/stat`, field 5).
pub fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            stat_fields(*pid).is_some_and(|f| f.get(2).and_then(|g| g.parse().ok()) == Some(pgid))
        })
        .collect()
}

/// `root` and every process descended from it (by parent PID, from `/proc/<pid>/stat`, field 4).
pub fn descendants(root: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return vec![root];
    };
    let parents: Vec<(u32, u32)> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat_fields(pid)?.get(1)?.parse().ok()?)))
        .collect();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    tree
}

/// Whether `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|s| s != "Z"))
}

/// The fields of `/proc/<pid>/stat` after the command name: state, ppid, pgrp, ...
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
    )
}

fn wait_state(pid: u32, done: impl Fn(char) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match stat_fields(pid).and_then(|f| f.first().and_then(|s| s.chars().next())) {
            Some(state) if !done(state) => thread::sleep(Duration::from_millis(1)),
            _ => return,
        }
    }
}

/// Whether `log` (from byte `from` on) contains `needle`.
pub fn log_has(path: &Path, from: u64, needle: &str) -> bool {
    let Ok(bytes) = fs::read(path) else {
        return false;
    };
    let start = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).contains(needle)
}

pub fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

/// Creates (truncates) a file.
pub fn write_file(path: &Path, text: &str) {
    let mut f = File::create(path).expect("create a config file");
    f.write_all(text.as_bytes()).expect("write a config file");
}

/// The first existing executable among `candidates`, then `name` on `PATH`.
pub fn find_binary(name: &str, candidates: &[PathBuf]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let exec = |p: &Path| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    candidates.iter().chain(&on_path).find(|p| exec(p)).cloned()
}
