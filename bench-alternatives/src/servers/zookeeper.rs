//! [`ZooKeeper`]: one ZooKeeper server or an ensemble of three, each a `java` process with a generated config
//! on free loopback ports and a data dir of its own, from the Debian package's jar (`zookeeperd` pulls it in).
//!
//! The timing settings are the package's example config (and ZooKeeper's documented defaults): `tickTime=2000`,
//! `initLimit=10`, `syncLimit=5`. The transaction log is synced to disk on every write (`forceSync`, the
//! default). Readiness is the four-letter command `srvr` reporting a mode (`standalone`, `leader`, `follower`).

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{Proc, Target, find_binary, free_ports, write_file};

/// The jar (its manifest names the other jars it needs).
const JAR: &str = "/usr/share/java/zookeeper.jar";

#[derive(Debug)]
struct Node {
    id: usize,
    dir: PathBuf,
    client_port: u16,
    proc: Option<Proc>,
}

#[derive(Debug)]
pub struct ZooKeeper {
    java: PathBuf,
    classpath: String,
    nodes: Vec<Node>,
    /// The node the last fault was injected into.
    failed: Option<usize>,
}

impl ZooKeeper {
    /// Starts `n` servers (1: standalone; 3: an ensemble) and waits until every one serves. A start that fails
    /// (a port taken meanwhile by another server starting beside it) is retried on new ports, twice.
    pub fn start(dir: &Path, n: usize) -> Result<ZooKeeper, String> {
        let mut last = String::new();
        for attempt in 0..3 {
            match ZooKeeper::start_once(&dir.join(format!("try{attempt}")), n) {
                Ok(zk) => return Ok(zk),
                Err(e) if e.starts_with("ZooKeeper not found") => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start_once(dir: &Path, n: usize) -> Result<ZooKeeper, String> {
        const MISSING: &str =
            "ZooKeeper not found: run scripts/bench-alternatives (it installs zookeeperd and java)";
        let java = find_binary("java", &[]).ok_or(MISSING)?;
        let classpath = std::env::var("ZOOKEEPER_CLASSPATH").unwrap_or_else(|_| JAR.into());
        if std::env::var_os("ZOOKEEPER_CLASSPATH").is_none() && !Path::new(JAR).exists() {
            return Err(MISSING.into());
        }
        // All 3n ports distinct: a port given twice (client and election, say) makes "Invalid config".
        let all = free_ports(3 * n);
        let ports: Vec<(u16, u16, u16)> = all.chunks(3).map(|c| (c[0], c[1], c[2])).collect();
        let servers: String = if n > 1 {
            ports
                .iter()
                .enumerate()
                .map(|(i, (_, peer, election))| {
                    format!("server.{}=127.0.0.1:{peer}:{election}\n", i + 1)
                })
                .collect()
        } else {
            String::new()
        };
        let mut zk = ZooKeeper {
            java,
            classpath,
            nodes: Vec::new(),
            failed: None,
        };
        for (i, (client, _, _)) in ports.iter().enumerate() {
            let node_dir = dir.join(format!("zk{}", i + 1));
            let data = node_dir.join("data");
            std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
            write_file(&data.join("myid"), &format!("{}\n", i + 1));
            write_file(
                &node_dir.join("zoo.cfg"),
                &format!(
                    "tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={client}\n\
                     clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\n\
                     maxClientCnxns=0\n{servers}",
                    data.display()
                ),
            );
            zk.nodes.push(Node {
                id: i + 1,
                dir: node_dir,
                client_port: *client,
                proc: None,
            });
        }
        // An ensemble's nodes must start together: each waits for the others to elect a leader.
        for i in 0..n {
            zk.spawn(i)?;
        }
        for i in 0..n {
            zk.wait_serving(i)?;
        }
        Ok(zk)
    }

    /// `host:port,host:port,...` for the client.
    pub fn connect_string(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// What `srvr` says the version is.
    pub fn version(&self) -> String {
        self.nodes
            .iter()
            .find_map(|n| srvr(n.client_port))
            .and_then(|out| {
                out.lines()
                    .find_map(|l| l.strip_prefix("Zookeeper version: ").map(str::to_owned))
            })
            .map_or("ZooKeeper ?".into(), |v| {
                format!("ZooKeeper {}", v.split([',', '-']).next().unwrap_or(&v))
            })
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn pgids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter_map(|n| n.proc.as_ref().map(Proc::pgid))
            .collect()
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let node = &mut self.nodes[i];
        let mut cmd = Command::new(&self.java);
        cmd.args([
            "-Xms64m",
            "-Xmx256m",
            "-Dzookeeper.admin.enableServer=false",
        ])
        .arg("-cp")
        .arg(format!("{}:{}", node.dir.display(), self.classpath))
        .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
        .arg(node.dir.join("zoo.cfg"));
        let proc = Proc::spawn(
            &format!("zookeeper {}", node.id),
            cmd,
            &node.dir.join("zookeeper.log"),
        )
        .map_err(|e| format!("java: {e}"))?;
        node.proc = Some(proc);
        Ok(())
    }

    fn wait_serving(&mut self, i: usize) -> Result<(), String> {
        let port = self.nodes[i].client_port;
        let proc = self.nodes[i].proc.as_mut().ok_or("not started")?;
        proc.wait_ready(|_| mode(port).is_some())
    }

    /// The index of the node that says it leads (or the only node).
    pub fn leader(&self) -> Option<usize> {
        if self.nodes.len() == 1 {
            return Some(0);
        }
        self.nodes
            .iter()
            .position(|n| mode(n.client_port).as_deref() == Some("leader"))
    }

    fn target(&mut self) -> usize {
        let i = self.leader().unwrap_or(0);
        self.failed = Some(i);
        i
    }
}

/// What the four-letter command `srvr` answers, if the server serves.
fn srvr(port: u16) -> Option<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"srvr").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// What `srvr` says the server's mode is, if it serves.
fn mode(port: u16) -> Option<String> {
    srvr(port)?
        .lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(str::to_owned)
}

impl Target for ZooKeeper {
    fn what(&self) -> String {
        match (self.nodes.len(), self.failed) {
            (1, _) => "the server".into(),
            (n, Some(i)) => format!("node {} of {n}, the leader", i + 1),
            (n, None) => format!("the leader of {n}"),
        }
    }

    fn kill(&mut self) {
        let i = self.target();
        if let Some(mut p) = self.nodes[i].proc.take() {
            p.kill();
        }
    }

    fn restart(&mut self) {
        let i = self.failed.unwrap_or(0);
        if let Some(mut p) = self.nodes[i].proc.take() {
            p.kill();
        }
        self.spawn(i).expect("ZooKeeper restarts");
        self.wait_serving(i).expect("ZooKeeper serves again");
    }

    fn pause(&mut self) {
        let i = self.target();
        if let Some(p) = &mut self.nodes[i].proc {
            p.pause();
        }
    }

    fn resume(&mut self) {
        let i = self.failed.unwrap_or(0);
        if let Some(p) = &mut self.nodes[i].proc {
            p.resume();
        }
    }
}
