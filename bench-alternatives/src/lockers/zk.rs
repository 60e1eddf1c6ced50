//! ZooKeeper's lock recipe (ZooKeeper's "Recipes and Solutions", the seed's "基于Zookeeper的分布式锁") on
//! `zookeeper-client`: create an ephemeral sequential node under the resource's node; the lowest sequence holds
//! the lock; a waiter watches the node just before its own and looks again when that one goes; release deletes
//! the node. The node's name carries the session id (`x-<session>-`, as ZooKeeper's own `WriteLock` does), so
//! that a create whose reply was lost can be found again instead of leaving an orphan in the queue.
//!
//! One attempt ([`Locker::try_acquire`]) creates the node, lists the queue, and deletes its node again if it is
//! not first: three round trips when held, two when free.
//!
//! After a call that failed or hung, the client keeps its session, as Curator does: a ZooKeeper session outlives
//! a lost connection and a server restart (until its timeout, here the server's minimum, 2 × `tickTime` = 4 s),
//! and the client reconnects it by itself. Only a terminal session (expired, closed) is replaced. Such a call
//! may have left our node in a queue (a create whose reply never came, a wait cut at the bound, a delete that
//! did not return): the next attempt first deletes our session's nodes from that queue, then queues afresh. Dropping
//! sessions on every failure instead was tried first: their nodes stayed in the queue for a session timeout
//! each after the server came back, and new ones kept coming, so the locks never came back in the window.
//!
//! The crate's own `Client::lock` does the same round trips, but releases by deleting in the background when its
//! guard drops, so a release could not be timed; this is the recipe written out, with a release that waits for
//! the deletion. The holder believes in its lock while its session is connected (`SessionState::SyncConnected`),
//! as Curator advises ("SUSPENDED" means: assume the lock may be lost).

use std::time::Duration;

use tokio::runtime::Handle;
use zookeeper_client::{Acls, Client, CreateMode, Error, SessionState};

use super::{BOUND, Call, Factory, Locker, Pids, bounded};

pub struct ZkFactory {
    pub rt: Handle,
    pub connect: String,
    pub nodes: usize,
    pub pgids: Vec<u32>,
    shared: std::sync::Mutex<Option<Client>>,
}

impl ZkFactory {
    pub fn new(rt: Handle, connect: String, nodes: usize, pgids: Vec<u32>) -> ZkFactory {
        ZkFactory {
            rt,
            connect,
            nodes,
            pgids,
            shared: std::sync::Mutex::new(None),
        }
    }
}

impl Factory for ZkFactory {
    fn name(&self) -> String {
        if self.nodes == 1 {
            "ZooKeeper (1 server)".into()
        } else {
            format!("ZooKeeper ({}-node ensemble)", self.nodes)
        }
    }

    fn locker(&self, shared: bool, _ttl: Duration) -> Box<dyn Locker> {
        let client = if shared {
            let mut slot = self.shared.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_none() {
                *slot = connect(&self.rt, &self.connect);
            }
            slot.clone()
        } else {
            None
        };
        Box::new(ZkLocker {
            rt: self.rt.clone(),
            connect: self.connect.clone(),
            client,
            stale: Vec::new(),
            held: None,
        })
    }

    fn servers(&self) -> Pids {
        Pids {
            pids: Vec::new(),
            trees: self.pgids.clone(),
        }
    }
}

fn connect(rt: &Handle, connect: &str) -> Option<Client> {
    let connect = connect.to_owned();
    match bounded(rt, BOUND, async move {
        Client::connector().connect(&connect).await
    }) {
        Call::Ok(c) => Some(c),
        _ => None,
    }
}

pub struct ZkLocker {
    rt: Handle,
    connect: String,
    client: Option<Client>,
    /// The queues (lock dirs) calls that were cut off or failed may have left our nodes in.
    stale: Vec<String>,
    /// The path of our node while we hold the lock.
    held: Option<String>,
}

/// The sequence number: the last 10 characters of a child's name.
fn sequence(child: &str) -> &str {
    &child[child.len().saturating_sub(10)..]
}

/// Creates our node in `dir`'s queue, after deleting our session's nodes from the `stale` queues (left by calls
/// that were cut off), and waits (or, with `wait` false, does not) until it is first. `Ok(None)`: not first, and
/// we left the queue again.
async fn lock(
    client: &Client,
    dir: &str,
    wait: bool,
    stale: &[String],
) -> Result<Option<String>, Error> {
    let mine = format!("x-{:x}-", client.session_id().0);
    let prefix = format!("{dir}/{mine}");
    let find_ours = |dir: String| {
        let mine = mine.clone();
        async move {
            let children = client.list_children(&dir).await?;
            Ok::<_, Error>(
                children
                    .into_iter()
                    .filter(|c| c.starts_with(&mine))
                    .map(|c| format!("{dir}/{c}"))
                    .collect::<Vec<_>>(),
            )
        }
    };
    for stale in stale {
        for path in find_ours(stale.clone()).await? {
            match client.delete(&path, None).await {
                Ok(()) | Err(Error::NoNode) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let path = match client.create(&prefix, b"", &options).await {
        Ok((_, seq)) => format!("{prefix}{seq}"),
        // The create may have happened: find our node by the session id in its name.
        Err(Error::ConnectionLoss) => find_ours(dir.to_owned())
            .await?
            .pop()
            .ok_or(Error::ConnectionLoss)?,
        Err(e) => return Err(e),
    };
    let me = &path[dir.len() + 1..];
    loop {
        let mut children = client.list_children(dir).await?;
        children.sort_by(|a, b| sequence(a).cmp(sequence(b)));
        let Some(at) = children.iter().position(|c| c == me) else {
            return Err(Error::RuntimeInconsistent); // our node is gone: the session expired
        };
        if at == 0 {
            return Ok(Some(path));
        }
        if !wait {
            client.delete(&path, None).await?;
            return Ok(None);
        }
        let before = format!("{dir}/{}", children[at - 1]);
        let (stat, watcher) = client.check_and_watch_stat(&before).await?;
        if stat.is_some() {
            watcher.changed().await;
        }
    }
}

impl ZkLocker {
    fn attempt(&mut self, name: &str, wait: bool) -> Call<bool> {
        self.renew_if_ended();
        if self.client.is_none() {
            self.client = connect(&self.rt, &self.connect);
        }
        let Some(client) = self.client.clone() else {
            return Call::Failed("no ZooKeeper session".into());
        };
        let dir = format!("/locks/{name}");
        let stale = self.stale.clone();
        let queue = dir.clone();
        let result = bounded(&self.rt, BOUND, async move {
            lock(&client, &queue, wait, &stale).await
        });
        if result.is_ok() {
            self.stale.clear();
        } else if !self.stale.contains(&dir) {
            self.stale.push(dir);
        }
        match result {
            Call::Ok(Some(path)) => {
                self.held = Some(path);
                Call::Ok(true)
            }
            Call::Ok(None) => Call::Ok(false),
            Call::Failed(e) => Call::Failed(e),
            Call::Hung => Call::Hung,
        }
    }

    /// Replaces a session that ended for good (expired, closed, failed authentication); keeps one that is only
    /// disconnected, since the client reconnects it by itself.
    fn renew_if_ended(&mut self) {
        let ended = self.client.as_ref().is_some_and(|c| {
            !matches!(
                c.state(),
                SessionState::SyncConnected
                    | SessionState::Disconnected
                    | SessionState::ConnectedReadOnly
            )
        });
        if ended {
            self.reset();
        }
    }

    /// Drops the session (closing it if it can: its ephemeral nodes go with it); the next call opens a new one.
    fn reset(&mut self) {
        let _guard = self.rt.enter();
        self.client = None;
        self.stale.clear();
    }
}

impl Locker for ZkLocker {
    fn prepare(&mut self, names: &[String]) -> Result<(), String> {
        if self.client.is_none() {
            self.client = connect(&self.rt, &self.connect);
        }
        let client = self.client.clone().ok_or("no ZooKeeper session")?;
        let names = names.to_vec();
        let made = bounded(&self.rt, Duration::from_secs(120), async move {
            let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
            for path in std::iter::once("/locks".to_owned())
                .chain(names.iter().map(|n| format!("/locks/{n}")))
            {
                match client.create(&path, b"", &options).await {
                    Ok(_) | Err(Error::NodeExists) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        match made {
            Call::Ok(()) => Ok(()),
            other => Err(format!("creating lock nodes: {other:?}")),
        }
    }

    fn try_acquire(&mut self, name: &str) -> Call<bool> {
        self.attempt(name, false)
    }

    fn acquire(&mut self, name: &str) -> Call<bool> {
        self.attempt(name, true)
    }

    fn release(&mut self) -> Call<()> {
        let Some(path) = self.held.take() else {
            return Call::Failed("nothing held".into());
        };
        let Some(client) = self.client.clone() else {
            return Call::Failed("session gone while held".into());
        };
        let path_dir = path.rsplit_once('/').map(|(dir, _)| dir.to_owned());
        let result = bounded(
            &self.rt,
            BOUND,
            async move { client.delete(&path, None).await },
        );
        // A delete cut off or failed may have left our node: the next attempt deletes it first.
        if let Some(dir) = path_dir.filter(|d| !result.is_ok() && !self.stale.contains(d)) {
            self.stale.push(dir);
        }
        result
    }

    fn still_valid(&self) -> bool {
        self.client
            .as_ref()
            .is_some_and(|c| c.state() == SessionState::SyncConnected)
    }
}

impl Drop for ZkLocker {
    fn drop(&mut self) {
        self.reset();
    }
}
