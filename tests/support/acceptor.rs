//! [`Acceptor`]: a listener on a free loopback port whose acceptor thread starts one thread per connection, and
//! whose drop stops and joins them all within a bounded wait. The [`FakeServer`](super::FakeServer) and the
//! [`FaultProxy`](super::FaultProxy) are both built on it; they differ only in what a connection does.

use std::io::{self, ErrorKind};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How often the non-blocking listener is polled for new connections.
const ACCEPT_POLL: Duration = Duration::from_millis(1);
/// Bound on joining all threads on drop.
const JOIN_TIMEOUT: Duration = Duration::from_secs(3);

/// A loopback listener with its acceptor thread and the connection threads it started.
#[derive(Debug)]
pub struct Acceptor {
    addr: SocketAddr,
    /// Set on drop; the connection threads watch it too.
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    /// Connection threads, reaped as they finish and joined on drop.
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// What this serves, for messages: "fake server", "fault proxy".
    what: &'static str,
}

impl Acceptor {
    /// Binds `127.0.0.1:0` (listening before this returns, so clients may connect at once) and starts the thread
    /// `{prefix}accept`. Each connection goes to `on_accept`, which may return the work to run for it on a thread
    /// of its own, `{prefix}{conn}`. `stop` is set on drop.
    ///
    /// # Panics
    /// If the listener cannot be bound or its thread cannot be spawned.
    #[track_caller]
    pub fn start<F, W>(
        what: &'static str,
        prefix: &str,
        conn: &str,
        stop: Arc<AtomicBool>,
        on_accept: F,
    ) -> Acceptor
    where
        F: Fn(TcpStream) -> Option<W> + Send + 'static,
        W: FnOnce() + Send + 'static,
    {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("listener local_addr");
        // Non-blocking so that the acceptor notices `stop` without a wake-up connection.
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let threads = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (stop, threads) = (Arc::clone(&stop), Arc::clone(&threads));
            let conn_name = format!("{prefix}{conn}");
            thread::Builder::new()
                .name(format!("{prefix}accept"))
                .spawn(move || accept_loop(&listener, &stop, &threads, &conn_name, what, on_accept))
                .expect("spawn the acceptor")
        };
        Acceptor {
            addr,
            stop,
            acceptor: Some(acceptor),
            threads,
            what,
        }
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        let deadline = Instant::now() + JOIN_TIMEOUT;
        // The acceptor first, so that no connection thread is added after we take the list.
        if let Some(acceptor) = self.acceptor.take() {
            join_by(acceptor, deadline, self.what);
        }
        let threads = std::mem::take(&mut *lock(&self.threads));
        for handle in threads {
            join_by(handle, deadline, self.what);
        }
    }
}

fn accept_loop<F, W>(
    listener: &TcpListener,
    stop: &AtomicBool,
    threads: &Mutex<Vec<JoinHandle<()>>>,
    conn_name: &str,
    what: &str,
    on_accept: F,
) where
    F: Fn(TcpStream) -> Option<W>,
    W: FnOnce() + Send + 'static,
{
    while !stop.load(SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            // `WouldBlock` is the idle case; anything else (EMFILE...) gets the same back-off.
            Err(_) => {
                thread::sleep(ACCEPT_POLL);
                continue;
            }
        };
        let Some(work) = on_accept(client) else {
            continue;
        };
        let spawned = thread::Builder::new()
            .name(conn_name.to_owned())
            .spawn(work);
        let mut threads = lock(threads);
        threads.retain(|h| !h.is_finished()); // finished ones need no join: nothing to report
        match spawned {
            Ok(handle) => threads.push(handle),
            Err(e) => eprintln!("{what}: cannot spawn a connection thread: {e}"),
        }
    }
}

/// Joins `handle` if it finishes before `deadline`; otherwise leaves it detached (a detached thread does not keep
/// the test process alive) and says so.
fn join_by(handle: JoinHandle<()>, deadline: Instant, what: &str) {
    while !handle.is_finished() {
        if Instant::now() >= deadline {
            eprintln!("{what}: thread {:?} still running", handle.thread().name());
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
    if handle.join().is_err() {
        eprintln!("{what}: a connection thread panicked");
    }
}

/// Locks `mutex` even if a thread panicked holding it: a panicking connection must not take the controls down.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A timeout (`WouldBlock` on Unix) or a signal: try again after checking the stop flags.
pub fn is_retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}
