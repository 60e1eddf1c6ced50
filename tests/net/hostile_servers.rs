//! Hostile and broken servers: a scripted fake node sends garbage, absurd declared sizes, deep nesting, a reply one
//! byte at a time, a reply that never ends, a connection closed mid-reply, error replies, refused logins and RESP3
//! pushes.
//!
//! What the connection does with the bytes alone (the exact error for each kind of garbage, limits, refused
//! logins, pushes) is unit-tested on the connection's state without sockets (`src/net/state_tests/`). Here, with
//! sockets and time: the network layer (a one-node [`Fanout`]) returns the outcome within the round's deadline
//! (a hung node, a trickle, a close mid-reply, a redial); and a [`LockManager`] over two real `redis-server`s and
//! the fake still locks and unlocks, and, where the majority needs the fake's vote, names it in the error report
//! with a message saying what it did. Memory is
//! measured where a declared size could tempt an allocation: the resident set may not grow by more than
//! [`RSS_BOUND`].
//!
//! What each case gives (one fake node among real ones; nothing panics, and the other nodes keep the lock usable):
//!
//! | the fake sends | outcome | when |
//! |---|---|---|
//! | garbage (HTTP, TLS alert, ...) | `protocol error: invalid RESP: unknown type byte at byte 0` (and similar, naming the byte) | at once |
//! | an unknown type byte | `unknown type byte at byte N` | at once |
//! | a bulk length of 2^62 | `bulk length above the limit at byte 1` | at once, nothing allocated |
//! | an array of 2^31 elements | `aggregate length above the limit at byte 1` | at once |
//! | nesting 10,000 deep | `aggregates nested deeper than the limit at byte 128` | at once |
//! | a reply one byte per write with pauses | the right value | when complete |
//! | a reply that never ends | `line longer than the limit` / `a reply longer than 4194304 bytes` | at the limit, bounded memory |
//! | a connection closed mid-reply | `connection closed by the server` | at once |
//! | `-ERR` for every command | `error reply: ERR ...` (a set-up command: `connection set-up failed: SCRIPT LOAD: ERR ...`) | at once |
//! | `-NOSCRIPT` | falls back to `EVAL`, the node counts (releases never get it: they go in full) | one more round trip |
//! | `-NOAUTH` / `-WRONGPASS` | `authentication failed: WRONGPASS ...`, `Error::is_auth()` | at once |
//! | a RESP3 push among replies | skipped; replies still match their requests | — |
//! | nothing (hung) | `timed out` at the round deadline, only when the majority needs it | deadline |
//!
//! Three cases have a test of their own: a close arriving with the last bytes of a half reply is a close, not a
//! timeout; a valid reply that never ends (each header within the limits) is bounded by `Options::max_reply_len`
//! and a read budget per event; `NOAUTH` during connection set-up is an authentication error.

use crate::support;

use std::fs;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use muxlock::net::{CommandId, Fanout, NodeError, Options, Reply};
use muxlock::redlock::scripts::{self, EXTEND, RELEASE};
use muxlock::redlock::{Config, LockManager, Outcome};
use muxlock::resp::{ErrorKind, Limits, Value, encode_command};
use support::fake::{self, Action, FakeServer, bulk, redis_like, well_behaved};
use support::locks::{self, wait_until};
use support::{Cluster, RedisServer, cmd};

/// The deadline of rounds that should end long before it, with an error or a reply.
const DEADLINE: Duration = Duration::from_secs(2);
/// "At once": well before [`DEADLINE`], so certainly not a timeout.
const AT_ONCE: Duration = Duration::from_millis(500);
/// Scheduling slack past a deadline (two CPUs, tests in parallel).
const MARGIN: Duration = Duration::from_millis(250);
/// The lock managers' round timeout.
const ROUND: Duration = Duration::from_millis(500);
const TTL: Duration = Duration::from_secs(10);
/// How much the resident set may grow during one hostile exchange. The largest honest buffer here is the 16 MiB
/// bulk the connection's limits allow; a declared 2^62 bytes or 2^31 elements must cost nothing near that.
const RSS_BOUND: u64 = 64 << 20;

fn fanout(url: &str, opts: Options) -> Fanout {
    Fanout::new(vec![url.parse().expect("node url")], opts).expect("event poll")
}

/// One round of `args` to the only node of `fanout`: its outcome and how long it took.
#[track_caller]
fn ask(fanout: &Fanout, args: &[&[u8]], deadline: Duration) -> (Reply, Duration) {
    let mut request = BytesMut::new();
    encode_command(args, &mut request);
    let started = Instant::now();
    let mut round = fanout.round(started + deadline);
    round.send_all(&request, 1);
    let (CommandId { node, .. }, reply) = round.next().expect("an outcome");
    assert_eq!(node, 0);
    assert!(round.next().is_none(), "one request, one outcome");
    (reply, started.elapsed())
}

#[track_caller]
fn assert_protocol(reply: &Reply, kind: ErrorKind, offset: usize, case: &str) {
    match reply {
        Err(NodeError::Protocol(e)) => {
            assert_eq!((e.kind(), e.offset()), (kind, offset), "{case}: {e}");
        }
        other => panic!("{case}: want {kind} at byte {offset}, got {other:?}"),
    }
}

/// The connection's default options, or (`wide`) with the decoder's own default limits, wider than the
/// connection's: declared sizes inside them must still cost only what arrives.
fn options(wide: bool) -> Options {
    match wide {
        true => Options::default().with_limits(Limits::default()),
        false => Options::default(),
    }
}

/// A fanout whose one node is `fake`, with the default options.
fn one(fake: &FakeServer) -> Fanout {
    fanout(&fake.url(), Options::default())
}

/// `took` ended at `deadline`: not before, and not much after.
#[track_caller]
fn assert_at(took: Duration, deadline: Duration, case: &str) {
    assert!(
        took >= deadline && took < deadline + MARGIN,
        "{case}: took {took:?}, deadline {deadline:?}"
    );
}

/// `depth` arrays, each holding the next, around `:1`.
fn nested(depth: usize) -> Vec<u8> {
    let mut out = b"*1\r\n".repeat(depth);
    out.extend_from_slice(b":1\r\n");
    out
}

/// RSS is per process: measured sections take turns, so that one test's buffers are not counted in another's.
static MEMORY: Mutex<()> = Mutex::new(());

/// The resident set in bytes: `VmRSS` of `/proc/self/status`, which is statm's resident pages times the page size.
fn rss() -> u64 {
    let status = fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS in kB");
    kb * 1024
}

/// Runs `f` and returns its result with the peak growth of the resident set while it ran, sampled every
/// millisecond (touching tens of MiB takes longer than that, so a buffer of the sizes that matter is seen even if
/// `f` frees it before returning).
fn peak_rss_growth<T>(f: impl FnOnce() -> T) -> (T, u64) {
    struct Done<'a>(&'a AtomicBool);
    impl Drop for Done<'_> {
        // Also on a panic in `f`: the scope waits for the sampler.
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }
    let _turn = MEMORY.lock().unwrap_or_else(PoisonError::into_inner);
    let before = rss();
    let done = AtomicBool::new(false);
    let (out, peak) = thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut peak = before;
            while !done.load(SeqCst) {
                peak = peak.max(rss());
                thread::sleep(Duration::from_millis(1));
            }
            peak.max(rss())
        });
        let out = {
            let _done = Done(&done);
            f()
        };
        (out, sampler.join().expect("sampler"))
    });
    (out, peak.saturating_sub(before))
}

/// The bytes alone are checked by the unit tests of the connection state (`src/net/state_tests/`); here, over
/// a socket, a declaration inside the limits is awaited until the deadline and costs only what arrived.
#[test]
fn declared_sizes_inside_the_limits_are_awaited_without_allocating_them() {
    // Inside the limits a declaration is only a promise: the reply is awaited, and costs what arrived.
    let deadline = Duration::from_millis(300);
    let awaited: &[(&str, &[u8], bool)] = &[
        ("2^31 - 1 elements", b"*2147483647\r\n:1\r\n", true),
        ("512 MiB bulk", b"$536870912\r\nabc", true),
        ("4 MiB bulk", b"$4194304\r\nabc", false),
        ("65,536 pairs", b"%65536\r\n+a\r\n", false),
    ];
    for &(case, bytes, wide) in awaited {
        let fake = FakeServer::start(move |_: &[Bytes]| {
            Action::Sequence(vec![Action::reply(bytes), Action::Hang])
        });
        let node = fanout(&fake.url(), options(wide));
        let ((reply, took), grew) = peak_rss_growth(|| ask(&node, &[b"PING"], deadline));
        eprintln!("{case}: {reply:?} after {took:?}, RSS +{} KiB", grew >> 10);
        assert_eq!(reply, Err(NodeError::Timeout), "{case}");
        assert_at(took, deadline, case);
        assert!(grew < RSS_BOUND, "{case}: RSS grew by {grew} bytes");
    }
}

#[test]
fn a_reply_trickled_one_byte_per_write_arrives_whole_and_a_late_one_is_dropped() {
    let fake = FakeServer::start(|cmd: &[Bytes]| match fake::name(cmd).as_deref() {
        Some("ECHO") => Action::Trickle(bulk(&cmd[1]), Duration::from_millis(10)),
        _ => Action::Trickle(
            b"$11\r\nhello world\r\n".to_vec(),
            Duration::from_millis(20),
        ),
    });
    let node = one(&fake);
    let (reply, took) = ask(&node, &[b"ECHO", b"hello"], DEADLINE);
    assert_eq!(reply, Ok(Value::BulkString("hello".into())));
    // 11 bytes, 10 pauses: not sooner, and not much later.
    assert!(
        took >= Duration::from_millis(100) && took < AT_ONCE,
        "took {took:?}"
    );
    // Too slow for its deadline: a timeout at the deadline. Its bytes still come, and are not taken for the
    // next reply.
    let deadline = Duration::from_millis(100);
    let (reply, took) = ask(&node, &[b"PING"], deadline);
    assert_eq!(reply, Err(NodeError::Timeout));
    assert_at(took, deadline, "a reply too slow for its deadline");
    let (reply, _) = ask(&node, &[b"ECHO", b"next"], DEADLINE);
    assert_eq!(reply, Ok(Value::BulkString("next".into())));
    assert_eq!(fake.connections(), 1);
}

#[test]
fn a_hung_node_times_out_at_the_deadline() {
    let fake = FakeServer::start(|_: &[Bytes]| Action::Hang);
    let deadline = Duration::from_millis(300);
    let (reply, took) = ask(&one(&fake), &[b"PING"], deadline);
    assert_eq!(reply, Err(NodeError::Timeout));
    assert_at(took, deadline, "a hung node");
}

#[test]
fn a_connection_closed_mid_reply_is_closed_at_once() {
    // Half a reply, then the server dies: the close is reported when it comes, not at the deadline. (The pause
    // makes the close arrive after the half reply was read; both in one read take another path in the reader.)
    let pause = Duration::from_millis(200);
    let fake = FakeServer::start(move |_: &[Bytes]| {
        Action::Sequence(vec![
            Action::reply(b"$10\r\nhel"),
            Action::Pause(pause),
            Action::Close,
        ])
    });
    let (reply, took) = ask(&one(&fake), &[b"PING"], DEADLINE);
    assert_eq!(reply, Err(NodeError::Closed));
    assert_at(took, pause, "half a reply, a pause, a close");
    // Closed before any reply.
    let fake = FakeServer::start(|_: &[Bytes]| Action::Close);
    let (reply, took) = ask(&one(&fake), &[b"PING"], DEADLINE);
    assert_eq!(reply, Err(NodeError::Closed));
    assert!(took < AT_ONCE, "took {took:?}");
}

#[test]
fn after_a_protocol_error_the_node_is_redialled_and_used_again() {
    static HOSTILE: AtomicBool = AtomicBool::new(true);
    let fake = FakeServer::start(|_: &[Bytes]| match HOSTILE.load(SeqCst) {
        true => Action::reply(b"@garbage\r\n"),
        false => Action::reply(b"+PONG\r\n"),
    });
    let node = one(&fake);
    let (reply, _) = ask(&node, &[b"PING"], DEADLINE);
    assert_protocol(&reply, ErrorKind::UnknownType, 0, "garbage");
    HOSTILE.store(false, SeqCst);
    // Within the backoff, the node's last error stands; after it, a new connection answers.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let (reply, _) = ask(&node, &[b"PING"], DEADLINE);
        if reply == Ok(Value::SimpleString("PONG".into())) {
            break;
        }
        assert!(Instant::now() < until, "never came back: {reply:?}");
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(fake.connections(), 2);
}

/// A manager without the restart guard (fresh real servers are not trusted for a TTL), one attempt per call.
fn manager(urls: &[&str]) -> LockManager {
    locks::manager(urls.iter().copied(), locks::one_attempt(ROUND))
}

/// Which commands the hostile fake answers with the case's action; the others as a healthy Redis would.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// `SET`, after a normal set-up: the acquisition's vote.
    Set,
    /// Every command, the set-up's `SCRIPT LOAD` first.
    Every,
    /// `AUTH`: the fake's URL carries a password.
    Auth,
}

fn hostile(scope: Scope, action: Action) -> FakeServer {
    FakeServer::start(move |cmd: &[Bytes]| {
        let name = fake::name(cmd).unwrap_or_default();
        match scope {
            Scope::Every => action.clone(),
            Scope::Set if name == "SET" => action.clone(),
            Scope::Auth if name == "AUTH" => action.clone(),
            _ => fake::setup_reply(cmd).unwrap_or_else(|| well_behaved(cmd)),
        }
    })
}

/// The hostile behaviours against a lock manager, and the fake's outcome in the report (its end, usually all of it)
/// when the majority needs its vote (`None`: it grants).
fn manager_cases() -> Vec<(&'static str, Scope, Action, Option<String>)> {
    use Scope::*;
    let protocol = |what: &str| format!("protocol error: invalid RESP: {what}");
    let closed_mid_reply = [Action::reply("+O"), Action::Pause(ROUND / 5), Action::Close];
    let endless = Action::Endless {
        prefix: b"+".to_vec(),
        filler: b"x".to_vec(),
    };
    let wrongpass = "WRONGPASS invalid username-password pair or user is disabled.";
    vec![
        (
            "garbage",
            Set,
            Action::reply("HTTP/1.1 400 Bad Request\r\n\r\n"),
            Some(protocol("unknown type byte at byte 0")),
        ),
        (
            "unknown type byte",
            Set,
            Action::reply("*2\r\n:1\r\n@\r\n"),
            Some(protocol("unknown type byte at byte 8")),
        ),
        (
            "2^62 bulk",
            Set,
            Action::reply("$4611686018427387904\r\n"),
            Some(protocol("bulk length above the limit at byte 1")),
        ),
        (
            "2^31 array",
            Set,
            Action::reply("*2147483648\r\n"),
            Some(protocol("aggregate length above the limit at byte 1")),
        ),
        (
            "10,000 deep",
            Set,
            Action::Reply(nested(10_000)),
            Some(protocol(
                "aggregates nested deeper than the limit at byte 128",
            )),
        ),
        (
            "never ends",
            Set,
            endless,
            Some(protocol("line longer than the limit at byte 65537")),
        ),
        (
            "closed mid-reply",
            Set,
            Action::Sequence(closed_mid_reply.to_vec()),
            Some("connection closed by the server".into()),
        ),
        (
            "-ERR",
            Set,
            Action::reply("-ERR fake failure\r\n"),
            Some("error reply: ERR fake failure".into()),
        ),
        (
            "-ERR to all",
            Every,
            Action::reply("-ERR fake failure\r\n"),
            // The `SCRIPT LOAD`s and the native probe are optional set-up steps (for users without Lua);
            // with the restart guard off nothing else is asked, so the refusal shows on the vote.
            Some("error reply: ERR fake failure".into()),
        ),
        (
            "-NOAUTH",
            Every,
            Action::reply("-NOAUTH Authentication required.\r\n"),
            // The server's words; whether they count as a failed set-up or login is the network layer's call.
            Some("NOAUTH Authentication required.".into()),
        ),
        (
            "-WRONGPASS",
            Auth,
            Action::reply(format!("-{wrongpass}\r\n")),
            Some(format!("authentication failed: {wrongpass}")),
        ),
        (
            "one byte per write",
            Set,
            Action::Trickle(b"+OK\r\n".to_vec(), ROUND / 25),
            None,
        ),
        (
            "push first",
            Set,
            Action::reply(">2\r\n$7\r\nmessage\r\n$1\r\nx\r\n+OK\r\n"),
            None,
        ),
    ]
}

#[test]
fn a_hostile_node_among_three_leaves_the_lock_usable_and_is_named_when_needed() {
    let cluster = Cluster::start(2);
    let real = cluster.urls();
    // A node that is down, so that the majority of [real, fake, down] needs the fake.
    let down = FakeServer::start(|_: &[Bytes]| Action::Close);
    for (i, (name, scope, action, want)) in manager_cases().into_iter().enumerate() {
        let fake = hostile(scope, action);
        let fake_url = match scope {
            Scope::Auth => format!("redis://:wrong@127.0.0.1:{}", fake.port()),
            _ => fake.url(),
        };
        // Two real nodes of three: the lock works as if the fake were merely down.
        let locks = manager(&[&real[0], &real[1], &fake_url]);
        let started = Instant::now();
        let lock = locks
            .request(format!("res{i}"))
            .ttl(TTL)
            .acquire()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            started.elapsed() < ROUND,
            "{name}: lock took {:?}",
            started.elapsed()
        );
        let released = locks.unlock(lock).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(released >= 2, "{name}: released on {released}");
        // The fake's vote decides.
        let needs = manager(&[&real[0], &fake_url, &down.url()]);
        let started = Instant::now();
        let (result, grew) =
            peak_rss_growth(|| needs.request(format!("needs{i}")).ttl(TTL).acquire());
        let took = started.elapsed();
        let shown = result.as_ref().map_err(ToString::to_string);
        eprintln!("{name}: {shown:?} after {took:?}, RSS +{} KiB", grew >> 10);
        assert!(took < ROUND + MARGIN, "{name}: took {took:?}");
        assert!(grew < RSS_BOUND, "{name}: RSS grew by {grew} bytes");
        let Some(want) = want else {
            let lock = result.unwrap_or_else(|e| panic!("{name}: the fake grants: {e}"));
            assert_eq!(needs.unlock(lock), Ok(2), "{name}");
            continue;
        };
        let err = result.expect_err(name);
        assert!(err.is_quorum(), "{name}: {err}");
        let report = err.report().expect("a report");
        // The real node may not have answered yet when the two failures decided the round.
        let real_vote = &report.nodes()[0].1;
        assert!(
            matches!(real_vote, Outcome::Granted | Outcome::NotAwaited),
            "{name}: {real_vote}"
        );
        let (addr, outcome) = &report.nodes()[1];
        assert!(outcome.to_string().ends_with(&want), "{name}: {outcome}");
        assert!(
            err.to_string().contains(&format!("{addr}: {outcome}")),
            "{name}: {err}"
        );
        if scope != Scope::Every {
            assert_eq!(err.is_auth(), scope == Scope::Auth, "{name}: {err}");
        }
    }
}

#[test]
fn the_redis_like_fake_answers_the_set_up_as_a_real_server() {
    let server = RedisServer::start();
    for script in [RELEASE, EXTEND] {
        let load = cmd(&["SCRIPT", "LOAD", script]);
        let real = server.raw(&load);
        assert_eq!(fake::setup_reply(&split(&load)), Some(Action::Reply(real)));
    }
}

/// A command's parts, for calling a behaviour directly.
fn split(encoded: &[u8]) -> Vec<Bytes> {
    let mut buf = BytesMut::from(encoded);
    match muxlock::resp::decode(&mut buf) {
        Ok(Some(Value::Array(items))) => items
            .into_iter()
            .map(|v| match v {
                Value::BulkString(b) => b,
                other => panic!("not a bulk: {other:?}"),
            })
            .collect(),
        other => panic!("not a command: {other:?}"),
    }
}

#[test]
fn a_hung_node_costs_the_round_timeout_only_when_the_majority_needs_it() {
    let cluster = Cluster::start(2);
    let fake = FakeServer::start(redis_like(|_: &[Bytes]| Action::Hang));
    let down = FakeServer::start(|_: &[Bytes]| Action::Close);
    let urls = cluster.urls();
    let locks = manager(&[&urls[0], &urls[1], &fake.url()]);
    for i in 0..3 {
        let started = Instant::now();
        let lock = locks
            .request(format!("res{i}"))
            .ttl(TTL)
            .acquire()
            .expect("two real nodes");
        locks.unlock(lock).expect("two real nodes");
        // Lock and unlock together, against a round timeout of 500 ms.
        assert!(
            started.elapsed() < ROUND / 4,
            "took {:?}",
            started.elapsed()
        );
    }
    let needs = manager(&[&urls[0], &fake.url(), &down.url()]);
    let started = Instant::now();
    let err = needs
        .request("needs")
        .ttl(TTL)
        .acquire()
        .expect_err("no majority without the fake");
    let took = started.elapsed();
    assert!(took >= ROUND && took < ROUND + MARGIN, "took {took:?}");
    assert!(err.is_quorum() && err.is_timeout(), "{err}");
    // It was asked each time, by both managers, and never answered.
    wait_until(DEADLINE, "the fake got every SET", || {
        fake.count("SET") == 4
    });
    assert_eq!(
        err.report().expect("report").nodes()[1].1.to_string(),
        "timed out"
    );
}

#[test]
fn noscript_falls_back_to_eval_and_the_node_counts() {
    let cluster = Cluster::start(1);
    let fake = FakeServer::start(redis_like(|cmd: &[Bytes]| {
        match fake::name(cmd).as_deref() {
            Some("EVALSHA") => Action::reply(b"-NOSCRIPT No matching script. Please use EVAL.\r\n"),
            _ => well_behaved(cmd),
        }
    }));
    let down = FakeServer::start(|_: &[Bytes]| Action::Close);
    let locks = manager(&[&cluster.urls()[0], &fake.url(), &down.url()]);
    let mut lock = locks
        .request("res")
        .ttl(TTL)
        .acquire()
        .expect("the real node and the fake");
    locks
        .extend(&mut lock, TTL)
        .expect("extended on both, the fake by EVAL");
    assert_eq!(
        locks.unlock(lock),
        Ok(2),
        "released on both, the fake by EVAL"
    );
    let calls: Vec<(String, Bytes)> = fake
        .received()
        .into_iter()
        .filter(|c| c[0].starts_with(b"EVAL"))
        .map(|c| (fake::name(&c).unwrap_or_default(), c[1].clone()))
        .collect();
    let want = [
        ("EVALSHA", scripts::EXTEND_SHA1),
        ("EVAL", EXTEND),
        // Releases go in full from the start: no hash for a NOSCRIPT to refuse.
        ("EVAL", RELEASE),
    ]
    .map(|(verb, body)| (verb.to_owned(), Bytes::from(body)));
    assert_eq!(calls, want);
}

#[test]
fn the_redis_like_fake_passes_the_restart_guard() {
    let fakes: Vec<FakeServer> = (0..3)
        .map(|_| FakeServer::start(redis_like(well_behaved)))
        .collect();
    let urls: Vec<String> = fakes.iter().map(FakeServer::url).collect();
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(ROUND);
    assert!(config.restart_guard());
    let locks = LockManager::builder()
        .nodes(urls)
        .config(config)
        .build()
        .expect("config");
    let lock = locks
        .request("res")
        .ttl(TTL)
        .acquire()
        .expect("uptime 1,000,000 s: trusted");
    assert!(locks.unlock(lock).expect("release") >= 2);
    // Each connection began with the set-up; the slowest node may still be reading it.
    // The set-up: SCRIPT LOAD of the spec's two scripts and of `lua::ALL`, the native probe (COMMAND INFO), then
    // INFO.
    let loads = 2 + muxlock::redlock::lua::ALL.len();
    for fake in &fakes {
        wait_until(DEADLINE, "the set-up", || {
            fake.commands() > loads as u64 + 1
        });
        let names = fake.names();
        assert!(names[..loads].iter().all(|n| n == "SCRIPT"), "{names:?}");
        assert_eq!(names[loads], "COMMAND");
        assert_eq!(names[loads + 1], "INFO");
    }
}

#[test]
fn the_fake_server_stops_every_thread_on_drop() {
    let fake = FakeServer::start(|cmd: &[Bytes]| match fake::name(cmd).as_deref() {
        Some("PING") => Action::Endless {
            prefix: b"+".to_vec(),
            filler: b"x".to_vec(),
        },
        _ => Action::Trickle(b"+OK\r\n".to_vec(), Duration::from_secs(60)),
    });
    let prefix = fake.thread_prefix();
    // Clients that send and never read: one flooded, one trickled.
    let clients = ["PING", "GET"].map(|name| {
        let mut client = TcpStream::connect(fake.addr()).expect("connect");
        client.write_all(&cmd(&[name])).expect("send");
        client
    });
    wait_until(DEADLINE, "both commands", || fake.commands() == 2);
    let started = Instant::now();
    drop(fake);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "drop took {:?}",
        started.elapsed()
    );
    let left: Vec<String> = fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "threads left: {left:?}");
    drop(clients);
}

/// A close that arrives together with the last bytes of a half reply: the connection is closed now, not at the
/// deadline (edge-triggered polls do not report the close again).
#[test]
fn a_close_right_after_half_a_reply_is_closed_not_a_timeout() {
    for _ in 0..10 {
        let fake = FakeServer::start(|_: &[Bytes]| Action::ReplyThenClose(b"$10\r\nhel".to_vec()));
        let (reply, took) = ask(&one(&fake), &[b"PING"], DEADLINE);
        assert_eq!(reply, Err(NodeError::Closed), "after {took:?}");
        assert!(took < AT_ONCE, "took {took:?}");
    }
}

/// A valid reply that never ends: every header is within the limits, the whole is not. The round keeps its
/// deadline, memory stays bounded, and the connection is cut at `Options::max_reply_len`.
#[test]
fn a_valid_reply_that_never_ends_is_bounded_in_time_and_memory() {
    let element = bulk(&vec![b'y'; 1 << 20]);
    let fake = FakeServer::start(move |_: &[Bytes]| Action::Endless {
        prefix: b"*65536\r\n".to_vec(),
        filler: element.clone(),
    });
    let node = one(&fake);
    let deadline = Duration::from_millis(300);
    for _ in 0..5 {
        let ((reply, took), grew) = peak_rss_growth(|| ask(&node, &[b"PING"], deadline));
        assert!(
            matches!(reply, Err(NodeError::ReplyTooLarge(_) | NodeError::Timeout)),
            "{reply:?}"
        );
        assert!(took < deadline + MARGIN, "took {took:?}");
        assert!(grew < RSS_BOUND, "RSS grew by {} MiB", grew >> 20);
    }
}

#[test]
fn a_valid_reply_that_never_ends_leaves_the_lock_usable() {
    let cluster = Cluster::start(2);
    let element = bulk(&vec![b'y'; 1 << 20]);
    let fake = FakeServer::start(redis_like(move |_: &[Bytes]| Action::Endless {
        prefix: b"*65536\r\n".to_vec(),
        filler: element.clone(),
    }));
    let real = cluster.urls();
    let locks = manager(&[&real[0], &real[1], &fake.url()]);
    // Measured against the whole process' RSS: the other measured sections wait.
    let _turn = MEMORY.lock().unwrap_or_else(PoisonError::into_inner);
    let before = rss();
    for i in 0..10 {
        thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        let lock = locks
            .request(format!("res{i}"))
            .ttl(TTL)
            .acquire()
            .expect("two real nodes");
        locks.unlock(lock).expect("two real nodes");
        let grew = rss().saturating_sub(before);
        assert!(
            started.elapsed() < ROUND,
            "lock + unlock took {:?}",
            started.elapsed()
        );
        assert!(grew < RSS_BOUND, "RSS grew by {} MiB", grew >> 20);
    }
}

/// Without a password, every set-up command is refused with NOAUTH: that is an authentication error.
#[test]
fn noauth_during_set_up_is_an_auth_error() {
    let server = RedisServer::builder().requirepass("s3cret").start();
    let locks = manager(&[&server.url()]); // no password in the URL
    let err = locks
        .request("res")
        .ttl(TTL)
        .acquire()
        .expect_err("no password");
    assert!(err.is_auth(), "{err}");
    assert!(
        err.to_string().contains("authentication failed: NOAUTH"),
        "{err}"
    );
}
