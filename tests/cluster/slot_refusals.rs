//! Outcomes by identity when a request is refused before the wire (`src/net/slots.rs`), end to end over a real
//! Redis Cluster member: a routed round's resend after `MOVED` meets a full master, and a later resend to the same
//! master fits once room is made.

use crate::support;

use std::time::{Duration, Instant};

use bytes::BytesMut;
use muxlock::net::cluster::{MemberAddr, Members, Plan, key_slot};
use muxlock::net::{CommandId, NodeError, NodeSet, Options, TlsConfig};
use muxlock::resp::{Value, encode_command};
use support::RedisCluster;

/// Busy for `ARGV[1]` ms (the whole server waits), then answers its key's name.
const SLOW: &str = "local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] \
    while true do local n = redis.call('TIME') \
    if n[1] * 1000000 + n[2] - s >= tonumber(ARGV[1]) * 1000 then break end end \
    return KEYS[1]";
/// A grant's stand-in: answers its key's name.
const NAME: &str = "return KEYS[1]";

/// A key whose slot shard `shard` of `c` serves, not in `avoid`'s slots.
fn key_on(c: &RedisCluster, shard: usize, prefix: &str, avoid: &[&str]) -> String {
    (0..100_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| {
            let slot = key_slot(k.as_bytes());
            c.shard_of(slot) == shard && avoid.iter().all(|a| key_slot(a.as_bytes()) != slot)
        })
        .expect("a key")
}

fn eval(buf: &mut BytesMut, script: &str, key: &str, arg: &str) {
    encode_command(
        &[
            b"EVAL",
            script.as_bytes(),
            b"1",
            key.as_bytes(),
            arg.as_bytes(),
        ],
        buf,
    );
}

/// One member's outcomes in the order of their commands' ids.
fn by_id(
    mut outcomes: Vec<(CommandId, Result<Value, NodeError>)>,
) -> Vec<Result<Value, NodeError>> {
    outcomes.sort_by_key(|(id, _)| (id.node, id.seq));
    outcomes.into_iter().map(|(_, r)| r).collect()
}

fn name(s: &str) -> Result<Value, NodeError> {
    Ok(Value::BulkString(s.to_owned().into()))
}

/// Member 0 is a cluster of masters A, B, C; its map is read, then `x`'s slot moves from A to B and `z`'s from C
/// to B (the map is now stale for both). With `max_in_flight` 2, one request of five commands:
///
/// - B: `q` (busy 200 ms), then, in a second request of the round, `y` (busy 2.5 s; written once `q` answers, so
///   that `q`'s reply makes room while `y` runs: Redis writes the replies of one pipelined read only after all of
///   it ran): B is full until 200 ms;
/// - A: `x`: `MOVED` to B at once; its resend finds B full and is refused (`Overloaded`);
/// - C: `s` (busy 1.2 s), `z`: `MOVED` to B at 1.2 s, long after `q` answered: its resend fits. (With `s` busy
///   500 ms, a loaded machine read `q`'s reply after `z`'s `MOVED` once, and refused `z` too.)
///
/// The member hands up each command's own outcome under its id: `x: Overloaded`, `z: z` (or `Overloaded`, if
/// `q`'s reply was read after `z`'s `MOVED`). Matched by position
/// instead, a refusal handed out after a later resend's reply puts `z`'s answer in `x`'s place: `x` counts a grant
/// for another key, and `z` is refused.
#[test]
fn a_resend_refused_by_a_full_master_and_a_later_resend_each_get_their_own_outcome() {
    let mut c = RedisCluster::start(3);
    let q = key_on(&c, 1, "q", &[]);
    let y = key_on(&c, 1, "y", &[&q]);
    let x = key_on(&c, 0, "x", &[]);
    let s = key_on(&c, 2, "s", &[]);
    let z = key_on(&c, 2, "z", &[&s]);
    let a = key_on(&c, 0, "a", &[&x]);
    let member: MemberAddr = c.seed_url().parse().expect("member url");
    let plan =
        Plan::read(vec![member], Duration::from_secs(2), &TlsConfig::default()).expect("plan");
    let members = Members::new(plan, Options::default().with_max_in_flight(2)).expect("members");
    // Every master's connection set up, away from the slots about to move.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut req = BytesMut::new();
        for k in [&a, &q, &s] {
            eval(&mut req, NAME, k, "0");
        }
        let mut round = members.round(Instant::now() + Duration::from_secs(2));
        round.send_to(NodeSet::ALL, &req, 3);
        let got = by_id(std::iter::from_fn(|| round.next()).collect());
        if got == vec![name(&a), name(&q), name(&s)] {
            break;
        }
        assert!(Instant::now() < deadline, "warm-up: {got:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.migrate_slot(key_slot(x.as_bytes()), 1);
    c.migrate_slot(key_slot(z.as_bytes()), 1);
    let mut first = BytesMut::new();
    eval(&mut first, SLOW, &q, "200");
    eval(&mut first, NAME, &x, "0");
    eval(&mut first, SLOW, &s, "1200");
    eval(&mut first, NAME, &z, "0");
    let mut second = BytesMut::new();
    eval(&mut second, SLOW, &y, "2500");
    let mut round = members.round(Instant::now() + Duration::from_secs(5));
    assert!(round.send_to(NodeSet::ALL, &first, 4).contains(0));
    // Queued behind `q` on B (written when `q` answers): B is full until then.
    assert!(round.send_to(NodeSet::ALL, &second, 1).contains(0));
    let got = by_id(std::iter::from_fn(|| round.next()).collect());
    // `z`'s resend fits once `q`'s reply was read; on a loaded machine the driver may read it after `z`'s `MOVED`,
    // and `z` is refused too. Either way each outcome is its own command's: never another key's reply.
    let z_own = got.get(3) == Some(&name(&z)) || got.get(3) == Some(&Err(NodeError::Overloaded));
    assert!(
        got.len() == 5
            && got[0] == name(&q)
            && got[1] == Err(NodeError::Overloaded)
            && got[2] == name(&s)
            && z_own
            && got[4] == name(&y),
        "each command's own outcome (x refused on the full master, z answered or refused): {got:?}"
    );
}
