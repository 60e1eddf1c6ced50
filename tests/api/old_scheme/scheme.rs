//! The old single-instance Redis lock: `SETNX` of an expiry timestamp, then `GET` and `GETSET` to take over an
//! expired one. **Unsafe, kept only as a baseline** for `tests/api/old_scheme.rs` (which shows it granting one lock to
//! two holders) and for `bench-alternatives/` (which measures it beside muxlock). It is not, and must never be,
//! part of muxlock's API.
//!
//! This is the seed's "方案二" (`../shared/seeds/000_*.txt`), step by step:
//!
//! 1. `SETNX key <now + timeout>`: 1 means the lock is ours.
//! 2. Otherwise `GET key`: if the timestamp in it is before *our* `now`, the lock is taken as expired.
//! 3. `GETSET key <now + timeout>`: if the old value it returns is the one we read in 2, nobody beat us to it and
//!    the lock is ours; if not, someone else took it over first (we have overwritten their timestamp with ours,
//!    which the seed calls harmless).
//! 4. Release: if *our* clock says our timestamp has not passed, `DEL key` (no check of whose lock it is).
//!
//! Why it is unsafe: a lock's end is a wall-clock time written by one client and judged by another client's
//! wall clock (step 2). A client whose clock runs ahead of the holder's by more than the time left sees a held
//! lock as expired and takes it: two holders. The same skew makes a holder whose clock runs behind `DEL` a lock
//! that has meanwhile gone to someone else (step 4). And the key never expires in Redis itself: a holder that
//! dies leaves it until another client's clock says the timestamp passed. muxlock's locks are `SET key value NX
//! PX ttl` (the node expires them on its own clock), released by a compare-and-delete script, with the validity
//! measured on each client's monotonic clock: no client ever reads a wall clock, so there is no skew to exploit.
//!
//! The client speaks RESP through `muxlock::resp` on a blocking `TcpStream` whose read and write timeouts bound
//! every call.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use muxlock::resp::{Value, decode, encode_command};

/// One client of the old scheme, with its own idea of the wall-clock time.
#[derive(Debug)]
pub struct OldScheme {
    stream: TcpStream,
    read: BytesMut,
    write: BytesMut,
    /// Added to this machine's wall clock: a client whose clock disagrees with the others'.
    clock_offset: i64,
}

/// A lock taken by [`OldScheme::try_lock`]: the key, and the expiry timestamp this client wrote (in its own
/// clock's milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OldLock {
    pub key: Vec<u8>,
    pub expires_ms: i64,
}

impl OldScheme {
    /// Connects to one Redis; every later call fails with `TimedOut`/`WouldBlock` if the server does not answer
    /// within `call_timeout`.
    ///
    /// # Errors
    /// If the connection cannot be made.
    pub fn connect(addr: SocketAddr, call_timeout: Duration) -> io::Result<OldScheme> {
        let stream = TcpStream::connect_timeout(&addr, call_timeout)?;
        stream.set_read_timeout(Some(call_timeout))?;
        stream.set_write_timeout(Some(call_timeout))?;
        stream.set_nodelay(true)?;
        Ok(OldScheme {
            stream,
            read: BytesMut::with_capacity(256),
            write: BytesMut::with_capacity(256),
            clock_offset: 0,
        })
    }

    /// This client's clock runs `offset_ms` milliseconds ahead of the machine's (behind, if negative).
    #[must_use]
    pub fn with_clock_offset(mut self, offset_ms: i64) -> OldScheme {
        self.clock_offset = offset_ms;
        self
    }

    /// This client's wall-clock time in milliseconds since the epoch (`System.currentTimeMillis()` in the seed).
    pub fn now_ms(&self) -> i64 {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX) + self.clock_offset
    }

    /// One attempt (the seed's `tryLock`): `Some` if this client now holds `key` until `now + timeout` by its own
    /// clock.
    ///
    /// # Errors
    /// A connection error, a timeout, or a reply of an unexpected type.
    pub fn try_lock(&mut self, key: &[u8], timeout: Duration) -> io::Result<Option<OldLock>> {
        let timeout_ms = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        let now = self.now_ms();
        let expires = now.saturating_add(timeout_ms);
        let stamp = expires.to_string();
        if self.call(&[b"SETNX", key, stamp.as_bytes()])? == Value::Integer(1) {
            return Ok(Some(OldLock {
                key: key.to_vec(),
                expires_ms: expires,
            }));
        }
        let current = match self.call(&[b"GET", key])? {
            Value::BulkString(b) => b,
            // Released between our SETNX and GET: the seed gives up this attempt.
            _ => return Ok(None),
        };
        let Some(current_ms) = parse_ms(&current) else {
            return Ok(None);
        };
        if current_ms >= now {
            return Ok(None); // not expired, by our clock
        }
        match self.call(&[b"GETSET", key, stamp.as_bytes()])? {
            Value::BulkString(old) if old == current => Ok(Some(OldLock {
                key: key.to_vec(),
                expires_ms: expires,
            })),
            // Someone else took it over first (and we overwrote their timestamp), or it was released.
            _ => Ok(None),
        }
    }

    /// The seed's `unlock`: `DEL` the key if this client's clock says its timestamp has not passed, whoever holds
    /// it now. Returns whether it sent the `DEL` and it deleted a key.
    ///
    /// # Errors
    /// A connection error or a timeout.
    pub fn unlock(&mut self, lock: &OldLock) -> io::Result<bool> {
        if lock.expires_ms <= self.now_ms() {
            return Ok(false);
        }
        Ok(self.call(&[b"DEL", &lock.key])? == Value::Integer(1))
    }

    /// What this client believes is left of `lock`, by its own clock (zero once it has passed).
    pub fn remaining(&self, lock: &OldLock) -> Duration {
        let left = lock.expires_ms.saturating_sub(self.now_ms());
        Duration::from_millis(u64::try_from(left).unwrap_or(0))
    }

    /// Sends one command and reads its reply.
    fn call(&mut self, args: &[&[u8]]) -> io::Result<Value> {
        self.write.clear();
        encode_command(args, &mut self.write);
        self.stream.write_all(&self.write)?;
        loop {
            match decode(&mut self.read) {
                Ok(Some(Value::Error(e))) => {
                    let msg = format!("error reply: {}", String::from_utf8_lossy(&e));
                    return Err(io::Error::other(msg));
                }
                Ok(Some(value)) => return Ok(value),
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
            let mut chunk = [0u8; 512];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.read.extend_from_slice(&chunk[..n]);
        }
    }
}

fn parse_ms(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}
