//! [`MariaDb`]: a MariaDB server of our own (`mariadb-install-db` into a temp dir, `mariadbd` on a free loopback
//! port), with the Debian package's binaries and InnoDB's defaults (every commit flushed to disk).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Proc, Target, file_len, find_binary, free_port, is_root, log_has};

#[derive(Debug)]
pub struct MariaDb {
    mariadbd: PathBuf,
    dir: PathBuf,
    log: PathBuf,
    port: u16,
    proc: Option<Proc>,
}

impl MariaDb {
    /// `mariadb-install-db` (root without a password on 127.0.0.1) and start.
    pub fn start(dir: &Path) -> Result<MariaDb, String> {
        const MISSING: &str =
            "MariaDB not found: run scripts/bench-alternatives (it installs mariadb-server)";
        let sbin = [
            PathBuf::from("/usr/sbin/mariadbd"),
            PathBuf::from("/usr/bin/mariadbd"),
        ];
        let mariadbd = find_binary("mariadbd", &sbin).ok_or(MISSING)?;
        let install = find_binary(
            "mariadb-install-db",
            &[PathBuf::from("/usr/bin/mariadb-install-db")],
        )
        .ok_or(MISSING)?;
        let data = dir.join("data");
        let mut cmd = Command::new(install);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if is_root() {
            cmd.arg("--user=root");
        }
        let out = cmd
            .output()
            .map_err(|e| format!("mariadb-install-db: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mariadb-install-db failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut db = MariaDb {
            mariadbd,
            log: dir.join("mariadb.log"),
            dir: dir.to_path_buf(),
            port: 0,
            proc: None,
        };
        let mut last = String::new();
        for _ in 0..5 {
            db.port = free_port();
            match db.spawn() {
                Ok(()) => return Ok(db),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// What `mariadbd --version` says, without the path.
    pub fn version(&self) -> String {
        let out = Command::new(&self.mariadbd).arg("--version").output();
        let text = out.map_or(String::new(), |o| {
            String::from_utf8_lossy(&o.stdout).trim().to_owned()
        });
        text.split_once(" Ver ")
            .map_or(text.clone(), |(_, v)| format!("mariadbd {v}"))
    }

    /// A `mysql_async` URL.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/mysql", self.port)
    }

    pub fn pgid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pgid)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let from = file_len(&self.log);
        let mut cmd = Command::new(&self.mariadbd);
        let path = |name: &str| self.dir.join(name).display().to_string();
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", path("data")))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", path("mysqld.sock")))
            .arg(format!("--pid-file={}", path("mysqld.pid")))
            .arg(format!("--log-error={}", self.log.display()))
            .args([
                "--skip-log-bin",
                "--skip-name-resolve",
                "--max-connections=300",
            ])
            .args(["--innodb-buffer-pool-size=64M"]);
        if is_root() {
            cmd.arg("--user=root");
        }
        let mut proc =
            Proc::spawn("mariadbd", cmd, &self.log).map_err(|e| format!("mariadbd: {e}"))?;
        let log = self.log.clone();
        proc.wait_ready(|_| log_has(&log, from, "ready for connections"))?;
        self.proc = Some(proc);
        Ok(())
    }
}

impl Target for MariaDb {
    fn what(&self) -> String {
        "the server".into()
    }

    fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    fn restart(&mut self) {
        self.kill();
        self.spawn().expect("MariaDB restarts");
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
