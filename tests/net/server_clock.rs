//! Tests of the fake clock (`support::clock`): a server started with `fake_clock` reads the clock the test moves
//! (`TIME`, key expiry), at once or within Valkey's millisecond, on redis-server and on Valkey, while its timers stay
//! on the real monotonic clock; and the shim moves exactly the wall-clock sources.
//!
//! Time checks are brackets, not tolerances: a server's `TIME` must lie between what the clock reads when the
//! command is sent and when its reply arrives (the test and the server read the same kernel clock), widened only by
//! how long the server may answer from an earlier wall-clock read (`Node::wall_cache`).

use crate::support;

use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use rustix::time::{ClockId, clock_gettime};
use support::clock::{self, CLOCK_MISSING, FakeClock, real_ns};
use support::locks::wait_until;
use support::process::{make_temp_dir, valkey_or_skip};
use support::skip;
use support::wire::show;
use support::{RedisServer, cmd};

/// A server following a clock, with the name failures give it.
struct Node {
    name: &'static str,
    server: RedisServer,
    /// How long the server may answer from a wall-clock read made earlier, advanced by its monotonic clock.
    wall_cache: Duration,
}

/// How long a server whose monotonic clock is the processor's counter may keep a wall-clock read: Valkey 9.1
/// (and Redis 8) then re-read the wall clock once a millisecond and add the counter's time in between (measured
/// here: Valkey 9.1.2 answered `TIME` from before a jump for up to 0.52 ms after it, in 30 jumps; redis-server 7.0
/// with `POSIX clock_gettime` never did). A millisecond more for the counter's calibration.
const HW_CLOCK_WALL_CACHE: Duration = Duration::from_millis(2);

impl Node {
    fn new(name: &'static str, server: RedisServer) -> Node {
        let info = String::from_utf8_lossy(&server.raw(&cmd(&["INFO", "server"]))).into_owned();
        let clock = info
            .lines()
            .find_map(|line| line.strip_prefix("monotonic_clock:"))
            .unwrap_or("");
        // "POSIX clock_gettime", or the processor's counter ("X86 TSC @ ...", "ARM CNTVCT @ ...").
        let wall_cache = if clock.starts_with("POSIX") || clock.is_empty() {
            Duration::ZERO
        } else {
            HW_CLOCK_WALL_CACHE
        };
        Node {
            name,
            server,
            wall_cache,
        }
    }
}

/// A clock and the servers that follow it. The servers are dropped first (fields drop in order): the clock's file
/// outlives them.
struct Clocked {
    nodes: Vec<Node>,
    clock: FakeClock,
}

/// A clock at the real time and redis-server and Valkey on it; without Valkey, redis-server alone and Valkey's
/// skip recorded; without a C compiler, `None` and the clock's skip recorded.
fn clocked() -> Option<Clocked> {
    let clock = FakeClock::new_or_skip()?;
    let mut nodes = vec![Node::new(
        "redis-server",
        RedisServer::builder().fake_clock(&clock).start(),
    )];
    if let Some(bin) = valkey_or_skip() {
        let server = RedisServer::builder()
            .binary(bin)
            .fake_clock(&clock)
            .start();
        nodes.push(Node::new("valkey", server));
    }
    Some(Clocked { nodes, clock })
}

/// Waits until every node reads the clock's last change: out of the time a node may answer from an earlier read.
fn settle(nodes: &[Node]) {
    thread::sleep(nodes.iter().map(|n| n.wall_cache).max().unwrap_or_default());
}

/// `TIME`'s reply in µs since the epoch.
#[track_caller]
fn parse_time(reply: &[u8]) -> i64 {
    let text = String::from_utf8_lossy(reply);
    let fields: Vec<&str> = text.split("\r\n").collect();
    let number = |i: usize| -> i64 {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("TIME answered {}", show(reply)))
    };
    // *2, $n, seconds, $n, microseconds
    number(2) * 1_000_000 + number(4)
}

/// The server's `TIME` in µs, checked to be what `clock` reads between the command's send and its reply. The last
/// change of the clock must be at least the node's `wall_cache` old ([`settle`]).
///
/// A server that answers from a wall-clock read made up to `wall_cache` earlier, advanced by its monotonic clock,
/// reads `clock(b) + (t - b)` at real time `t`, for a read at `b` between `t - wall_cache` and `t`: at least the
/// clock at `send - wall_cache`, and at most the greater of the clock at the reply and the clock at
/// `send - wall_cache` plus the real time from then to the reply (the second is greater only for a clock slower
/// than real time). With no cache, this is the clock between the send and the reply.
#[track_caller]
fn assert_time(node: &Node, clock: &FakeClock) -> i64 {
    let before = SystemTime::now();
    let reply = node.server.raw(&cmd(&["TIME"]));
    let after = SystemTime::now();
    let time = parse_time(&reply);
    let earliest = before - node.wall_cache;
    let since = real_ns(after) - real_ns(earliest);
    let low = real_ns(clock.at(earliest)) / 1000;
    let high = real_ns(clock.at(after)).max(real_ns(clock.at(earliest)) + since) / 1000;
    assert!(
        (low..=high).contains(&time),
        "{}: TIME {time} µs is not between {low} and {high}, the clock (offset {} ms, rate {}) from the send \
         (less {:?}) to the reply ({} µs and {} µs from the real time)",
        node.name,
        clock.offset_ms(),
        clock.rate(),
        node.wall_cache,
        time - real_ns(before) / 1000,
        time - real_ns(after) / 1000,
    );
    time
}

#[track_caller]
fn assert_reply(node: &Node, command: &[&str], want: &[u8]) {
    let reply = node.server.raw(&cmd(command));
    assert_eq!(
        reply,
        want,
        "{}: {command:?} answered {}, want {}",
        node.name,
        show(&reply),
        show(want)
    );
}

/// An integer reply (`:n`).
#[track_caller]
fn integer(node: &Node, command: &[&str]) -> i64 {
    let reply = node.server.raw(&cmd(command));
    String::from_utf8_lossy(&reply)
        .strip_prefix(':')
        .and_then(|n| n.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("{}: {command:?} answered {}", node.name, show(&reply)))
}

#[test]
fn time_is_the_real_time_until_the_clock_moves() {
    let Some(clocked) = clocked() else {
        return;
    };
    let Clocked { nodes, clock } = &clocked;
    assert_eq!(clock.offset_ms(), 0);
    for node in nodes.iter() {
        assert_time(node, clock);
    }
}

#[test]
fn a_jump_moves_time_ahead_at_once_and_expires_the_keys_it_passes() {
    let Some(clocked) = clocked() else {
        return;
    };
    let Clocked { nodes, clock } = &clocked;
    for node in nodes.iter() {
        assert_reply(node, &["SET", "passed", "v", "PX", "30000"], b"+OK\r\n");
        assert_reply(node, &["SET", "kept", "v", "PX", "120000"], b"+OK\r\n");
    }
    clock.jump(Duration::from_secs(60));
    settle(nodes);
    let offset = clock.offset_ms();
    assert!((60_000..60_100).contains(&offset), "offset {offset} ms");
    for node in nodes.iter() {
        assert_time(node, clock);
        assert_reply(node, &["GET", "passed"], b"$-1\r\n");
        assert_reply(node, &["GET", "kept"], b"$1\r\nv\r\n");
        // 120 s less the 60 s jumped and the real time since the SET.
        let ttl = integer(node, &["PTTL", "kept"]);
        assert!(
            (50_000..=60_000).contains(&ttl),
            "{}: PTTL {ttl}",
            node.name
        );
    }
}

#[test]
fn a_step_back_moves_time_back_and_the_clock_runs_on() {
    let Some(clocked) = clocked() else {
        return;
    };
    let Clocked { nodes, clock } = &clocked;
    let before: Vec<i64> = nodes.iter().map(|node| assert_time(node, clock)).collect();
    clock.step_back(Duration::from_secs(60));
    settle(nodes);
    for (node, before) in nodes.iter().zip(before) {
        let after = assert_time(node, clock);
        assert!(
            after < before - 59_000_000,
            "{}: TIME {after} after the step back, {before} before",
            node.name
        );
    }
    // The server's wall clock runs at real speed from there, and its timers are on the real monotonic clock: active
    // expiry (the server's cron; DBSIZE counts keys without expiring them) deletes a key when its TTL has passed
    // in real time. Had the step back moved the timers too, the cron would wait out the 60 s.
    for node in nodes.iter() {
        let set = Instant::now();
        assert_reply(node, &["SET", "k", "v", "PX", "500"], b"+OK\r\n");
        wait_until(
            Duration::from_secs(5),
            &format!("{}: active expiry of a 500 ms key", node.name),
            || integer(node, &["DBSIZE"]) == 0,
        );
        let took = set.elapsed();
        assert!(
            took >= Duration::from_millis(499),
            "{}: a 500 ms key expired after {took:?}",
            node.name
        );
    }
}

#[test]
fn a_set_offset_puts_the_clock_there_whatever_it_read() {
    let Some(clocked) = clocked() else {
        return;
    };
    let Clocked { nodes, clock } = &clocked;
    clock.jump(Duration::from_secs(3600));
    clock.set_offset_ms(-1500);
    settle(nodes);
    let offset = clock.offset_ms();
    assert!((-1500..-1400).contains(&offset), "offset {offset} ms");
    for node in nodes.iter() {
        assert_time(node, clock);
    }
    clock.set_offset_ms(0);
    settle(nodes);
    for node in nodes.iter() {
        assert_time(node, clock);
    }
}

#[test]
fn a_rate_runs_the_wall_clock_and_expiry_faster_or_not_at_all() {
    let Some(clocked) = clocked() else {
        return;
    };
    let Clocked { nodes, clock } = &clocked;
    clock.run_at(2.0);
    settle(nodes);
    assert_eq!(clock.rate(), 2.0);
    for node in nodes.iter() {
        let first = assert_time(node, clock);
        thread::sleep(Duration::from_millis(100));
        let second = assert_time(node, clock);
        // The brackets hold the rate; this says it plainly: the 100 ms slept, less the time a node may answer
        // from an earlier read, are twice as long in TIME.
        let slept = 100_000 - node.wall_cache.as_micros() as i64;
        assert!(
            second - first >= 2 * slept,
            "{}: {first} then {second}",
            node.name
        );
        // A 1 s key is gone 600 ms (real) after its SET's reply: 1.2 s of the server's time.
        assert_reply(node, &["SET", "k", "v", "PX", "1000"], b"+OK\r\n");
        thread::sleep(Duration::from_millis(600));
        assert_reply(node, &["GET", "k"], b"$-1\r\n");
    }
    // A stopped clock does not follow the real time (50 ms slept between two reads, less than that read by the
    // server, see `assert_time`), and no key expires.
    clock.run_at(0.0);
    settle(nodes);
    for node in nodes.iter() {
        assert_reply(node, &["SET", "k", "v", "PX", "20"], b"+OK\r\n");
        let first = assert_time(node, clock);
        thread::sleep(Duration::from_millis(50));
        let second = assert_time(node, clock);
        assert!(
            second - first < 50_000,
            "{}: {first} then {second}",
            node.name
        );
        assert_reply(node, &["GET", "k"], b"$1\r\nv\r\n");
    }
    // Back to real speed, continuing from the stopped instant.
    clock.run_at(1.0);
    settle(nodes);
    for node in nodes.iter() {
        assert_time(node, clock);
    }
}

#[test]
fn a_restarted_server_keeps_its_clock() {
    let Some(mut clocked) = clocked() else {
        return;
    };
    let Clocked { nodes, clock } = &mut clocked;
    clock.step_back(Duration::from_secs(30));
    for node in nodes.iter_mut() {
        node.server.restart();
    }
    for node in nodes.iter() {
        assert_time(node, clock);
    }
}

/// One run of the clock probe (`support::clock::probe`): its line, between this process' readings of the same
/// clocks (this process runs without the shim).
struct ProbeRun {
    line: String,
    before: Readings,
    after: Readings,
}

/// The probe's sources, each with the clock that this process reads for it.
const SOURCES: [(&str, ClockId); 7] = [
    ("realtime", ClockId::Realtime),
    ("realtime_coarse", ClockId::RealtimeCoarse),
    ("gettimeofday", ClockId::Realtime),
    ("time", ClockId::Realtime),
    ("monotonic", ClockId::Monotonic),
    ("monotonic_raw", ClockId::MonotonicRaw),
    ("boottime", ClockId::Boottime),
];

/// This process' reading of each of [`SOURCES`]' clocks, in ns.
struct Readings(Vec<(ClockId, i64)>);

impl Readings {
    fn now() -> Readings {
        Readings(
            SOURCES
                .iter()
                .map(|&(_, id)| {
                    let ts = clock_gettime(id);
                    (id, ts.tv_sec * 1_000_000_000 + ts.tv_nsec)
                })
                .collect(),
        )
    }

    fn of(&self, id: ClockId) -> i64 {
        self.0
            .iter()
            .find(|(c, _)| *c == id)
            .map(|(_, ns)| *ns)
            .expect("every source's clock is read")
    }
}

impl ProbeRun {
    /// Runs the probe with `clock`'s shim and file.
    #[track_caller]
    fn new(clock: &FakeClock) -> ProbeRun {
        let probe = clock::probe().expect("a C compiler: the clock's shim was built with it");
        let before = Readings::now();
        let out = clock
            .command(&probe)
            .stdin(Stdio::null())
            .output()
            .expect("run the clock probe");
        let after = Readings::now();
        assert!(out.status.success(), "the probe: {out:?}");
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        ProbeRun {
            line,
            before,
            after,
        }
    }

    /// What the probe read from `source`, in ns.
    #[track_caller]
    fn read(&self, source: &str) -> i64 {
        self.line
            .split_whitespace()
            .find_map(|pair| pair.strip_prefix(source)?.strip_prefix('='))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {source} in the probe's {:?}", self.line))
    }

    /// Asserts that `source` read `map` of this process' own clock, between its readings before and after the
    /// run, in units of `unit` ns (the source's resolution).
    #[track_caller]
    fn assert_between(&self, source: &str, id: ClockId, unit: i64, map: impl Fn(i64) -> i64) {
        let read = self.read(source);
        let low = map(self.before.of(id)) / unit * unit;
        let high = map(self.after.of(id)) / unit * unit;
        assert!(
            (low..=high).contains(&read),
            "{source} read {read}, not between {low} and {high}: {}",
            self.line
        );
    }
}

#[test]
fn the_shim_moves_the_wall_clock_sources_and_no_other() {
    let Some(clock) = FakeClock::new_or_skip() else {
        return;
    };
    clock.jump(Duration::from_secs(3600));
    let run = ProbeRun::new(&clock);
    let fake = |real: i64| real_ns(clock.at(clock::system_time(real)));
    let real = |real: i64| real;
    for (source, id) in SOURCES {
        match source {
            // Moved, each in its own unit.
            "realtime" | "realtime_coarse" => run.assert_between(source, id, 1, fake),
            "gettimeofday" => run.assert_between(source, id, 1_000, fake),
            "time" => run.assert_between(source, id, 1_000_000_000, fake),
            // Not moved.
            _ => run.assert_between(source, id, 1, real),
        }
    }
}

#[test]
fn a_clock_file_that_cannot_be_read_or_parsed_leaves_the_real_time() {
    let Some(clock) = FakeClock::new_or_skip() else {
        return;
    };
    clock.jump(Duration::from_secs(3600));
    let real = |real: i64| real;
    for garbage in [
        "",
        "60000000000",
        "1 2 x",
        "1 2 -5",
        "99999999999999999999 0 1000000",
    ] {
        std::fs::write(clock.file(), garbage).expect("write the clock's file");
        ProbeRun::new(&clock).assert_between("realtime", ClockId::Realtime, 1, real);
    }
    std::fs::remove_file(clock.file()).expect("remove the clock's file");
    ProbeRun::new(&clock).assert_between("realtime", ClockId::Realtime, 1, real);
}

/// The first test above, run in a child process of this binary with `$CC` naming no file, passes and leaves
/// exactly one skip line naming it in `$MUXLOCK_SKIP_LOG`.
#[test]
fn a_test_without_a_c_compiler_appends_one_skip_line_naming_it() {
    let dir = make_temp_dir();
    let log = dir.join("skips");
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let test = "time_is_the_real_time_until_the_clock_moves";
    let out = std::process::Command::new(std::env::current_exe().expect("current_exe"))
        .args(["--exact", &format!("{module}::{test}"), "--nocapture"])
        .env("CC", dir.join("no-cc"))
        .env(skip::LOG_VAR, &log)
        .stdin(Stdio::null())
        .output()
        .expect("run this test binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let written = std::fs::read_to_string(&log).unwrap_or_default();
    let want = skip::line(
        skip::Kind::Faketime,
        &format!("{}::{test}", module_path!()),
        CLOCK_MISSING,
    );
    assert_eq!(written, want);
    std::fs::remove_dir_all(&dir).expect("remove the temp dir");
}
