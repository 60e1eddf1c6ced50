//! The cluster parsers on tables of replies as Redis 7.0.15 sends them (RESP2 and RESP3), on malformed ones, and
//! on arbitrary and mutated values (proptest): no input panics, and every map built keeps its invariants.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;
use crate::resp::{Value, decode, encode};

fn bulk(s: &str) -> Value {
    Value::BulkString(Bytes::copy_from_slice(s.as_bytes()))
}

fn int(n: i64) -> Value {
    Value::Integer(n)
}

fn arr(items: Vec<Value>) -> Value {
    Value::Array(items)
}

/// A map in either protocol: RESP3's `%`, or RESP2's flat array.
fn map(resp3: bool, pairs: Vec<(&str, Value)>) -> Value {
    if resp3 {
        Value::Map(pairs.into_iter().map(|(k, v)| (bulk(k), v)).collect())
    } else {
        arr(pairs.into_iter().flat_map(|(k, v)| [bulk(k), v]).collect())
    }
}

const ID_A: &str = "05e07e0337413bc6afd4d1da01ea9e31c5bd53c7";
const ID_B: &str = "a4d1b9993889f18a1f8d48c3ac7d8cba2ff8d72b";
const ID_C: &str = "a9795f4abe0e71ce6b1bfdaf86cac87db413bd69";
const ID_R: &str = "c0ffee0337413bc6afd4d1da01ea9e31c5bd53c7";

fn shard_node(resp3: bool, id: &str, port: i64, endpoint: &str, role: &str, health: &str) -> Value {
    map(
        resp3,
        vec![
            ("id", bulk(id)),
            ("port", int(port)),
            ("ip", bulk("127.0.0.1")),
            ("endpoint", bulk(endpoint)),
            ("role", bulk(role)),
            ("replication-offset", int(0)),
            ("health", bulk(health)),
        ],
    )
}

/// `CLUSTER SHARDS` of three masters (the first with a replica and two ranges), as Redis 7.0.15 orders it.
fn shards_reply(resp3: bool) -> Value {
    let shard = |slots: Vec<i64>, nodes: Vec<Value>| {
        map(
            resp3,
            vec![
                ("slots", arr(slots.into_iter().map(int).collect())),
                ("nodes", arr(nodes)),
            ],
        )
    };
    arr(vec![
        shard(
            vec![10923, 16383],
            vec![shard_node(
                resp3,
                ID_C,
                7002,
                "127.0.0.1",
                "master",
                "online",
            )],
        ),
        shard(
            vec![0, 100, 200, 5460],
            vec![
                shard_node(resp3, ID_R, 7003, "127.0.0.1", "replica", "online"),
                shard_node(resp3, ID_A, 7000, "", "master", "online"),
            ],
        ),
        shard(
            vec![101, 199, 5461, 10922],
            vec![shard_node(resp3, ID_B, 7001, "?", "master", "online")],
        ),
    ])
}

fn slots_node(resp3: bool, endpoint: Option<&str>, port: i64, id: &str) -> Value {
    let endpoint = match (endpoint, resp3) {
        (Some(e), _) => bulk(e),
        (None, true) => Value::Null,
        (None, false) => Value::NullBulk,
    };
    arr(vec![
        endpoint,
        int(port),
        bulk(id),
        map(resp3, vec![("ip", bulk("127.0.0.1"))]),
    ])
}

/// `CLUSTER SLOTS` of the same cluster.
fn slots_reply(resp3: bool) -> Value {
    let a = || slots_node(resp3, None, 7000, ID_A);
    let r = || slots_node(resp3, Some("127.0.0.1"), 7003, ID_R);
    let b = || slots_node(resp3, Some("?"), 7001, ID_B);
    let c = || slots_node(resp3, Some("127.0.0.1"), 7002, ID_C);
    arr(vec![
        arr(vec![int(0), int(100), a(), r()]),
        arr(vec![int(101), int(199), b()]),
        arr(vec![int(200), int(5460), a(), r()]),
        arr(vec![int(5461), int(10922), b()]),
        arr(vec![int(10923), int(16383), c()]),
    ])
}

#[track_caller]
fn check_three_masters(map: &SlotMap) {
    assert!(map.uncovered().is_empty(), "{:?}", map.uncovered());
    let port = |slot| map.master_of(slot).and_then(|m| m.port);
    for (slot, want) in [
        (0, 7000),
        (100, 7000),
        (101, 7001),
        (199, 7001),
        (200, 7000),
        (5460, 7000),
        (5461, 7001),
        (10922, 7001),
        (10923, 7002),
        (16383, 7002),
    ] {
        assert_eq!(port(slot), Some(want), "slot {slot}");
    }
    assert_eq!(map.master_of(SLOT_COUNT), None);
    assert_eq!(map.shards().len(), 3);
    let a = map.shard_of(0).unwrap();
    assert_eq!(a.master.id.as_deref(), Some(ID_A));
    assert_eq!(a.master.endpoint, Endpoint::SameHost);
    assert_eq!(a.master.endpoint.host("10.1.1.1"), Some("10.1.1.1"));
    assert_eq!(a.replicas.len(), 1);
    assert_eq!(a.replicas[0].id.as_deref(), Some(ID_R));
    assert_eq!(a.replicas[0].port, Some(7003));
    let b = map.master_of(101).unwrap();
    assert_eq!(
        (b.endpoint.clone(), b.endpoint.host("h")),
        (Endpoint::Unknown, None)
    );
}

#[test]
fn shards_in_both_protocols() {
    for resp3 in [false, true] {
        let map = SlotMap::from_shards_reply(&shards_reply(resp3)).unwrap();
        check_three_masters(&map);
        assert_eq!(map.master_of(0).unwrap().health, Health::Online);
    }
}

#[test]
fn slots_in_both_protocols() {
    for resp3 in [false, true] {
        let map = SlotMap::from_slots_reply(&slots_reply(resp3)).unwrap();
        check_three_masters(&map);
        assert_eq!(map.master_of(0).unwrap().health, Health::Unknown);
    }
}

#[test]
fn replies_survive_the_codec() {
    // Encoded and decoded again, as they arrive from a socket.
    for resp3 in [false, true] {
        for (reply, shards) in [(shards_reply(resp3), true), (slots_reply(resp3), false)] {
            let mut buf = BytesMut::new();
            encode(&reply, &mut buf);
            let value = decode(&mut buf).unwrap().unwrap();
            let map = if shards {
                SlotMap::from_shards_reply(&value)
            } else {
                SlotMap::from_slots_reply(&value)
            };
            check_three_masters(&map.unwrap());
        }
    }
}

#[test]
fn old_slots_forms_and_partial_maps() {
    // Redis 3: [ip, port] only; "" for the node's own unknown address; a gap in coverage.
    let reply = arr(vec![
        arr(vec![int(0), int(8000), arr(vec![bulk(""), int(7000)])]),
        arr(vec![
            int(9000),
            int(16383),
            arr(vec![bulk("10.0.0.2"), int(7001)]),
        ]),
    ]);
    let map = SlotMap::from_slots_reply(&reply).unwrap();
    assert_eq!(map.uncovered(), vec![(8001, 8999)]);
    assert_eq!(map.master_of(8500), None);
    assert_eq!(map.master_of(0).unwrap().endpoint, Endpoint::SameHost);
    assert_eq!(map.master_of(0).unwrap().id, None);
    assert_eq!(map.shards().len(), 2);
    // Empty: a cluster with no slot assigned yet.
    let empty = SlotMap::from_slots_reply(&arr(vec![])).unwrap();
    assert_eq!(empty.uncovered(), vec![(0, 16383)]);
    // An IPv6 endpoint keeps no brackets.
    let reply = arr(vec![arr(vec![
        int(0),
        int(16383),
        arr(vec![bulk("::1"), int(7000)]),
    ])]);
    let map = SlotMap::from_slots_reply(&reply).unwrap();
    assert_eq!(
        map.master_of(5).unwrap().endpoint,
        Endpoint::Host("::1".into())
    );
}

#[test]
fn shards_with_replicas_only_or_two_masters() {
    let reply = arr(vec![
        map(
            false,
            vec![
                ("slots", arr(vec![int(0), int(16383)])),
                (
                    "nodes",
                    arr(vec![
                        shard_node(false, ID_A, 7000, "127.0.0.1", "master", "failed"),
                        shard_node(false, ID_B, 7001, "127.0.0.1", "master", "online"),
                    ]),
                ),
            ],
        ),
        // A shard without slots and without a master is skipped.
        map(
            false,
            vec![
                ("slots", arr(vec![])),
                (
                    "nodes",
                    arr(vec![shard_node(
                        false,
                        ID_R,
                        7003,
                        "127.0.0.1",
                        "replica",
                        "online",
                    )]),
                ),
            ],
        ),
    ]);
    let map = SlotMap::from_shards_reply(&reply).unwrap();
    assert_eq!(map.master_of(0).unwrap().id.as_deref(), Some(ID_B));
    assert_eq!(map.shards().len(), 1);
}

#[test]
fn malformed_replies_say_where() {
    let node = |id| shard_node(false, id, 7000, "h", "master", "online");
    let shard = |slots: Vec<Value>, nodes: Vec<Value>| {
        map(false, vec![("slots", arr(slots)), ("nodes", arr(nodes))])
    };
    let cases: Vec<(Value, bool, &str)> = vec![
        (
            Value::Error("ERR unknown subcommand 'shards'".into()),
            true,
            "refused to give its slot map: ERR unknown",
        ),
        (bulk("nope"), true, "expected an array"),
        (arr(vec![int(1)]), true, "shard 0: expected a map"),
        (
            arr(vec![arr(vec![bulk("slots")])]),
            true,
            "shard 0: expected key/value pairs",
        ),
        (
            arr(vec![shard(vec![int(0)], vec![node(ID_A)])]),
            true,
            "shard 0 > slots: expected start/end pairs",
        ),
        (
            arr(vec![shard(vec![int(0), int(16384)], vec![node(ID_A)])]),
            true,
            "shard 0 > slots > 1: expected a slot number",
        ),
        (
            arr(vec![shard(vec![int(10), int(5)], vec![node(ID_A)])]),
            true,
            "slots 10-5: a slot range must lie",
        ),
        (
            arr(vec![
                shard(vec![int(0), int(10)], vec![node(ID_A)]),
                shard(vec![int(10), int(20)], vec![node(ID_B)]),
            ]),
            true,
            "slots 0-10 and 10-20: slots claimed twice",
        ),
        (
            arr(vec![shard(vec![int(0), int(10)], vec![])]),
            true,
            "shard 0: a shard with slots has no master",
        ),
        (
            arr(vec![shard(
                vec![int(0), int(10)],
                vec![map(
                    false,
                    vec![("role", bulk("master")), ("ip", bulk("h"))],
                )],
            )]),
            true,
            "nodes[0]: neither \"port\" nor \"tls-port\"",
        ),
        (
            arr(vec![shard(
                vec![int(0), int(10)],
                vec![map(
                    false,
                    vec![("role", bulk("boss")), ("port", int(1)), ("ip", bulk("h"))],
                )],
            )]),
            true,
            "role is neither",
        ),
        (
            arr(vec![shard(
                vec![int(0), int(10)],
                vec![map(
                    false,
                    vec![
                        ("role", bulk("master")),
                        ("port", int(0)),
                        ("ip", bulk("h")),
                    ],
                )],
            )]),
            true,
            "nodes[0] > port: expected a port number",
        ),
        (
            arr(vec![map(false, vec![("nodes", arr(vec![]))])]),
            true,
            "no \"slots\"",
        ),
        (
            Value::Error("ERR This instance has cluster support disabled".into()),
            false,
            "cluster support disabled",
        ),
        (
            arr(vec![arr(vec![int(0), int(1)])]),
            false,
            "range 0: expected [start, end, master, ...]",
        ),
        (
            arr(vec![arr(vec![int(0), int(1), arr(vec![bulk("h")])])]),
            false,
            "range 0 > master: expected [endpoint, port, ...]",
        ),
        (
            arr(vec![arr(vec![
                int(0),
                int(1),
                arr(vec![int(3), int(7000)]),
            ])]),
            false,
            "master > endpoint: expected a string",
        ),
        (
            arr(vec![arr(vec![
                int(0),
                int(1),
                arr(vec![bulk("h"), int(70000)]),
            ])]),
            false,
            "master > port: expected a port",
        ),
        (
            arr(vec![arr(vec![
                int(0),
                int(1),
                arr(vec![bulk("h"), int(1)]),
                arr(vec![bulk("h"), int(2), Value::Null]),
            ])]),
            false,
            "replica 0 > id: expected a string, got a null",
        ),
        (
            arr(vec![arr(vec![
                int(0),
                int(1),
                arr(vec![bulk("h"), int(1), bulk("x"), arr(vec![bulk("ip")])]),
            ])]),
            false,
            "master > metadata: expected key/value pairs",
        ),
        (
            arr(vec![arr(vec![
                int(-1),
                int(1),
                arr(vec![bulk("h"), int(1)]),
            ])]),
            false,
            "range 0 > start: expected a slot number",
        ),
    ];
    for (reply, shards, want) in cases {
        let got = if shards {
            SlotMap::from_shards_reply(&reply)
        } else {
            SlotMap::from_slots_reply(&reply)
        };
        let err = got.expect_err(want).to_string();
        assert!(err.contains(want), "want {want:?} in {err:?}");
    }
    assert!(
        SlotMap::from_shards_reply(&Value::Error("ERR x".into()))
            .unwrap_err()
            .is_refused()
    );
}

#[test]
fn redirections() {
    use RedirectKind::{Ask, Moved};
    let host = |h: &str| Endpoint::Host(h.into());
    let cases: Vec<(&[u8], RedirectKind, u16, Endpoint, u16)> = vec![
        (
            b"MOVED 3999 127.0.0.1:6381",
            Moved,
            3999,
            host("127.0.0.1"),
            6381,
        ),
        (
            b"ASK 3999 127.0.0.1:6381",
            Ask,
            3999,
            host("127.0.0.1"),
            6381,
        ),
        (
            b"MOVED 0 redis-2.example.com:7000",
            Moved,
            0,
            host("redis-2.example.com"),
            7000,
        ),
        (b"MOVED 16383 ::1:7000", Moved, 16383, host("::1"), 7000),
        (
            b"ASK 5 2001:db8::7:65535",
            Ask,
            5,
            host("2001:db8::7"),
            65535,
        ),
        (
            b"MOVED 5 [2001:db8::7]:7000",
            Moved,
            5,
            host("2001:db8::7"),
            7000,
        ),
        (
            b"MOVED 12182 :23103",
            Moved,
            12182,
            Endpoint::SameHost,
            23103,
        ),
        (b"ASK 12182 ?:7000", Ask, 12182, Endpoint::Unknown, 7000),
    ];
    for (text, kind, slot, endpoint, port) in cases {
        let want = Redirect {
            kind,
            slot,
            endpoint,
            port,
        };
        assert_eq!(
            Redirect::parse(text),
            Ok(Some(want.clone())),
            "{}",
            text.escape_ascii()
        );
        // Display writes it back as the server did (brackets aside).
        if !text.contains(&b'[') {
            assert_eq!(want.to_string().as_bytes(), text);
        }
    }
    for other in [
        &b"ERR wrong"[..],
        b"",
        b"MOVEDX 1 h:1",
        b"moved 1 h:1",
        b"CROSSSLOT Keys",
        b"TRYAGAIN x",
    ] {
        assert_eq!(Redirect::parse(other), Ok(None), "{}", other.escape_ascii());
    }
    let bad: Vec<(&[u8], RedirectError)> = vec![
        (b"MOVED", RedirectError::Shape),
        (b"MOVED 1", RedirectError::Shape),
        (b"MOVED 1 h:1 extra", RedirectError::Shape),
        (b"MOVED 16384 h:1", RedirectError::Slot),
        (b"MOVED -1 h:1", RedirectError::Slot),
        (b"MOVED +1 h:1", RedirectError::Slot),
        (b"MOVED 01 h:1", RedirectError::Slot),
        (b"MOVED x h:1", RedirectError::Slot),
        (b"ASK 1 h", RedirectError::NoPort),
        (b"ASK 1 h:", RedirectError::Port),
        (b"ASK 1 h:0", RedirectError::Port),
        (b"ASK 1 h:65536", RedirectError::Port),
        (b"ASK 1 h:07000", RedirectError::Port),
        (b"ASK 1 \xff:1", RedirectError::Endpoint),
        (b"ASK 1 h\t:1", RedirectError::Endpoint),
    ];
    for (text, want) in bad {
        assert_eq!(Redirect::parse(text), Err(want), "{}", text.escape_ascii());
    }
}

#[test]
fn cluster_urls() {
    let a: ClusterAddr = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"
        .parse()
        .unwrap();
    assert_eq!(
        a.seeds().iter().map(|s| s.port()).collect::<Vec<_>>(),
        [7000, 7001]
    );
    assert!(a.seeds().iter().all(|s| !s.tls() && s.password().is_none()));
    let a: ClusterAddr = "rediss+cluster://u:p%40w@h1,h2:7001/0?protocol=resp3#insecure"
        .parse()
        .unwrap();
    for s in a.seeds() {
        assert!(s.tls() && s.insecure() && s.resp3());
        assert_eq!(
            (s.username(), s.password(), s.db()),
            (Some("u"), Some("p@w"), Some(0))
        );
    }
    assert_eq!((a.seeds()[0].host(), a.seeds()[0].port()), ("h1", 6379));
    assert_eq!(
        a.to_string(),
        "rediss+cluster://u:***@h1:6379,h2:7001/0?protocol=resp3#insecure"
    );
    let node = a.node("10.0.0.9", 7005);
    assert!(node.tls() && node.resp3() && node.password() == Some("p@w"));
    let one: ClusterAddr = "REDIS+CLUSTER://[::1]:7000".parse().unwrap();
    assert_eq!(one.seeds()[0].host(), "::1");
    // A password holding '#' and ',' (escaped or not).
    let a: ClusterAddr = "redis+cluster://:p#w,x@h:1,h:2".parse().unwrap();
    assert_eq!(a.seeds()[1].password(), Some("p#w,x"));

    for (input, want) in [
        ("redis+cluster://", "at least one seed"),
        ("redis+cluster://u:p@", "at least one seed"),
        ("redis+cluster://h:1,,h:2", "a seed in the list is empty"),
        ("redis+cluster://h:1,", "a seed in the list is empty"),
        ("redis+cluster://h:1,h:1", "given twice"),
        ("redis+cluster://h:1/2", "database 0 only"),
        ("redis+cluster://h:1,h:x", "port is not a number"),
        ("redis+cluster://u:secret@h:1,::1:2", "needs brackets"),
        ("redis://h:1", "scheme is redis+cluster://"),
        ("h:1,h:2", "a cluster is redis+cluster://"),
    ] {
        let err = input.parse::<ClusterAddr>().unwrap_err().to_string();
        assert!(err.contains(want), "{input}: {err}");
        assert!(!err.contains("secret"), "{err}");
    }
    assert!(ClusterAddr::new(vec![]).is_err());
    let seed = |port| crate::net::NodeAddr::new("h", port);
    assert!(ClusterAddr::new(vec![seed(1), seed(1)]).is_err());
    assert!(ClusterAddr::new(vec![seed(1).with_db(1)]).is_err());
    assert_eq!(
        ClusterAddr::new(vec![seed(1), seed(2)])
            .unwrap()
            .to_string(),
        "redis+cluster://h:1,h:2"
    );

    assert!(matches!(
        "redis+cluster://h:1".parse(),
        Ok(MemberAddr::Cluster(_))
    ));
    assert!(matches!("redis://h:1".parse(), Ok(MemberAddr::Node(_))));
    assert!(matches!("h:1".parse(), Ok(MemberAddr::Node(_))));
    let e = "redis+cluster://h:1"
        .parse::<crate::net::NodeAddr>()
        .unwrap_err();
    assert!(e.to_string().contains("not one node"), "{e}");
}

// --- no input panics --------------------------------------------------------------------------------------------

fn scalar() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        Just("master"),
        Just("replica"),
        Just("slots"),
        Just("nodes"),
        Just("port"),
        Just("id"),
        Just("ip"),
        Just("endpoint"),
        Just("role"),
        Just("health"),
        Just("tls-port"),
        Just(""),
        Just("?"),
        Just("127.0.0.1"),
        Just("\u{ff}"),
    ];
    prop_oneof![
        text.prop_map(bulk),
        any::<i64>().prop_map(Value::Integer),
        (-2i64..16390).prop_map(Value::Integer),
        Just(Value::Null),
        Just(Value::NullBulk),
        Just(Value::NullArray),
        proptest::collection::vec(any::<u8>(), 0..8).prop_map(|b| Value::BulkString(b.into())),
        Just(Value::Error("ERR x".into())),
        any::<f64>().prop_map(Value::Double),
        any::<bool>().prop_map(Value::Boolean),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(5, 48, 8, |inner| {
        let items = proptest::collection::vec(inner.clone(), 0..8);
        let pairs = proptest::collection::vec((inner.clone(), inner.clone()), 0..5);
        prop_oneof![
            items.clone().prop_map(Value::Array),
            items.prop_map(Value::Set),
            pairs.clone().prop_map(Value::Map),
            (pairs, inner).prop_map(|(attributes, v)| Value::Attribute {
                attributes,
                value: Box::new(v)
            }),
        ]
    })
}

/// Replaces the part of `v` that `path` leads to (each step an index, taken modulo the children) by `with`.
fn mutate(v: &mut Value, path: &[usize], with: Value) {
    let children: Vec<&mut Value> = match v {
        Value::Array(items) | Value::Set(items) | Value::Push(items) => items.iter_mut().collect(),
        Value::Map(pairs) => pairs.iter_mut().flat_map(|(k, v)| [k, v]).collect(),
        Value::Attribute { value, .. } => vec![&mut **value],
        _ => Vec::new(),
    };
    match path.split_first() {
        Some((step, rest)) if !children.is_empty() => {
            let n = children.len();
            if let Some(child) = children.into_iter().nth(step % n) {
                mutate(child, rest, with);
            }
        }
        _ => *v = with,
    }
}

#[track_caller]
fn check_invariants(map: &SlotMap) {
    for pair in map.ranges().windows(2) {
        assert!(pair[0].end < pair[1].start, "{:?}", map.ranges());
    }
    for r in map.ranges() {
        assert!(r.start <= r.end && r.end < SLOT_COUNT && r.shard < map.shards().len());
        assert_eq!(map.shard_index_of(r.start), Some(r.shard));
        assert_eq!(map.shard_index_of(r.end), Some(r.shard));
    }
    let covered: usize = map
        .ranges()
        .iter()
        .map(|r| usize::from(r.end - r.start) + 1)
        .sum();
    let gaps: usize = map
        .uncovered()
        .iter()
        .map(|(s, e)| usize::from(e - s) + 1)
        .sum();
    assert_eq!(covered + gaps, usize::from(SLOT_COUNT));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_values_never_panic(v in value()) {
        for map in [SlotMap::from_shards_reply(&v), SlotMap::from_slots_reply(&v)].into_iter().flatten() {
            check_invariants(&map);
        }
    }

    #[test]
    fn mutated_replies_never_panic(
        resp3 in any::<bool>(),
        shards in any::<bool>(),
        path in proptest::collection::vec(any::<usize>(), 0..6),
        with in value(),
    ) {
        let mut reply = if shards { shards_reply(resp3) } else { slots_reply(resp3) };
        mutate(&mut reply, &path, with);
        for map in [SlotMap::from_shards_reply(&reply), SlotMap::from_slots_reply(&reply)].into_iter().flatten() {
            check_invariants(&map);
        }
    }

    #[test]
    fn arbitrary_redirections_never_panic(
        head in prop_oneof![Just(&b"MOVED "[..]), Just(&b"ASK "[..]), Just(&b""[..])],
        tail in proptest::collection::vec(prop_oneof![any::<u8>(), Just(b':'), Just(b' '), Just(b'1')], 0..24),
    ) {
        let text = [head, &tail[..]].concat();
        if let Ok(Some(r)) = Redirect::parse(&text) {
            prop_assert!(r.slot < SLOT_COUNT && r.port > 0);
            // Written back as a server writes it, it reads the same.
            prop_assert_eq!(Redirect::parse(r.to_string().as_bytes()), Ok(Some(r.clone())));
        }
    }

    #[test]
    fn arbitrary_urls_never_panic(s in "(redis|rediss)\\+cluster://[a-z0-9:@,/?#%\\[\\]é=]{0,24}") {
        if let Ok(addr) = s.parse::<ClusterAddr>() {
            prop_assert!(!addr.seeds().is_empty());
            // What it prints parses back to the same seeds (passwords aside: they print as ***).
            if addr.seeds()[0].password().is_none() {
                let again: ClusterAddr = addr.to_string().parse().unwrap();
                prop_assert_eq!(again.seeds(), addr.seeds());
            }
        }
    }
}
