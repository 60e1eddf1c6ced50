//! PostgreSQL session-level advisory locks with `tokio-postgres`: `pg_try_advisory_lock($1)` for one attempt,
//! `pg_advisory_lock($1)` (which waits in the server) to wait, `pg_advisory_unlock($1)` to release. The three
//! statements are prepared once per connection, so each call is one round trip. A resource name becomes the
//! lock's 64-bit key by FNV-1a.
//!
//! A session lock belongs to the connection: it lasts until released or until the session ends, and the holder
//! learns that its session ended only when it next uses the connection.

use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio_postgres::{CancelToken, Client, NoTls, Statement};

use super::{BOUND, Call, Factory, Locker, Pids, bounded};

pub struct PgFactory {
    pub rt: Handle,
    pub conninfo: String,
    pub pgid: u32,
}

impl Factory for PgFactory {
    fn name(&self) -> String {
        "PostgreSQL advisory lock".into()
    }

    fn locker(&self, _shared: bool, _ttl: Duration) -> Box<dyn Locker> {
        Box::new(PgLocker {
            rt: self.rt.clone(),
            conninfo: self.conninfo.clone(),
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

struct Conn {
    client: Client,
    cancel: CancelToken,
    task: JoinHandle<()>,
    try_lock: Statement,
    lock: Statement,
    unlock: Statement,
}

pub struct PgLocker {
    rt: Handle,
    conninfo: String,
    conn: Option<Conn>,
    held: Option<i64>,
}

/// FNV-1a, 64 bits, as the advisory lock's key.
fn key(name: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h as i64
}

impl PgLocker {
    fn connect(&mut self) -> Call<()> {
        if self.conn.is_some() {
            return Call::Ok(());
        }
        let conninfo = self.conninfo.clone();
        let rt = self.rt.clone();
        let made = bounded(&self.rt, BOUND, async move {
            let (client, connection) = tokio_postgres::connect(&conninfo, NoTls).await?;
            let task = rt.spawn(async move {
                let _ = connection.await;
            });
            let try_lock = client.prepare("SELECT pg_try_advisory_lock($1)").await?;
            let lock = client.prepare("SELECT pg_advisory_lock($1)").await?;
            let unlock = client.prepare("SELECT pg_advisory_unlock($1)").await?;
            let cancel = client.cancel_token();
            Ok::<_, tokio_postgres::Error>(Conn {
                client,
                cancel,
                task,
                try_lock,
                lock,
                unlock,
            })
        });
        match made {
            Call::Ok(conn) => {
                self.conn = Some(conn);
                Call::Ok(())
            }
            Call::Failed(e) => Call::Failed(e),
            Call::Hung => Call::Hung,
        }
    }

    /// Drops the connection (after a hang or an error): a waiting query is cancelled first, so that its backend
    /// does not take the lock for a client that left.
    fn drop_conn(&mut self, cancel: bool) {
        if let Some(conn) = self.conn.take() {
            if cancel {
                let token = conn.cancel.clone();
                self.rt.spawn(async move {
                    let _ = tokio::time::timeout(BOUND, token.cancel_query(NoTls)).await;
                });
            }
            conn.task.abort();
        }
    }

    fn call_bool(&mut self, which: fn(&Conn) -> &Statement, k: i64) -> Call<bool> {
        if let c @ (Call::Failed(_) | Call::Hung) = self.connect() {
            return c.map_unit();
        }
        let conn = self.conn.as_ref().expect("connected");
        let (client, stmt) = (&conn.client, which(conn).clone());
        let result = bounded(&self.rt, BOUND, async move {
            let row = client.query_one(&stmt, &[&k]).await?;
            // pg_advisory_lock returns void: any row means it was granted.
            Ok::<_, tokio_postgres::Error>(row.try_get::<_, bool>(0).unwrap_or(true))
        });
        match &result {
            Call::Hung => self.drop_conn(true),
            Call::Failed(_) => self.drop_conn(false),
            Call::Ok(_) => {}
        }
        result
    }
}

trait MapUnit {
    fn map_unit(self) -> Call<bool>;
}

impl MapUnit for Call<()> {
    fn map_unit(self) -> Call<bool> {
        match self {
            Call::Ok(()) => Call::Ok(true),
            Call::Failed(e) => Call::Failed(e),
            Call::Hung => Call::Hung,
        }
    }
}

impl Locker for PgLocker {
    fn try_acquire(&mut self, name: &str) -> Call<bool> {
        let k = key(name);
        let result = self.call_bool(|c| &c.try_lock, k);
        if result == Call::Ok(true) {
            self.held = Some(k);
        }
        result
    }

    fn acquire(&mut self, name: &str) -> Call<bool> {
        let k = key(name);
        let result = self.call_bool(|c| &c.lock, k);
        if result == Call::Ok(true) {
            self.held = Some(k);
        }
        result
    }

    fn release(&mut self) -> Call<()> {
        let Some(k) = self.held.take() else {
            return Call::Failed("nothing held".into());
        };
        match self.call_bool(|c| &c.unlock, k) {
            Call::Ok(true) => Call::Ok(()),
            // The session no longer held it: it ended and a new one was made, or it was never ours.
            Call::Ok(false) => Call::Failed("pg_advisory_unlock: not held by this session".into()),
            Call::Failed(e) => Call::Failed(e),
            Call::Hung => Call::Hung,
        }
    }
}

impl Drop for PgLocker {
    fn drop(&mut self) {
        let _guard = self.rt.enter();
        self.drop_conn(false);
    }
}
