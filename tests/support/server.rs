//! [`RedisServer`]: one real `redis-server` child process, owned by a test.
//!
//! Modelled on redis-rs' `redis-test` server guard: a free loopback port, `--save ""`, a
//! throwaway `--dir`, and kill + wait on drop.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use std::{fmt, fs, io, thread};

use super::process::{self, find_binary, free_port, is_executable, make_temp_dir};
use super::wire;

/// How long a server may take to answer its first `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(5);
/// Bound on one readiness probe, so that a listener that never answers (a stranger on our
/// port) does not hold up noticing that our own process has exited.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Fresh ports tried by `start` when another process wins the race for the port we picked.
const START_TRIES: usize = 8;
/// `restart` must reuse its port; this bounds the waits for the old socket to go away.
const RESTART_TRIES: usize = 50;
const RESTART_BACKOFF: Duration = Duration::from_millis(100);
/// Timeouts of sockets from [`RedisServer::connect`] and of [`RedisServer::raw`].
const IO_TIMEOUT: Duration = Duration::from_secs(5);
const RAW_TIMEOUT: Duration = Duration::from_secs(10);

const NOT_FOUND: &str = "redis-server not found: run scripts/test (it installs it when root) \
                         or `apt-get install redis-server`";

/// Options for a [`RedisServer`]: extra command-line arguments, environment variables, a preloaded library.
///
/// # Examples
/// ```ignore
/// let server = RedisServer::builder().arg("--enable-debug-command").arg("yes").start();
/// ```
#[derive(Debug, Clone, Default)]
pub struct RedisServerBuilder {
    args: Vec<OsString>,
    binary: Option<PathBuf>,
    tls: Option<Vec<OsString>>,
    env: Vec<(OsString, OsString)>,
    preload: Option<PathBuf>,
}

impl RedisServerBuilder {
    /// Appends one argument after the fixed ones, e.g. `"--maxclients"`, then `"100"`.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// `--requirepass pw`. [`RedisServer::raw`] and the readiness probe then send `AUTH` first;
    /// [`RedisServer::connect`] does not. (Passing the two arguments with [`arg`](Self::arg)
    /// is the same.)
    pub fn requirepass(self, password: &str) -> Self {
        self.arg("--requirepass").arg(password)
    }

    /// `--enable-debug-command yes`, for `DEBUG SLEEP` and `DEBUG PROTOCOL`.
    pub fn enable_debug(self) -> Self {
        self.arg("--enable-debug-command").arg("yes")
    }

    /// Also listens for TLS on a second free port ([`RedisServer::tls_port`]), with the server certificate and CA
    /// in the directory `certs` (`server.crt`, `server.key`, `ca.crt`: what `certs::Certs` writes; a `&Certs`
    /// will do), requiring client certificates or not (`--tls-auth-clients`). The plain port stays open for the
    /// readiness probe and [`RedisServer::raw`]. (A directory rather than `Certs` itself, so that this file
    /// needs nothing but std: the CLI's tests include it by path, without rcgen.)
    pub fn tls(mut self, certs: impl AsRef<Path>, require_client_certs: bool) -> Self {
        let dir = certs.as_ref();
        let auth = if require_client_certs { "yes" } else { "no" };
        let args = [
            OsString::from("--tls-cert-file"),
            dir.join("server.crt").into(),
            "--tls-key-file".into(),
            dir.join("server.key").into(),
            "--tls-ca-cert-file".into(),
            dir.join("ca.crt").into(),
            "--tls-auth-clients".into(),
            auth.into(),
        ];
        self.tls = Some(args.to_vec());
        self
    }

    /// `--appendonly yes --appendfsync always --no-appendfsync-on-rewrite no`: every write is on disk before the
    /// reply, so that [`RedisServer::restart`] keeps the data (and [`RedisServer::restart_without_files`] does not).
    pub fn persist_every_write(self) -> Self {
        self.args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--no-appendfsync-on-rewrite",
            "no",
        ])
    }

    /// Sets an environment variable of the server process (on every start and restart).
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Loads `library` into the server with `LD_PRELOAD` (replacing any `LD_PRELOAD` of the test's environment),
    /// on every start and restart, and checks that it is mapped once the server answers: a library the loader
    /// passed over (a static binary, a library built for another machine) fails the start instead of leaving
    /// the server as it would be without it.
    pub fn preload(mut self, library: impl Into<PathBuf>) -> Self {
        self.preload = Some(library.into());
        self
    }

    /// Uses this binary instead of looking one up.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Starts the server on a free port and waits until it answers `PING`.
    ///
    /// # Panics
    /// If there is no `redis-server`, or it does not become ready within 10 s; the message then
    /// includes the server's log.
    #[track_caller]
    pub fn start(self) -> RedisServer {
        let bin = match self.binary {
            Some(path) if is_executable(&path) => path,
            Some(path) => panic!("{NOT_FOUND} (no executable at {})", path.display()),
            None => match (find_binary(), std::env::var_os("REDIS_SERVER")) {
                (Some(path), _) => path.clone(),
                (None, Some(env)) => panic!("{NOT_FOUND} (REDIS_SERVER={env:?} is not executable)"),
                (None, None) => panic!("{NOT_FOUND}"),
            },
        };
        let password = password_in(&self.args);
        let mut server = RedisServer {
            child: None,
            pid: 0,
            port: 0,
            tls_port: None,
            tls_args: self.tls.clone().unwrap_or_default(),
            args: self.args,
            env: self.env,
            preload: self.preload,
            password,
            dir: make_temp_dir(),
            bin,
            paused: false,
        };
        for _ in 0..START_TRIES {
            server.port = free_port();
            server.tls_port = self.tls.as_ref().map(|_| free_port());
            match server.spawn_and_wait() {
                Ok(()) => return server,
                // Someone took the port between our probe and redis' bind: pick another.
                Err(Failure::PortTaken) => continue,
                Err(failure) => server.fail(&failure),
            }
        }
        server.fail(&Failure::PortTaken)
    }
}

/// A `redis-server` child process on `127.0.0.1`, killed (by PID) and cleaned up on drop.
///
/// Started with `--save "" --appendonly no`, so it keeps nothing across [`restart`](Self::restart),
/// and with `--dir` and `--logfile` in its own temp directory.
pub struct RedisServer {
    /// `None` once killed.
    child: Option<Child>,
    /// Of the current or, once killed, the last process.
    pid: u32,
    port: u16,
    /// The TLS port, for a server started with [`RedisServerBuilder::tls`], and its TLS arguments.
    tls_port: Option<u16>,
    tls_args: Vec<OsString>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    preload: Option<PathBuf>,
    password: Option<String>,
    dir: PathBuf,
    bin: PathBuf,
    paused: bool,
}

enum Failure {
    PortTaken,
    Exited(ExitStatus),
    Timeout,
    Io(io::Error),
    /// The library given to [`RedisServerBuilder::preload`] is not in the ready process' memory map.
    NotPreloaded(PathBuf),
}

impl RedisServer {
    /// Starts a server with default options. See [`RedisServerBuilder::start`].
    #[track_caller]
    pub fn start() -> Self {
        Self::builder().start()
    }

    /// Options for a server with extra arguments.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// The TCP port; it stays the same across [`restart`](Self::restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `redis://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The TLS port of a server started with [`RedisServerBuilder::tls`]; it stays the same across restarts.
    ///
    /// # Panics
    /// If the server has no TLS port.
    #[track_caller]
    pub fn tls_port(&self) -> u16 {
        self.tls_port
            .expect("a server started with RedisServerBuilder::tls")
    }

    /// `rediss://127.0.0.1:tls_port`.
    #[track_caller]
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port())
    }

    /// The PID of the running process, or of the last one once killed.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The password given with `--requirepass`, if any.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The server's temp directory (`--dir`), removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the process is alive (paused counts as alive).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Whether [`pause`](Self::pause) was called without a later [`resume`](Self::resume).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// The log of every run so far (`restart` appends), then what the last run wrote to stderr
    /// (config errors go there, before the log file is opened).
    pub fn log(&self) -> String {
        self.log_since(0)
    }

    fn log_since(&self, offset: u64) -> String {
        let mut log = process::read_lossy_from(&self.log_path(), offset);
        let stderr = process::read_lossy(&self.dir.join("stderr.log"));
        if !stderr.trim().is_empty() {
            log.push_str("--- stderr ---\n");
            log.push_str(&stderr);
        }
        log
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// Kills the process with SIGKILL and reaps it. Does nothing if already killed.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL ends a stopped process too, so a paused server needs no SIGCONT first.
            // An error means it has already been reaped; `wait` below settles it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Stops the process with SIGSTOP: connections are still accepted by the kernel, but
    /// nothing is answered until [`resume`](Self::resume). Returns once the process is stopped.
    ///
    /// # Panics
    /// If the server is not running or the signal cannot be sent.
    #[track_caller]
    pub fn pause(&mut self) {
        self.signal("STOP");
        process::wait_for_state(self.pid, |state| state == 'T');
        self.paused = true;
    }

    /// Continues a paused process with SIGCONT. Returns once it is running again.
    ///
    /// # Panics
    /// If the server is not running or the signal cannot be sent.
    #[track_caller]
    pub fn resume(&mut self) {
        self.signal("CONT");
        process::wait_for_state(self.pid, |state| state != 'T');
        self.paused = false;
    }

    /// Kills the process if running, then starts a new one on the same port with the same
    /// arguments and directory, and waits until it answers. Data is gone: nothing is persisted.
    ///
    /// # Panics
    /// If the port cannot be bound again within about 5 s, or the server does not become ready.
    #[track_caller]
    pub fn restart(&mut self) {
        self.kill();
        for _ in 0..RESTART_TRIES {
            match self.spawn_and_wait() {
                Ok(()) => return,
                // The old socket, or a stranger, still holds the port; it usually clears fast.
                Err(Failure::PortTaken) => thread::sleep(RESTART_BACKOFF),
                Err(failure) => self.fail(&failure),
            }
        }
        self.fail(&Failure::PortTaken)
    }

    /// Kills the process and starts `bin` instead on the same port, arguments and directory, as
    /// [`restart`](Self::restart) does: the node behind the address is now another server (an older Redis
    /// after a Valkey, say).
    ///
    /// # Panics
    /// As [`restart`](Self::restart).
    #[track_caller]
    pub fn restart_as(&mut self, bin: impl Into<PathBuf>) {
        self.bin = bin.into();
        self.restart();
    }

    /// Kills the process, deletes its data files (the append-only directory or file, the RDB file) as a lost
    /// ephemeral disk would, and starts a new process as [`restart`](Self::restart) does: a restart that forgets
    /// every write whatever the persistence settings. The log stays.
    ///
    /// # Panics
    /// If a file cannot be deleted, or as [`restart`](Self::restart).
    #[track_caller]
    pub fn restart_without_files(&mut self) {
        self.kill();
        for name in ["appendonlydir", "appendonly.aof", "dump.rdb"] {
            let path = self.dir.join(name);
            let removed = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            match removed {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => panic!("deleting {}: {e}", path.display()),
            }
        }
        self.restart();
    }

    /// A new, unauthenticated connection with 5 s read and write timeouts and `TCP_NODELAY`.
    ///
    /// # Panics
    /// If the connection fails; see [`try_connect`](Self::try_connect) to handle that.
    #[track_caller]
    pub fn connect(&self) -> TcpStream {
        self.try_connect()
            .unwrap_or_else(|e| panic!("connect to redis-server at {}: {e}", self.addr()))
    }

    /// For a server started with `--tcp-backlog 0` and [`pause`](Self::pause)d: fills its accept queue (one place),
    /// so that a new connection to it waits in `SYN_SENT` for a retransmission (a second or more) instead of
    /// completing at once. Returns the connection that took the place, or `None` if the place was taken already
    /// (another client dialled meanwhile: the queue is full all the same). Keep it until the server is resumed.
    pub fn fill_accept_queue(&self) -> Option<TcpStream> {
        TcpStream::connect_timeout(&self.addr(), Duration::from_millis(500)).ok()
    }

    /// As [`connect`](Self::connect), returning the error, e.g. `ConnectionRefused` once killed.
    pub fn try_connect(&self) -> io::Result<TcpStream> {
        let stream = TcpStream::connect_timeout(&self.addr(), IO_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// Sends `bytes` on a new connection and returns the raw reply, e.g.
    /// `raw(&cmd(&["GET", "k"]))` gives `b"$-1\r\n"` for a missing key.
    ///
    /// For set-up and simple checks (`PING`, `SET`, `DEL`, `FLUSHALL`, `DEBUG SLEEP`): `bytes`
    /// must hold one command, and the reply is read until it is whole (by lengths only, not
    /// parsed: the real RESP parser is `muxlock::resp`), for at most 10 s. Sends `AUTH` first
    /// when the server has a password.
    ///
    /// A field of `command`'s line in `INFO commandstats` (`calls`, `rejected_calls`, ...): 0 if the command never
    /// ran or the field is absent.
    ///
    /// # Panics
    /// As [`raw`](Self::raw).
    #[track_caller]
    pub fn command_stat(&self, command: &str, field: &str) -> u64 {
        let info =
            String::from_utf8_lossy(&self.raw(&crate::support::cmd(&["INFO", "commandstats"])))
                .into_owned();
        let prefix = format!("cmdstat_{command}:");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Calls of `command` so far (`INFO commandstats`; 0 if it never ran).
    ///
    /// # Panics
    /// As [`raw`](Self::raw).
    #[track_caller]
    pub fn calls(&self, command: &str) -> u64 {
        self.command_stat(command, "calls")
    }

    /// # Panics
    /// If the server cannot be reached or the reply does not arrive in time.
    #[track_caller]
    pub fn raw(&self, bytes: &[u8]) -> Vec<u8> {
        self.try_raw(bytes, RAW_TIMEOUT).unwrap_or_else(|e| {
            panic!(
                "raw {:?} to redis-server at {}: {e}",
                wire::show(bytes),
                self.addr()
            )
        })
    }

    /// As [`raw`](Self::raw) with a given timeout, returning the error.
    pub fn try_raw(&self, bytes: &[u8], timeout: Duration) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut stream = self.try_connect()?;
        self.auth(&mut stream, deadline)?;
        wire::roundtrip(&mut stream, bytes, 1, deadline)
    }

    /// Sends `AUTH` if the server has a password.
    fn auth(&self, stream: &mut TcpStream, deadline: Instant) -> io::Result<()> {
        let Some(password) = &self.password else {
            return Ok(());
        };
        let reply = wire::roundtrip(stream, &wire::cmd(&["AUTH", password]), 1, deadline)?;
        if reply != b"+OK\r\n" {
            let msg = format!("AUTH answered {}", wire::show(&reply));
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, msg));
        }
        Ok(())
    }

    #[track_caller]
    fn signal(&mut self, name: &str) {
        assert!(
            self.is_running(),
            "SIG{name} to redis-server on port {}: not running",
            self.port
        );
        process::signal(self.pid, name);
    }

    /// Spawns on `self.port` and waits until this very process answers `PING`.
    fn spawn_and_wait(&mut self) -> Result<(), Failure> {
        let stderr = fs::File::create(self.dir.join("stderr.log")).map_err(Failure::Io)?;
        // Only this run's part of the log tells why this run failed.
        let log_start = process::file_len(&self.log_path());
        let mut command = Command::new(&self.bin);
        command.envs(self.env.iter().map(|(name, value)| (name, value)));
        if let Some(library) = &self.preload {
            command.env("LD_PRELOAD", library);
        }
        let child = command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--dir"])
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.log_path())
            .args(
                self.tls_port
                    .iter()
                    .flat_map(|p| [OsString::from("--tls-port"), p.to_string().into()]),
            )
            .args(&self.tls_args)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(Failure::Io)?;
        self.pid = child.id();
        self.child = Some(child);
        self.paused = false;
        let result = self
            .wait_ready(log_start)
            .and_then(|()| self.check_preloaded());
        if result.is_err() {
            self.kill();
        }
        result
    }

    fn wait_ready(&mut self, log_start: u64) -> Result<(), Failure> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let child = self.child.as_mut().expect("spawned");
            if let Some(status) = child.try_wait().map_err(Failure::Io)? {
                return Err(if self.log_since(log_start).contains("already in use") {
                    Failure::PortTaken
                } else {
                    Failure::Exited(status)
                });
            }
            if let Ok(mut stream) = self.try_connect() {
                let probe_deadline = deadline.min(Instant::now() + PROBE_TIMEOUT);
                match self.probe(&mut stream, probe_deadline) {
                    Ok(true) => return Ok(()),
                    // Another process answers on our port: ours will fail to bind.
                    Ok(false) => return Err(Failure::PortTaken),
                    // Not serving yet (e.g. `-LOADING`) or the connection dropped: poll again.
                    Err(_) => {}
                }
            }
            if Instant::now() >= deadline {
                return Err(Failure::Timeout);
            }
            thread::sleep(POLL);
        }
    }

    /// With a [`preload`](RedisServerBuilder::preload)ed library, whether the process has it mapped.
    fn check_preloaded(&self) -> Result<(), Failure> {
        let Some(library) = &self.preload else {
            return Ok(());
        };
        // The loader maps the file by the path given (made canonical), as `/proc/<pid>/maps` shows it.
        let wanted = fs::canonicalize(library).unwrap_or_else(|_| library.clone());
        let maps = process::read_lossy(Path::new(&format!("/proc/{}/maps", self.pid)));
        if maps
            .lines()
            .any(|line| line.ends_with(&*wanted.to_string_lossy()))
        {
            Ok(())
        } else {
            Err(Failure::NotPreloaded(library.clone()))
        }
    }

    /// `Ok(true)` once `PING` gets `+PONG` from our own process, `Ok(false)` if another
    /// process answers on the port.
    fn probe(&self, stream: &mut TcpStream, deadline: Instant) -> io::Result<bool> {
        self.auth(stream, deadline)?;
        let pong = wire::roundtrip(stream, wire::PING, 1, deadline)?;
        if pong != b"+PONG\r\n" {
            let msg = format!("PING answered {}", wire::show(&pong));
            return Err(io::Error::other(msg));
        }
        let info = wire::roundtrip(stream, &wire::cmd(&["INFO", "server"]), 1, deadline)?;
        let needle = format!("\r\nprocess_id:{}\r\n", self.pid);
        Ok(info.windows(needle.len()).any(|w| w == needle.as_bytes()))
    }

    #[track_caller]
    fn fail(&mut self, failure: &Failure) -> ! {
        self.kill();
        let what = match failure {
            Failure::PortTaken => "could not get a free port (address in use every time)".into(),
            Failure::Exited(status) if self.tls_port.is_some() && self.lacks_tls() => format!(
                "exited during start-up ({status}): this redis-server was built without TLS support, which the \
                 TLS tests need: install one built with BUILD_TLS=yes (Debian's redis-server 7.0 has it) or \
                 point REDIS_SERVER at one"
            ),
            Failure::Exited(status) => format!("exited during start-up ({status})"),
            Failure::Timeout => format!("did not answer PING within {READY_TIMEOUT:?}"),
            Failure::Io(e) => format!("could not be started: {e}"),
            Failure::NotPreloaded(library) => format!(
                "started without {} loaded (LD_PRELOAD): it is not in /proc/{}/maps",
                library.display(),
                self.pid
            ),
        };
        panic!(
            "redis-server {} on port {} {what}\nargs: {:?}\n--- log ({}) ---\n{}",
            self.bin.display(),
            self.port,
            self.args,
            self.log_path().display(),
            self.log()
        );
    }
}

impl RedisServer {
    /// Whether the log says the binary does not know the TLS directives.
    fn lacks_tls(&self) -> bool {
        let log = self.log();
        log.contains("Bad directive") && log.contains("tls")
            || log.contains("TLS is not supported")
            || log.contains("not compiled with TLS")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid)
            .field("running", &self.child.is_some())
            .field("paused", &self.paused)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// `--requirepass X` among the extra arguments (the last one wins, as in redis).
fn password_in(args: &[OsString]) -> Option<String> {
    args.windows(2)
        .rev()
        .find(|pair| pair[0] == "--requirepass")
        .map(|pair| pair[1].to_string_lossy().into_owned())
}
