//! The restart guard's unit tests: readings of set-up replies, the window, trust at once.

use super::*;

/// The readings at the start of the set-up replies, as the tests' `setup` writes them.
const IDS: SetupIds = SetupIds {
    info: 0,
    settings: 1,
    marker: 2,
};

fn info(run_id: &str, uptime: &str) -> Value {
    let text = format!(
        "# Server\r\nredis_version:7.0.15\r\nrun_id:{run_id}\r\nuptime_in_seconds:{uptime}\r\n"
    );
    Value::BulkString(Bytes::from(text))
}

/// A connection's set-up replies: `INFO` (run id, uptime), the settings (persisting every write or not),
/// the marker (its age in ms, or refused), all decoded at `at`.
fn setup(
    run_id: &str,
    uptime: u64,
    persists: bool,
    marker_ms: Option<i64>,
    at: Instant,
) -> Vec<(Value, Instant)> {
    let b = |s: &str| Value::BulkString(Bytes::from(s.to_owned()));
    let fsync = if persists { "always" } else { "everysec" };
    let settings = Value::Array(
        [
            ("appendonly", "yes"),
            ("appendfsync", fsync),
            ("no-appendfsync-on-rewrite", "no"),
        ]
        .iter()
        .flat_map(|(k, v)| [b(k), b(v)])
        .collect(),
    );
    let marker = match marker_ms {
        Some(ms) => Value::Array(vec![Value::Integer(ms), b("1 x")]),
        None => Value::Error(Bytes::from("NOPERM")),
    };
    vec![
        (info(run_id, &uptime.to_string()), at),
        (settings, at),
        (marker, at),
    ]
}

const DAY: u64 = 86_400;

/// A connection that dropped right after its set-up leaves no replies to read (the next connection's set-up has
/// cleared them). That reading must change nothing: were it to wipe the `run_id`, the next process would not be
/// seen as another one, and a persistent node would lose "trusted at once" for good.
#[test]
fn a_connection_gone_before_its_replies_were_read_changes_nothing() {
    let t0 = Instant::now();
    let window = Duration::from_secs(10);
    let old_marker = Some(3_600_000);
    let mut node = Node::default();
    assert_eq!(
        node.read(1, &setup("a", DAY, true, old_marker, t0), IDS),
        Read::New { restarted: false }
    );
    assert!(node.trusted_at_once(t0, window, true));
    // Session 2 completed its set-up and dropped; session 3's set-up is under way: no replies, or only some.
    assert_eq!(node.read(2, &[], IDS), Read::Incomplete);
    assert_eq!(
        node.read(2, &setup("b", 0, true, old_marker, t0)[..2], IDS),
        Read::Incomplete
    );
    assert_eq!(node.run_id, Some(Bytes::from("a")));
    // Session 3: another process. It is seen as one, and it stays trusted at once (its marker is old).
    let t1 = t0 + Duration::from_millis(5);
    assert_eq!(
        node.read(3, &setup("b", 0, true, old_marker, t1), IDS),
        Read::New { restarted: true }
    );
    assert!(node.trusted_at_once(t1, window, true), "{node:?}");
    assert_eq!(node.age.map(|a| a.least), Some(Duration::ZERO));
    // The same session again reads nothing.
    assert_eq!(node.read(3, &[], IDS), Read::Same);
}

/// Trusted at once needs settings that persist *and* a marker older than the window: a node whose files were
/// lost comes back with a new, young marker, and waits like any other; so does one back from a second restart
/// soon after (its marker predates the process, not the locks that were lost).
#[test]
fn only_a_marker_older_than_the_window_proves_nothing_was_lost() {
    let t0 = Instant::now();
    let window = Duration::from_secs(30);
    let mut node = Node::default();
    node.read(1, &setup("a", DAY, true, Some(3_600_000), t0), IDS);
    assert!(node.counts(t0, window, true) && node.trusted_at_once(t0, window, true));
    // Files lost: the new process writes the marker now.
    node.read(2, &setup("b", 0, true, Some(0), t0), IDS);
    assert!(!node.counts(t0, window, true), "{node:?}");
    assert_eq!(node.counted_in(t0, window, true), Some(window));
    // Restarted again 2 s later with its files: the marker predates this process, but is 2 s old.
    let t2 = t0 + Duration::from_secs(2);
    node.read(3, &setup("c", 0, true, Some(2_000), t2), IDS);
    assert!(!node.counts(t2, window, true));
    assert_eq!(
        node.counted_in(t2, window, true),
        Some(window - Duration::from_millis(1_999))
    );
    // Once the marker is a window old, trusted at once although the process is young.
    let t3 = t2 + window - Duration::from_millis(1_999);
    assert!(node.trusted_at_once(t3, window, true) && node.counts(t3, window, true));
    assert!(node.age.is_some_and(|a| a.at(t3) < window));
    // A marker refused (ACL, OOM): the window rule, whatever the settings.
    let mut refused = Node::default();
    refused.read(1, &setup("a", 0, true, None, t0), IDS);
    assert!(!refused.trusted_at_once(t0 + window * 100, window, true));
    assert!(
        refused.counts(t0 + window, window, true),
        "the window rule still applies"
    );
    // An old marker on a node that does not persist every write: the window rule.
    let mut everysec = Node::default();
    everysec.read(1, &setup("a", 0, false, Some(3_600_000), t0), IDS);
    assert!(!everysec.counts(t0, window, true));
}

#[test]
fn settings_qualify_only_if_every_process_seen_persisted() {
    // First reading: the configuration stands for the predecessor's.
    assert!(settings_qualify(false, false, (false, false), true));
    assert!(!settings_qualify(false, false, (false, false), false));
    // A restart: the predecessor this manager saw must have persisted too.
    assert!(settings_qualify(true, true, (true, true), true));
    assert!(!settings_qualify(true, true, (false, false), true));
    assert!(!settings_qualify(true, true, (true, true), false));
    // The same process on a new connection: trusted only if it was already.
    assert!(settings_qualify(true, false, (true, true), true));
    assert!(!settings_qualify(true, false, (false, false), true));
    assert!(!settings_qualify(true, false, (true, true), false));
}

#[test]
fn info_fields_are_read_in_both_protocols() {
    let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n";
    let bulk = Value::BulkString(Bytes::from(text));
    assert_eq!(parse_info(&bulk), (Some(Bytes::from("abc123")), Some(42)));
    let verbatim = Value::Verbatim {
        format: *b"txt",
        data: Bytes::from(text),
    };
    assert_eq!(
        parse_info(&verbatim),
        (Some(Bytes::from("abc123")), Some(42))
    );
    assert_eq!(parse_info(&Value::Integer(1)), (None, None));
}

#[test]
fn the_window_is_the_longest_lease_in_use_plus_drift() {
    let guard = RestartGuard::new(3, Duration::from_secs(1), 0.01);
    assert_eq!(guard.window(), Duration::from_millis(1000 + 12));
    guard.note_ttl(5000);
    guard.note_ttl(2000);
    assert_eq!(guard.window(), Duration::from_millis(5000 + 52));
}

/// Redis' uptime is `floor(now) - floor(start)`: a reading of `u` means more than `u - 1` seconds.
#[test]
fn a_whole_second_uptime_is_a_bound_one_second_short() {
    let t0 = Instant::now();
    let age = |uptime: &str| reading(&info("a", uptime), t0, None).1;
    // Started at 12.98 s, asked at 13.01 s: "1" after 30 ms of real uptime.
    assert_eq!(age("1").least, Duration::ZERO);
    assert_eq!(age("0").least, Duration::ZERO);
    assert_eq!(age("2").least, Duration::from_secs(1));
    assert_eq!(age("86400").least, Duration::from_secs(86_399));
    // Unreadable or negative (the node's wall clock stepped back): as if just started.
    assert_eq!(age("-3").least, Duration::ZERO);
    assert_eq!(age("soon").least, Duration::ZERO);
    assert_eq!(age("1").at, t0, "dated when the reply was read");
}

#[test]
fn a_changed_run_id_counts_from_the_new_connection_whatever_the_uptime() {
    let t0 = Instant::now();
    let old = Bytes::from("a");
    let (run_id, age) = reading(&info("b", "86400"), t0, Some(&old));
    assert_eq!(run_id, Some(Bytes::from("b")));
    assert_eq!(
        age,
        Age {
            at: t0,
            least: Duration::ZERO
        }
    );
    let (_, same) = reading(&info("a", "86400"), t0, Some(&old));
    assert_eq!(same.least, Duration::from_secs(86_399));
}

/// On a virtual clock: a node that reports "up 1 s" is trusted a full window after the reading, not a window
/// minus a second (the uptime's whole seconds may hide up to a second since the restart).
#[test]
fn a_node_read_as_up_one_second_waits_the_whole_window() {
    let t0 = Instant::now();
    let window = Duration::from_millis(1500);
    let (_, age) = reading(&info("a", "1"), t0, None);
    assert!(age.at(t0 + Duration::from_millis(600)) < window);
    assert!(age.at(t0 + Duration::from_millis(1499)) < window);
    assert!(age.at(t0 + window) >= window);
    // Ages are durations: an uptime longer than this machine's monotonic clock has run is not a problem.
    let (_, old) = reading(&info("a", &u64::MAX.to_string()), t0, None);
    assert!(old.at(t0) >= Duration::from_secs(365 * 24 * 3600));
    assert_eq!(old.at(t0 - Duration::from_millis(1)), old.least);
}

#[test]
fn a_promoted_master_says_so_in_its_replication_section() {
    let info = |offset: &str| {
        Value::BulkString(Bytes::from(format!(
            "# Server\r\nrun_id:abc\r\nuptime_in_seconds:86400\r\n\r\n# Replication\r\nrole:master\r\n\
             second_repl_offset:{offset}\r\n"
        )))
    };
    assert!(!was_promoted(&info("-1")), "never a replica");
    assert!(was_promoted(&info("1234")), "promoted at offset 1234");
    let server_only = Value::BulkString(Bytes::from("# Server\r\nrun_id:abc\r\n"));
    assert!(
        !was_promoted(&server_only),
        "no replication section: plain members"
    );
    // A promoted process read on a new connection: its window starts at that reading, whatever its uptime,
    // and no persistence proof lets it count sooner.
    let t0 = Instant::now();
    let mut node = Node::default();
    let ids = SetupIds {
        info: 0,
        settings: 1,
        marker: 2,
    };
    let settings = Value::Array(
        [
            "appendonly",
            "yes",
            "appendfsync",
            "always",
            "no-appendfsync-on-rewrite",
            "no",
        ]
        .iter()
        .map(|s| Value::BulkString(Bytes::from(*s)))
        .collect(),
    );
    // A marker a day old (replicated from the old master): it would make a restarted node count at once.
    let marker = Value::Array(vec![Value::Integer(86_400_000)]);
    let window = Duration::from_secs(10);
    let mut never = Node::default();
    let replies = vec![
        (info("-1"), t0),
        (settings.clone(), t0),
        (marker.clone(), t0),
    ];
    assert!(matches!(never.read(1, &replies, ids), Read::New { .. }));
    assert!(
        never.trusted_at_once(t0, window, true),
        "the control: a node never promoted counts at once"
    );
    let replies = vec![(info("1234"), t0), (settings, t0), (marker, t0)];
    assert!(matches!(node.read(1, &replies, ids), Read::New { .. }));
    assert!(!node.trusted_at_once(t0, window, true));
    assert!(!node.counts(t0 + Duration::from_secs(9), window, true));
    assert!(node.counts(t0 + Duration::from_secs(10), window, true));
}

/// A cluster member's node is never trusted at once by its marker (a migration may have brought the marker's
/// slot from another master): it gets the window rule, whatever its settings and marker say.
#[test]
fn a_marker_proves_nothing_on_a_cluster_members_node() {
    let t0 = Instant::now();
    let window = Duration::from_secs(10);
    let node = Node {
        settings_qualify: true,
        marker: Some(Age {
            at: t0,
            least: window * 100,
        }),
        age: Some(Age {
            at: t0,
            least: Duration::ZERO,
        }),
        ..Node::default()
    };
    assert!(node.trusted_at_once(t0, window, true));
    assert!(!node.trusted_at_once(t0, window, false));
    assert!(!node.counts(t0, window, false));
    assert_eq!(node.counted_in(t0, window, false), Some(window));
    assert!(node.counts(t0 + window, window, false));
}

/// A cluster member's standing from its masters': the connections never read say nothing; trusted at once only if
/// every one read is; counted once the last of them counts.
#[test]
fn a_cluster_members_standing_covers_every_master_read() {
    let s = |trusted, up: Option<u64>, left: Option<u64>| Standing {
        trusted_at_once: trusted,
        up: up.map(Duration::from_secs),
        counted_in: left.map(Duration::from_secs),
        broken_clock: false,
    };
    let member = Standing::of_member([
        s(true, Some(90), None),
        Standing::default(),
        s(false, Some(2), Some(3)),
        s(false, Some(1), Some(4)),
    ]);
    assert_eq!(member, s(false, Some(1), Some(4)));
    let all_trusted = Standing::of_member([s(true, Some(90), None), s(true, Some(50), None)]);
    assert_eq!(all_trusted, s(true, Some(50), None));
    assert_eq!(
        Standing::of_member([Standing::default()]),
        Standing::default()
    );
    let one = s(false, Some(7), Some(1));
    assert_eq!(Standing::of_member([one]), one, "a plain member's own");
    let broken = Standing {
        broken_clock: true,
        ..s(true, Some(90), None)
    };
    assert!(
        Standing::of_member([one, broken]).broken_clock,
        "one broken master"
    );
}

/// `INFO server` as the servers here answer it, with its `monotonic_clock` line (`None`: without one, as before
/// Redis 6.2), in the protocol's two forms.
fn info_with_clock(line: Option<&str>) -> [Value; 2] {
    let clock = line.map_or(String::new(), |l| format!("monotonic_clock:{l}\r\n"));
    let text = format!(
        "# Server\r\nredis_version:7.2.4\r\nvalkey_version:9.1.2\r\nredis_mode:standalone\r\n\
         {clock}multiplexing_api:epoll\r\nrun_id:ab12\r\nuptime_in_seconds:1\r\n"
    );
    [
        Value::BulkString(Bytes::from(text.clone())),
        Value::Verbatim {
            format: *b"txt",
            data: Bytes::from(text),
        },
    ]
}

/// The monotonic clocks servers report: the kernel's (Redis 7.0 here), a processor counter at its calibrated
/// rate (Valkey 9.1.2 here: `X86 TSC @ 2444.95 ticks/us`; Redis prints whole ticks, and ARM's counter at 24 MHz
/// or 1 GHz), none (before Redis 6.2): working. A rate that is infinite or not a number (a calibration that
/// measured no time), zero, or in the millions (the smallest non-zero multiplier of a calibration gone wrong):
/// broken, and the reason quotes the line.
#[test]
fn a_monotonic_clock_is_broken_only_when_its_rate_is_not_a_counters() {
    for working in [
        Some("POSIX clock_gettime"),
        Some("X86 TSC @ 2500 ticks/us"),
        Some("X86 TSC @ 2444.95 ticks/us"),
        Some("ARM CNTVCT @ 24 ticks/us"),
        Some("ARM CNTVCT @ 1000 ticks/us"),
        Some("ARM CNTVCT @ 1 ticks/us"),
        Some("some future clock"),
        Some("X86 TSC @ 2500 MHz"),
        None,
    ] {
        for info in info_with_clock(working) {
            assert_eq!(info::broken_monotonic(&info), None, "{working:?}");
        }
    }
    for broken in [
        "X86 TSC @ inf ticks/us",
        "X86 TSC @ -inf ticks/us",
        "X86 TSC @ nan ticks/us",
        "X86 TSC @ -nan ticks/us",
        "X86 TSC @ 0 ticks/us",
        "X86 TSC @ 0.00 ticks/us",
        "ARM CNTVCT @ 0 ticks/us",
        "X86 TSC @ 16777216.00 ticks/us",
        "X86 TSC @ -2500 ticks/us",
        "X86 TSC @ ? ticks/us",
    ] {
        for info in info_with_clock(Some(broken)) {
            let why =
                info::broken_monotonic(&info).unwrap_or_else(|| panic!("{broken} read as working"));
            assert!(why.contains(&format!("monotonic_clock:{broken}")), "{why}");
        }
    }
    assert_eq!(info::broken_monotonic(&Value::Integer(1)), None);
}

/// A node's reading of a broken monotonic clock lasts as long as its process: a new connection to the same
/// process keeps it, a restart into a working one clears it.
#[test]
fn a_broken_monotonic_clock_is_known_until_another_process_answers() {
    let t0 = Instant::now();
    // `setup`'s replies with `INFO` showing `clock`.
    let with = |run_id: &str, uptime: u64, clock: &str| {
        let mut replies = setup(run_id, uptime, false, None, t0);
        let text = format!(
            "# Server\r\nrun_id:{run_id}\r\nmonotonic_clock:{clock}\r\nuptime_in_seconds:{uptime}\r\n"
        );
        replies[0].0 = Value::BulkString(Bytes::from(text));
        replies
    };
    let mut node = Node::default();
    let broken = "X86 TSC @ inf ticks/us";
    node.read(1, &with("a", DAY, broken), IDS);
    assert!(
        node.broken_clock
            .as_deref()
            .is_some_and(|w| w.contains(broken))
    );
    node.read(2, &with("a", DAY, broken), IDS);
    assert!(node.broken_clock.is_some(), "the same process, read again");
    let working = "X86 TSC @ 2444.95 ticks/us";
    assert_eq!(
        node.read(3, &with("b", 0, working), IDS),
        Read::New { restarted: true }
    );
    assert_eq!(node.broken_clock, None, "another process, working");
}

/// Connections whose set-up replies are scripted (every connection's are `replies`, in session 1) over a fanout
/// to nowhere: the restart guard reads a cluster member's node through [`Members`] as a manager does.
#[derive(Debug)]
struct ScriptedConns {
    fanout: crate::net::Fanout,
    replies: Vec<(Value, Instant)>,
}

impl crate::net::cluster::Conns for ScriptedConns {
    type Round<'a> = crate::net::Round<'a>;

    fn round(&self, deadline: Instant) -> crate::net::Round<'_> {
        self.fanout.round(deadline)
    }

    fn release_round(&self, deadline: Instant) -> crate::net::Round<'_> {
        self.fanout.release_round(deadline)
    }

    fn options(&self) -> &crate::net::Options {
        self.fanout.options()
    }

    fn stats(&self, conn: usize) -> crate::net::NodeCounts {
        self.fanout.stats(conn)
    }

    fn sessions(&self, _conn: usize) -> u64 {
        1
    }

    fn next_session(&self, _conn: usize) -> u64 {
        1
    }

    fn setup_replies(&self, _conn: usize) -> Vec<(Value, Instant)> {
        self.replies.clone()
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn read_map(
        &self,
        _nodes: Vec<crate::net::NodeAddr>,
        _wait: Duration,
        _tls: &crate::net::TlsConfig,
        _done: crate::net::cluster::MapDone,
    ) -> Result<(), ()> {
        Err(())
    }

    fn vacancies(&self) -> Box<dyn crate::net::cluster::Vacancies> {
        Box::new(self.fanout.occupier())
    }
}

/// Through the seam, a manager's cluster member's node is never trusted at once after a restart, whatever its
/// settings and marker say (the marker's slot may have migrated onto a master that lost its files); a plain
/// member's node with the same readings is.
#[test]
fn a_cluster_members_node_read_through_the_members_is_never_trusted_at_once() {
    use crate::net::cluster::{MemberAddr, Members, Plan};
    let t0 = Instant::now();
    let plain = crate::net::test_peer::nobody();
    let seed = crate::net::test_peer::nobody();
    let seed = format!("{}:{}", seed.host(), seed.port());
    let members: Vec<MemberAddr> = vec![
        MemberAddr::Node(plain),
        format!("redis+cluster://{seed}")
            .parse()
            .expect("cluster URL"),
    ];
    // The cluster member's map could not be read: it is planned with its seed.
    let plan = Plan::with_maps(members, vec![None, Some(None)]);
    let fanout = crate::net::Fanout::with_vacancies(
        plan.conns().to_vec(),
        plan.vacant(),
        crate::net::Options::default(),
    )
    .expect("fanout");
    // A process just started (uptime 0), persisting every write, with a marker a day old.
    let replies = setup("restarted", 0, true, Some(86_400_000), t0);
    let members = Members::over(plan, ScriptedConns { fanout, replies });
    assert!(members.is_cluster(1) && !members.is_cluster(0));
    let guard = RestartGuard::new(members.connections(), Duration::from_secs(10), 0.01);
    let now = t0 + Duration::from_millis(1);
    assert!(
        guard.trusts(&members, (0, b"k"), IDS, now, None),
        "a plain member's node proves it lost nothing"
    );
    assert!(
        !guard.trusts(&members, (1, b"k"), IDS, now, None),
        "a cluster member's node trusted at once by its marker"
    );
    let standing = |conn| guard.standing(&members, (conn, Some(&b"k"[..])), IDS, now);
    assert!(standing(0).trusted_at_once);
    assert!(!standing(1).trusted_at_once);
    assert!(standing(1).counted_in.is_some(), "{:?}", standing(1));
    // Once the window has passed since the start it read, it counts.
    assert!(guard.trusts(
        &members,
        (1, b"k"),
        IDS,
        now + Duration::from_secs(11),
        None
    ));
}

/// Plain nodes whose set-up replies are scripted (every connection's are `replies`, in session 1) over a fanout
/// to nowhere, every one of which took over at `at` (as a cluster's promoted replica does).
#[derive(Debug)]
struct TakenOver {
    fanout: crate::net::Fanout,
    replies: Vec<(Value, Instant)>,
    at: Instant,
}

impl crate::redlock::engine::seam::Nodes for TakenOver {
    type Round<'a> = crate::net::Round<'a>;

    fn len(&self) -> usize {
        self.fanout.len()
    }

    fn addrs(&self) -> &[crate::net::NodeAddr] {
        self.fanout.addrs()
    }

    fn round(&self, deadline: Instant) -> crate::net::Round<'_> {
        self.fanout.round(deadline)
    }

    fn release_round(&self, deadline: Instant) -> crate::net::Round<'_> {
        self.fanout.release_round(deadline)
    }

    fn sessions(&self, _conn: usize) -> u64 {
        1
    }

    fn setup_replies(&self, _conn: usize) -> Vec<(Value, Instant)> {
        self.replies.clone()
    }

    fn taken_over(&self, _conn: usize, _key: Option<&[u8]>) -> Option<Instant> {
        Some(self.at)
    }
}

/// A node that took over is not counted for a whole window from then, however much its readings prove, and is
/// again from the instant the window ends.
#[test]
fn a_node_that_took_over_counts_again_the_instant_its_window_ends() {
    let t0 = Instant::now();
    let fanout = crate::net::Fanout::new(
        vec![crate::net::test_peer::nobody()],
        crate::net::Options::default(),
    )
    .expect("fanout");
    // Up for a day, persisting every write, with a marker a day old: trusted at once but for the takeover.
    let replies = setup("up", DAY, true, Some(86_400_000), t0);
    let nodes = TakenOver {
        fanout,
        replies,
        at: t0,
    };
    let guard = RestartGuard::new(1, Duration::from_secs(10), 0.01);
    let window = guard.window();
    let tick = Duration::from_nanos(1);
    assert!(!guard.trusts(&nodes, (0, b"k"), IDS, t0, None));
    assert!(!guard.trusts(&nodes, (0, b"k"), IDS, t0 + window - tick, None));
    assert!(guard.trusts(&nodes, (0, b"k"), IDS, t0 + window, None));
}

/// Every set-up step may be refused but `INFO`: the scripts' loads and the native probe (a user without them
/// still locks), and with the restart guard its settings and marker (the node then gets the window rule). `INFO`
/// is what the guard reads a restart from: refused, the connection is not set up.
#[test]
fn every_setup_step_but_info_may_be_refused() {
    let (setup, on) = connection_setup(&Config::default().with_restart_guard(true), 3);
    let info = on
        .guard
        .as_ref()
        .map(|(_, ids)| ids.info())
        .expect("the guard is on");
    let all_but_info: Vec<usize> = (0..setup.len()).filter(|&i| i != info).collect();
    assert!(all_but_info.len() >= 4, "{setup:?}");
    assert_eq!(on.optional(), all_but_info);
    let (setup, off) = connection_setup(&Config::default().with_restart_guard(false), 3);
    assert_eq!(off.optional(), (0..setup.len()).collect::<Vec<_>>());
}
