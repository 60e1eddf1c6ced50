//! Test support for the `muxlock` binary: the root's real-server guards (`RedisServer`, `Cluster`), and a runner
//! for the binary with a clean environment and a bounded wait.
//!
//! The server guards are the root's `tests/support` files, included by path (the ones that need nothing but std):
//! every server a test starts is stopped by its PID when its guard drops.

#![allow(dead_code, unused_imports)]

#[path = "../../../../tests/support/acceptor.rs"]
pub mod acceptor;
#[path = "../../../../tests/support/cluster.rs"]
pub mod cluster;
#[path = "../../../../tests/support/process.rs"]
pub mod process;
#[path = "../../../../tests/support/server.rs"]
pub mod server;
#[path = "../../../../tests/support/skip.rs"]
pub mod skip;
#[path = "../../../../tests/support/wire.rs"]
pub mod wire;

pub mod heartbeat;

pub use cluster::Cluster;
pub use server::RedisServer;
pub use wire::cmd;

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The longest any one run of the binary may take before the test fails (it is killed first).
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The `muxlock` binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_muxlock")
}

/// What a run of the binary did.
#[derive(Clone, Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Run {
    /// The exit code (panics if a signal ended the process: the binary must always exit).
    #[track_caller]
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("muxlock was killed by a signal: {self:?}"))
    }

    /// Asserts the exit code, showing the whole run when it differs, and that nothing panicked.
    #[track_caller]
    pub fn expect(&self, code: i32) -> &Run {
        assert_eq!(self.code(), code, "unexpected exit code: {self:#?}");
        self.no_panic()
    }

    /// Asserts that the run printed no panic message or backtrace.
    #[track_caller]
    pub fn no_panic(&self) -> &Run {
        for bad in ["panicked", "RUST_BACKTRACE", "stack backtrace"] {
            assert!(!self.stderr.contains(bad), "{bad} in stderr: {self:#?}");
        }
        self
    }

    /// Asserts that an error is one line on stderr, starting `muxlock: `.
    #[track_caller]
    pub fn one_line_error(&self) -> &Run {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "not one line: {self:#?}");
        assert!(lines[0].starts_with("muxlock: "), "{self:#?}");
        self
    }

    /// Asserts that an error from a round is its headline, one line starting `muxlock: `, then one line per node
    /// (`muxlock:   NODE: OUTCOME`), `nodes` of them, and nothing else.
    #[track_caller]
    pub fn error_with_nodes(&self, nodes: usize) -> &Run {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1 + nodes,
            "not a headline and {nodes} node lines: {self:#?}"
        );
        assert!(
            lines[0].starts_with("muxlock: ") && !lines[0].starts_with("muxlock:   "),
            "{self:#?}"
        );
        for line in &lines[1..] {
            assert!(
                line.starts_with("muxlock:   "),
                "not a node line: {line:?} in {self:#?}"
            );
        }
        self
    }

    /// stdout parsed as JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {self:#?}"))
    }
}

/// A `muxlock` command with a clean environment: none of the `MUXLOCK_*` variables of the caller's environment,
/// and its own state directory, so that no test sees a cluster recorded by the user or another test.
pub struct Muxlock {
    command: Command,
}

impl Muxlock {
    /// `muxlock ARGS` with its state in `state_dir`.
    pub fn new<I, S>(state_dir: &Path, args: I) -> Muxlock
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Muxlock::program(bin(), state_dir, args)
    }

    /// Another program (a shell running a script of `muxlock` commands) with the same environment.
    pub fn program<I, S>(program: &str, state_dir: &Path, args: I) -> Muxlock
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(program);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("MUXLOCK_") {
                command.env_remove(name);
            }
        }
        command
            .env("MUXLOCK_STATE_DIR", state_dir)
            .env_remove("RUST_BACKTRACE")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Muxlock { command }
    }

    /// Sets an environment variable.
    pub fn env(mut self, name: &str, value: impl AsRef<OsStr>) -> Muxlock {
        self.command.env(name, value);
        self
    }

    /// Removes an environment variable.
    pub fn env_remove(mut self, name: &str) -> Muxlock {
        self.command.env_remove(name);
        self
    }

    /// Sends stdout to `stdio` instead of capturing it.
    pub fn stdout(mut self, stdio: Stdio) -> Muxlock {
        self.command.stdout(stdio);
        self
    }

    /// Sends stderr to `stdio` instead of capturing it.
    pub fn stderr(mut self, stdio: Stdio) -> Muxlock {
        self.command.stderr(stdio);
        self
    }

    /// Starts it in a process group of its own (as a shell with job control does), so that job-control signals
    /// (SIGTSTP) take their default effect on it rather than being discarded as in an orphaned group.
    pub fn own_process_group(mut self) -> Muxlock {
        use std::os::unix::process::CommandExt;
        self.command.process_group(0);
        self
    }

    /// Starts it without waiting; [`Running::finish`] waits for it.
    #[track_caller]
    pub fn spawn(mut self) -> Running {
        let start = Instant::now();
        let child = self.command.spawn().expect("spawn muxlock");
        Running {
            child,
            start,
            command: self.command,
        }
    }

    /// Runs to the end (at most a minute), capturing stdout and stderr.
    #[track_caller]
    pub fn run(self) -> Run {
        self.spawn().finish()
    }
}

/// A run of the binary under way.
pub struct Running {
    pub child: std::process::Child,
    start: Instant,
    command: Command,
}

impl Running {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. "TERM", "INT") to the process.
    #[track_caller]
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", self.pid());
    }

    /// Waits for the end (at most a minute from the start), capturing stdout and stderr.
    #[track_caller]
    pub fn finish(mut self) -> Run {
        let start = self.start;
        let child = &mut self.child;
        let read = |pipe: Option<Box<dyn Read + Send>>| {
            thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_string(&mut text);
                }
                text
            })
        };
        let out = read(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let err = read(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for muxlock") {
                break status;
            }
            if start.elapsed() > RUN_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "muxlock {:?} did not finish within {RUN_LIMIT:?}",
                    self.command.get_args().collect::<Vec<_>>()
                );
            }
            thread::sleep(Duration::from_millis(5));
        };
        Run {
            status,
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
            took: start.elapsed(),
        }
    }
}

impl Drop for Running {
    /// A test that fails midway leaves no muxlock behind.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `muxlock ARGS` with the nodes of `cluster` (through `MUXLOCK_NODES`) and without the restart guard: these
/// servers have just started without persistence (fast, and nothing to clean up), and the guard would not count
/// them for a whole lease. (Nodes with `appendfsync always`, such as `cluster up`'s, are trusted at once.)
pub fn on(cluster: &Cluster, state_dir: &Path, args: &[&str]) -> Muxlock {
    Muxlock::new(state_dir, args)
        .env("MUXLOCK_NODES", cluster.urls().join(","))
        .env("MUXLOCK_RESTART_GUARD", "off")
        .env("MUXLOCK_ROUND_TIMEOUT", "500ms")
}

/// A temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        TempDir(process::make_temp_dir())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The raw reply of `GET key` on a node.
pub fn get(server: &RedisServer, key: &str) -> String {
    String::from_utf8_lossy(&server.raw(&cmd(&["GET", key]))).into_owned()
}

/// The PIDs of running (not zombie) processes whose working directory is under `dir`: how a test finds every
/// `redis-server` a `cluster up` started under its state directory, recorded or not (redis changes into its
/// `--dir`; its command line is no help, since redis rewrites it to `redis-server 127.0.0.1:PORT`).
pub fn processes_under(dir: &Path) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != std::process::id())
        .filter(|&pid| {
            fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
                && !matches!(process::process_state(pid), Some('Z') | None)
        })
        .collect()
}

/// Makes this test process the reaper of orphaned descendants: the `redis-server` daemons of `cluster up` are
/// reparented to it instead of to PID 1, which in some containers never reaps them. Then [`reap`] can show that a
/// stopped node is gone for good, not a zombie.
pub fn become_subreaper() {
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
}

/// Reaps `pid` if it is an exited child of this process (a no-op otherwise).
pub fn reap(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
    }
}

/// Waits, bounded, until every one of `pids` is gone from `/proc` (reaping those that are this process' children).
#[track_caller]
pub fn wait_gone(pids: &[u32], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let left: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|&pid| {
                reap(pid);
                Path::new(&format!("/proc/{pid}")).exists()
            })
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes {left:?} still exist after {limit:?}: {:?}",
            left.iter()
                .map(|&p| process::process_state(p))
                .collect::<Vec<_>>()
        );
        thread::sleep(Duration::from_millis(20));
    }
}
