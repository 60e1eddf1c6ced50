//! Slot maps from `CLUSTER SHARDS` and `CLUSTER SLOTS` replies: good ones in both protocols, through the codec,
//! old and partial forms, and malformed ones (each error names where).

use bytes::BytesMut;

use super::*;
use crate::resp::{decode, encode};

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
