//! The fuzz harness for the Redis Cluster parsers (`muxlock::net::cluster`): `CLUSTER SHARDS` and
//! `CLUSTER SLOTS` replies, `MOVED`/`ASK` errors and `redis+cluster://` URLs. Shared by the `cluster` fuzz target
//! and `tests/codec/fuzz_replay.rs` (both include this file with `#[path]`); it sees only muxlock's public API.
//!
//! [`check`] reads the bytes three ways, and panics when a parser breaks a documented guarantee:
//!
//! - as a RESP reply stream: every value decoded is given to both map parsers, which must not panic, and any map
//!   they build must keep its invariants (ranges sorted, disjoint, inside 0..=16383, naming a shard; every lookup
//!   agreeing with the ranges; owned and uncovered slots adding up to 16,384); an error value's text goes to
//!   [`Redirect::parse`];
//! - as an error's text for [`Redirect::parse`]: a redirection read has a slot below 16,384 and a port above 0, and
//!   written back as a server writes it, it reads the same;
//! - as UTF-8, for [`ClusterAddr`]: a URL read has seeds, and one without a password prints a URL that reads back
//!   to the same seeds.

use bytes::BytesMut;
use muxlock::net::cluster::{ClusterAddr, Redirect, SLOT_COUNT, SlotMap};
use muxlock::resp::{Decoder, Value};

/// At most this many values of one input are parsed (a stream of tiny values could be long).
const MAX_VALUES: usize = 64;

/// Runs every cluster parser on `data`; panics if one breaks a guarantee.
pub fn check(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    let mut decoder = Decoder::new();
    for _ in 0..MAX_VALUES {
        let Ok(Some(value)) = decoder.decode(&mut buf) else {
            break;
        };
        for map in [
            SlotMap::from_shards_reply(&value),
            SlotMap::from_slots_reply(&value),
        ]
        .into_iter()
        .flatten()
        {
            check_map(&map);
        }
        if let Value::Error(text) = &value {
            check_redirect(text);
        }
    }
    check_redirect(data);
    if let Ok(text) = std::str::from_utf8(data) {
        check_url(text);
    }
}

fn check_map(map: &SlotMap) {
    let mut covered = 0usize;
    for (i, r) in map.ranges().iter().enumerate() {
        assert!(r.start <= r.end && r.end < SLOT_COUNT, "{r:?}");
        assert!(r.shard < map.shards().len(), "{r:?}");
        if let Some(next) = map.ranges().get(i + 1) {
            assert!(r.end < next.start, "{r:?} then {next:?}");
        }
        for slot in [r.start, r.end, r.start + (r.end - r.start) / 2] {
            assert_eq!(map.shard_index_of(slot), Some(r.shard), "slot {slot}");
        }
        covered += usize::from(r.end - r.start) + 1;
    }
    let gaps: usize = map
        .uncovered()
        .iter()
        .map(|(s, e)| {
            assert_eq!(map.shard_index_of(*s), None, "uncovered slot {s}");
            usize::from(e - s) + 1
        })
        .sum();
    assert_eq!(covered + gaps, usize::from(SLOT_COUNT));
    assert_eq!(map.master_of(SLOT_COUNT), None);
}

fn check_redirect(text: &[u8]) {
    if let Ok(Some(r)) = Redirect::parse(text) {
        assert!(r.slot < SLOT_COUNT && r.port > 0, "{r:?}");
        let again = Redirect::parse(r.to_string().as_bytes());
        assert_eq!(again, Ok(Some(r.clone())), "{r} does not read back");
    }
}

fn check_url(text: &str) {
    if let Ok(addr) = text.parse::<ClusterAddr>() {
        assert!(!addr.seeds().is_empty());
        if addr.seeds()[0].password().is_none() {
            let again: ClusterAddr = addr
                .to_string()
                .parse()
                .unwrap_or_else(|e| panic!("{addr} does not read back: {e}"));
            assert_eq!(again.seeds(), addr.seeds());
        }
    }
}
