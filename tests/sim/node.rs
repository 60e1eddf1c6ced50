//! One simulated Redis node: a keyspace with expiries on the node's own wall clock ([`NodeClock`]: as Redis
//! expires keys, by the wall clock, whatever it does), muxlock's own scripts implemented in Rust (recognised by
//! their SHA1s, or by their bodies under `EVAL`), the set-up commands a connection runs (`SCRIPT LOAD`, `INFO
//! server`, `CONFIG GET *append*`, the persistence-marker script), and process restarts with or without data.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use muxlock::redlock::{PERSIST_MARKER_KEY, lua, scripts};
use muxlock::resp::{Decimal, Value, encode_command};

use super::did::{self, Did};

/// Virtual time, in nanoseconds from the start of the run.
pub type Time = u64;
pub const MS: Time = 1_000_000;

/// A right wall clock at virtual time 0 (Unix ms): the clients' wall clocks, and a node's until its clock is moved.
pub const WALL_START_MS: u64 = 1_700_000_000_000;

/// Time on a node's wall clock: nanoseconds since the Unix epoch. Everything a node times (expiries, `TIME`, its
/// uptime, the persistence marker's age, the queue's deadlines) is on its wall clock, as a Redis server's is.
pub type Wall = u64;

/// What a right wall clock reads at virtual time `t` (the clients' do: NTP keeps them right).
pub fn true_wall(t: Time) -> Wall {
    WALL_START_MS * MS + t
}

/// A node's wall clock, its machine's (a restart keeps it): it read `wall` at virtual time `at`, and has advanced
/// `rate` thousandths of a nanosecond per nanosecond since (1,000: right; 0: stopped; 2,000: twice as fast). The
/// fault plan steps it and changes its rate (`Event::Clock`).
#[derive(Clone, Copy, Debug)]
pub struct NodeClock {
    wall: Wall,
    at: Time,
    rate: u64,
}

/// A clock's rate when it runs right, in thousandths.
pub const RIGHT_RATE: u64 = 1_000;

impl NodeClock {
    /// A right clock.
    pub fn right() -> NodeClock {
        NodeClock {
            wall: true_wall(0),
            at: 0,
            rate: RIGHT_RATE,
        }
    }

    /// What it reads at virtual time `now` (not before its last change).
    pub fn read(&self, now: Time) -> Wall {
        self.wall + now.saturating_sub(self.at) * self.rate / 1_000
    }

    /// How far ahead of a right clock it is at `now`, in nanoseconds (negative: behind).
    pub fn offset(&self, now: Time) -> i64 {
        self.read(now) as i64 - true_wall(now) as i64
    }

    /// Its rate now, in thousandths.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// From `now` on: stepped by `step` nanoseconds (negative: back), then running at `rate` thousandths.
    pub fn change(&mut self, now: Time, step: i64, rate: u64) {
        *self = NodeClock {
            wall: self.read(now).saturating_add_signed(step),
            at: now,
            rate,
        };
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Data {
    Str(Bytes),
    /// A hash, fields in insertion order (as a small hash's listpack keeps them: `HKEYS` order matters to the
    /// unattributed release).
    Hash(Vec<(Bytes, Bytes)>),
    /// A sorted set, kept in Redis' order: by score, then by member (the waiting queue's scripts).
    ZSet(Vec<(i64, Bytes)>),
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub data: Data,
    /// When it expires, on the node's wall clock.
    pub expires: Option<Wall>,
}

/// What a restart keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// Every acknowledged write (AOF with `appendfsync always`).
    KeepAll,
    /// Nothing: the files are gone (marker too).
    LoseAll,
    /// The last snapshot (RDB): keys as they were then, expiries absolute.
    Snapshot,
}

#[derive(Debug)]
pub struct Node {
    pub keys: BTreeMap<Bytes, Entry>,
    /// The scripts loaded, by their index in [`all_scripts`].
    scripts: u64,
    pub run: u64,
    /// When this process started, on the node's wall clock (its uptime is counted on it, as Redis counts it).
    pub started: Wall,
    /// The machine's wall clock.
    pub clock: NodeClock,
    /// `appendonly yes`, `appendfsync always`, `no-appendfsync-on-rewrite no`.
    pub aof_always: bool,
    snapshot: Option<BTreeMap<Bytes, Entry>>,
    /// The server's native compare-and-delete: none (Redis 7.0: scripts only), `DELIFEQ` (Valkey ≥ 9,
    /// also `SET ... IFEQ`), or `DELEX key IFEQ` (Redis ≥ 8.4, also `SET ... IFEQ`).
    pub native: Native,
    /// Native compare-and-delete or `SET IFEQ` commands this node ran (kept across restarts: a count for the run).
    pub native_calls: u64,
    /// Releases sent by hash that this node answered `NOSCRIPT` (kept across restarts): none may be, since a
    /// release's reply is often read by nobody (`scripts.rs`, "Releases go in full").
    pub releases_by_hash: u64,
    /// Compare-and-delete requests of one key this node ran (the spec's release script, `DELIFEQ`, `DELEX
    /// IFEQ`): a plain lock's release, or a failed attempt's clean-up (kept across restarts: a count for the run).
    pub compare_deletes: u64,
    /// Keys a release or a leave handed on to a waiter ([`lua::QUEUE_LEAVE`]), and handed keys
    /// a waiter's gate granted.
    pub handed_on: u64,
    pub handed_taken: u64,
    /// Handed markers (`muxlock:turn:<id>=<value>:<line>`) written by the last command, for the world to push to
    /// the turn listeners whose prefix they start with (taken after each command: `World::push_markers`).
    pub markers: Vec<Bytes>,
    /// What the user's ACL refuses (`-NOPERM`, before anything runs): a mask of [`Acl`] bits (the world's ACL
    /// faults set it, `plan_acls`).
    pub denied: u8,
    /// Commands refused by the ACL so far, by [`Acl`] bit (kept across restarts: a count for the run).
    pub refusals: [u64; Acl::KINDS],
    /// What every command carrying a lock value did here, in the order they ran (kept across restarts: the
    /// record of the run, `did.rs`).
    pub did: Vec<Did>,
}

/// What a simulated user's ACL may lack, as bits of [`Node::denied`]: each refused as Redis 7.0 words it
/// (`-NOPERM this user has no permissions to run the 'eval' command`).
#[derive(Clone, Copy, Debug)]
pub struct Acl;

impl Acl {
    /// `-@scripting` without `SCRIPT`: `EVAL` and `EVALSHA` (releases, fenced and reentrant locks, the marker).
    pub const EVAL: u8 = 1;
    /// `-evalsha` alone: extensions by hash refused, scripts in full allowed.
    pub const EVALSHA: u8 = 2;
    /// `-time`: the clock check's readings.
    pub const TIME: u8 = 4;
    /// `-info`: the set-up's `INFO server`, which the restart guard reads (not an optional step).
    pub const INFO: u8 = 8;
    /// `-delifeq -delex`: the native compare-and-delete.
    pub const NATIVE: u8 = 16;
    /// `-command`: the native probe (`COMMAND INFO`).
    pub const COMMAND: u8 = 32;
    pub const KINDS: usize = 6;

    /// The bit that refuses `verb` (upper case), and its name in the refusal.
    fn of(verb: &[u8]) -> Option<(u8, &'static str)> {
        Some(match verb {
            b"EVAL" => (Acl::EVAL, "eval"),
            b"EVALSHA" => (Acl::EVAL | Acl::EVALSHA, "evalsha"),
            b"TIME" => (Acl::TIME, "time"),
            b"INFO" => (Acl::INFO, "info"),
            b"DELIFEQ" => (Acl::NATIVE, "delifeq"),
            b"DELEX" => (Acl::NATIVE, "delex"),
            b"COMMAND" => (Acl::COMMAND, "command|info"),
            _ => return None,
        })
    }
}

/// A simulated server's native commands (see [`Node::native`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Native {
    #[default]
    None,
    DelIfEq,
    DelEx,
}

/// The scripts a node knows, by SHA1 and body (made once: a node looks them up for every script call).
pub fn all_scripts() -> &'static [(&'static str, &'static str)] {
    static ALL: std::sync::OnceLock<Vec<(&'static str, &'static str)>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut v = vec![
            (scripts::RELEASE_SHA1, scripts::RELEASE),
            (scripts::EXTEND_SHA1, scripts::EXTEND),
        ];
        v.extend(lua::ALL.iter().map(|l| (l.sha1, l.body)));
        // The queued offers not loaded at set-up, sent in full on their first use.
        for (queued, _) in lua::QUEUED {
            if !v.iter().any(|(sha, _)| *sha == queued.sha1) {
                v.push((queued.sha1, queued.body));
            }
        }
        for l in [
            lua::RELEASE_REENTRANT_UNATTRIBUTED,
            lua::EXTEND_REENTRANT_SHORTENING,
        ] {
            v.push((l.sha1, l.body));
        }
        assert!(v.len() <= 64, "a node's loaded scripts are a 64-bit mask");
        v
    })
}

/// Two SHA1s (hex) are the same: their first 8 bytes compared as one word first, so that telling the scripts
/// apart (a dozen candidates per script call) calls no `memcmp` but for the match.
fn same_sha(a: &[u8], b: &[u8]) -> bool {
    let head = |s: &[u8]| s.first_chunk::<8>().map(|c| u64::from_ne_bytes(*c));
    head(a) == head(b) && a == b
}

/// Whether the script `sha` is a release (it deletes a value only its caller holds).
fn is_release(sha: &str) -> bool {
    let releases = [
        scripts::RELEASE_SHA1,
        lua::RELEASE_BATCH.sha1,
        lua::RELEASE_MANY.sha1,
        lua::RELEASE_FENCED.sha1,
        lua::RELEASE_REENTRANT.sha1,
        lua::RELEASE_REENTRANT_UNATTRIBUTED.sha1,
        lua::QUEUE_LEAVE.sha1,
    ];
    releases
        .iter()
        .any(|r| same_sha(r.as_bytes(), sha.as_bytes()))
}

/// The hand-off values' field of a waiter's registered TTL: `<id>:px`.
fn ttl_field(id: &[u8]) -> Vec<u8> {
    [id, b":px"].concat()
}

fn int(n: i64) -> Value {
    Value::Integer(n)
}

fn err(msg: &str) -> Value {
    Value::Error(Bytes::from(msg.to_owned()))
}

/// `TIME` at `now` on a node's wall clock: seconds and microseconds (the clock check compares it with the
/// client's).
fn time(now: Wall) -> [u64; 2] {
    let us = now / (MS / 1000);
    [us / 1_000_000, us % 1_000_000]
}

fn num(b: &[u8]) -> i64 {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(0, |f| f as i64)
}

impl Node {
    pub fn new(aof_always: bool, run: u64) -> Node {
        let mut keys = BTreeMap::new();
        // Provisioned with an old time, as `muxlock cluster up` does: trusted at once if the settings qualify.
        keys.insert(
            Bytes::from_static(PERSIST_MARKER_KEY.as_bytes()),
            Entry {
                data: Data::Str(Bytes::from_static(b"0 provisioned")),
                expires: None,
            },
        );
        Node {
            keys,
            scripts: 0,
            run,
            started: true_wall(0),
            clock: NodeClock::right(),
            aof_always,
            snapshot: None,
            native: Native::None,
            native_calls: 0,
            compare_deletes: 0,
            releases_by_hash: 0,
            handed_on: 0,
            handed_taken: 0,
            markers: Vec::new(),
            denied: 0,
            refusals: [0; Acl::KINDS],
            did: Vec::new(),
        }
    }

    /// Sets the fence counter of `resource` (no expiry, as fencing keeps it).
    pub fn set_counter(&mut self, resource: &[u8], value: u64) {
        let key = Bytes::from(muxlock::redlock::counter_key(resource));
        let data = Data::Str(Bytes::from(value.to_string()));
        self.keys.insert(
            key,
            Entry {
                data,
                expires: None,
            },
        );
    }

    /// Sets `key` to `value` for `ttl` from time 0 (directed histories: someone else holds it).
    pub fn hold(&mut self, key: &[u8], value: &[u8], ttl: Time) {
        let data = Data::Str(Bytes::copy_from_slice(value));
        let expires = Some(self.clock.read(0) + ttl);
        self.keys
            .insert(Bytes::copy_from_slice(key), Entry { data, expires });
    }

    /// `key` is live at virtual time `now`.
    pub fn has(&mut self, key: &[u8], now: Time) -> bool {
        let now = self.clock.read(now);
        self.live(key, now).is_some()
    }

    /// `key` holds `value` at virtual time `now` (a live string key).
    pub fn holds(&mut self, key: &[u8], value: &[u8], now: Time) -> bool {
        let now = self.clock.read(now);
        self.get(key, now).is_some_and(|v| v == value)
    }

    /// `key` holds `value` at virtual time `now` and still will at `until` (no later expiry), read without
    /// touching the keyspace (an expired key is not removed: the judges' look changes nothing).
    pub fn keeps(&self, key: &[u8], value: &[u8], now: Time, until: Time) -> bool {
        let (now, until) = (self.clock.read(now), self.clock.read(until));
        self.keys.get(key).is_some_and(|e| {
            matches!(&e.data, Data::Str(v) if v == value)
                && e.expires.is_none_or(|t| t > now && t > until)
        })
    }

    /// `key` is live at virtual time `now`, read without touching the keyspace.
    pub fn sees(&self, key: &[u8], now: Time) -> bool {
        let now = self.clock.read(now);
        (self.keys.get(key)).is_some_and(|e| e.expires.is_none_or(|t| t > now))
    }

    pub fn take_snapshot(&mut self) {
        self.snapshot = Some(self.keys.clone());
    }

    /// A new process at virtual time `now`, with a new run id.
    pub fn restart(&mut self, now: Time, kind: Restart, run: u64) {
        let now = self.clock.read(now);
        match kind {
            Restart::KeepAll => {}
            Restart::LoseAll => self.keys.clear(),
            Restart::Snapshot => self.keys = self.snapshot.clone().unwrap_or_default(),
        }
        self.scripts = 0;
        self.run = run;
        self.started = now;
    }

    pub fn flush_scripts(&mut self) {
        self.scripts = 0;
    }

    /// Removes every key expired by virtual time `now`, as the server's active expiry does ten times a second:
    /// run before each change of the node's clock, so that a key the clock expired stays gone when the clock
    /// steps back (a key read after expiring is removed by [`Node::live`], as Redis removes it on access).
    pub fn expire_all(&mut self, now: Time) {
        let now = self.clock.read(now);
        self.keys.retain(|_, e| e.expires.is_none_or(|t| t > now));
    }

    fn live(&mut self, key: &[u8], now: Wall) -> Option<&mut Entry> {
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.expires.is_some_and(|t| t <= now))
        {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    /// A live string key's value (compared in place: most reads only compare it).
    fn get(&mut self, key: &[u8], now: Wall) -> Option<&[u8]> {
        match self.live(key, now) {
            Some(Entry {
                data: Data::Str(v), ..
            }) => Some(v),
            _ => None,
        }
    }

    fn set(&mut self, key: &[u8], value: &[u8], px: Option<i64>, now: Wall) {
        let expires = px.map(|ms| now + (ms.max(0) as u64) * MS);
        self.keys.insert(
            Bytes::copy_from_slice(key),
            Entry {
                data: Data::Str(Bytes::copy_from_slice(value)),
                expires,
            },
        );
    }

    fn del(&mut self, key: &[u8], now: Wall) -> i64 {
        let had = self.live(key, now).is_some();
        self.keys.remove(key);
        i64::from(had)
    }

    fn pexpire(&mut self, key: &[u8], ms: i64, now: Wall) -> i64 {
        match self.live(key, now) {
            Some(e) => {
                e.expires = Some(now + (ms.max(0) as u64) * MS);
                1
            }
            None => 0,
        }
    }

    fn pttl(&mut self, key: &[u8], now: Wall) -> i64 {
        match self.live(key, now) {
            None => -2,
            Some(Entry { expires: None, .. }) => -1,
            Some(Entry {
                expires: Some(t), ..
            }) => ((*t - now) / MS) as i64,
        }
    }

    fn hash(&mut self, key: &[u8], now: Wall) -> Option<&mut Vec<(Bytes, Bytes)>> {
        match self.live(key, now) {
            Some(Entry {
                data: Data::Hash(h),
                ..
            }) => Some(h),
            _ => None,
        }
    }

    fn hset(&mut self, key: &[u8], field: &[u8], now: Wall) {
        if self.hash(key, now).is_none() {
            self.keys.insert(
                Bytes::copy_from_slice(key),
                Entry {
                    data: Data::Hash(Vec::new()),
                    expires: None,
                },
            );
        }
        if let Some(h) = self.hash(key, now) {
            if !h.iter().any(|(f, _)| f == field) {
                h.push((Bytes::copy_from_slice(field), Bytes::from_static(b"1")));
            }
        }
    }

    /// `HSET key field value` (a new value replaces the field's).
    fn hput(&mut self, key: &[u8], field: &[u8], value: &[u8], now: Wall) {
        self.hset(key, field, now);
        if let Some(h) = self.hash(key, now) {
            for (f, v) in h.iter_mut() {
                if f == field {
                    *v = Bytes::copy_from_slice(value);
                }
            }
        }
    }

    /// `HGET key field`.
    fn hget(&mut self, key: &[u8], field: &[u8], now: Wall) -> Option<Bytes> {
        self.hash(key, now)
            .and_then(|h| h.iter().find(|(f, _)| f == field).map(|(_, v)| v.clone()))
    }

    fn zset(&mut self, key: &[u8], now: Wall) -> Option<&mut Vec<(i64, Bytes)>> {
        match self.live(key, now) {
            Some(Entry {
                data: Data::ZSet(z),
                ..
            }) => Some(z),
            _ => None,
        }
    }

    /// `ZADD key score member` (a new score moves the member).
    fn zadd(&mut self, key: &[u8], score: i64, member: &[u8], now: Wall) {
        if self.zset(key, now).is_none() {
            self.keys.insert(
                Bytes::copy_from_slice(key),
                Entry {
                    data: Data::ZSet(Vec::new()),
                    expires: None,
                },
            );
        }
        if let Some(z) = self.zset(key, now) {
            z.retain(|(_, m)| m != member);
            z.push((score, Bytes::copy_from_slice(member)));
            z.sort();
        }
    }

    /// `ZREM`; an emptied sorted set goes, as in Redis.
    fn zrem(&mut self, key: &[u8], member: &[u8], now: Wall) {
        let Some(z) = self.zset(key, now) else {
            return;
        };
        z.retain(|(_, m)| m != member);
        if z.is_empty() {
            self.keys.remove(key);
        }
    }

    /// `ZSCORE key member`.
    fn zscore(&mut self, key: &[u8], member: &[u8], now: Wall) -> Option<i64> {
        self.zset(key, now)
            .and_then(|z| z.iter().find(|(_, m)| m == member).map(|(s, _)| *s))
    }

    /// The first member (`ZRANGE key 0 0`).
    fn zhead(&mut self, key: &[u8], now: Wall) -> Option<Bytes> {
        self.zset(key, now)
            .and_then(|z| z.first().map(|(_, m)| m.clone()))
    }

    /// `INCR` of a counter key (kept as a string).
    fn incr(&mut self, key: &[u8], now: Wall) {
        let n = self.get(key, now).map_or(0, num) + 1;
        let expires = self.live(key, now).and_then(|e| e.expires);
        self.keys.insert(
            Bytes::copy_from_slice(key),
            Entry {
                data: Data::Str(Bytes::from(n.to_string())),
                expires,
            },
        );
    }

    /// `HDEL g m m:px`: a waiter's registered value and TTL go (the hand-off values of its line, `g`).
    fn forget_offer(&mut self, g: &[u8], m: &[u8], now: Wall) {
        self.hdel(g, m, now);
        self.hdel(g, &ttl_field(m), now);
    }

    /// `HDEL`; an emptied hash goes, as in Redis.
    fn hdel(&mut self, key: &[u8], field: &[u8], now: Wall) -> i64 {
        let Some(h) = self.hash(key, now) else {
            return 0;
        };
        let before = h.len();
        h.retain(|(f, _)| f != field);
        let removed = before - h.len();
        if h.is_empty() {
            self.keys.remove(key);
        }
        removed as i64
    }

    fn hlen(&mut self, key: &[u8], now: Wall) -> i64 {
        self.hash(key, now).map_or(0, |h| h.len() as i64)
    }

    /// `uptime_in_seconds`: as Redis computes it, the difference of two wall-clock readings in whole seconds
    /// (negative after the clock stepped back past the start).
    fn uptime_s(&self, now: Wall) -> i64 {
        let s = |t: Wall| (t / (1_000 * MS)) as i64;
        s(now) - s(self.started)
    }

    /// Appends the reply to `TIME` at virtual time `now` to `out`, encoded: the bytes of [`Node::exec`]'s reply,
    /// without the reply in between (every request of a lease's round reads `TIME`).
    pub fn time_reply(&self, now: Time, out: &mut BytesMut) {
        let [s, us] = time(self.clock.read(now)).map(|n| Decimal::new(n as i64));
        encode_command(&[s.as_bytes(), us.as_bytes()], out);
    }

    /// Runs one command at virtual time `now`, and keeps what it did with the lock value it carries, if any
    /// ([`Node::did`]).
    pub fn exec(&mut self, cmd: &[&[u8]], now: Time) -> Value {
        let reply = self.run_command(cmd, now);
        self.did.extend(did::effects(cmd, &reply, now));
        reply
    }

    /// Runs one command at virtual time `now`.
    fn run_command(&mut self, cmd: &[&[u8]], now: Time) -> Value {
        let now = self.clock.read(now);
        let Some(verb) = cmd.first() else {
            return err("ERR empty command");
        };
        // Commands as the engine sends them (upper case), else upper-cased (rare: no allocation on the way).
        let upper;
        let verb: &[u8] = match verb.iter().any(u8::is_ascii_lowercase) {
            true => {
                upper = verb.to_ascii_uppercase();
                &upper
            }
            false => verb,
        };
        if self.denied != 0
            && let Some((bits, name)) = Acl::of(verb)
            && self.denied & bits != 0
        {
            let bit = (self.denied & bits).trailing_zeros() as usize;
            self.refusals[bit] += 1;
            return err(&format!(
                "NOPERM this user has no permissions to run the '{name}' command"
            ));
        }
        let a = |i: usize| cmd.get(i).map_or(&b""[..], |b| &b[..]);
        match verb {
            b"SET" => {
                let nx = cmd.iter().any(|c| c.eq_ignore_ascii_case(b"NX"));
                let px = cmd
                    .iter()
                    .position(|c| c.eq_ignore_ascii_case(b"PX"))
                    .map(|i| num(a(i + 1)));
                let ifeq = cmd.iter().position(|c| c.eq_ignore_ascii_case(b"IFEQ"));
                if let Some(i) = ifeq {
                    // `SET key value IFEQ cmp [PX ms]`, as Valkey ≥ 8.1 / Redis ≥ 8.4 do it: only if the key holds
                    // `cmp`, never creating it; without an expiry the TTL goes (a lock that never expires: the
                    // checker's no-key-without-expiry rule would catch a client that sent it).
                    if self.native == Native::None {
                        return err("ERR syntax error");
                    }
                    if nx {
                        return err("ERR syntax error");
                    }
                    self.native_calls += 1;
                    if self.get(a(1), now) != Some(a(i + 1)) {
                        return Value::NullBulk;
                    }
                    self.set(a(1), a(2), px, now);
                    return Value::SimpleString(Bytes::from_static(b"OK"));
                }
                if nx && self.live(a(1), now).is_some() {
                    return Value::NullBulk;
                }
                self.set(a(1), a(2), px, now);
                Value::SimpleString(Bytes::from_static(b"OK"))
            }
            b"DELIFEQ" if self.native == Native::DelIfEq => {
                self.native_calls += 1;
                self.compare_deletes += 1;
                if self.get(a(1), now) == Some(a(2)) {
                    return int(self.del(a(1), now));
                }
                int(0)
            }
            b"DELEX" if self.native == Native::DelEx && a(2).eq_ignore_ascii_case(b"IFEQ") => {
                self.native_calls += 1;
                self.compare_deletes += 1;
                if self.get(a(1), now) == Some(a(3)) {
                    return int(self.del(a(1), now));
                }
                int(0)
            }
            b"COMMAND" if a(1).eq_ignore_ascii_case(b"INFO") => {
                // One entry per name asked: the command's description if the server has it, else a null.
                let info = |name: &'static [u8]| {
                    Value::Array(vec![Value::BulkString(Bytes::from_static(name)), int(3)])
                };
                let entries = cmd[2..]
                    .iter()
                    .map(
                        |name| match (self.native, name.to_ascii_uppercase().as_slice()) {
                            (Native::DelIfEq, b"DELIFEQ") => info(b"delifeq"),
                            (Native::DelEx, b"DELEX") => info(b"delex"),
                            _ => Value::NullBulk,
                        },
                    )
                    .collect();
                Value::Array(entries)
            }
            b"GET" => self.get(a(1), now).map_or(Value::NullBulk, |v| {
                Value::BulkString(Bytes::copy_from_slice(v))
            }),
            b"PTTL" => int(self.pttl(a(1), now)),
            b"DEL" => int(cmd[1..].iter().map(|k| self.del(k, now)).sum()),
            b"SCRIPT" if a(1).eq_ignore_ascii_case(b"LOAD") => {
                match all_scripts()
                    .iter()
                    .position(|(_, body)| body.as_bytes() == a(2))
                {
                    Some(i) => {
                        self.scripts |= 1 << i;
                        Value::BulkString(Bytes::from_static(all_scripts()[i].0.as_bytes()))
                    }
                    None => err("ERR unknown script"),
                }
            }
            b"INFO" => Value::BulkString(Bytes::from(format!(
                "# Server\r\nredis_version:7.0.0\r\nrun_id:{:040x}\r\nuptime_in_seconds:{}\r\n",
                self.run,
                self.uptime_s(now)
            ))),
            b"CONFIG" => {
                let (aof, fsync) = match self.aof_always {
                    true => ("yes", "always"),
                    false => ("no", "everysec"),
                };
                let b = |s: &str| Value::BulkString(Bytes::from(s.to_owned()));
                Value::Array(vec![
                    b("appendonly"),
                    b(aof),
                    b("appendfsync"),
                    b(fsync),
                    b("no-appendfsync-on-rewrite"),
                    b("no"),
                ])
            }
            b"TIME" => Value::Array(
                time(now)
                    .iter()
                    .map(|n| Value::BulkString(Bytes::from(n.to_string())))
                    .collect(),
            ),
            b"EVAL" if a(3) == PERSIST_MARKER_KEY.as_bytes() => {
                let wall = now / MS;
                if self.get(a(3), now).is_none() {
                    let v = format!("{wall} {:x}", self.run);
                    self.set(a(3), v.as_bytes(), None, now);
                }
                let v = self
                    .get(a(3), now)
                    .map_or_else(Bytes::new, Bytes::copy_from_slice);
                let w = num(v.split(|&c| c == b' ').next().unwrap_or(b"0"));
                Value::Array(vec![int(wall as i64 - w), Value::BulkString(v)])
            }
            b"EVAL" => match all_scripts()
                .iter()
                .position(|(_, body)| body.as_bytes() == a(1))
            {
                Some(i) => {
                    self.scripts |= 1 << i;
                    self.script(all_scripts()[i].0, cmd, now)
                }
                None => err("ERR unknown script body"),
            },
            b"EVALSHA" => {
                let sha = all_scripts()
                    .iter()
                    .position(|(sha, _)| same_sha(sha.as_bytes(), a(1)));
                match sha {
                    Some(i) if self.scripts & 1 << i != 0 => {
                        self.script(all_scripts()[i].0, cmd, now)
                    }
                    Some(i) => {
                        self.releases_by_hash += u64::from(is_release(all_scripts()[i].0));
                        err("NOSCRIPT No matching script. Please use EVAL.")
                    }
                    None => err("NOSCRIPT No matching script. Please use EVAL."),
                }
            }
            _ => err("ERR unknown command"),
        }
    }

    /// Runs the script `sha` with `cmd`'s keys and arguments (`EVAL/EVALSHA script numkeys keys... args...`).
    fn script(&mut self, sha: &str, cmd: &[&[u8]], now: Wall) -> Value {
        let numkeys = cmd.get(2).map_or(0, |n| num(n)).max(0) as usize;
        let keys = cmd.get(3..).unwrap_or_default();
        let keys = &keys[..numkeys.min(keys.len())];
        let argv = cmd.get(3 + keys.len()..).unwrap_or_default();
        let k = |i: usize| keys.get(i).map_or(&b""[..], |b| &b[..]);
        let arg = |i: usize| argv.get(i).map_or(&b""[..], |b| &b[..]);
        let is = |l: lua::Lua| same_sha(l.sha1.as_bytes(), sha.as_bytes());
        if same_sha(sha.as_bytes(), scripts::RELEASE_SHA1.as_bytes()) {
            self.compare_deletes += 1;
            if self.get(k(0), now) == Some(arg(0)) {
                return int(self.del(k(0), now));
            }
            return int(0);
        }
        if same_sha(sha.as_bytes(), scripts::EXTEND_SHA1.as_bytes()) {
            if self.get(k(0), now) == Some(arg(0)) {
                return int(self.pexpire(k(0), num(arg(1)), now));
            }
            return int(0);
        }
        if is(lua::RELEASE_BATCH) {
            let r = keys
                .iter()
                .enumerate()
                .map(|(i, key)| {
                    if self.get(key, now) == Some(arg(i)) {
                        int(self.del(key, now))
                    } else {
                        int(0)
                    }
                })
                .collect();
            return Value::Array(r);
        }
        if is(lua::ACQUIRE_MANY) {
            for key in keys {
                if self.get(key, now).is_some() {
                    return int(0);
                }
            }
            for key in keys {
                self.set(key, arg(0), Some(num(arg(1))), now);
            }
            return int(1);
        }
        if is(lua::ACQUIRE_PERMITS) {
            let want = num(arg(2)).max(0) as usize;
            let mut took = Vec::new();
            for (i, key) in keys.iter().enumerate() {
                if took.len() >= want {
                    break;
                }
                if self.live(key, now).is_none() {
                    self.set(key, arg(0), Some(num(arg(1))), now);
                    took.push(int(i as i64));
                }
            }
            return Value::Array(took);
        }
        if is(lua::ACQUIRE_READ) {
            // KEYS: the writer key, the intent key, then the reader slots.
            if keys.iter().take(2).any(|key| self.live(key, now).is_some()) {
                return Value::Array(Vec::new());
            }
            let want = num(arg(2)).max(0) as usize;
            let mut took = Vec::new();
            for (i, key) in keys.iter().enumerate().skip(2) {
                if took.len() >= want {
                    break;
                }
                if self.live(key, now).is_none() {
                    self.set(key, arg(0), Some(num(arg(1))), now);
                    took.push(int(i as i64 - 2));
                }
            }
            return Value::Array(took);
        }
        if is(lua::ACQUIRE_WRITE) {
            if self.live(k(0), now).is_some() {
                return int(0);
            }
            if keys.iter().skip(2).any(|key| self.live(key, now).is_some()) {
                self.set(k(1), arg(0), Some(num(arg(1))), now);
                return int(0);
            }
            self.set(k(0), arg(0), Some(num(arg(1))), now);
            self.del(k(1), now);
            return int(1);
        }
        if is(lua::EXTEND_MANY) {
            if keys.iter().any(|key| self.get(key, now) != Some(arg(0))) {
                return int(0);
            }
            for key in keys {
                self.pexpire(key, num(arg(1)), now);
            }
            return int(1);
        }
        if is(lua::RELEASE_MANY) {
            let mut n = 0;
            for key in keys {
                if self.get(key, now) == Some(arg(0)) {
                    n += self.del(key, now);
                }
            }
            return int(n);
        }
        if is(lua::ACQUIRE_FENCED) {
            if self.live(k(0), now).is_none() {
                self.set(k(0), arg(0), Some(num(arg(1))), now);
                let c = self.get(k(1), now).map_or(0, num);
                return int(c + 1);
            }
            return int(0);
        }
        if is(lua::FENCE) {
            let c = self.get(k(0), now).map_or(0, num);
            if c < num(arg(0)) {
                self.set(k(0), arg(0), None, now);
                return int(1);
            }
            return int(-c);
        }
        if is(lua::RELEASE_FENCED) {
            if self.get(k(0), now) != Some(arg(0)) {
                return int(0);
            }
            let c = self.get(k(1), now).map_or(0, num);
            if c < num(arg(1)) {
                self.set(k(1), arg(1), None, now);
            }
            return int(self.del(k(0), now));
        }
        if is(lua::ACQUIRE_REENTRANT) {
            let ttl = num(arg(2));
            match self.get(k(0), now) {
                None => {
                    self.del(k(1), now);
                    self.set(k(0), arg(0), Some(ttl), now);
                    self.hset(k(1), arg(1), now);
                    self.pexpire(k(1), ttl, now);
                    return int(1);
                }
                Some(v) if v != arg(0) => return int(0),
                Some(_) => {}
            }
            if self.live(k(1), now).is_none() {
                self.hset(k(1), b"?", now);
            }
            self.hset(k(1), arg(1), now);
            let mut t = self.pttl(k(0), now);
            if t < ttl {
                t = ttl;
                self.pexpire(k(0), t, now);
            }
            self.pexpire(k(1), t, now);
            return int(self.hlen(k(1), now));
        }
        if is(lua::RELEASE_REENTRANT) {
            if self.get(k(0), now) != Some(arg(0)) {
                return int(-1);
            }
            if self.live(k(1), now).is_none() {
                return int(1);
            }
            self.hdel(k(1), arg(1), now);
            let c = self.hlen(k(1), now);
            if c == 0 {
                self.del(k(0), now);
                self.del(k(1), now);
            }
            return int(c);
        }
        if is(lua::EXTEND_REENTRANT) {
            if self.get(k(0), now) != Some(arg(0)) {
                return int(0);
            }
            if let Some(holds) = self.hash(k(1), now)
                && !holds.iter().any(|(f, _)| &f[..] == arg(1))
            {
                return int(0);
            }
            let ttl = num(arg(2));
            let mut t = self.pttl(k(0), now);
            if t < ttl {
                t = ttl;
                self.pexpire(k(0), t, now);
            }
            self.pexpire(k(1), t, now);
            return int(1);
        }
        if is(lua::EXTEND_REENTRANT_SHORTENING) {
            // The control: as `EXTEND_REENTRANT`, but both expiries set to `ARGV[3]` whatever they had.
            if self.get(k(0), now) != Some(arg(0)) {
                return int(0);
            }
            if let Some(holds) = self.hash(k(1), now)
                && !holds.iter().any(|(f, _)| &f[..] == arg(1))
            {
                return int(0);
            }
            let ttl = num(arg(2));
            self.pexpire(k(0), ttl, now);
            self.pexpire(k(1), ttl, now);
            return int(1);
        }
        if is(lua::RELEASE_REENTRANT_UNATTRIBUTED) {
            if self.get(k(0), now) != Some(arg(0)) {
                return int(-1);
            }
            if self.hdel(k(1), arg(1), now) == 0 {
                let first = self
                    .hash(k(1), now)
                    .and_then(|h| h.first().map(|(f, _)| f.clone()));
                if let Some(f) = first {
                    self.hdel(k(1), &f, now);
                }
            }
            let c = self.hlen(k(1), now);
            if c == 0 {
                self.del(k(0), now);
                self.del(k(1), now);
            }
            return int(c);
        }
        if is(lua::ACQUIRE_ONE) {
            if self.live(k(0), now).is_some() {
                return int(0);
            }
            self.set(k(0), arg(0), Some(num(arg(1))), now);
            return int(1);
        }
        if let Some((_, inner)) = lua::QUEUED.iter().find(|(queued, _)| is(*queued)) {
            return self.queued(*inner, keys, argv, now);
        }
        if is(lua::QUEUE_LEAVE) {
            return self.leave_queue(keys, argv, now);
        }
        err("ERR script not simulated")
    }

    /// The queue's gate of every queued offer, as [`lua::QUEUE_ACQUIRE`] does it around `inner` (the kind's
    /// script): `KEYS` the kind's, then the queue and the deadlines; `ARGV` the kind's, then the waiter's id, its
    /// ticket, the entry's lease (ms) and the line. The node's clock for deadlines is its wall clock, as `TIME`
    /// reads it.
    fn queued(&mut self, inner: lua::Lua, keys: &[&[u8]], argv: &[&[u8]], now: Wall) -> Value {
        let (nk, na) = (keys.len().saturating_sub(3), argv.len().saturating_sub(4));
        let (q, d, g) = (
            keys.get(nk).copied().unwrap_or_default(),
            keys.get(nk + 1).copied().unwrap_or_default(),
            keys.get(nk + 2).copied().unwrap_or_default(),
        );
        let arg = |i: usize| argv.get(na + i).copied().unwrap_or_default();
        let (id, ticket, lease, line) = (arg(0), num(arg(1)), num(arg(2)), arg(3));
        let plain = same_sha(inner.sha1.as_bytes(), lua::ACQUIRE_ONE.sha1.as_bytes());
        let (key, value) = (
            keys.first().copied().unwrap_or_default(),
            argv.first().copied().unwrap_or_default(),
        );
        if plain {
            // The key handed to this waiter (or set by this attempt): taken, and the waiter leaves the queue.
            let held = self.get(key, now).map(Bytes::copy_from_slice);
            let handed = self.hget(g, id, now);
            if let Some(held) = held
                && (&held[..] == value || handed.as_deref() == Some(&held[..]))
            {
                let ttl = argv.get(1).map_or(0, |t| num(t));
                self.set(key, value, Some(ttl), now);
                self.handed_taken += u64::from(handed.as_deref() == Some(&held[..]));
                self.zrem(q, id, now);
                self.zrem(d, id, now);
                self.forget_offer(g, id, now);
                return Value::Array(vec![int(1), int(-2), int(0)]);
            }
        }
        let turn = |m: &[u8]| [&b"muxlock:turn:"[..], m, b":", line].concat();
        let wall = (now / MS) as i64;
        let signal = |node: &mut Node, m: &[u8]| {
            let t = turn(m);
            node.incr(&t, now);
            node.pexpire(&t, lease, now);
        };
        let mut head = self.zhead(q, now);
        if head.as_ref().is_some_and(|h| &h[..] != id) {
            let dead: Vec<Bytes> = self
                .zset(d, now)
                .map(|z| {
                    z.iter()
                        .filter(|(s, _)| *s <= wall)
                        .map(|(_, m)| m.clone())
                        .collect()
                })
                .unwrap_or_default();
            if !dead.is_empty() {
                for m in &dead {
                    self.zrem(q, m, now);
                    self.zrem(d, m, now);
                    self.forget_offer(g, m, now);
                }
                let next = self.zhead(q, now);
                if let Some(n) = &next {
                    if Some(n) != head.as_ref() && &n[..] != id {
                        signal(self, n);
                    }
                }
                head = next;
            }
        }
        let mut ran = Value::NullBulk;
        if head.as_ref().is_none_or(|h| &h[..] == id) {
            let numkeys = nk.to_string();
            let mut cmd: Vec<&[u8]> = vec![b"EVALSHA", inner.sha1.as_bytes(), numkeys.as_bytes()];
            cmd.extend_from_slice(&keys[..nk]);
            cmd.extend_from_slice(&argv[..na]);
            ran = self.script(inner.sha1, &cmd, now);
            let granted = match &ran {
                Value::Integer(1) => true,
                Value::Array(items) => !items.is_empty(),
                _ => false,
            };
            if granted {
                // A granted key is never the waiter's offered value there: a leave must not hand it on.
                self.forget_offer(g, id, now);
                return Value::Array(vec![ran, int(-1), int(0)]);
            }
            if matches!(ran, Value::Error(_)) {
                return ran;
            }
        }
        self.zadd(q, ticket, id, now);
        self.zadd(d, wall + lease, id, now);
        self.pexpire(q, lease, now);
        self.pexpire(d, lease, now);
        if plain {
            // The value and the TTL a release hands the key on as (`<id>` and `<id>:px`).
            let ttl = argv.get(1).copied().unwrap_or_default();
            self.hput(g, id, value, now);
            self.hput(g, &ttl_field(id), ttl, now);
            self.pexpire(g, lease, now);
        }
        let rank = self
            .zset(q, now)
            .and_then(|z| z.iter().position(|(_, m)| &m[..] == id))
            .unwrap_or(0);
        let turn_value = self.get(&turn(id), now).map_or(0, num);
        Value::Array(vec![ran, int(rank as i64), int(turn_value)])
    }

    /// A waiter leaves the queue, or a waiting request's plain lock is released, as [`lua::QUEUE_LEAVE`] does:
    /// `KEYS` the queue, the deadlines, the hand-off values and (a plain lock's line) the lock key; `ARGV` the
    /// waiter's id, its ticket, the entry's lease, the line and (a release) the lock's value. The entry goes; if
    /// the lock key holds the value to hand on (the lock's, else the one handed to the waiter), it is handed on
    /// (1); a release also hands on a key holding the waiter's own hand-off value (0); otherwise, if the waiter
    /// headed the queue, the next waiter's turn key is bumped (0).
    fn leave_queue(&mut self, keys: &[&[u8]], argv: &[&[u8]], now: Wall) -> Value {
        let k = |i: usize| keys.get(i).copied().unwrap_or_default();
        let arg = |i: usize| argv.get(i).copied().unwrap_or_default();
        let (q, d, g, id, lease) = (k(0), k(1), k(2), arg(0), num(arg(2)));
        // `handed`: the key holds the value to hand on (the lock's, or for a leave the one handed to this
        // waiter); `untaken`: a release finds the key holding this waiter's own hand-off value (handed to it
        // where its winning attempt did not take it), which it hands on too without counting it released.
        let (mut handed, mut untaken) = (false, false);
        if let Some(lock) = keys.get(3) {
            let own = self.hget(g, id, now).map(|v| v.to_vec());
            let from = match argv.get(4) {
                Some(value) => Some(value.to_vec()),
                None => own.clone(),
            };
            let held = self.get(lock, now).map(<[u8]>::to_vec);
            handed = from.is_some() && held == from;
            untaken = !handed && argv.get(4).is_some() && own.is_some() && held == own;
        }
        let head = self.zhead(q, now);
        self.zrem(q, id, now);
        self.zrem(d, id, now);
        self.forget_offer(g, id, now);
        if handed || untaken {
            self.hand_on((k(3), q, d, g), arg(3), lease, now);
            return int(i64::from(handed));
        }
        if head.as_deref() == Some(id)
            && let Some(next) = self.zhead(q, now)
        {
            let t = [&b"muxlock:turn:"[..], &next, b":", arg(3)].concat();
            self.incr(&t, now);
            self.pexpire(&t, lease, now);
        }
        int(0)
    }

    /// Hands a plain lock's `key` on to the head of its line's queue, as [`lua::QUEUE_LEAVE`] does: to the first
    /// waiter whose deadline is not past (dropping the others before it), set to the value it last offered for
    /// the TTL it registered with it, and that waiter's handed marker `muxlock:turn:<id>=<value>:<line>` written
    /// for as long (pushed to its listener: [`Node::markers`]), and that waiter taken off the queue (its value and
    /// TTL stay, for its take or its leave); without a registered value and TTL, the key is deleted. The head's
    /// turn key is bumped (living `px` ms). With nobody waiting, the key is deleted.
    fn hand_on(
        &mut self,
        (key, q, d, g): (&[u8], &[u8], &[u8], &[u8]),
        line: &[u8],
        px: i64,
        now: Wall,
    ) {
        let wall = (now / MS) as i64;
        for _ in 0..16 {
            let Some(h) = self.zhead(q, now) else {
                break;
            };
            let left = self.zscore(d, &h, now).unwrap_or(0) - wall;
            let offered = self.hget(g, &h, now);
            if left > 0 {
                // `tonumber`: a field that is no number is none.
                let ttl = (self.hget(g, &ttl_field(&h), now))
                    .and_then(|t| std::str::from_utf8(&t).ok()?.trim().parse::<f64>().ok())
                    .map(|t| t as i64);
                match (offered, ttl) {
                    (Some(v), Some(ttl)) => {
                        self.set(key, &v, Some(ttl), now);
                        let marker = [&b"muxlock:turn:"[..], &h, b"=", &v, b":", line].concat();
                        self.set(&marker, b"1", Some(ttl), now);
                        self.markers.push(Bytes::from(marker));
                        // The head leaves the queue; its hand-off values stay, for its take or its leave.
                        self.zrem(q, &h, now);
                        self.zrem(d, &h, now);
                        // The values of earlier waiters no longer queued go (their key has moved on), looked
                        // for only when the hash holds more than the queue needs.
                        let fields = self.hash(g, now).map_or(0, |f| f.len());
                        let queued = self.zset(q, now).map_or(0, |z| z.len());
                        if fields > 2 * queued + 2 {
                            let names: Vec<Bytes> = (self.hash(g, now).into_iter().flatten())
                                .map(|(f, _)| f.clone())
                                .filter(|f| f[..] != h[..] && !f.ends_with(b":px"))
                                .collect();
                            for f in names {
                                if self.zscore(q, &f, now).is_none() {
                                    self.forget_offer(g, &f, now);
                                }
                            }
                        }
                        self.handed_on += 1;
                    }
                    _ => {
                        self.del(key, now);
                    }
                }
                let t = [&b"muxlock:turn:"[..], &h, b":", line].concat();
                self.incr(&t, now);
                self.pexpire(&t, px, now);
                return;
            }
            self.zrem(q, &h, now);
            self.zrem(d, &h, now);
            self.forget_offer(g, &h, now);
        }
        self.del(key, now);
    }

    /// How many entries the sorted set `queue` (a waiting line's queue) holds at virtual time `now`.
    pub fn waiting(&mut self, queue: &[u8], now: Time) -> usize {
        let now = self.clock.read(now);
        match self.live(queue, now).map(|e| &e.data) {
            Some(Data::ZSet(members)) => members.len(),
            _ => 0,
        }
    }

    /// Keys alive at virtual time `now` that have no expiry, except the documented ones (the marker, fence
    /// counters).
    pub fn keys_without_expiry(&mut self, now: Time) -> Vec<Bytes> {
        let now = self.clock.read(now);
        let names: Vec<Bytes> = self.keys.keys().cloned().collect();
        names
            .into_iter()
            .filter(|k| {
                // Fencing counters (`counter_key`) and the marker live on by design.
                let documented = &k[..] == PERSIST_MARKER_KEY.as_bytes()
                    || k.starts_with(&muxlock::redlock::counter_key(b""));
                !documented && self.live(k, now).is_some_and(|e| e.expires.is_none())
            })
            .collect()
    }
}
