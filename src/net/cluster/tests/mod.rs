//! The cluster parsers on tables of replies as Redis 7.0.15 sends them (RESP2 and RESP3), on malformed ones, and
//! on arbitrary and mutated values (proptest): no input panics, and every map built keeps its invariants.
//!
//! - this file: the fixtures (a three-master cluster's `CLUSTER SHARDS` and `CLUSTER SLOTS`, in both protocols);
//! - `maps`: slot maps from good, old, partial and malformed replies;
//! - `text`: `MOVED`/`ASK` errors and `redis+cluster://` URLs;
//! - `props`: arbitrary and mutated values, redirections and URLs (proptest).

mod maps;
mod props;
mod text;

use bytes::Bytes;

use super::*;
use crate::resp::Value;

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
