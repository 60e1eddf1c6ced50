//! [`FaultProxy`]: a TCP proxy on loopback that injects network faults between a client and one
//! real `redis-server`, switched on and off while a test runs.
//!
//! This machine's kernel has no `netem`, so latency, partitions, slow links and resets are
//! simulated here, in userspace, one proxy per Redis node. Written rather than taken from the
//! `noxious` crate: a few hundred lines of std threads, no async runtime, and exact control over
//! resets (`SO_LINGER 0` through `socket2`).
//!
//! # Design
//! One acceptor thread, and per connection and direction (client→server "up", server→client
//! "down") a reader and a writer thread on blocking sockets with short timeouts, so that every
//! loop notices a fault change or shutdown within [`POLL`]. The reader queues chunks stamped with
//! their arrival time; the writer delivers them as the fault in force *at delivery time* says.
//! The queue keeps ordering and lets latency overlap (a burst of replies is late once, not once
//! per chunk), and a slow writer (trickle) never delays the stamping of later chunks.

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use socket2::SockRef;

use super::acceptor::{Acceptor, is_retry, lock};

/// The longest a proxy thread sleeps or blocks before looking at the fault and the stop flag.
pub const POLL: Duration = Duration::from_millis(5);
/// Bound on dialing the upstream server for a new connection.
const DIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// One read's worth.
const CHUNK: usize = 16 * 1024;
/// A reader stops reading while this much is queued (latency, trickle): back-pressure through
/// TCP, as a slow real link gives, instead of unbounded memory.
const MAX_QUEUED: usize = 1 << 20;

/// A network fault, set with [`FaultProxy::set`] for all current and future connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Transparent: bytes are forwarded as they come.
    #[default]
    None,
    /// Each chunk is delivered this long after it arrived, in *each* direction: a request/reply
    /// round trip costs twice this (as `netem delay` on both ends would). Chunks overlap: ten
    /// pipelined replies are all late by one delay, not ten. Ordering is kept.
    Latency(Duration),
    /// Nothing is forwarded either way, and the connections stay open; new connections are
    /// accepted (the kernel of a hung host still completes handshakes) and get nothing.
    ///
    /// Bytes are **held, not dropped**: the proxy stops reading, so they wait in kernel buffers
    /// (or the proxy's queue) and are delivered, in order, once the fault is lifted. That is what
    /// TCP does across a healed partition: it retransmits, it never loses bytes mid-stream. A
    /// request sent into the black hole is therefore answered after `set(Fault::None)`.
    BlackHole,
    /// Server→client bytes are written one byte per `write`, with this pause between bytes.
    /// Client→server bytes pass as in [`Fault::None`].
    Trickle(Duration),
    /// One shot: the next server→client chunk on any connection is cut after its first
    /// `len / 2` bytes and that client connection is aborted with a TCP RST (`SO_LINGER` 0, then
    /// close); the fault then reverts to [`Fault::None`] for all connections, old and new.
    /// Client→server bytes pass as in [`Fault::None`].
    ResetMidReply,
    /// A down node whose port is still bound: existing connections are aborted with a RST
    /// (within [`POLL`]), and new ones are accepted and at once reset.
    Refuse,
}

/// State shared by the proxy handle and its threads.
#[derive(Debug)]
struct Shared {
    id: usize,
    upstream: SocketAddr,
    fault: Mutex<Fault>,
    /// Set when the proxy drops.
    stop: Arc<AtomicBool>,
    stats: Mutex<Stats>,
}

/// A snapshot of a proxy's counters, from [`FaultProxy::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes written to the server (client→server, as delivered, not as read).
    pub to_server: u64,
    /// Bytes written to clients (server→client, as delivered, not as read).
    pub to_client: u64,
    /// Client connections accepted, including those reset at once under [`Fault::Refuse`].
    pub accepted: u64,
    /// Connections accepted and at once reset under [`Fault::Refuse`].
    pub refused: u64,
    /// Resets the faults caused: [`Fault::ResetMidReply`] cuts, and connections aborted or
    /// refused under [`Fault::Refuse`]. A reset that mirrors a failure elsewhere (upstream
    /// unreachable, a peer's own reset) is not counted.
    pub resets: u64,
}

impl Shared {
    fn fault(&self) -> Fault {
        *lock(&self.fault)
    }

    fn count(&self, update: impl FnOnce(&mut Stats)) {
        update(&mut lock(&self.stats));
    }

    /// Takes the one-shot [`Fault::ResetMidReply`], if still set, leaving [`Fault::None`].
    fn claim_reset(&self) -> bool {
        let mut fault = lock(&self.fault);
        let claimed = *fault == Fault::ResetMidReply;
        if claimed {
            *fault = Fault::None;
        }
        claimed
    }
}

/// A fault-injecting TCP proxy in front of one upstream server, on a free `127.0.0.1` port.
///
/// - Each client connection gets its own upstream connection, dialed when it is accepted (also
///   under [`Fault::BlackHole`]); point a Redlock client at one proxy per node.
/// - A fault applies at once to bytes already read, and within [`POLL`] to idle connections
///   (a black hole lifts within `POLL` plus a jiffy of socket timeout, about 10 ms).
/// - [`Fault::Latency`] is per direction: a round trip gains twice the delay.
/// - [`Fault::ResetMidReply`] is one shot for the whole proxy: with several connections open,
///   the first to get a reply chunk is cut.
/// - Dropping it stops the listener and closes every connection (a FIN, or a RST where unread
///   data remains), joining its threads within about 10 ms (bounded at 3 s).
///
/// # Examples
/// ```ignore
/// let server = RedisServer::start();
/// let proxy = FaultProxy::start(server.addr());
/// let mut stream = TcpStream::connect(proxy.addr())?;
/// proxy.set(Fault::Latency(Duration::from_millis(50)));
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    shared: Arc<Shared>,
    /// Dropping it stops and joins every thread.
    acceptor: Acceptor,
}

impl FaultProxy {
    /// Starts a transparent proxy to `upstream` on a free loopback port (bound before this
    /// returns, so clients may connect at once). Upstream is dialed per client connection, so it
    /// need not be up yet; if the dial fails, that client connection is reset.
    ///
    /// # Panics
    /// If the listener cannot be bound or its thread cannot be spawned.
    #[track_caller]
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        static IDS: AtomicUsize = AtomicUsize::new(0);
        let shared = Arc::new(Shared {
            id: IDS.fetch_add(1, SeqCst),
            upstream,
            fault: Mutex::default(),
            stop: Arc::default(),
            stats: Mutex::default(),
        });
        let acceptor = {
            let prefix = format!("fp{}-", shared.id);
            let stop = Arc::clone(&shared.stop);
            let shared = Arc::clone(&shared);
            Acceptor::start("fault proxy", &prefix, "dnw", stop, move |client| {
                let refuse = shared.fault() == Fault::Refuse;
                shared.count(|stats| {
                    stats.accepted += 1;
                    stats.refused += u64::from(refuse);
                    stats.resets += u64::from(refuse);
                });
                if refuse {
                    rst_on_close(&client);
                    return None;
                }
                let shared = Arc::clone(&shared);
                Some(move || serve(client, &shared))
            })
        };
        FaultProxy { shared, acceptor }
    }

    /// Switches the fault for all current and future connections, at once for data already
    /// read (it is delivered under the new fault), else within [`POLL`].
    pub fn set(&self, fault: Fault) {
        *lock(&self.shared.fault) = fault;
    }

    /// The fault in force: [`Fault::ResetMidReply`] reads back as [`Fault::None`] once used.
    pub fn fault(&self) -> Fault {
        self.shared.fault()
    }

    /// The proxy's listening address, `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        self.acceptor.addr()
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.addr().port()
    }

    /// `redis://127.0.0.1:port`, the proxy's address as a Redis URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// The server this proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// A prefix for this proxy's thread names (`fp<N>-`), unique in the process: an acceptor
    /// `fp<N>-accept`, and per connection `fp<N>-upr`, `-upw`, `-dnr`, `-dnw` (reader and writer
    /// of each direction). For leak checks via `/proc/self/task/*/comm`.
    pub fn thread_prefix(&self) -> String {
        format!("fp{}-", self.shared.id)
    }

    /// The counters so far. Bytes are counted after each write, so a client may see them a
    /// moment before they are counted.
    pub fn stats(&self) -> Stats {
        *lock(&self.shared.stats)
    }
}

/// Closes `stream` with a RST instead of a FIN: with `SO_LINGER` 0, close discards unsent data
/// and aborts. (`TcpStream::set_linger` is unstable in std, hence socket2.)
fn rst_on_close(stream: &TcpStream) {
    let _ = SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// Runs one client connection: dials upstream, then runs a reader and a writer per direction,
/// the down writer on this thread.
fn serve(client: TcpStream, shared: &Arc<Shared>) {
    let Ok(server) = TcpStream::connect_timeout(&shared.upstream, DIAL_TIMEOUT) else {
        // Upstream is down: the client sees a reset, as from a proxy with a dead backend.
        return rst_on_close(&client);
    };
    let conn = Arc::new(Conn {
        client,
        server,
        dead: AtomicBool::default(),
        lanes: Default::default(),
    });
    let mut threads = Vec::new();
    let started = (|| -> io::Result<()> {
        for socket in [&conn.client, &conn.server] {
            socket.set_nonblocking(false)?;
            // No Nagle: trickled single bytes and a cut half-reply must leave at once.
            socket.set_nodelay(true)?;
            socket.set_read_timeout(Some(POLL))?;
            socket.set_write_timeout(Some(POLL))?;
        }
        for (dir, write, name) in [(UP, false, "upr"), (UP, true, "upw"), (DOWN, false, "dnr")] {
            let (conn, shared) = (Arc::clone(&conn), Arc::clone(shared));
            let name = format!("fp{}-{name}", shared.id);
            let run = move || run(&conn, &shared, dir, write);
            threads.push(thread::Builder::new().name(name).spawn(run)?);
        }
        Ok(())
    })();
    match started {
        Ok(()) => run(&conn, shared, DOWN, true),
        Err(_) => {
            conn.abort();
        }
    }
    for thread in threads {
        let _ = thread.join(); // a panic was already printed
    }
}

/// Client → server, as an index into [`Conn::lanes`].
const UP: usize = 0;
/// Server → client.
const DOWN: usize = 1;

/// One proxied connection; its sockets close when its last thread is done with it.
#[derive(Debug)]
struct Conn {
    client: TcpStream,
    server: TcpStream,
    /// Set by [`Conn::abort`]; tells every thread of the connection to stop.
    dead: AtomicBool,
    /// The bytes in flight, [`UP`] and [`DOWN`].
    lanes: [Lane; 2],
}

/// One direction's chunks, read but not yet delivered: its reader pushes, its writer pops.
#[derive(Debug, Default)]
struct Lane {
    queue: Mutex<Queue>,
    /// Signalled on a push and on abort.
    ready: Condvar,
}

#[derive(Debug, Default)]
struct Queue {
    /// With their arrival times, taken as the read returned.
    chunks: VecDeque<(Instant, Vec<u8>)>,
    bytes: usize,
    /// The source sent EOF: once the queue is empty, the writer passes it on.
    eof: bool,
}

impl Conn {
    /// The sockets that `dir` reads from and writes to.
    fn ends(&self, dir: usize) -> (&TcpStream, &TcpStream) {
        match dir {
            UP => (&self.client, &self.server),
            _ => (&self.server, &self.client),
        }
    }

    fn closing(&self, shared: &Shared) -> bool {
        self.dead.load(SeqCst) || shared.stop.load(SeqCst)
    }

    /// Aborts the connection: the client gets a RST once every thread drops its handle, which is
    /// at once: the shutdowns wake the readers, the condvars the writers. Returns whether this
    /// call did it (several threads may try at once).
    fn abort(&self) -> bool {
        if self.dead.swap(true, SeqCst) {
            return false;
        }
        rst_on_close(&self.client);
        // `Read` only: shutting down the write side would send a FIN before the RST.
        let _ = self.client.shutdown(Shutdown::Read);
        let _ = self.server.shutdown(Shutdown::Both);
        for lane in &self.lanes {
            lane.ready.notify_all();
        }
        true
    }
}

/// Runs the reader or the writer of `dir`; any socket error aborts the whole connection, as a
/// failing real connection fails both ways.
fn run(conn: &Conn, shared: &Shared, dir: usize, write: bool) {
    let result = if write {
        writer(conn, shared, dir)
    } else {
        reader(conn, shared, dir)
    };
    if result.is_err() {
        conn.abort();
    }
}

/// Reads chunks into the lane, stamped with their arrival time, until EOF or closing.
fn reader(conn: &Conn, shared: &Shared, dir: usize) -> io::Result<()> {
    let (lane, mut src) = (&conn.lanes[dir], conn.ends(dir).0);
    let mut buf = vec![0u8; CHUNK];
    while !conn.closing(shared) {
        // A black hole does not even read: the bytes wait in the kernel, as behind a partition.
        // A full queue pushes back the same way.
        if shared.fault() == Fault::BlackHole || lock(&lane.queue).bytes >= MAX_QUEUED {
            thread::sleep(POLL);
            continue;
        }
        let n = match src.read(&mut buf) {
            Ok(n) => n,
            Err(e) if is_retry(&e) => continue,
            Err(e) => return Err(e),
        };
        let arrived = Instant::now();
        let mut queue = lock(&lane.queue);
        // Our own abort may have caused this EOF; the writer checks `dead` first.
        queue.eof = n == 0;
        if n > 0 {
            queue.chunks.push_back((arrived, buf[..n].to_vec()));
            queue.bytes += n;
        }
        lane.ready.notify_one();
        if queue.eof {
            break;
        }
    }
    Ok(())
}

/// Delivers the lane's chunks as the fault in force says, until EOF or closing.
///
/// Waits are condvar timeouts (high-resolution), not socket timeouts: `SO_RCVTIMEO` is rounded
/// up to a jiffy (4 ms here), far too coarse for latency and trickle.
fn writer(conn: &Conn, shared: &Shared, dir: usize) -> io::Result<()> {
    let lane = &conn.lanes[dir];
    // The chunk being delivered, `off` bytes of it already written.
    let (mut chunk, mut off, mut arrived) = (Vec::new(), 0, Instant::now());
    let mut next_byte = Instant::now(); // when a trickle may write again
    let mut queue = lock(&lane.queue);
    while !conn.closing(shared) {
        let fault = shared.fault();
        if fault == Fault::Refuse {
            if conn.abort() {
                shared.count(|stats| stats.resets += 1);
            }
            break;
        }
        if off == chunk.len() {
            match queue.chunks.pop_front() {
                Some((at, bytes)) => {
                    queue.bytes -= bytes.len();
                    (arrived, chunk, off) = (at, bytes, 0);
                }
                // A FIN is data too: held in a black hole.
                None if queue.eof && fault != Fault::BlackHole => {
                    return conn.ends(dir).1.shutdown(Shutdown::Write);
                }
                None => {
                    queue = wait(lane, queue, POLL);
                    continue;
                }
            }
        }
        let now = Instant::now();
        let cut = dir == DOWN && fault == Fault::ResetMidReply && shared.claim_reset();
        let (due, end) = match fault {
            _ if cut => (now, off.max(chunk.len() / 2)),
            Fault::BlackHole => (now + POLL, off),
            Fault::Latency(delay) => (arrived + delay, chunk.len()),
            Fault::Trickle(_) if dir == DOWN => (next_byte, off + 1),
            _ => (now, chunk.len()),
        };
        if due > now {
            queue = wait(lane, queue, due - now);
            continue;
        }
        drop(queue); // the reader must not wait for our write
        send(conn, shared, dir, &chunk[off..end])?;
        off = end;
        if let Fault::Trickle(pause) = fault {
            // On a schedule from the chunk's arrival (or the byte before), not from this write: a write the
            // scheduler ran late is followed at once by the bytes due meanwhile, so a loaded machine delays a
            // trickled reply by its one late wake-up, not by one per byte.
            next_byte = next_byte.max(arrived) + pause;
        }
        if cut {
            conn.abort();
            shared.count(|stats| stats.resets += 1);
            return Ok(());
        }
        queue = lock(&lane.queue);
    }
    Ok(())
}

/// Waits on the lane's condvar for at most `limit` (and [`POLL`]).
fn wait<'a>(lane: &'a Lane, q: MutexGuard<'a, Queue>, limit: Duration) -> MutexGuard<'a, Queue> {
    let waited = lane.ready.wait_timeout(q, limit.min(POLL));
    waited.unwrap_or_else(PoisonError::into_inner).0
}

/// Writes all of `bytes` to `dir`'s destination, retrying timeouts, unless the connection closes.
fn send(conn: &Conn, shared: &Shared, dir: usize, mut bytes: &[u8]) -> io::Result<()> {
    let mut dst = conn.ends(dir).1;
    while !bytes.is_empty() && !conn.closing(shared) {
        match dst.write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => {
                bytes = &bytes[n..];
                shared.count(|stats| match dir {
                    UP => stats.to_server += n as u64,
                    _ => stats.to_client += n as u64,
                });
            }
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
