//! [`FakeServer`]: a scripted Redis impostor on loopback that answers each command with chosen
//! bytes, valid or not, whole, one byte at a time, never, or by hanging up.
//!
//! Real `redis-server`s cannot be made to send garbage, a `$4611686018427387904` header or a
//! reply that never ends; this can. A test gives a behaviour, `Fn(&[Bytes]) -> Action`, which
//! sees each decoded command (its name and arguments) and says what to send back.
//! [`redis_like`] answers the connection set-up a `LockManager` pipelines (`SCRIPT LOAD`, `INFO`,
//! `AUTH`, `HELLO`, ...) as Redis would, so that a scenario scripts only the lock commands.
//!
//! # Design
//! One acceptor thread on a non-blocking listener, one thread per connection on a blocking
//! socket with short timeouts, so that every loop sees the stop flag within [`POLL`]. Requests
//! are decoded with `muxlock::resp::Decoder` (commands are arrays of bulk strings, the simplest
//! RESP there is); anything else closes the connection. Dropping the server stops and joins every
//! thread within a bounded wait.

use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use muxlock::redlock::scripts::{EXTEND, EXTEND_SHA1, RELEASE, RELEASE_SHA1};
use muxlock::resp::{Decoder, Value};

use super::acceptor::{Acceptor, is_retry, lock};

/// The longest any thread of the server blocks or sleeps before looking at the stop flag again.
pub const POLL: Duration = Duration::from_millis(5);
/// After a graceful close, how long unread client bytes are drained (so that closing sends a FIN,
/// not the RST that closing with unread data causes).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// One read's worth.
const CHUNK: usize = 16 * 1024;
/// Commands kept for [`FakeServer::received`]; later ones are counted but not kept.
const LOG_MAX: usize = 4096;

/// The `run_id` [`redis_like`] reports in `INFO`.
pub const RUN_ID: &str = "fa4e5e4e4f4b4e5e4e4f4b4e5e4e4f4b4e5e4e4f";

/// What the server does about one command.
#[derive(Clone, PartialEq, Eq)]
pub enum Action {
    /// Sends these bytes (any bytes: a valid reply, several, or garbage) in one write.
    Reply(Vec<u8>),
    /// Sends these bytes one byte per `write`, pausing this long after each byte but the last.
    Trickle(Vec<u8>, Duration),
    /// Never answers again on this connection: later commands are read and counted, and get
    /// nothing either (a hung server answers nothing, and a reply to a later command would be
    /// taken for this one's).
    Hang,
    /// Closes the connection (FIN) without answering.
    Close,
    /// Sends these bytes (a partial reply, say), then closes the connection.
    ReplyThenClose(Vec<u8>),
    /// Sends `prefix`, then `filler` over and over until the client hangs up or the server
    /// stops: a reply that never ends (`+` then `x`s), or one that overflows a limit.
    Endless {
        /// The start of the reply.
        prefix: Vec<u8>,
        /// Repeated after the prefix; never empty (an empty filler is sent as `x`).
        filler: Vec<u8>,
    },
    /// Waits this long (for a step of a [`Sequence`](Action::Sequence)).
    Pause(Duration),
    /// These actions, in order; one that ends the connection ([`Close`](Action::Close), ...) or
    /// mutes it ([`Hang`](Action::Hang)) ends the sequence.
    Sequence(Vec<Action>),
}

impl fmt::Debug for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Replies may be long or binary; show them escaped and cut.
        let show = |b: &[u8]| {
            let s = b.escape_ascii().to_string();
            match s.char_indices().nth(60) {
                Some((i, _)) => format!("{}...", &s[..i]),
                None => s,
            }
        };
        match self {
            Action::Reply(b) => write!(f, "Reply({})", show(b)),
            Action::Trickle(b, pause) => write!(f, "Trickle({}, {pause:?})", show(b)),
            Action::Hang => f.write_str("Hang"),
            Action::Close => f.write_str("Close"),
            Action::ReplyThenClose(b) => write!(f, "ReplyThenClose({})", show(b)),
            Action::Endless { prefix, filler } => {
                write!(f, "Endless({} then {}...)", show(prefix), show(filler))
            }
            Action::Pause(pause) => write!(f, "Pause({pause:?})"),
            Action::Sequence(steps) => f.debug_tuple("Sequence").field(steps).finish(),
        }
    }
}

impl Action {
    /// [`Action::Reply`] with these bytes.
    pub fn reply(bytes: impl AsRef<[u8]>) -> Action {
        Action::Reply(bytes.as_ref().to_vec())
    }
}

/// A behaviour: given one command (name first), what to do.
pub type Behaviour = dyn Fn(&[Bytes]) -> Action + Send + Sync;

/// State shared by the server handle, the acceptor and the connection threads.
struct Shared {
    id: usize,
    behaviour: Box<Behaviour>,
    /// Set when the server drops.
    stop: Arc<AtomicBool>,
    connections: AtomicU64,
    commands: AtomicU64,
    bytes_sent: AtomicU64,
    log: Mutex<Vec<Vec<Bytes>>>,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(SeqCst)
    }
}

/// A fake Redis on a free `127.0.0.1` port, answering as its behaviour says.
///
/// # Examples
/// ```ignore
/// let fake = FakeServer::start(|_: &[Bytes]| Action::reply(b"@garbage\r\n"));
/// let fanout = Fanout::new(vec![fake.url().parse()?], Options::default())?;
/// ```
pub struct FakeServer {
    shared: Arc<Shared>,
    /// Dropping it stops and joins every thread.
    acceptor: Acceptor,
}

impl fmt::Debug for FakeServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeServer")
            .field("addr", &self.addr())
            .field("connections", &self.connections())
            .field("commands", &self.commands())
            .finish_non_exhaustive()
    }
}

impl FakeServer {
    /// Starts the server; it listens before this returns, so clients may connect at once.
    ///
    /// # Panics
    /// If the listener cannot be bound or its thread cannot be spawned.
    #[track_caller]
    pub fn start<F>(behaviour: F) -> FakeServer
    where
        F: Fn(&[Bytes]) -> Action + Send + Sync + 'static,
    {
        static IDS: AtomicUsize = AtomicUsize::new(0);
        let shared = Arc::new(Shared {
            id: IDS.fetch_add(1, SeqCst),
            behaviour: Box::new(behaviour),
            stop: Arc::default(),
            connections: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let prefix = format!("fake{}-", shared.id);
            let stop = Arc::clone(&shared.stop);
            let shared = Arc::clone(&shared);
            Acceptor::start("fake server", &prefix, "conn", stop, move |client| {
                shared.connections.fetch_add(1, SeqCst);
                let shared = Arc::clone(&shared);
                Some(move || serve(&client, &shared))
            })
        };
        FakeServer { shared, acceptor }
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        self.acceptor.addr()
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.addr().port()
    }

    /// `redis://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// A prefix for this server's thread names (`fake<N>-`), unique in the process; threads are
    /// `fake<N>-accept` and `fake<N>-conn`. For leak checks via `/proc/self/task/*/comm`.
    pub fn thread_prefix(&self) -> String {
        format!("fake{}-", self.shared.id)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(SeqCst)
    }

    /// Commands received so far, on all connections, answered or not.
    pub fn commands(&self) -> u64 {
        self.shared.commands.load(SeqCst)
    }

    /// Bytes written to clients so far.
    pub fn bytes_sent(&self) -> u64 {
        self.shared.bytes_sent.load(SeqCst)
    }

    /// The first 4,096 commands received, in arrival order (across connections).
    pub fn received(&self) -> Vec<Vec<Bytes>> {
        lock(&self.shared.log).clone()
    }

    /// The names of the commands received (upper-cased; `SCRIPT LOAD` is `SCRIPT`), in order.
    pub fn names(&self) -> Vec<String> {
        self.received()
            .iter()
            .map(|cmd| name(cmd).unwrap_or_default())
            .collect()
    }

    /// How many commands named `name` (any case) were received.
    pub fn count(&self, name: &str) -> usize {
        self.names()
            .iter()
            .filter(|n| n.eq_ignore_ascii_case(name))
            .count()
    }
}

/// The upper-cased name of a command, if it has one.
pub fn name(cmd: &[Bytes]) -> Option<String> {
    cmd.first()
        .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
}

/// Wraps `lock_commands` (which sees `SET`, `EVALSHA`, `EVAL` and anything else unusual) with
/// the set-up answers of a real Redis; see [`setup_reply`].
pub fn redis_like<F>(lock_commands: F) -> impl Fn(&[Bytes]) -> Action + Send + Sync + 'static
where
    F: Fn(&[Bytes]) -> Action + Send + Sync + 'static,
{
    move |cmd: &[Bytes]| setup_reply(cmd).unwrap_or_else(|| lock_commands(cmd))
}

/// What a real, long-running Redis answers to a connection set-up command, or `None` for other
/// commands:
///
/// - `SCRIPT LOAD <script>`: the SHA1 of muxlock's release or extend script, or of one of
///   `redlock::lua::ALL` (`-ERR` for any other script: this server cannot hash);
/// - `INFO [section]`: a bulk string with `run_id:`[`RUN_ID`] and `uptime_in_seconds:1000000`;
/// - `COMMAND INFO <names>`: a null per name (Redis 7.0 has neither `DELEX` nor `DELIFEQ`);
/// - `PING`: `+PONG`; `AUTH`, `SELECT`: `+OK`; `TIME`: this machine's wall clock;
/// - `HELLO 3`: a small RESP3 map (`server`, `version`, `proto`); `HELLO` otherwise: the same as
///   a RESP2 flat array.
pub fn setup_reply(cmd: &[Bytes]) -> Option<Action> {
    let arg = |i: usize| cmd.get(i).map(|a| &a[..]).unwrap_or_default();
    Some(match name(cmd)?.as_str() {
        "SCRIPT" if arg(1).eq_ignore_ascii_case(b"LOAD") => match arg(2) {
            s if s == RELEASE.as_bytes() => Action::reply(bulk(RELEASE_SHA1.as_bytes())),
            s if s == EXTEND.as_bytes() => Action::reply(bulk(EXTEND_SHA1.as_bytes())),
            s => match muxlock::redlock::lua::ALL
                .iter()
                .find(|l| l.body.as_bytes() == s)
            {
                Some(l) => Action::reply(bulk(l.sha1.as_bytes())),
                None => Action::reply("-ERR fake server: cannot hash an unknown script\r\n"),
            },
        },
        "INFO" => {
            let text = format!(
                "# Server\r\nredis_version:7.0.15\r\nrun_id:{RUN_ID}\r\n\
                 uptime_in_seconds:1000000\r\n"
            );
            Action::reply(bulk(text.as_bytes()))
        }
        // Redis 7.0 knows neither native command: one null per name (its `addReplyCommandInfo`).
        "COMMAND" if arg(1).eq_ignore_ascii_case(b"INFO") => {
            let names = cmd.len().saturating_sub(2);
            Action::reply(format!("*{names}\r\n{}", "$-1\r\n".repeat(names)))
        }
        "PING" => Action::reply("+PONG\r\n"),
        // This machine's wall clock, as a node beside the client would read it (the clock check's `TIME`).
        "TIME" => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let (secs, micros) = (now.as_secs().to_string(), now.subsec_micros().to_string());
            let mut out = b"*2\r\n".to_vec();
            out.extend_from_slice(&bulk(secs.as_bytes()));
            out.extend_from_slice(&bulk(micros.as_bytes()));
            Action::reply(out)
        }
        "AUTH" | "SELECT" => Action::reply("+OK\r\n"),
        "HELLO" if arg(1) == b"3" => Action::reply(
            "%3\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n\
             $5\r\nproto\r\n:3\r\n",
        ),
        "HELLO" => Action::reply(
            "*6\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n\
             $5\r\nproto\r\n:2\r\n",
        ),
        _ => return None,
    })
}

/// The lock commands answered as a healthy node with a free resource would: `SET` → `+OK`,
/// `EVALSHA`/`EVAL` → `:1`, anything else → `-ERR unknown command`.
pub fn well_behaved(cmd: &[Bytes]) -> Action {
    match name(cmd).as_deref() {
        Some("SET") => Action::reply("+OK\r\n"),
        Some("EVALSHA" | "EVAL") => Action::reply(":1\r\n"),
        _ => Action::reply("-ERR unknown command\r\n"),
    }
}

/// `$<len>\r\n<bytes>\r\n`.
pub fn bulk(bytes: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", bytes.len()).into_bytes();
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
    out
}

/// What the connection does after an action.
enum Next {
    Continue,
    /// Read and count commands, never answer.
    Mute,
    /// Close gracefully (FIN, then drain).
    Close,
    /// The client is gone or the server stops: just drop the socket.
    Drop,
}

/// Runs one connection: decode commands, answer each as the behaviour says.
fn serve(stream: &TcpStream, shared: &Shared) {
    let configured = (|| {
        // The listener is non-blocking; accepted sockets inherit nothing on Linux, but be sure.
        stream.set_nonblocking(false)?;
        // No Nagle: trickled single bytes must leave one by one.
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(POLL))?;
        stream.set_write_timeout(Some(POLL))
    })();
    if configured.is_err() {
        return;
    }
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::new();
    let mut chunk = vec![0u8; CHUNK];
    let mut mute = false;
    while !shared.stopping() {
        // Answer every whole command buffered, in order.
        loop {
            let cmd = match decoder.decode(&mut buf) {
                Ok(Some(value)) => match command(value) {
                    Some(cmd) => cmd,
                    // Not a command: Redis answers a protocol error and hangs up; hanging up will do.
                    None => return close(stream, shared),
                },
                Ok(None) => break,
                Err(_) => return close(stream, shared),
            };
            shared.commands.fetch_add(1, SeqCst);
            {
                let mut log = lock(&shared.log);
                if log.len() < LOG_MAX {
                    log.push(cmd.clone());
                }
            }
            if mute {
                continue;
            }
            match act((shared.behaviour)(&cmd), stream, shared) {
                Next::Continue => {}
                Next::Mute => mute = true,
                Next::Close => return close(stream, shared),
                Next::Drop => return,
            }
        }
        match (&*stream).read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if is_retry(&e) => {}
            Err(_) => return,
        }
    }
}

/// An array of bulk strings as its parts.
fn command(value: Value) -> Option<Vec<Bytes>> {
    let Value::Array(items) = value else {
        return None;
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::BulkString(b) => Some(b),
            _ => None,
        })
        .collect()
}

fn act(action: Action, stream: &TcpStream, shared: &Shared) -> Next {
    let sent = match action {
        Action::Reply(bytes) => send(stream, &bytes, shared),
        Action::Trickle(bytes, pause) => {
            for (i, byte) in bytes.iter().enumerate() {
                if i > 0 && !sleep_unless_stopped(pause, shared) {
                    return Next::Drop;
                }
                if send(stream, std::slice::from_ref(byte), shared).is_err() {
                    return Next::Drop;
                }
            }
            Ok(())
        }
        Action::Hang => return Next::Mute,
        Action::Close => return Next::Close,
        Action::ReplyThenClose(bytes) => {
            return match send(stream, &bytes, shared) {
                Ok(()) => Next::Close,
                Err(_) => Next::Drop,
            };
        }
        Action::Endless { prefix, filler } => {
            let filler = if filler.is_empty() {
                vec![b'x']
            } else {
                filler
            };
            // Batch small fillers so that the flood is limited by the client, not by syscalls.
            let batch = filler.repeat(CHUNK.div_ceil(filler.len()));
            if send(stream, &prefix, shared).is_ok() {
                while send(stream, &batch, shared).is_ok() {}
            }
            // The client hung up (as it should) or the server stops.
            return Next::Drop;
        }
        Action::Pause(pause) => {
            return match sleep_unless_stopped(pause, shared) {
                true => Next::Continue,
                false => Next::Drop,
            };
        }
        Action::Sequence(steps) => {
            for step in steps {
                match act(step, stream, shared) {
                    Next::Continue => {}
                    other => return other,
                }
            }
            return Next::Continue;
        }
    };
    match sent {
        Ok(()) => Next::Continue,
        Err(_) => Next::Drop,
    }
}

/// Writes all of `bytes`, retrying the short write timeouts until done, the client is gone, or
/// the server stops.
fn send(stream: &TcpStream, bytes: &[u8], shared: &Shared) -> io::Result<()> {
    let mut rest = bytes;
    while !rest.is_empty() {
        if shared.stopping() {
            return Err(io::Error::other("fake server stopping"));
        }
        match (&*stream).write(rest) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => {
                rest = &rest[n..];
                shared.bytes_sent.fetch_add(n as u64, SeqCst);
            }
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sleeps `pause` in slices of [`POLL`]; `false` if the server stopped meanwhile.
fn sleep_unless_stopped(pause: Duration, shared: &Shared) -> bool {
    let until = Instant::now() + pause;
    loop {
        if shared.stopping() {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        thread::sleep((until - now).min(POLL));
    }
}

/// Closes with a FIN: shut down our side, then read and discard what the client still sends
/// until it closes too (closing a socket with unread bytes would send a RST instead).
fn close(stream: &TcpStream, shared: &Shared) {
    let _ = stream.shutdown(Shutdown::Write);
    let until = Instant::now() + DRAIN_TIMEOUT;
    let mut sink = [0u8; 1024];
    while !shared.stopping() && Instant::now() < until {
        match (&*stream).read(&mut sink) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if is_retry(&e) => {}
            Err(_) => return,
        }
    }
}
