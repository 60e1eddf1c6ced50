//! What routing to a Redis Cluster member will pay per request and per map refresh: the slot of a key
//! (`key_slot`: CRC16 of the key or its hash tag), a slot's owner in a map (`SlotMap::master_of`), reading a
//! `MOVED` error, and reading a slot map from `CLUSTER SHARDS` / `CLUSTER SLOTS` replies of a live Redis 7.0.15
//! cluster of three masters with a replica each (the fuzz seeds, decoded outside the timing).
//!
//! `cargo bench --bench cluster`.

#![allow(missing_docs)] // criterion_group! and criterion_main! generate undocumented items

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{Criterion, criterion_group, criterion_main};
use muxlock::net::cluster::{Redirect, SlotMap, key_slot};
use muxlock::resp::{Value, decode};

/// A reply captured from a live cluster (`fuzz/seeds/cluster/`), decoded.
fn reply(bytes: &[u8]) -> Value {
    decode(&mut BytesMut::from(bytes))
        .expect("a valid reply")
        .expect("a whole reply")
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("cluster");
    for key in [
        &b"invoice:42"[..],
        b"{invoice:42}:fence",
        b"muxlock:queue-deadlines:a-rather-long-resource-name-of-64-bytes!!",
    ] {
        let name = format!("key_slot/{}B", key.len());
        group.bench_function(name, |b| b.iter(|| key_slot(black_box(key))));
    }
    let shards = [
        (
            "shards/resp2",
            reply(include_bytes!("../fuzz/seeds/cluster/shards-resp2")),
        ),
        (
            "shards/resp3",
            reply(include_bytes!("../fuzz/seeds/cluster/shards-resp3")),
        ),
    ];
    for (name, value) in &shards {
        group.bench_function(*name, |b| {
            b.iter(|| SlotMap::from_shards_reply(black_box(value)))
        });
    }
    let slots = [
        (
            "slots/resp2",
            reply(include_bytes!("../fuzz/seeds/cluster/slots-resp2")),
        ),
        (
            "slots/resp3",
            reply(include_bytes!("../fuzz/seeds/cluster/slots-resp3")),
        ),
    ];
    for (name, value) in &slots {
        group.bench_function(*name, |b| {
            b.iter(|| SlotMap::from_slots_reply(black_box(value)))
        });
    }
    let map = SlotMap::from_shards_reply(&shards[0].1).expect("a map");
    group.bench_function("master_of", |b| {
        b.iter(|| map.master_of(black_box(key_slot(b"invoice:42"))))
    });
    group.bench_function("redirect", |b| {
        b.iter(|| Redirect::parse(black_box(b"MOVED 3999 127.0.0.1:6381")))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
