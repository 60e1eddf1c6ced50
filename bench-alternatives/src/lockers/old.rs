//! The seed's single-instance `SETNX` + `GETSET` timestamp scheme on one Redis, **as a baseline only**: it is
//! unsafe (`tests/api/old_scheme.rs` shows it granting one lock to two holders) and is no part of muxlock. The client
//! is `tests/api/old_scheme/scheme.rs`, on a blocking socket whose timeouts are the bench's bound (so a timeout is
//! counted as hung). The lock's timeout is the scenario's TTL; waiting polls.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

// `with_clock_offset` is for tests/api/old_scheme.rs (clients whose clocks disagree), unused here.
#[allow(dead_code)]
#[path = "../../../tests/api/old_scheme/scheme.rs"]
mod scheme;

use scheme::{OldLock, OldScheme};

use super::{BOUND, Call, Factory, Locker, Pids, poll};

pub struct OldFactory {
    pub addr: SocketAddr,
    pub pid: u32,
}

impl Factory for OldFactory {
    fn name(&self) -> String {
        "old SETNX+GETSET (1 Redis)".into()
    }

    fn locker(&self, _shared: bool, ttl: Duration) -> Box<dyn Locker> {
        Box::new(OldLocker {
            addr: self.addr,
            ttl,
            client: None,
            held: None,
        })
    }

    fn servers(&self) -> Pids {
        Pids {
            pids: vec![self.pid],
            trees: Vec::new(),
        }
    }
}

pub struct OldLocker {
    addr: SocketAddr,
    ttl: Duration,
    client: Option<OldScheme>,
    held: Option<(OldLock, Instant)>,
}

fn judge<T>(result: std::io::Result<T>) -> Call<T> {
    match result {
        Ok(v) => Call::Ok(v),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Call::Hung
        }
        Err(e) => Call::Failed(e.to_string()),
    }
}

impl OldLocker {
    fn attempt(&mut self, name: &str) -> Call<bool> {
        if self.client.is_none() {
            match judge(OldScheme::connect(self.addr, BOUND)) {
                Call::Ok(c) => self.client = Some(c),
                Call::Failed(e) => return Call::Failed(e),
                Call::Hung => return Call::Hung,
            }
        }
        let client = self.client.as_mut().expect("connected");
        match judge(client.try_lock(name.as_bytes(), self.ttl)) {
            Call::Ok(Some(lock)) => {
                // The holder's own clock decides when it stops believing: now + what its timestamp leaves.
                let end = Instant::now() + client.remaining(&lock);
                self.held = Some((lock, end));
                Call::Ok(true)
            }
            Call::Ok(None) => Call::Ok(false),
            Call::Failed(e) => {
                self.client = None;
                Call::Failed(e)
            }
            Call::Hung => {
                self.client = None;
                Call::Hung
            }
        }
    }
}

impl Locker for OldLocker {
    fn try_acquire(&mut self, name: &str) -> Call<bool> {
        self.attempt(name)
    }

    fn acquire(&mut self, name: &str) -> Call<bool> {
        poll(|| self.attempt(name))
    }

    fn release(&mut self) -> Call<()> {
        let Some((lock, _)) = self.held.take() else {
            return Call::Failed("nothing held".into());
        };
        let Some(client) = self.client.as_mut() else {
            return Call::Failed("connection lost while held".into());
        };
        // The seed's unlock: DEL if our clock says our timestamp has not passed; nothing otherwise.
        match judge(client.unlock(&lock)) {
            Call::Ok(_) => Call::Ok(()),
            Call::Failed(e) => {
                self.client = None;
                Call::Failed(e)
            }
            Call::Hung => {
                self.client = None;
                Call::Hung
            }
        }
    }

    fn lease_end(&self) -> Option<Instant> {
        self.held.as_ref().map(|(_, end)| *end)
    }
}
