//! The groundwork of cluster members against real Redis Clusters (`tests/support/redis_cluster/`: `redis-server
//! --cluster-enabled yes` processes on loopback, built by the test): the slot map read with muxlock's parsers from
//! `CLUSTER SHARDS` and `CLUSTER SLOTS` in RESP2 and RESP3 covers every slot and names the masters and replicas
//! the harness arranged; `CLUSTER KEYSLOT` agrees with `key_slot` for hundreds of keys; a slot migration gives an
//! `ASK` half-way and a `MOVED` after, both read by `Redirect::parse`; a failover moves the slots to the replica
//! and the map read afterwards says so.

use crate::support;

use std::time::{Duration, Instant};

use bytes::BytesMut;
use muxlock::net::cluster::{
    ClusterAddr, Endpoint, Health, Redirect, RedirectKind, SlotMap, key_slot,
};
use muxlock::resp::{Value, decode};
use support::redis_cluster::SLOTS;
use support::wire::{self, cmd};
use support::{Failover, RedisCluster, RedisServer};

const IO: Duration = Duration::from_secs(20);

/// Sends `commands` on one new connection (after `HELLO 3` when `resp3`) and returns their decoded replies.
#[track_caller]
fn query(server: &RedisServer, resp3: bool, commands: &[Vec<&str>]) -> Vec<Value> {
    let mut stream = server.connect();
    let mut bytes = Vec::new();
    if resp3 {
        bytes.extend(cmd(&["HELLO", "3"]));
    }
    for parts in commands {
        bytes.extend(cmd(parts));
    }
    let count = commands.len() + usize::from(resp3);
    let raw = wire::roundtrip(&mut stream, &bytes, count, Instant::now() + IO)
        .unwrap_or_else(|e| panic!("{commands:?} to port {}: {e}", server.port()));
    let mut buf = BytesMut::from(&raw[..]);
    let mut replies: Vec<Value> = (0..count)
        .map(|_| {
            decode(&mut buf)
                .expect("a valid reply")
                .expect("a whole reply")
        })
        .collect();
    assert!(buf.is_empty(), "bytes left over: {}", wire::show(&buf));
    if resp3 {
        assert!(matches!(replies.remove(0), Value::Map(_)), "HELLO 3");
    }
    replies
}

#[track_caller]
fn one(server: &RedisServer, resp3: bool, parts: &[&str]) -> Value {
    query(server, resp3, &[parts.to_vec()]).remove(0)
}

/// The slot map `server` gives, by `CLUSTER SHARDS` or `CLUSTER SLOTS`.
#[track_caller]
fn slot_map(server: &RedisServer, resp3: bool, shards: bool) -> SlotMap {
    let reply = one(
        server,
        resp3,
        &["CLUSTER", if shards { "SHARDS" } else { "SLOTS" }],
    );
    let parsed = if shards {
        SlotMap::from_shards_reply(&reply)
    } else {
        SlotMap::from_slots_reply(&reply)
    };
    parsed.unwrap_or_else(|e| panic!("{e}: {reply:?}"))
}

/// The redirection in an error reply.
#[track_caller]
fn redirect(reply: &Value) -> Redirect {
    let Value::Error(text) = reply else {
        panic!("expected a redirection, got {reply:?}")
    };
    Redirect::parse(text)
        .expect("a readable redirection")
        .unwrap_or_else(|| panic!("not a redirection: {}", text.escape_ascii()))
}

/// Every slot of `map` is owned by the master the harness says, at its port and id, with the shard's live
/// replicas (in any order) when `replicas`.
#[track_caller]
fn check_map(map: &SlotMap, cluster: &RedisCluster, replicas: bool, what: &str) {
    assert!(
        map.uncovered().is_empty(),
        "{what}: uncovered {:?}",
        map.uncovered()
    );
    for slot in 0..SLOTS {
        let owner = cluster.owner_of(slot);
        let master = map.master_of(slot).expect("covered");
        assert_eq!(
            master.port,
            Some(cluster.node(owner).port()),
            "{what}: slot {slot}"
        );
        assert_eq!(
            master.id.as_deref(),
            Some(cluster.node_id(owner)),
            "{what}: slot {slot}"
        );
        assert_eq!(
            master.endpoint,
            Endpoint::Host("127.0.0.1".into()),
            "{what}"
        );
    }
    // Masters that own no slot (a killed master whose replica took over) may be listed as shards of their own.
    let owning: std::collections::HashSet<usize> = map.ranges().iter().map(|r| r.shard).collect();
    assert_eq!(owning.len(), cluster.shard_count(), "{what}");
    if replicas {
        for s in 0..cluster.shard_count() {
            let shard = map
                .shards()
                .iter()
                .find(|sh| {
                    sh.master.id.as_deref() == Some(cluster.node_id(cluster.master_index(s)))
                })
                .expect("every master has its shard");
            let mut got: Vec<u16> = shard.replicas.iter().filter_map(|r| r.port).collect();
            let mut want: Vec<u16> = cluster
                .replica_indexes(s)
                .iter()
                .map(|&r| cluster.node(r).port())
                .collect();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "{what}: replicas of shard {s}");
        }
    }
}

#[test]
fn the_slot_map_of_a_live_cluster_in_both_commands_and_protocols() {
    let cluster = RedisCluster::builder(3).replicas(1).start();
    // Redis 7.0 leaves a replica out of CLUSTER SLOTS (not SHARDS) until it has seen its replication offset move
    // from 0 (`isReplicaAvailable`): a write on each master moves them.
    for s in 0..3 {
        let key = (0..)
            .map(|i| format!("{{w{i}}}"))
            .find(|k| cluster.shard_of(key_slot(k.as_bytes())) == s);
        let key = key.expect("a key of every shard");
        assert_eq!(
            one(cluster.master(s), false, &["SET", &key, "1"]),
            Value::SimpleString("OK".into())
        );
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for s in 0..3 {
        while slot_map(cluster.master(s), false, false)
            .shards()
            .iter()
            .any(|sh| sh.replicas.is_empty())
        {
            assert!(
                Instant::now() < deadline,
                "CLUSTER SLOTS from shard {s} lists no replica after 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for s in 0..3 {
        for resp3 in [false, true] {
            for shards in [true, false] {
                let what = format!(
                    "{} from shard {s}'s master, {}",
                    if shards {
                        "CLUSTER SHARDS"
                    } else {
                        "CLUSTER SLOTS"
                    },
                    if resp3 { "RESP3" } else { "RESP2" }
                );
                let map = slot_map(cluster.master(s), resp3, shards);
                check_map(&map, &cluster, true, &what);
                if shards {
                    assert!(
                        map.shards()
                            .iter()
                            .all(|sh| sh.master.health == Health::Online)
                    );
                }
            }
        }
    }
    // A replica answers too (reads of the map need no master).
    let replica = cluster.replica_indexes(0)[0];
    check_map(
        &slot_map(cluster.node(replica), false, true),
        &cluster,
        true,
        "from a replica",
    );
    // The member URL names the masters.
    let member: ClusterAddr = cluster.seed_url().parse().expect("a cluster URL");
    let ports: Vec<u16> = member.seeds().iter().map(|s| s.port()).collect();
    let want: Vec<u16> = (0..3).map(|s| cluster.master(s).port()).collect();
    assert_eq!(ports, want);
}

#[test]
fn cluster_keyslot_agrees_with_key_slot() {
    let cluster = RedisCluster::start(1);
    let mut keys: Vec<String> = Vec::new();
    for i in 0..120 {
        keys.push(format!("lock:{i}"));
        keys.push(format!("{{invoice:{i}}}:fence"));
        keys.push(format!("a{{}}{{b{i}}}"));
        keys.push(format!("x{{{{{i}}}}}y"));
        keys.push(format!("{i}{{é{i}}}ü{{z}}"));
    }
    keys.extend(
        [
            "",
            "{",
            "}",
            "{}",
            "}{",
            "{a",
            "a}",
            "{}{}",
            "é",
            "\u{1F512}{\u{1F511}}",
        ]
        .map(String::from),
    );
    let commands: Vec<Vec<&str>> = keys
        .iter()
        .map(|k| vec!["CLUSTER", "KEYSLOT", k.as_str()])
        .collect();
    let replies = query(cluster.master(0), false, &commands);
    for (key, reply) in keys.iter().zip(&replies) {
        assert_eq!(
            *reply,
            Value::Integer(i64::from(key_slot(key.as_bytes()))),
            "CLUSTER KEYSLOT {key:?}"
        );
    }
    assert_eq!(replies.len(), 610);
    // Keys of one tag share a slot, so one script may touch them all: the server agrees.
    let reply = one(
        cluster.master(0),
        false,
        &["EVAL", "return 1", "2", "{r}a", "{r}b"],
    );
    assert_eq!(reply, Value::Integer(1));
}

#[test]
fn a_slot_migration_gives_ask_then_moved() {
    let mut cluster = RedisCluster::start(3);
    let key = "{migrating}held";
    let slot = key_slot(key.as_bytes());
    let from = cluster.shard_of(slot);
    let to = (from + 1) % 3;
    let (source, target) = (cluster.master_index(from), cluster.master_index(to));
    let source_port = cluster.node(source).port();
    let target_port = cluster.node(target).port();
    assert_eq!(
        one(cluster.node(source), false, &["SET", key, "v"]),
        Value::SimpleString("OK".into())
    );

    let migration = cluster.begin_migration(slot, to);
    // Half-way: a key still on the source is served there; a missing one is asked of the target.
    assert_eq!(
        one(cluster.node(source), false, &["GET", key]),
        Value::BulkString("v".into())
    );
    for resp3 in [false, true] {
        let ask = redirect(&one(
            cluster.node(source),
            resp3,
            &["SET", "{migrating}new", "w"],
        ));
        assert_eq!(ask.kind, RedirectKind::Ask);
        assert_eq!((ask.slot, ask.port), (slot, target_port));
        assert_eq!(ask.endpoint, Endpoint::Host("127.0.0.1".into()));
    }
    // The target, asked without ASKING, sends the client back to the owner ...
    let moved = redirect(&one(cluster.node(target), false, &["GET", key]));
    assert_eq!(
        (moved.kind, moved.slot, moved.port),
        (RedirectKind::Moved, slot, source_port)
    );
    // ... and with ASKING first, serves the command.
    let replies = query(
        cluster.node(target),
        false,
        &[vec!["ASKING"], vec!["SET", "{migrating}new", "w"]],
    );
    assert_eq!(
        replies,
        [
            Value::SimpleString("OK".into()),
            Value::SimpleString("OK".into())
        ]
    );
    assert_eq!(
        cluster.move_slot_keys(&migration),
        1,
        "the key set on the source"
    );
    let ask = redirect(&one(cluster.node(source), false, &["GET", key]));
    assert_eq!(
        (ask.kind, ask.port),
        (RedirectKind::Ask, target_port),
        "a key moved: ASK"
    );
    // The maps read mid-way still give the slot to the source (MIGRATING/IMPORTING are not ownership).
    assert_eq!(
        slot_map(cluster.node(target), true, true)
            .master_of(slot)
            .and_then(|m| m.port),
        Some(source_port)
    );
    cluster.finish_migration(migration);

    // Done: the source sends every client of the slot to the target for good.
    let moved = redirect(&one(cluster.node(source), false, &["GET", key]));
    assert_eq!(
        (moved.kind, moved.slot, moved.port),
        (RedirectKind::Moved, slot, target_port)
    );
    assert_eq!(
        one(cluster.node(target), false, &["GET", key]),
        Value::BulkString("v".into())
    );
    for resp3 in [false, true] {
        for shards in [true, false] {
            check_map(
                &slot_map(cluster.node(source), resp3, shards),
                &cluster,
                false,
                "after the migration",
            );
        }
    }

    // With `unknown-endpoint`, Redis 7 writes no host: the client is to use the host it asked.
    let set = [
        "CONFIG",
        "SET",
        "cluster-preferred-endpoint-type",
        "unknown-endpoint",
    ];
    assert_eq!(
        one(cluster.node(source), false, &set),
        Value::SimpleString("OK".into())
    );
    let moved = redirect(&one(cluster.node(source), false, &["GET", key]));
    assert_eq!(
        (moved.endpoint.clone(), moved.port),
        (Endpoint::SameHost, target_port)
    );
    assert_eq!(moved.endpoint.host("127.0.0.1"), Some("127.0.0.1"));
    for resp3 in [false, true] {
        for shards in [true, false] {
            let map = slot_map(cluster.node(source), resp3, shards);
            assert!(map.uncovered().is_empty());
            let master = map.master_of(slot).expect("covered");
            assert_eq!(
                (master.endpoint.clone(), master.port),
                (Endpoint::SameHost, Some(target_port))
            );
        }
    }
    // Preferring host names where none was announced, it writes `?`: a node the client cannot reach.
    let set = [
        "CONFIG",
        "SET",
        "cluster-preferred-endpoint-type",
        "hostname",
    ];
    assert_eq!(
        one(cluster.node(source), false, &set),
        Value::SimpleString("OK".into())
    );
    let moved = redirect(&one(cluster.node(source), false, &["GET", key]));
    assert_eq!(
        (moved.endpoint.clone(), moved.port),
        (Endpoint::Unknown, target_port)
    );
    assert_eq!(moved.endpoint.host("127.0.0.1"), None);
    let map = slot_map(cluster.node(source), true, false);
    assert_eq!(
        map.master_of(slot).map(|m| m.endpoint.clone()),
        Some(Endpoint::Unknown)
    );
}

#[test]
fn a_failover_gives_the_slots_to_the_replica() {
    let mut cluster = RedisCluster::builder(3).replicas(1).start();
    // Slot 0 is shard 0's (the slots are split evenly, in order).
    assert_eq!(cluster.shard_of(0), 0);
    let old = cluster.master_index(0);
    let promoted = cluster.fail_over(0, Failover::Takeover);
    assert_ne!(promoted, old);
    assert_eq!(cluster.owner_of(0), promoted);
    for resp3 in [false, true] {
        let map = slot_map(cluster.master(1), resp3, true);
        assert!(map.uncovered().is_empty());
        let master = map.master_of(0).expect("covered");
        assert_eq!(master.port, Some(cluster.node(promoted).port()));
        assert_eq!(master.health, Health::Online);
        let map = slot_map(cluster.master(2), resp3, false);
        assert_eq!(
            map.master_of(0).and_then(|m| m.port),
            Some(cluster.node(promoted).port())
        );
    }
    // A forced failover of another shard, with the votes of the live masters.
    let old_1 = cluster.master_index(1);
    let promoted_1 = cluster.fail_over(1, Failover::Force);
    assert_ne!(promoted_1, old_1);
    check_map(
        &slot_map(cluster.master(2), false, true),
        &cluster,
        false,
        "after two failovers",
    );
    // The first killed master comes back as a replica of the node that replaced it.
    cluster.restart_node(old);
    let map = slot_map(cluster.master(2), false, true);
    let shard = map.shard_of(0).expect("covered");
    assert!(
        shard
            .replicas
            .iter()
            .any(|r| r.port == Some(cluster.node(old).port())),
        "{shard:?}"
    );
}
