//! [`Postgres`]: a PostgreSQL cluster of our own (`initdb` into a temp dir, `postgres` on a free loopback port),
//! with the Debian package's binaries. As root it runs as the `postgres` user, since PostgreSQL refuses root.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Proc, Target, file_len, find_binary, free_port, is_root, log_has, user_ids};

#[derive(Debug)]
pub struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    user: Option<(u32, u32)>,
    proc: Option<Proc>,
}

/// `$PG_BINDIR`, else the newest `/usr/lib/postgresql/<version>/bin`, else `PATH`.
fn bindir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PG_BINDIR") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin")))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, dir)| dir)
        .or_else(|| find_binary("postgres", &[]).and_then(|p| p.parent().map(Path::to_path_buf)))
}

impl Postgres {
    /// `initdb` (trust authentication on loopback, user `postgres`) and start.
    pub fn start(dir: &Path) -> Result<Postgres, String> {
        let bin = bindir().ok_or(
            "PostgreSQL not found: run scripts/bench-alternatives (it installs postgresql)",
        )?;
        let user =
            if is_root() {
                Some(user_ids("postgres").ok_or(
                    "running as root, and there is no `postgres` user to run PostgreSQL as",
                )?)
            } else {
                None
            };
        let data = dir.join("data");
        std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
        if let Some((uid, gid)) = user {
            for d in [dir, &data] {
                std::os::unix::fs::chown(d, Some(uid), Some(gid))
                    .map_err(|e| format!("chown {}: {e}", d.display()))?;
            }
        }
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
                "-D",
            ])
            .arg(&data);
        if let Some((uid, gid)) = user {
            initdb.uid(uid).gid(gid);
        }
        let out = initdb.output().map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut pg = Postgres {
            bin,
            log: dir.join("postgres.log"),
            data,
            port: 0,
            user,
            proc: None,
        };
        let mut last = String::new();
        for _ in 0..5 {
            pg.port = free_port();
            match pg.spawn() {
                Ok(()) => return Ok(pg),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// What `postgres --version` says.
    pub fn version(&self) -> String {
        let out = Command::new(self.bin.join("postgres"))
            .arg("--version")
            .output();
        out.map_or("PostgreSQL ?".into(), |o| {
            String::from_utf8_lossy(&o.stdout).trim().to_owned()
        })
    }

    /// A `tokio-postgres` connection string.
    pub fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres connect_timeout=2",
            self.port
        )
    }

    pub fn pgid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pgid)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let from = file_len(&self.log);
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", self.data.display()))
            .args(["-c", "max_connections=200", "-c", "shared_buffers=64MB"])
            .args([
                "-c",
                "logging_collector=off",
                "-c",
                "log_min_messages=warning",
            ])
            // A backend waiting in pg_advisory_lock for a client that went away notices within 0.5 s.
            .args(["-c", "client_connection_check_interval=500ms"]);
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        let mut proc =
            Proc::spawn("postgres", cmd, &self.log).map_err(|e| format!("postgres: {e}"))?;
        let log = self.log.clone();
        proc.wait_ready(|_| log_has(&log, from, "ready to accept connections"))?;
        self.proc = Some(proc);
        Ok(())
    }
}

impl Target for Postgres {
    fn what(&self) -> String {
        "the server (postmaster and every backend)".into()
    }

    fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    fn restart(&mut self) {
        self.kill();
        self.spawn().expect("PostgreSQL restarts");
    }

    fn pause(&mut self) {
        if let Some(p) = &mut self.proc {
            p.pause();
        }
    }

    fn resume(&mut self) {
        if let Some(p) = &mut self.proc {
            p.resume();
        }
    }
}
