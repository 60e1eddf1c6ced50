//! [`FakeClock`]: a wall clock a test moves under running servers, for clock-fault tests (Redis and Valkey
//! expire keys, and so leases, by their wall clock).
//!
//! # Use
//! ```ignore
//! let Some(clock) = FakeClock::new_or_skip() else { return };
//! let server = RedisServer::builder().fake_clock(&clock).start();
//! server.raw(&cmd(&["SET", "k", "v", "PX", "30000"]));
//! clock.jump(Duration::from_secs(60));          // the server's wall clock is now 60 s ahead
//! assert_eq!(server.raw(&cmd(&["GET", "k"])), b"$-1\r\n");
//! ```
//!
//! # What moves
//! The server's `gettimeofday`, `time` and `clock_gettime` for `CLOCK_REALTIME` and `CLOCK_REALTIME_COARSE` read
//! the real time moved by the clock's setting: an offset ([`jump`](FakeClock::jump),
//! [`step_back`](FakeClock::step_back), [`set_offset_ms`](FakeClock::set_offset_ms)) and a rate
//! ([`run_at`](FakeClock::run_at)). Every other clock, `CLOCK_MONOTONIC` above all, stays real: the server's
//! timers (its cron and so active expiry, Valkey's command durations) keep real time, as they would on a machine
//! whose wall clock an operator or NTP stepped.
//!
//! The setting is a file that the shim re-reads on every wall-clock read, and a change replaces it whole (a
//! temporary file, then a rename; about 0.3 ms here). redis-server 7.0 reads the wall clock for every command
//! and sees a change on the first read after the call returns. Valkey 9.1, whose monotonic clock is the
//! processor's counter (`INFO server`'s `monotonic_clock`), reads the wall clock once a millisecond and advances
//! that read by its monotonic clock in between: it sees a change within a millisecond (0.52 ms at most in 30
//! jumps measured here), and between two reads its time runs at real speed whatever the rate.
//!
//! # How: a preload shim, not libfaketime
//! The servers run with `LD_PRELOAD` of a small shim (`tests/support/clock_shim.c`) that this module builds
//! with the C compiler on first use (`$CC`, else `cc`: the one cargo links with) and caches under the target
//! directory. libfaketime 0.9.10 (Debian's) moves Valkey's clock as well, but Debian's `redis-server` 7.0.15
//! (jemalloc) never answers under it: libfaketime reports "Unexpected recursive calls to clock_gettime() without
//! proper initialization" at start, with `FAKETIME` or `FAKETIME_TIMESTAMP_FILE`, `libfaketime.so.1` or
//! `libfaketimeMT.so.1`. The shim allocates nothing and looks no symbol up inside an override (an override
//! called before its constructor reaches the kernel directly). One mechanism then serves both servers, so that
//! a clock-fault test means the same on each, and it has what libfaketime lacks: a rate change that continues
//! from the current reading (libfaketime's `x2` counts from the process' start, so a rate changed mid-run jumps
//! the clock) and file timestamps left alone.
//!
//! Without a C compiler, [`FakeClock::new_or_skip`] records the test's skip ([`super::skip::Kind::Faketime`]).
//!
//! # Limits
//! The shim moves only what goes through the dynamic symbols above: a static binary, or code that reads the
//! vDSO itself, sees the real time. [`RedisServerBuilder::preload`] checks that the shim is mapped in the server,
//! so a server the shim cannot reach fails to start rather than running on the real clock. `clock_settime` is not
//! faked. A clock must outlive its servers: once its file is gone they read the real time.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::process::make_temp_dir;
use super::server::RedisServerBuilder;
use super::skip::{self, Kind};

/// The environment variable naming the clock's file, for the shim.
pub const FILE_VAR: &str = "MUXLOCK_CLOCK_FILE";

/// Why a test that needs a fake clock skips, and what to do about it.
pub const CLOCK_MISSING: &str = "no C compiler to build the clock shim (tests/support/clock_shim.c): \
     install one (apt-get install gcc; cargo links with it too) or set CC=/path/to/cc";

/// The shim's and the probe's sources, built at run time.
const SHIM_SOURCE: &str = include_str!("clock_shim.c");
const PROBE_SOURCE: &str = include_str!("clock_probe.c");

/// Bound on one run of the C compiler.
const COMPILE_LIMIT: Duration = Duration::from_secs(120);

/// A rate of 1, in the shim's parts per million.
const PPM: i64 = 1_000_000;
/// The fastest rate [`FakeClock::run_at`] takes.
const MAX_RATE: f64 = 1000.0;

/// A fake wall clock for servers: the real time moved by an offset and a rate the test changes while they run.
///
/// Starts at the real time (offset 0, rate 1). Servers follow it when started with
/// [`RedisServerBuilder::fake_clock`]; several servers may follow one clock. Changes from several threads are
/// applied one at a time. Its file is removed on drop: drop it after the servers (declare it before them).
#[derive(Debug)]
pub struct FakeClock {
    dir: PathBuf,
    file: PathBuf,
    shim: PathBuf,
    setting: Mutex<Setting>,
}

/// The shim's setting (its file's three numbers): the fake time at real time `real` (ns since the epoch) is
/// `real + offset + (real - anchor) * (rate - 1e6) / 1e6`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Setting {
    offset_ns: i64,
    anchor_ns: i64,
    rate_ppm: i64,
}

impl Setting {
    /// The fake time at real time `real_ns`, as the shim computes it.
    fn fake_ns(self, real_ns: i64) -> i64 {
        let drift = (i128::from(real_ns) - i128::from(self.anchor_ns))
            * i128::from(self.rate_ppm - PPM)
            / i128::from(PPM);
        let fake = i128::from(real_ns) + i128::from(self.offset_ns) + drift;
        // As the shim: no time before the epoch, none past i64.
        i64::try_from(fake.max(0)).unwrap_or(i64::MAX)
    }

    /// The setting that reads `fake_ns` at real time `real_ns` and runs at `rate_ppm` from there.
    fn anchored(real_ns: i64, fake_ns: i64, rate_ppm: i64) -> Setting {
        Setting {
            offset_ns: fake_ns - real_ns,
            anchor_ns: real_ns,
            rate_ppm,
        }
    }

    fn line(self) -> String {
        format!("{} {} {}\n", self.offset_ns, self.anchor_ns, self.rate_ppm)
    }
}

impl FakeClock {
    /// A clock at the real time, or `None` after recording the running test's skip when there is no C compiler to
    /// build the shim: the caller returns at once (`let Some(clock) = FakeClock::new_or_skip() else { return };`).
    ///
    /// # Panics
    /// If the shim does not compile (the compiler's output is in the message), or the clock's file cannot be
    /// written.
    #[track_caller]
    pub fn new_or_skip() -> Option<FakeClock> {
        let Some(shim) = shim() else {
            skip::skip(Kind::Faketime, CLOCK_MISSING);
            return None;
        };
        let dir = make_temp_dir();
        let now = real_ns(SystemTime::now());
        let clock = FakeClock {
            file: dir.join("clock"),
            dir,
            shim,
            setting: Mutex::new(Setting::anchored(now, now, PPM)),
        };
        let setting = *clock.lock();
        clock.write(setting);
        Some(clock)
    }

    /// Moves the clock forward by `by`, at once (the rate stays).
    ///
    /// # Panics
    /// If the offset would leave the range of `i64` nanoseconds (about 292 years), or the file cannot be written.
    #[track_caller]
    pub fn jump(&self, by: Duration) {
        self.shift(duration_ns(by));
    }

    /// Moves the clock back by `by`, at once (the rate stays).
    ///
    /// # Panics
    /// As [`jump`](Self::jump).
    #[track_caller]
    pub fn step_back(&self, by: Duration) {
        self.shift(-duration_ns(by));
    }

    /// Sets the clock to read the real time plus `offset_ms` (negative: behind) now; the rate stays.
    ///
    /// # Panics
    /// As [`jump`](Self::jump).
    #[track_caller]
    pub fn set_offset_ms(&self, offset_ms: i64) {
        let offset_ns = offset_ms
            .checked_mul(1_000_000)
            .unwrap_or_else(|| panic!("clock offset of {offset_ms} ms is out of range"));
        self.change(|setting, now| {
            let fake = now
                .checked_add(offset_ns)
                .unwrap_or_else(|| panic!("clock offset of {offset_ms} ms is out of range"));
            Setting::anchored(now, fake, setting.rate_ppm)
        });
    }

    /// How far the clock is ahead of the real time now, in ms (negative: behind).
    pub fn offset_ms(&self) -> i64 {
        let real = SystemTime::now();
        (real_ns(self.at(real)) - real_ns(real)) / 1_000_000
    }

    /// Makes the clock run at `rate` times real speed from now on (2.0: twice as fast; 0.0: stopped), continuing
    /// from what it reads now (no jump). Timers of the server stay real: only its wall clock runs at `rate`.
    ///
    /// # Panics
    /// If `rate` is not between 0 and 1000 (in parts per million), or the file cannot be written.
    #[track_caller]
    pub fn run_at(&self, rate: f64) {
        assert!(
            rate.is_finite() && (0.0..=MAX_RATE).contains(&rate),
            "clock rate {rate} is not between 0 and {MAX_RATE}"
        );
        // In range by the assertion.
        let rate_ppm = (rate * PPM as f64).round() as i64;
        self.change(|setting, now| Setting::anchored(now, setting.fake_ns(now), rate_ppm));
    }

    /// The rate set by [`run_at`](Self::run_at) (1.0 until then), to the shim's precision (a millionth).
    pub fn rate(&self) -> f64 {
        self.lock().rate_ppm as f64 / PPM as f64
    }

    /// What a server following the clock reads at the real time `real`, under the clock's current setting. The
    /// shim computes the same in nanoseconds; the server then truncates it to its own unit (µs for `TIME`).
    pub fn at(&self, real: SystemTime) -> SystemTime {
        system_time(self.lock().fake_ns(real_ns(real)))
    }

    /// What a server following the clock reads now.
    pub fn now(&self) -> SystemTime {
        self.at(SystemTime::now())
    }

    /// The clock's file (its setting, which the shim reads).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The shim the servers preload.
    pub fn shim(&self) -> &Path {
        &self.shim
    }

    /// `program` run with the clock: the shim preloaded and the clock's file named, as a server gets them.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new(program);
        command
            .env("LD_PRELOAD", &self.shim)
            .env(FILE_VAR, &self.file);
        command
    }

    /// Moves the clock by `delta_ns` from what it reads now.
    #[track_caller]
    fn shift(&self, delta_ns: i64) {
        self.change(|setting, now| {
            let fake = setting
                .fake_ns(now)
                .checked_add(delta_ns)
                .unwrap_or_else(|| panic!("a clock shift of {delta_ns} ns is out of range"));
            Setting::anchored(now, fake, setting.rate_ppm)
        });
    }

    /// Replaces the setting by `f(setting, now)`, with `now` the real time in ns, and writes it, under the lock:
    /// the file always holds the last setting.
    #[track_caller]
    fn change(&self, f: impl FnOnce(Setting, i64) -> Setting) {
        let mut setting = self.lock();
        let new = f(*setting, real_ns(SystemTime::now()));
        self.write(new);
        *setting = new;
    }

    /// Replaces the file whole: a reader opens the old file or the new one, never a half-written one.
    #[track_caller]
    fn write(&self, setting: Setting) {
        let tmp = self.dir.join("clock.tmp");
        fs::write(&tmp, setting.line())
            .and_then(|()| fs::rename(&tmp, &self.file))
            .unwrap_or_else(|e| panic!("writing the clock {}: {e}", self.file.display()));
    }

    fn lock(&self) -> MutexGuard<'_, Setting> {
        // A panic while holding the lock leaves a whole setting (it is replaced only after the write).
        self.setting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for FakeClock {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl RedisServerBuilder {
    /// Runs the server on `clock`: its wall clock is the clock's ([`FakeClock`]), on every start and restart.
    pub fn fake_clock(self, clock: &FakeClock) -> Self {
        self.preload(&clock.shim).env(FILE_VAR, &clock.file)
    }

    /// [`fake_clock`](Self::fake_clock), with the server's `CLOCK_MONOTONIC` running at `ppm` millionths of real
    /// speed from its first read: a server that calibrates its processor counter against it at start (Valkey on
    /// a TSC) calibrates it wrong, as valkey-io/valkey#4345's servers did, and its timers crawl.
    pub fn crawling_monotonic(self, clock: &FakeClock, ppm: u32) -> Self {
        self.fake_clock(clock)
            .env("MUXLOCK_MONOTONIC_PPM", ppm.to_string())
    }
}

/// The shim, built once per test process (and cached across runs), or `None` when there is no C compiler.
///
/// # Panics
/// If it does not compile.
#[track_caller]
pub fn shim() -> Option<PathBuf> {
    static SHIM: OnceLock<Option<PathBuf>> = OnceLock::new();
    SHIM.get_or_init(|| {
        build(
            "clock-shim",
            ".so",
            SHIM_SOURCE,
            &["-shared", "-fPIC", "-O2", "-Wall"],
            &["-ldl"],
        )
    })
    .clone()
}

/// The clock probe (`tests/support/clock_probe.c`): a program that prints what each time source reads, one
/// line of `name=ns` pairs. Built as [`shim`] is.
///
/// # Panics
/// If it does not compile.
#[track_caller]
pub fn probe() -> Option<PathBuf> {
    static PROBE: OnceLock<Option<PathBuf>> = OnceLock::new();
    PROBE
        .get_or_init(|| build("clock-probe", "", PROBE_SOURCE, &["-O2", "-Wall"], &[]))
        .clone()
}

/// The C compiler: `$CC`, else `cc`.
fn compiler() -> std::ffi::OsString {
    std::env::var_os("CC")
        .filter(|cc| !cc.is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// Compiles `source` (C, on stdin) with `flags`, into `<cache>/<name>-<hash><ext>`, unless it is there already;
/// `None` when there is no compiler. The hash covers the source, the compiler and the flags, so a changed source
/// is built anew. Test processes may build at the same time: each writes its own temporary file, then links it
/// to the final name only if that is still free, so that a file a running server has mapped is never replaced.
#[track_caller]
fn build(name: &str, ext: &str, source: &str, flags: &[&str], libs: &[&str]) -> Option<PathBuf> {
    let cc = compiler();
    let mut key = Vec::from(source.as_bytes());
    for part in [cc.as_encoded_bytes()]
        .into_iter()
        .chain(flags.iter().chain(libs).map(|f| f.as_bytes()))
    {
        key.push(0);
        key.extend_from_slice(part);
    }
    let dir = cache_dir();
    let out = dir.join(format!("{name}-{:016x}{ext}", fnv1a(&key)));
    if out.is_file() {
        return Some(out);
    }
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
    let log = dir.join(format!("{name}.{}.log", std::process::id()));
    let stderr =
        fs::File::create(&log).unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
    let mut child = match Command::new(&cc)
        .args(flags)
        .arg("-o")
        .arg(&tmp)
        .args(["-x", "c", "-"])
        .args(libs)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let _ = fs::remove_file(&log);
            return None;
        }
        Err(e) => panic!("running the C compiler {cc:?}: {e}"),
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A compiler that stops reading early fails below with its own message.
        let _ = stdin.write_all(source.as_bytes());
    }
    let deadline = Instant::now() + COMPILE_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{cc:?} did not build {name} within {COMPILE_LIMIT:?}");
            }
            Err(e) => panic!("waiting for {cc:?}: {e}"),
        }
    };
    let output = super::process::read_lossy(&log);
    let _ = fs::remove_file(&log);
    assert!(
        status.success(),
        "{cc:?} failed to build {name} ({status}):\n{output}"
    );
    match fs::hard_link(&tmp, &out) {
        Ok(()) => {}
        // Another process linked its build first: the same source, the same program.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("linking {} to {}: {e}", tmp.display(), out.display()),
    }
    let _ = fs::remove_file(&tmp);
    Some(out)
}

/// Where built shims and probes are kept: the target directory's scratch space for tests and benches.
fn cache_dir() -> PathBuf {
    option_env!("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join("muxlock-clock")
}

/// FNV-1a, 64 bits: a hash that is the same in every build (std's is not promised to be).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `time` in ns since the epoch (negative before it; saturated past `i64`).
pub fn real_ns(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_nanos()).map_or(i64::MIN, |ns| -ns),
    }
}

/// The time `ns` nanoseconds after the epoch (before it if negative).
pub fn system_time(ns: i64) -> SystemTime {
    let magnitude = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + magnitude
    } else {
        UNIX_EPOCH - magnitude
    }
}

#[track_caller]
fn duration_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or_else(|_| panic!("a clock shift of {d:?} is out of range"))
}
