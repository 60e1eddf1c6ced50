//! The seed's two database-table locks ("基于数据库表的增删", "基于数据库排他锁") on MariaDB (InnoDB) with
//! `mysql_async`, one connection per client, statements prepared once per connection:
//!
//! - [`Mode::Row`]: lock = `INSERT INTO locks.held (name, owner) VALUES (?, ?)` (the unique key on `name` lets
//!   one insert win; a duplicate-key error means held), release = `DELETE FROM locks.held WHERE name = ? AND
//!   owner = ?`. Autocommit: each is a transaction of its own, flushed to disk. Waiting polls. The row stays if
//!   its holder never deletes it (a crash, a lost connection): the seed's answer is a clean-up job deleting
//!   rows older than a timeout, not built here, so such a resource stays locked.
//! - [`Mode::ForUpdate`]: lock = `BEGIN` + `SELECT name FROM locks.resources WHERE name = ? FOR UPDATE` (the row
//!   exists beforehand), release = `COMMIT`. Waiting happens in the server (`innodb_lock_wait_timeout` set to 2 s
//!   for the session, close to the bench's bound); one attempt adds `NOWAIT`. The lock belongs to the
//!   transaction: a lost connection rolls it back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder};
use tokio::runtime::Handle;

use super::{BOUND, Call, Factory, Locker, Pids, bounded, poll};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Row,
    ForUpdate,
}

pub struct MariaFactory {
    pub rt: Handle,
    pub url: String,
    pub pgid: u32,
    pub mode: Mode,
}

/// Creates the tables, once per server.
pub fn create_tables(rt: &Handle, url: &str) -> Result<(), String> {
    let opts = Opts::from_url(url).map_err(|e| e.to_string())?;
    let made = bounded(rt, Duration::from_secs(30), async move {
        let mut conn = Conn::new(opts).await?;
        conn.query_drop("CREATE DATABASE IF NOT EXISTS locks")
            .await?;
        conn.query_drop(
            "CREATE TABLE IF NOT EXISTS locks.held (name VARCHAR(191) PRIMARY KEY, owner VARCHAR(64) NOT NULL, \
             since TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE=InnoDB",
        )
        .await?;
        conn.query_drop(
            "CREATE TABLE IF NOT EXISTS locks.resources (name VARCHAR(191) PRIMARY KEY) ENGINE=InnoDB",
        )
        .await?;
        conn.disconnect().await
    });
    match made {
        Call::Ok(()) => Ok(()),
        Call::Failed(e) => Err(e),
        Call::Hung => Err("MariaDB: creating the tables hung".into()),
    }
}

impl Factory for MariaFactory {
    fn name(&self) -> String {
        match self.mode {
            Mode::Row => "MariaDB row insert/delete".into(),
            Mode::ForUpdate => "MariaDB SELECT ... FOR UPDATE".into(),
        }
    }

    fn locker(&self, _shared: bool, _ttl: Duration) -> Box<dyn Locker> {
        static OWNER: AtomicU64 = AtomicU64::new(0);
        Box::new(MariaLocker {
            rt: self.rt.clone(),
            url: self.url.clone(),
            mode: self.mode,
            owner: format!(
                "{}.{}",
                std::process::id(),
                OWNER.fetch_add(1, Ordering::Relaxed)
            ),
            conn: None,
            held: None,
        })
    }

    fn servers(&self) -> Pids {
        Pids {
            pids: Vec::new(),
            trees: vec![self.pgid],
        }
    }
}

pub struct MariaLocker {
    rt: Handle,
    url: String,
    mode: Mode,
    owner: String,
    conn: Option<Conn>,
    held: Option<String>,
}

/// A duplicate key (`INSERT`) or a lock wait that gave up (`NOWAIT`, `innodb_lock_wait_timeout`).
fn is_held(e: &mysql_async::Error) -> bool {
    matches!(e, mysql_async::Error::Server(s) if matches!(s.code, 1062 | 1205 | 3572))
}

impl MariaLocker {
    fn connect(&mut self) -> Result<(), Call<bool>> {
        if self.conn.is_some() {
            return Ok(());
        }
        let opts = Opts::from_url(&self.url).map_err(|e| Call::Failed(e.to_string()))?;
        let opts =
            OptsBuilder::from_opts(opts).init(vec!["SET SESSION innodb_lock_wait_timeout = 2"]);
        match bounded(&self.rt, BOUND, Conn::new(opts)) {
            Call::Ok(conn) => {
                self.conn = Some(conn);
                Ok(())
            }
            Call::Failed(e) => Err(Call::Failed(e)),
            Call::Hung => Err(Call::Hung),
        }
    }

    fn drop_conn(&mut self) {
        let _guard = self.rt.enter();
        self.conn = None;
    }

    /// One attempt; `wait`: let `FOR UPDATE` wait in the server.
    fn attempt(&mut self, name: &str, wait: bool) -> Call<bool> {
        if let Err(c) = self.connect() {
            return c;
        }
        let (mode, owner) = (self.mode, self.owner.clone());
        let conn = self.conn.as_mut().expect("connected");
        let name_owned = name.to_owned();
        let result = bounded(&self.rt, BOUND, async move {
            let outcome = match mode {
                Mode::Row => {
                    conn.exec_drop(
                        "INSERT INTO locks.held (name, owner) VALUES (?, ?)",
                        (name_owned, owner),
                    )
                    .await
                }
                Mode::ForUpdate => {
                    conn.query_drop("BEGIN").await?;
                    let sql = if wait {
                        "SELECT name FROM locks.resources WHERE name = ? FOR UPDATE"
                    } else {
                        "SELECT name FROM locks.resources WHERE name = ? FOR UPDATE NOWAIT"
                    };
                    let r = conn.exec_first::<String, _, _>(sql, (name_owned,)).await;
                    match r {
                        Ok(Some(_)) => Ok(()),
                        Ok(None) => {
                            conn.query_drop("ROLLBACK").await?;
                            return Err(mysql_async::Error::Other("no such resource row".into()));
                        }
                        Err(e) => {
                            conn.query_drop("ROLLBACK").await?;
                            Err(e)
                        }
                    }
                }
            };
            match outcome {
                Ok(()) => Ok(true),
                Err(e) if is_held(&e) => Ok(false),
                Err(e) => Err(e),
            }
        });
        match &result {
            Call::Ok(true) => self.held = Some(name.to_owned()),
            Call::Ok(false) => {}
            Call::Failed(_) | Call::Hung => self.drop_conn(),
        }
        result
    }
}

impl Locker for MariaLocker {
    fn prepare(&mut self, names: &[String]) -> Result<(), String> {
        if self.mode == Mode::Row {
            return Ok(());
        }
        if let Err(c) = self.connect() {
            return Err(format!("connect: {c:?}"));
        }
        let conn = self.conn.as_mut().expect("connected");
        let names = names.to_vec();
        match bounded(&self.rt, Duration::from_secs(60), async move {
            for chunk in names.chunks(500) {
                let values = vec!["(?)"; chunk.len()].join(",");
                let sql = format!("INSERT IGNORE INTO locks.resources (name) VALUES {values}");
                conn.exec_drop(sql, chunk.to_vec()).await?;
            }
            Ok::<_, mysql_async::Error>(())
        }) {
            Call::Ok(()) => Ok(()),
            other => Err(format!("creating resource rows: {other:?}")),
        }
    }

    fn try_acquire(&mut self, name: &str) -> Call<bool> {
        self.attempt(name, false)
    }

    fn acquire(&mut self, name: &str) -> Call<bool> {
        match self.mode {
            Mode::Row => poll(|| self.attempt(name, false)),
            Mode::ForUpdate => self.attempt(name, true),
        }
    }

    fn release(&mut self) -> Call<()> {
        let Some(name) = self.held.take() else {
            return Call::Failed("nothing held".into());
        };
        let Some(conn) = self.conn.as_mut() else {
            return Call::Failed("connection lost while held".into());
        };
        let (mode, owner) = (self.mode, self.owner.clone());
        let result = bounded(&self.rt, BOUND, async move {
            match mode {
                Mode::Row => {
                    conn.exec_drop(
                        "DELETE FROM locks.held WHERE name = ? AND owner = ?",
                        (name, owner),
                    )
                    .await?;
                    Ok(conn.affected_rows() == 1)
                }
                Mode::ForUpdate => conn.query_drop("COMMIT").await.map(|()| true),
            }
        });
        match result {
            Call::Ok(true) => Call::Ok(()),
            Call::Ok(false) => Call::Failed("the lock row was not ours any more".into()),
            Call::Failed(e) => {
                self.drop_conn();
                Call::Failed(e)
            }
            Call::Hung => {
                self.drop_conn();
                Call::Hung
            }
        }
    }
}

impl Drop for MariaLocker {
    fn drop(&mut self) {
        self.drop_conn();
    }
}
