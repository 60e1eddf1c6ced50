//! A scripted peer for the threaded fanout's unit tests: a loopback listener whose connections answer a handful of
//! made-up commands, so that the threads, the poll and the sockets run without a server. It is a fake of the wire
//! only (no key, no lock, no Redis semantics): the tests that judge locking run against real servers or the
//! simulator.
//!
//! Commands (arrays of bulk strings, as the fanout encodes them), answered in order per connection:
//!
//! - `PING` → `+PONG`;
//! - `ECHO x` → `$x`;
//! - `SLEEP ms x` → `$x` after `ms` milliseconds (the connection answers nothing meanwhile: a slow node);
//! - `PUSH x` → a RESP3 push `>2 message x`, then `+OK`;
//! - `CLOSE` → the connection is closed, unanswered;
//! - `HALF x` → the first bytes of `$x` (its header and half of `x`), then the connection is closed: the close
//!   comes with the last bytes, in one segment (a node that dies mid-reply);
//! - `MUTE` → nothing, then or ever: the connection goes on reading, 4 KiB every 5 ms, and answers nothing more
//!   (a node that takes the client's bytes and never replies: a proxy in front of a hung server);
//! - `ERROR m` → the error `-m` (a refusal: `NOPERM ...`);
//! - `CLUSTER SLOTS` → a map of one range, every slot served by this peer (`CLUSTER SHARDS` is unknown);
//! - anything else → `-ERR unknown`.
//!
//! Every command received is logged, with the connection it came on. Dropping the peer stops its threads and
//! joins them (each looks at the stop flag at least every 10 ms).

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::net::NodeAddr;
use crate::resp::{Value, decode};

const POLL: Duration = Duration::from_millis(10);

/// See the module doc.
pub(crate) struct Peer {
    addr: NodeAddr,
    log: Log,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Peer {
    /// Listens on a free loopback port.
    pub(crate) fn start() -> Peer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("local address").port();
        let addr = format!("127.0.0.1:{port}").parse().expect("address");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
            thread::spawn(move || accept(listener, port, log, stop))
        };
        Peer {
            addr,
            log,
            stop,
            thread: Some(thread),
        }
    }

    /// Its address.
    pub(crate) fn addr(&self) -> NodeAddr {
        self.addr.clone()
    }

    /// Every command received so far, each with the number of the connection it came on (0 for the first).
    pub(crate) fn log(&self) -> Vec<(usize, Vec<Vec<u8>>)> {
        crate::sync::lock(&self.log).clone()
    }

    /// Waits up to `wait` for a command whose arguments are `args` to arrive; whether it did.
    pub(crate) fn received(&self, args: &[&[u8]], wait: Duration) -> bool {
        let until = Instant::now() + wait;
        loop {
            if self.log().iter().any(|(_, c)| c.iter().eq(args.iter())) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An address nothing listens on (a port bound, then let go).
pub(crate) fn nobody() -> NodeAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().expect("local address").port();
    drop(listener);
    format!("127.0.0.1:{port}").parse().expect("address")
}

type Log = Arc<Mutex<Vec<(usize, Vec<Vec<u8>>)>>>;

fn accept(listener: TcpListener, port: u16, log: Log, stop: Arc<AtomicBool>) {
    let mut conns = Vec::new();
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => {
                let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
                let n = conns.len();
                conns.push(thread::spawn(move || serve(stream, (n, port), log, stop)));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(2)),
            Err(_) => thread::sleep(POLL),
        }
    }
    for c in conns {
        let _ = c.join();
    }
}

fn serve(mut stream: TcpStream, (n, port): (usize, u16), log: Log, stop: Arc<AtomicBool>) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(POLL));
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    while !stop.load(Ordering::Acquire) {
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => return,
        }
        while let Ok(Some(command)) = decode(&mut buf) {
            let args: Vec<Vec<u8>> = match command {
                Value::Array(items) => items
                    .into_iter()
                    .map(|v| match v {
                        Value::BulkString(b) => b.to_vec(),
                        _ => Vec::new(),
                    })
                    .collect(),
                _ => Vec::new(),
            };
            crate::sync::lock(&log).push((n, args.clone()));
            if args
                .first()
                .is_some_and(|a| a.eq_ignore_ascii_case(b"MUTE"))
            {
                return read_on_mute(&mut stream, &stop);
            }
            if let [half, x] = &args[..] {
                if half.eq_ignore_ascii_case(b"HALF") {
                    // Corked, the bytes wait in the socket until the close, which sends them with the FIN in
                    // one segment: the client's poll sees the bytes and the close in one event.
                    let _ = socket2::SockRef::from(&stream).set_tcp_cork(true);
                    let mut cut = format!("${}\r\n", x.len()).into_bytes();
                    cut.extend_from_slice(&x[..x.len() / 2]);
                    let _ = stream.write_all(&cut);
                    return;
                }
            }
            let Some(reply) = answer(&args, port, &stop) else {
                return;
            };
            if stream.write_all(&reply).is_err() {
                return;
            }
        }
    }
}

/// Reads what comes, slowly, answering nothing, until the client closes or the peer stops.
fn read_on_mute(stream: &mut TcpStream, stop: &AtomicBool) {
    let mut chunk = [0u8; 4096];
    while !stop.load(Ordering::Acquire) {
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// The bytes answering `args`; `None`: close the connection.
fn answer(args: &[Vec<u8>], port: u16, stop: &AtomicBool) -> Option<Vec<u8>> {
    let bulk = |x: &[u8]| {
        let mut out = format!("${}\r\n", x.len()).into_bytes();
        out.extend_from_slice(x);
        out.extend_from_slice(b"\r\n");
        out
    };
    let name = args.first().map(|a| a.to_ascii_uppercase());
    Some(match (name.as_deref(), &args[1.min(args.len())..]) {
        (Some(b"PING"), _) => b"+PONG\r\n".to_vec(),
        (Some(b"ECHO"), [x]) => bulk(x),
        (Some(b"SLEEP"), [ms, x]) => {
            let ms: u64 = std::str::from_utf8(ms).ok()?.parse().ok()?;
            let until = Instant::now() + Duration::from_millis(ms);
            while Instant::now() < until && !stop.load(Ordering::Acquire) {
                thread::sleep(Duration::from_millis(1));
            }
            bulk(x)
        }
        (Some(b"PUSH"), [x]) => {
            let mut out = b">2\r\n".to_vec();
            out.extend(bulk(b"message"));
            out.extend(bulk(x));
            out.extend_from_slice(b"+OK\r\n");
            out
        }
        (Some(b"CLOSE"), _) => return None,
        (Some(b"ERROR"), [m]) => {
            let mut out = b"-".to_vec();
            out.extend_from_slice(m);
            out.extend_from_slice(b"\r\n");
            out
        }
        // A key being migrated to the peer on port `to`: the others send the client there with `-ASK`.
        (Some(b"GET"), [key]) if key.starts_with(b"ask:") => {
            let to: u16 = std::str::from_utf8(&key[4..]).ok()?.parse().ok()?;
            match to == port {
                true => b"$-1\r\n".to_vec(),
                false => {
                    let slot = crate::net::cluster::key_slot(key);
                    format!("-ASK {slot} 127.0.0.1:{to}\r\n").into_bytes()
                }
            }
        }
        // A key whose slot the peer on port `to` serves: the others send the client there with `-MOVED`.
        (Some(b"GET"), [key]) if key.starts_with(b"moved:") => {
            let to: u16 = std::str::from_utf8(&key[6..]).ok()?.parse().ok()?;
            match to == port {
                true => b"$-1\r\n".to_vec(),
                false => {
                    let slot = crate::net::cluster::key_slot(key);
                    format!("-MOVED {slot} 127.0.0.1:{to}\r\n").into_bytes()
                }
            }
        }
        (Some(b"CLUSTER"), [sub]) if sub.eq_ignore_ascii_case(b"SLOTS") => {
            format!("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:{port}\r\n").into_bytes()
        }
        _ => b"-ERR unknown\r\n".to_vec(),
    })
}

/// A command's bytes, as the fanout sends them.
pub(crate) fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = BytesMut::new();
    crate::resp::encode_command(args, &mut out);
    out.to_vec()
}

/// Polls `future` to its end on this thread, parking between polls (an executor of one task, for the fanout's
/// task paths: its waker unparks this thread; a wake-up that never comes costs 2 s a poll).
pub(crate) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        thread::park_timeout(Duration::from_secs(2));
    }
}
