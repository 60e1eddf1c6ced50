//! Local redis-server nodes, as `cluster up` and `demo` start and stop them: a recorded cluster started in
//! parallel (each node recorded as soon as it runs), one node started (again) on its port and data directory,
//! processes stopped by PID and start time.

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::certs;
use crate::duration;
use crate::exit::{self, CliError};
use crate::output;
use crate::procs;
use crate::redis::{self, Client};
use crate::state::{self, ClusterState, NodeRecord, TlsFiles};

/// How long a node may take to answer its first PING.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Fresh ports tried for a node whose free port someone else took first (without --base-port).
const PORT_TRIES: usize = 5;
/// What every node persists: each write is on disk before the node answers.
pub const APPENDFSYNC: &str = "always";

/// Starts a cluster of `ports.len()` nodes (each on its port, or a free one) recorded in `dir`, as `cluster up`
/// does (and `demo` when no cluster runs); TLS nodes with new certificates if `tls`.
///
/// # Errors
///
/// As [`cluster up`](crate::cmd::cluster::up::run).
pub fn start(
    dir: &Path,
    ports: &[Option<u16>],
    redis_server: Option<&Path>,
    tls: bool,
) -> Result<ClusterState, CliError> {
    start_members(dir, ports, redis_server, tls, None)
}

/// [`start`], with `shards`: every `shards` nodes in a row form one Redis Cluster (a Redlock member), each with a
/// bus port of its own and an even share of the 16,384 slots.
///
/// # Errors
///
/// As [`start`]; also if a cluster does not form in time.
pub fn start_members(
    dir: &Path,
    ports: &[Option<u16>],
    redis_server: Option<&Path>,
    tls: bool,
    shards: Option<u16>,
) -> Result<ClusterState, CliError> {
    // REDIS_SERVER is read here rather than by clap, so that an empty one means "not set".
    let from_env = std::env::var_os("REDIS_SERVER")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let bin = find_redis(redis_server.or(from_env.as_deref()))?;
    let tls_dir = state::data_dir(dir).join("tls");
    let files = tls.then(|| TlsFiles::in_dir(&tls_dir));
    let record = Recorder::claim(dir, &bin, files.clone())?;
    // After the claim: it clears the data directory of an earlier cluster, where the files go.
    if let Some(Err(e)) = tls.then(|| certs::generate(&tls_dir)) {
        record.abandon();
        return Err(CliError::new(exit::CANTCREAT, "cluster", e));
    }
    let results: Vec<Result<NodeRecord, String>> = thread::scope(|scope| {
        let handles: Vec<_> = ports
            .iter()
            .enumerate()
            .map(|(i, port)| {
                let (bin, record, files) = (&bin, &record, files.as_ref());
                scope.spawn(move || {
                    let node = start_cluster_node(
                        bin,
                        &state::data_dir(dir).join(format!("node-{}", i + 1)),
                        *port,
                        files,
                        shards.is_some(),
                    )?;
                    if shards.is_none() {
                        redis::provision_marker(node.port, files);
                    }
                    record.add(i, node.clone());
                    Ok(node)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the thread starting it failed".into()))
            })
            .collect()
    });
    if let Some(failure) = results.iter().find_map(|r| r.as_ref().err()) {
        let failure = failure.clone();
        record.abandon();
        if failure.starts_with(NO_TLS) {
            return Err(CliError::new(exit::UNAVAILABLE, "unavailable", failure));
        }
        return Err(CliError::new(exit::CANTCREAT, "cluster", failure));
    }
    if let Some(k) = shards {
        let nodes = record.nodes();
        for member in nodes.chunks(usize::from(k)) {
            if let Err(e) = crate::shards::form_cluster(member) {
                record.abandon();
                return Err(CliError::new(exit::CANTCREAT, "cluster", e));
            }
        }
        record.set_shards(k);
    }
    let cluster = record.finish()?;
    Ok(cluster)
}

/// The redis-server binary: the given one, else on PATH, else the usual places.
fn find_redis(given: Option<&Path>) -> Result<PathBuf, CliError> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if let Some(path) = given.filter(|p| !p.as_os_str().is_empty()) {
        if executable(path) {
            return Ok(path.to_path_buf());
        }
        return Err(CliError::new(
            exit::UNAVAILABLE,
            "unavailable",
            format!(
                "{} (--redis-server or REDIS_SERVER) is not an executable file",
                path.display()
            ),
        ));
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .map(|dir| dir.join("redis-server"))
        .chain(["/usr/bin/redis-server", "/usr/local/bin/redis-server"].map(PathBuf::from))
        .find(|p| executable(p))
        .ok_or_else(|| {
            CliError::new(
                exit::UNAVAILABLE,
                "unavailable",
                "redis-server is not installed: on Debian, `sudo apt-get install -y redis-server` (scripts/test does \
                 it when run as root), or give its path with --redis-server or REDIS_SERVER",
            )
        })
}

/// The record of the cluster being started, kept up to date as nodes come up.
struct Recorder<'a> {
    dir: &'a Path,
    state: Mutex<(ClusterState, Vec<Option<NodeRecord>>)>,
}

impl<'a> Recorder<'a> {
    /// Creates the record, or explains why there is one already. A record whose nodes are all gone (and whose
    /// `cluster up` is not running) is stale: it is removed, with a note.
    fn claim(dir: &'a Path, bin: &Path, tls: Option<TlsFiles>) -> Result<Recorder<'a>, CliError> {
        let fresh = ClusterState::starting(bin, APPENDFSYNC, tls);
        for _ in 0..2 {
            match state::create(dir, &fresh) {
                Ok(()) => {
                    // Data of an earlier cluster (a stale record's) is not this cluster's.
                    let _ = fs::remove_dir_all(state::data_dir(dir));
                    return Ok(Recorder {
                        dir,
                        state: Mutex::new((fresh, Vec::new())),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(state::cannot_write(dir, &e)),
            }
            let existing = match state::load(dir) {
                Ok(Some(existing)) => existing,
                Ok(None) => continue, // removed meanwhile: try again
                Err(e) => return Err(CliError::new(exit::CANTCREAT, "cluster", e.message)),
            };
            let live = existing.live_urls();
            if !live.is_empty() {
                return Err(CliError::new(
                    exit::CANTCREAT,
                    "cluster",
                    format!(
                        "a local cluster is already running ({} of {} nodes up: {}), recorded in {}: use it, or \
                         stop it first with `muxlock cluster down`",
                        live.len(),
                        existing.nodes.len(),
                        live.join(", "),
                        state::describe(dir)
                    ),
                ));
            }
            if existing.is_being_started() {
                return Err(CliError::new(
                    exit::CANTCREAT,
                    "cluster",
                    format!(
                        "another `muxlock cluster up` (pid {}) is starting a cluster: wait for it, or stop it",
                        existing.owner_pid
                    ),
                ));
            }
            output::note(&format!(
                "removing the record of a cluster that is no longer running ({})",
                state::describe(dir)
            ));
            state::remove(dir).map_err(|e| state::cannot_write(dir, &e))?;
        }
        Err(CliError::new(
            exit::CANTCREAT,
            "cluster",
            format!(
                "could not claim {}: another process keeps recreating it",
                state::describe(dir)
            ),
        ))
    }

    /// Records node `i` as running (the record is rewritten, so an interrupted `cluster up` leaves nothing
    /// unaccounted for).
    fn add(&self, i: usize, node: NodeRecord) {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (state, slots) = &mut *guard;
        if slots.len() <= i {
            slots.resize(i + 1, None);
        }
        slots[i] = Some(node);
        state.nodes = slots.iter().flatten().cloned().collect();
        let _ = state::save(self.dir, state);
    }

    /// The nodes started so far, in order, with their bus ports (`--cluster-port`: the port + 10,000 when a node
    /// has none of its own recorded).
    fn nodes(&self) -> Vec<(NodeRecord, u16)> {
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .0
            .nodes
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    bus_port(&n.dir).unwrap_or(n.port.wrapping_add(10_000)),
                )
            })
            .collect()
    }

    /// Records that every `k` nodes form one cluster member.
    fn set_shards(&self, k: u16) {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.shards = Some(k);
        let _ = state::save(self.dir, &guard.0);
    }

    /// Marks the cluster running.
    fn finish(self) -> Result<ClusterState, CliError> {
        let (mut state, _) = self.state.into_inner().unwrap_or_else(|p| p.into_inner());
        state.status = "running".into();
        state::save(self.dir, &state).map_err(|e| state::cannot_write(self.dir, &e))?;
        Ok(state)
    }

    /// Stops the nodes that did start, and removes their data and the record.
    fn abandon(self) {
        let (state, _) = self.state.into_inner().unwrap_or_else(|p| p.into_inner());
        let procs: Vec<(u32, u64)> = state.nodes.iter().map(|n| (n.pid, n.start_ticks)).collect();
        stop(&procs);
        let _ = state::remove(self.dir);
    }
}

/// Stops processes: SIGTERM (SIGCONT first, for a paused one), then SIGKILL for those still there after 10 s.
/// Returns those that could not be stopped.
pub fn stop(procs: &[(u32, u64)]) -> Vec<(u32, u64)> {
    let alive: Vec<(u32, u64)> = procs
        .iter()
        .copied()
        .filter(|&(p, t)| procs::is_alive(p, t))
        .collect();
    for &(pid, _) in &alive {
        let _ = procs::signal(pid, Signal::TERM);
        let _ = procs::signal(pid, Signal::CONT);
    }
    let left = procs::wait_gone(&alive, Duration::from_secs(10));
    for &(pid, ticks) in &left {
        if procs::is_alive(pid, ticks) {
            let _ = procs::signal(pid, Signal::KILL);
        }
    }
    procs::wait_gone(&left, Duration::from_secs(5))
}

/// Starts one node in `dir`, on the `fixed` port or on a free one, and waits until it answers; a TLS node (its
/// only port is TLS) with `tls`'s server certificate.
///
/// # Errors
///
/// A message naming the port and the cause; it starts with [`NO_TLS`] when redis-server has no TLS support.
pub fn start_node(
    bin: &Path,
    dir: &Path,
    fixed: Option<u16>,
    tls: Option<&TlsFiles>,
) -> Result<NodeRecord, String> {
    start_cluster_node(bin, dir, fixed, tls, bus_port(dir).is_some())
}

/// The bus port a cluster node in `dir` was started with (written to `bus.port` there), if it is one.
fn bus_port(dir: &Path) -> Option<u16> {
    fs::read_to_string(dir.join("bus.port"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// [`start_node`]; with `cluster`, the node is started with `--cluster-enabled yes` and a bus port of its own
/// (kept in `bus.port` in its directory, so that a restart keeps it). A new node's two ports are picked together,
/// and picked again together if either was taken before redis bound it (another cluster's node may listen there).
fn start_cluster_node(
    bin: &Path,
    dir: &Path,
    fixed: Option<u16>,
    tls: Option<&TlsFiles>,
    cluster: bool,
) -> Result<NodeRecord, String> {
    let kept_bus = bus_port(dir);
    let tries = if fixed.is_some() { 1 } else { PORT_TRIES };
    let free = || free_port().map_err(|e| format!("cannot find a free port: {e}"));
    for _ in 0..tries {
        let bus = match (cluster, kept_bus) {
            (false, _) => None,
            (true, Some(bus)) => Some(bus),
            (true, None) => Some(free()?),
        };
        let port = match fixed {
            Some(p) => p,
            None => free()?,
        };
        match spawn(bin, dir, port, tls, bus) {
            Ok(node) => {
                if let (Some(bus), None) = (bus, kept_bus) {
                    fs::write(dir.join("bus.port"), bus.to_string())
                        .map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
                }
                return Ok(node);
            }
            Err(Failure::PortTaken) if fixed.is_some() => {
                return Err(format!(
                    "port {port} is in use: choose another --base-port, or leave it out to use free ports"
                ));
            }
            // Someone took a free port between our look and redis' bind: pick others.
            Err(Failure::PortTaken) => {}
            Err(Failure::Other(message)) => return Err(message),
        }
    }
    Err(format!(
        "no node could bind a free port in {PORT_TRIES} tries"
    ))
}

enum Failure {
    PortTaken,
    Other(String),
}

/// The start of the error for a redis-server built without TLS.
pub const NO_TLS: &str = "this redis-server was built without TLS support";

/// The arguments that make `port` the node's only port: plain, or TLS with `tls`'s files.
fn port_args(port: u16, tls: Option<&TlsFiles>) -> Vec<std::ffi::OsString> {
    let port = port.to_string().into();
    match tls {
        None => vec!["--port".into(), port],
        Some(files) => vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port,
            "--tls-cert-file".into(),
            files.server_cert.clone().into(),
            "--tls-key-file".into(),
            files.server_key.clone().into(),
            "--tls-ca-cert-file".into(),
            files.ca.clone().into(),
            // Redis' default, said out loud: a client without a certificate from this CA is refused.
            "--tls-auth-clients".into(),
            "yes".into(),
        ],
    }
}

/// Whether redis-server's words (its start-up errors or log) say it does not know the TLS directives.
fn lacks_tls(text: &str) -> bool {
    (text.contains("Bad directive") && text.contains("tls"))
        || text.contains("TLS is not supported")
        || text.contains("not compiled with TLS")
}

/// One try: start `redis-server` as a daemon on `port`, and wait until this very process answers.
fn spawn(
    bin: &Path,
    dir: &Path,
    port: u16,
    tls: Option<&TlsFiles>,
    bus: Option<u16>,
) -> Result<NodeRecord, Failure> {
    let other = |m: String| Failure::Other(m);
    fs::create_dir_all(dir).map_err(|e| other(format!("cannot create {}: {e}", dir.display())))?;
    let (pidfile, logfile, errfile) = (
        dir.join("redis.pid"),
        dir.join("redis.log"),
        dir.join("stderr.log"),
    );
    for f in [&pidfile, &logfile] {
        let _ = fs::remove_file(f);
    }
    let stderr = fs::File::create(&errfile)
        .map_err(|e| other(format!("cannot create {}: {e}", errfile.display())))?;
    let status = Command::new(bin)
        .args(port_args(port, tls))
        .args([
            "--bind",
            "127.0.0.1",
            "--protected-mode",
            "yes",
            "--daemonize",
            "yes",
        ])
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            APPENDFSYNC,
            "--save",
            "",
        ])
        .args(match bus {
            Some(bus) => vec![
                "--cluster-enabled".to_owned(),
                "yes".to_owned(),
                "--cluster-config-file".to_owned(),
                "nodes.conf".to_owned(),
                "--cluster-port".to_owned(),
                bus.to_string(),
            ],
            None => Vec::new(),
        })
        .arg("--dir")
        .arg(dir)
        .arg("--pidfile")
        .arg(&pidfile)
        .arg("--logfile")
        .arg(&logfile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .status()
        .map_err(|e| other(format!("cannot run {}: {e}", bin.display())))?;
    if !status.success() {
        let said = read(&errfile);
        if tls.is_some() && lacks_tls(&said) {
            return Err(other(format!(
                "{NO_TLS} ({}: {}): cluster up --tls needs one built with BUILD_TLS=yes (Debian's redis-server 7 \
                 is), given with --redis-server or REDIS_SERVER; or leave out --tls",
                bin.display(),
                last_lines(&said, 1)
            )));
        }
        let why = last_lines(&said, 1);
        return Err(other(format!(
            "redis-server on port {port} refused to start ({status}): {why}"
        )));
    }
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut pid = None;
    loop {
        let log = read(&logfile);
        if log.contains("Address already in use") {
            return Err(Failure::PortTaken);
        }
        if tls.is_some() && lacks_tls(&log) {
            return Err(other(format!(
                "{NO_TLS} ({}; log: {}): cluster up --tls needs one built with BUILD_TLS=yes, given with \
                 --redis-server or REDIS_SERVER; or leave out --tls",
                bin.display(),
                logfile.display()
            )));
        }
        if log.contains("aborting") || log.contains("FATAL") {
            return Err(other(format!(
                "redis-server on port {port} stopped: {} (log: {})",
                last_lines(&log, 1),
                logfile.display()
            )));
        }
        if pid.is_none() {
            pid = fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
        }
        if let Some(pid) = pid {
            let Some(stat) = procs::stat(pid).filter(|s| !matches!(s.state, 'Z' | 'X')) else {
                return Err(other(format!(
                    "redis-server on port {port} exited: {} (log: {})",
                    last_lines(&log, 1),
                    logfile.display()
                )));
            };
            match answers_as(port, pid, tls) {
                Some(true) => {
                    let scheme = if tls.is_some() { "rediss" } else { "redis" };
                    return Ok(NodeRecord {
                        url: format!("{scheme}://127.0.0.1:{port}"),
                        port,
                        pid,
                        start_ticks: stat.start_ticks,
                        dir: dir.to_path_buf(),
                    });
                }
                Some(false) => {
                    // Someone else answers on the port: ours cannot bind it and is on its way out.
                    let _ = procs::signal(pid, Signal::KILL);
                    return Err(Failure::PortTaken);
                }
                None => {}
            }
        }
        if Instant::now() >= deadline {
            if let Some(pid) = pid {
                let _ = procs::signal(pid, Signal::KILL);
            }
            return Err(other(format!(
                "redis-server on port {port} did not answer within {} (log: {})",
                duration::human(READY_TIMEOUT),
                logfile.display()
            )));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// `Some(true)` once the node on `port` answers PING and is process `pid`; `Some(false)` if another process
/// answers there; `None` while nothing answers yet.
fn answers_as(port: u16, pid: u32, tls: Option<&TlsFiles>) -> Option<bool> {
    let mut client = Client::connect(port, tls, Duration::from_millis(500)).ok()?;
    let replies = client.pipeline(&[&[b"PING"], &[b"INFO", b"server"]]).ok()?;
    let info = redis::text(replies.get(1)?)?;
    let served_by = redis::info_field(&info, "process_id")?
        .parse::<u32>()
        .ok()?;
    Some(served_by == pid)
}

/// A port the kernel just had free.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

fn read(path: &Path) -> String {
    fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The last `n` non-empty lines of a log, joined; redis' `PID:X date` prefix dropped.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let start = lines.len().saturating_sub(n);
    lines[start..]
        .iter()
        .map(
            |l| match l.split_once(" # ").or_else(|| l.split_once(" * ")) {
                Some((_, message)) => message,
                None => l,
            },
        )
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_lose_their_prefix() {
        let log = "1:C 22 Nov 2026 15:08:54.969 # Configuration loaded\n\
                   1:M 22 Nov 2026 15:08:54.969 # Failed listening on port 45385 (TCP), aborting.\n";
        assert_eq!(
            last_lines(log, 1),
            "Failed listening on port 45385 (TCP), aborting."
        );
        assert_eq!(last_lines("", 1), "");
        assert_eq!(
            last_lines("*** FATAL CONFIG FILE ERROR", 1),
            "*** FATAL CONFIG FILE ERROR"
        );
    }
}
