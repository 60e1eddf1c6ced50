//! Where the local cluster is recorded, so that every other command finds it.
//!
//! The state directory is `$MUXLOCK_STATE_DIR` if set, else `$XDG_STATE_HOME/muxlock`, else
//! `~/.local/state/muxlock`. It holds `cluster.json` (the record) and `cluster/node-N/` (each node's data: its
//! append-only file, log and PID file), and for a TLS cluster `cluster/tls/` (its throwaway CA and certificates). The record is written whole to a temporary file and renamed over the old
//! one, so a reader never sees half of it; it is rewritten as each node comes up, so that a `cluster up` that is
//! interrupted still leaves a record `cluster down` can stop its nodes from.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::exit::{self, CliError};
use crate::procs;

/// The record's format; a record of another version is reported, never misread. Version 2 added `tls`: a version 1
/// record (no `tls`) is read as a plain-TCP cluster, and a muxlock that reads version 1 only refuses a version 2
/// record rather than mistake TLS nodes for plain ones.
pub const VERSION: u32 = 2;
/// The oldest version this muxlock still reads.
const OLDEST_VERSION: u32 = 1;

/// A local cluster as `cluster up` recorded it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterState {
    /// [`VERSION`].
    pub version: u32,
    /// `starting` while `cluster up` runs, `running` once every node answered.
    pub status: String,
    /// The `muxlock cluster up` process that wrote the record.
    pub owner_pid: u32,
    /// When `cluster up` started, in milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// The `redis-server` binary.
    pub redis_server: String,
    /// The nodes' `appendfsync` setting.
    pub appendfsync: String,
    /// For TLS nodes (`cluster up --tls`, `rediss://` URLs): their certificates. `None`: plain TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFiles>,
    /// The nodes, in order.
    pub nodes: Vec<NodeRecord>,
    /// `cluster up --shards K`: each Redlock member is a Redis Cluster of K masters, nodes `i*K..(i+1)*K` (its
    /// URL is `redis+cluster://`). `None`: every node is a member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u16>,
}

/// The PEM files of a TLS cluster: the CA that signed everything, the nodes' certificate and key, and the client
/// certificate and key the other commands present (the nodes ask for one: `tls-auth-clients yes`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsFiles {
    /// The throwaway CA's certificate: `--tls-ca`.
    pub ca: PathBuf,
    /// The client certificate: `--tls-cert`.
    pub client_cert: PathBuf,
    /// Its private key: `--tls-key`.
    pub client_key: PathBuf,
    /// The nodes' certificate (for 127.0.0.1 and localhost).
    pub server_cert: PathBuf,
    /// Its private key.
    pub server_key: PathBuf,
}

impl TlsFiles {
    /// The files' names in `dir`.
    pub fn in_dir(dir: &Path) -> TlsFiles {
        TlsFiles {
            ca: dir.join("ca.crt"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
        }
    }

    /// The flags that make a command trust these nodes and present the client certificate, as a user types them
    /// (for the commands that are given `--nodes` rather than using the recorded cluster).
    pub fn flags(&self) -> String {
        format!(
            "--tls-ca {} --tls-cert {} --tls-key {}",
            self.ca.display(),
            self.client_cert.display(),
            self.client_key.display()
        )
    }
}

/// One node of the local cluster.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeRecord {
    /// `redis://127.0.0.1:PORT`, or `rediss://127.0.0.1:PORT` for a TLS node.
    pub url: String,
    /// The TCP port on 127.0.0.1 (the TLS port of a TLS node: it has no plain one).
    pub port: u16,
    /// The `redis-server` process.
    pub pid: u32,
    /// The process' start time in clock ticks since boot: with the PID, tells our process from a later one that
    /// reused its number.
    pub start_ticks: u64,
    /// Its data directory.
    pub dir: PathBuf,
}

impl NodeRecord {
    /// Whether the recorded process is still running.
    pub fn is_alive(&self) -> bool {
        procs::is_alive(self.pid, self.start_ticks)
    }
}

impl ClusterState {
    /// A record of a cluster being started by this process.
    pub fn starting(redis_server: &Path, appendfsync: &str, tls: Option<TlsFiles>) -> ClusterState {
        ClusterState {
            version: VERSION,
            status: "starting".into(),
            owner_pid: std::process::id(),
            created_unix_ms: unix_ms(SystemTime::now()),
            redis_server: redis_server.display().to_string(),
            appendfsync: appendfsync.into(),
            tls,
            nodes: Vec::new(),
            shards: None,
        }
    }

    /// The URLs of the members that are still running: each node's, or with `shards`, each cluster's
    /// (`redis+cluster://` over its nodes still running).
    pub fn live_urls(&self) -> Vec<String> {
        let live = |n: &&NodeRecord| n.is_alive();
        match self.shards.map(usize::from).filter(|&k| k > 0) {
            None => self
                .nodes
                .iter()
                .filter(live)
                .map(|n| n.url.clone())
                .collect(),
            Some(k) => self
                .nodes
                .chunks(k)
                .filter_map(|member| {
                    let seeds: Vec<String> = member
                        .iter()
                        .filter(live)
                        .map(|n| format!("127.0.0.1:{}", n.port))
                        .collect();
                    (!seeds.is_empty()).then(|| format!("redis+cluster://{}", seeds.join(",")))
                })
                .collect(),
        }
    }

    /// Whether the process that is starting this cluster is still at it.
    pub fn is_being_started(&self) -> bool {
        self.status == "starting"
            && self.owner_pid != std::process::id()
            && procs::stat(self.owner_pid).is_some_and(|s| !matches!(s.state, 'Z' | 'X'))
    }
}

/// The state directory (see the module's documentation).
///
/// # Errors
///
/// [`exit::CONFIG`] when neither `MUXLOCK_STATE_DIR`, `XDG_STATE_HOME` nor `HOME` is set.
pub fn dir() -> Result<PathBuf, CliError> {
    let set = |name| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = set("MUXLOCK_STATE_DIR") {
        return Ok(dir);
    }
    if let Some(dir) = set("XDG_STATE_HOME") {
        return Ok(dir.join("muxlock"));
    }
    if let Some(home) = set("HOME") {
        return Ok(home.join(".local/state/muxlock"));
    }
    Err(CliError::config(
        "no place for the cluster's state: set MUXLOCK_STATE_DIR (or HOME)",
    ))
}

/// `cluster.json` in the state directory.
pub fn file(dir: &Path) -> PathBuf {
    dir.join("cluster.json")
}

/// The nodes' data directories' parent.
pub fn data_dir(dir: &Path) -> PathBuf {
    dir.join("cluster")
}

/// Reads the record, if there is one.
///
/// # Errors
///
/// [`exit::CONFIG`] for a record that cannot be read or understood (it names the file, to remove by hand).
pub fn load(dir: &Path) -> Result<Option<ClusterState>, CliError> {
    let path = file(dir);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CliError::config(format!(
                "cannot read the local cluster's record {}: {e}",
                path.display()
            )));
        }
    };
    let state: ClusterState = serde_json::from_str(&text).map_err(|e| {
        CliError::config(format!(
            "the local cluster's record {} is not valid ({e}): stop its redis-server processes and remove it",
            path.display()
        ))
    })?;
    if !(OLDEST_VERSION..=VERSION).contains(&state.version) {
        return Err(CliError::config(format!(
            "the local cluster's record {} has version {}, this muxlock reads versions {OLDEST_VERSION} to \
             {VERSION}",
            path.display(),
            state.version
        )));
    }
    Ok(Some(state))
}

/// Creates the record for a new cluster, failing if one exists (two `cluster up` at once: one wins).
///
/// # Errors
///
/// `AlreadyExists` if there is a record; other I/O errors as they come.
pub fn create(dir: &Path, state: &ClusterState) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file(dir))?;
    f.write_all(&to_json(state)?)?;
    f.sync_all()
}

/// Replaces the record (write a temporary file, then rename it over the record).
///
/// # Errors
///
/// The I/O error.
pub fn save(dir: &Path, state: &ClusterState) -> io::Result<()> {
    let tmp = dir.join(format!("cluster.json.{}.tmp", std::process::id()));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(&to_json(state)?)?;
    f.sync_all()?;
    fs::rename(&tmp, file(dir))
}

/// Removes the record and the nodes' data directories.
///
/// # Errors
///
/// The first I/O error other than "not found".
pub fn remove(dir: &Path) -> io::Result<()> {
    let gone = |r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    gone(fs::remove_dir_all(data_dir(dir)))?;
    gone(fs::remove_file(file(dir)))
}

/// Where the record is, for messages.
pub fn describe(dir: &Path) -> String {
    file(dir).display().to_string()
}

fn to_json(state: &ClusterState) -> io::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(state).map_err(io::Error::other)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Milliseconds since the Unix epoch (0 before it).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The error for a state directory that cannot be written.
pub fn cannot_write(dir: &Path, e: &io::Error) -> CliError {
    CliError::new(
        exit::CANTCREAT,
        "cluster",
        format!(
            "cannot write the local cluster's state in {}: {e} (set MUXLOCK_STATE_DIR to a writable directory)",
            dir.display()
        ),
    )
}
