//! No input panics: arbitrary values and mutated real replies for the map parsers, arbitrary bytes after `MOVED` and
//! `ASK`, arbitrary cluster URLs; every map built keeps its invariants, and what is read writes back to itself.

use proptest::prelude::*;

use super::*;

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
