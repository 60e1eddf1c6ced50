//! The Lua scripts beyond the spec's two: batches, sets of resources, fencing tokens, reentrant holds. Each runs atomically on one
//! node (Redis runs a script to its end before any other command), which is what makes a node's part of a set or of
//! a fenced acquisition all-or-nothing.
//!
//! Like the spec's scripts they are loaded with `SCRIPT LOAD` on every new connection and called by `EVALSHA`; a
//! `NOSCRIPT` reply makes the round send them once more in full with `EVAL` (see `Engine::pipelined`). The
//! releases among them always go in full (`scripts`, "Releases go in full").
//!
//! Counters are compared as Lua numbers (doubles): fencing tokens are exact up to 2^53.

use bytes::BytesMut;

use crate::resp::encode_command;

// The body of [`ACQUIRE_ONE`], for its queued form.
macro_rules! acquire_one {
    () => {
        r#"if redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[2]) then return 1 end return 0"#
    };
}

// The body of [`ACQUIRE_PERMITS`], for its queued form too.
macro_rules! acquire_permits {
    () => {
        r#"local got = {} local want = tonumber(ARGV[3]) for i, k in ipairs(KEYS) do if #got >= want then break end if redis.call("set", k, ARGV[1], "nx", "px", ARGV[2]) then got[#got + 1] = i - 1 end end return got"#
    };
}

// The body of [`ACQUIRE_READ`], for its queued form too.
macro_rules! acquire_read {
    () => {
        r#"if redis.call("exists", KEYS[1], KEYS[2]) > 0 then return {} end local got = {} local want = tonumber(ARGV[3]) for i = 3, #KEYS do if #got >= want then break end if redis.call("set", KEYS[i], ARGV[1], "nx", "px", ARGV[2]) then got[#got + 1] = i - 3 end end return got"#
    };
}

// The body of [`ACQUIRE_WRITE`], for its queued form too.
macro_rules! acquire_write {
    () => {
        r#"if redis.call("exists", KEYS[1]) == 1 then return 0 end if redis.call("exists", unpack(KEYS, 3)) > 0 then redis.call("set", KEYS[2], ARGV[1], "px", ARGV[2]) return 0 end redis.call("set", KEYS[1], ARGV[1], "px", ARGV[2]) redis.call("del", KEYS[2]) return 1"#
    };
}

/// A script and its SHA1 (as `SCRIPT LOAD` returns it; checked against a real server by the tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lua {
    /// The script's text.
    pub body: &'static str,
    /// Its SHA1, 40 hex digits.
    pub sha1: &'static str,
}

/// Compare-and-delete for many keys at once (`unlock_batch`): `KEYS[i]` is deleted if it holds `ARGV[i]`.
/// Returns an array: 1 where deleted, 0 where the key was not ours, and the error where reading the key failed
/// (`WRONGTYPE`: another application's key of another type under that name), so that one such key costs only its
/// own release, not the others' (a folded release puts several callers' keys in one call).
pub const RELEASE_BATCH: Lua = Lua {
    body: r#"local r = {} for i, k in ipairs(KEYS) do local v = redis.pcall("get", k) if v == ARGV[i] then r[i] = redis.call("del", k) elseif type(v) == "table" and v.err then r[i] = v else r[i] = 0 end end return r"#,
    sha1: "87a540a6f6fa803d77722d00adbd7e940617c033",
};

/// All-or-nothing acquisition of a set (`request_all`): sets every key to `ARGV[1]` for `ARGV[2]` ms if none of them
/// holds a value, else touches nothing: `SET NX` for the whole set. Any value blocks, this one's too: values are
/// drawn per attempt (`kind/set.rs`, "A value per attempt"), and a script that let its own value through would
/// let one server vote twice for a set (one cluster named as two members). Returns 1 if set, 0 if some key is
/// held.
pub const ACQUIRE_MANY: Lua = Lua {
    body: r#"for _, k in ipairs(KEYS) do if redis.call("get", k) then return 0 end end for _, k in ipairs(KEYS) do redis.call("set", k, ARGV[1], "px", ARGV[2]) end return 1"#,
    sha1: "c4d07709b35e1f1726549035060c84916feccf3c",
};

/// Extends a set together: every key's expiry to `ARGV[2]` ms if every key still holds `ARGV[1]`, else nothing
/// (a set missing one key is not held on that node). Never creates a key. Returns 1 or 0.
pub const EXTEND_MANY: Lua = Lua {
    body: r#"for _, k in ipairs(KEYS) do if redis.call("get", k) ~= ARGV[1] then return 0 end end for _, k in ipairs(KEYS) do redis.call("pexpire", k, ARGV[2]) end return 1"#,
    sha1: "f541961e290ec7d9986f04f95450cea10fe2c30c",
};

/// Releases a set, or a semaphore's permits an attempt took and did not keep: deletes every key that holds
/// `ARGV[1]`. Returns how many it deleted. A key of another type (another application's, under a permit's name)
/// is skipped, not an error: reading it with `redis.call` would abort the script there and leave every key named
/// after it held until its lease ends (as [`RELEASE_BATCH`], one such key costs only itself).
pub const RELEASE_MANY: Lua = Lua {
    body: r#"local n = 0 for _, k in ipairs(KEYS) do if redis.pcall("get", k) == ARGV[1] then n = n + redis.call("del", k) end end return n"#,
    sha1: "a1a4e9d9d4f65c7ff59c72313c761d1969018a92",
};

/// Fenced acquisition: `SET KEYS[1] ARGV[1] NX PX ARGV[2]` and, only if it set the key, reads the resource's
/// counter `KEYS[2]` in the same atomic step. Returns the counter plus one (at least 1: a candidate token, which
/// [`FENCE`] must still confirm), or 0 if the key is held. It writes no counter: see `fenced` for why.
pub const ACQUIRE_FENCED: Lua = Lua {
    body: r#"if redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[2]) then return (tonumber(redis.call("get", KEYS[2]) or "0") or 0) + 1 end return 0"#,
    sha1: "8a5e5107fe8b0e876e5365475f1098693eafde11",
};

/// The confirmation of a candidate token: if the counter `KEYS[1]` is below `ARGV[1]`, sets it to `ARGV[1]` and
/// returns 1 (confirmed on this node); otherwise changes nothing and returns minus the counter (0 or less: the
/// token is stale here, and the counter says what a new candidate must exceed).
pub const FENCE: Lua = Lua {
    body: r#"local c = tonumber(redis.call("get", KEYS[1]) or "0") or 0 if c < tonumber(ARGV[1]) then redis.call("set", KEYS[1], ARGV[1]) return 1 end return -c"#,
    sha1: "41690654d9e957dea2e20879ff633137003ccc82",
};

/// Fenced release: if `KEYS[1]` holds `ARGV[1]`, first raises the counter `KEYS[2]` to the token `ARGV[2]`, then
/// deletes the key. A node therefore never frees a fenced lock without having seen its token (see `fenced`).
/// Returns 1 if deleted, 0 if the key was not ours.
pub const RELEASE_FENCED: Lua = Lua {
    body: r#"if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end local c = tonumber(redis.call("get", KEYS[2]) or "0") or 0 if c < tonumber(ARGV[2]) then redis.call("set", KEYS[2], ARGV[2]) end return redis.call("del", KEYS[1])"#,
    sha1: "2d6dd65ef86dc2094b1791e0dcff734fc5f6d491",
};

/// Reentrant acquisition by an owner, one hold at a time: `KEYS[1]` is the lock key, `KEYS[2]` the hash of its
/// holds (one field per acquisition), `ARGV[1]` the owner, `ARGV[2]` the acquisition's id, `ARGV[3]` the TTL in ms.
///
/// - `KEYS[1]` free: clears any stale `KEYS[2]` first (so that no later write can fail half-way on a key of
///   another type), sets `KEYS[1]` to the owner and `KEYS[2]` to `{id}`, both for `ARGV[3]` ms. Returns 1.
/// - `KEYS[1]` held by the owner: adds the field `id` (setting it again is harmless: an acquisition counts once
///   per node), and sets `KEYS[2]`'s expiry to `KEYS[1]`'s, lengthening both to `ARGV[3]` ms if that is later (a
///   nested hold never shortens the outer one's lease; a key without an expiry gets one). If `KEYS[2]` is
///   missing (evicted, deleted by hand) the holds it listed are unknown: a field `?` that no release removes
///   keeps the key until it expires. Returns the number of holds (at least 1).
/// - `KEYS[1]` held by another owner: returns 0, writes nothing.
///
/// Every key it writes has an expiry when it returns.
pub const ACQUIRE_REENTRANT: Lua = Lua {
    body: r#"local v = redis.call("get", KEYS[1]) if not v then redis.call("del", KEYS[2]) redis.call("set", KEYS[1], ARGV[1], "px", ARGV[3]) redis.call("hset", KEYS[2], ARGV[2], 1) redis.call("pexpire", KEYS[2], ARGV[3]) return 1 end if v ~= ARGV[1] then return 0 end if redis.call("exists", KEYS[2]) == 0 then redis.call("hset", KEYS[2], "?", 1) end redis.call("hset", KEYS[2], ARGV[2], 1) local t = redis.call("pttl", KEYS[1]) if t < tonumber(ARGV[3]) then t = tonumber(ARGV[3]) redis.call("pexpire", KEYS[1], t) end redis.call("pexpire", KEYS[2], t) return redis.call("hlen", KEYS[2])"#,
    sha1: "63fcdcb7ec2d64c5cbcada514ac62f0e51a306a9",
};

/// Reentrant release of one hold (same keys; `ARGV[1]` the owner, `ARGV[2]` the hold's id): if `KEYS[1]` holds
/// the owner, removes the field `id` from `KEYS[2]`, and deletes both keys when no hold is left. Idempotent and
/// attributable: a node that never saw this hold (its acquisition did not run there), or already released it,
/// removes nothing, so a release may go to every node and be repeated. Returns the holds left (0: the key is
/// gone), or -1 if the key is not the owner's. With `KEYS[2]` missing, the holds are unknown: it keeps the key
/// (it expires) and returns 1.
pub const RELEASE_REENTRANT: Lua = Lua {
    body: r#"if redis.call("get", KEYS[1]) ~= ARGV[1] then return -1 end if redis.call("exists", KEYS[2]) == 0 then return 1 end redis.call("hdel", KEYS[2], ARGV[2]) local c = redis.call("hlen", KEYS[2]) if c == 0 then redis.call("del", KEYS[1], KEYS[2]) end return c"#,
    sha1: "3ba1f53982cdf89755fd166aee05f2bf4b392501",
};

/// Reentrant extension of one hold (same keys; `ARGV[1]` the owner, `ARGV[2]` the hold's id, `ARGV[3]` the TTL in
/// ms): if `KEYS[1]` holds the owner and the hold is there (or the node no longer knows the holds: `KEYS[2]`
/// missing, the key is the owner's all the same), makes both keys live at least `ARGV[3]` ms more — never less
/// than they had: another hold of the owner may rely on a longer lease (the invariant of
/// `kind/owned.rs`). Returns 1 if extended, 0 if the key or the hold is not there (it expired, was released).
pub const EXTEND_REENTRANT: Lua = Lua {
    body: r#"if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end if redis.call("exists", KEYS[2]) == 1 and redis.call("hexists", KEYS[2], ARGV[2]) == 0 then return 0 end local t = redis.call("pttl", KEYS[1]) if t < tonumber(ARGV[3]) then t = tonumber(ARGV[3]) redis.call("pexpire", KEYS[1], t) end redis.call("pexpire", KEYS[2], t) return 1"#,
    sha1: "225a88b5588503988af92d9abdb03718a4cc79f5",
};

/// **For tests only: a broken release, on purpose.** A release that counts down *some* hold when the node never saw
/// the one released, so a nested release on a node its acquisition never reached strips the outer hold. The control
/// of the tests that check [`RELEASE_REENTRANT`]'s attribution; never loaded on connections (sent in full after
/// `NOSCRIPT`).
#[doc(hidden)]
pub const RELEASE_REENTRANT_UNATTRIBUTED: Lua = Lua {
    body: r#"if redis.call("get", KEYS[1]) ~= ARGV[1] then return -1 end if redis.call("hdel", KEYS[2], ARGV[2]) == 0 then local f = redis.call("hkeys", KEYS[2])[1] if f then redis.call("hdel", KEYS[2], f) end end local c = redis.call("hlen", KEYS[2]) if c == 0 then redis.call("del", KEYS[1], KEYS[2]) end return c"#,
    sha1: "8b1912f62e1c00756668f3285ed48730c711b28d",
};

/// **For tests only: a broken extension of an owned hold.** As [`EXTEND_REENTRANT`] but it sets both keys' expiry to
/// `ARGV[3]` ms whatever they had: an extension with a shorter TTL than the key has left cuts the lease another
/// hold of the owner relies on (the outer hold, a guarded hold). The control of the simulator's owned holds
/// (`tests/sim/owned.rs`); never loaded on connections (sent in full after `NOSCRIPT`).
#[doc(hidden)]
pub const EXTEND_REENTRANT_SHORTENING: Lua = Lua {
    body: r#"if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end if redis.call("exists", KEYS[2]) == 1 and redis.call("hexists", KEYS[2], ARGV[2]) == 0 then return 0 end redis.call("pexpire", KEYS[1], ARGV[3]) redis.call("pexpire", KEYS[2], ARGV[3]) return 1"#,
    sha1: "c8786c1070176b05a4086cbbbb5fcd7af07970a3",
};

/// The resource side of fencing, for a protected resource that is itself a Redis key (on any server, not the lock
/// nodes): writes `ARGV[2]` to `KEYS[1]` only if the token `ARGV[1]` is at least the largest token seen so far,
/// kept in `KEYS[2]`, and records it. Returns 1 if written, 0 if refused (a stale holder). Not loaded on the
/// lock nodes' connections: run it with `EVAL` where the data lives.
///
/// The rule for any other resource is the same: keep the largest token seen, and accept a write only if its
/// token is greater than or equal to it (equal: the same holder writing again).
pub const FENCED_WRITE: Lua = Lua {
    body: r#"local t = tonumber(ARGV[1]) local seen = tonumber(redis.call("get", KEYS[2]) or "0") or 0 if t < seen then return 0 end redis.call("set", KEYS[2], ARGV[1]) redis.call("set", KEYS[1], ARGV[2]) return 1"#,
    sha1: "73268b957259cb6e0a0fc23d76f5974dfd14f218",
};

/// The offer of a semaphore's permits (`kind/semaphore.rs`): `KEYS` are the permits' keys in index order,
/// `ARGV[1]` the value, `ARGV[2]` the TTL in ms, `ARGV[3]` how many permits to take at most. Takes free permits
/// lowest index first, each by `SET key value NX PX ttl` (any value blocks, this one's too, as in
/// [`ACQUIRE_MANY`]), until it has taken `ARGV[3]` of them. Returns the 0-based indices it took (an empty array:
/// none was free).
pub const ACQUIRE_PERMITS: Lua = Lua {
    body: acquire_permits!(),
    sha1: "fb377b89c49e1009fc4bbbe5775fb4584ec0155f",
};

/// A reader's offer of a read-write lock (`kind/rwlock.rs`): `KEYS[1]` the writer key, `KEYS[2]` the writer's
/// intent key, `KEYS[3..]` the reader slots in index order; `ARGV` as [`ACQUIRE_PERMITS`]'s. Takes nothing while
/// the writer key or the intent key exists (any value, any type); otherwise takes free reader slots as
/// [`ACQUIRE_PERMITS`] takes permits. Returns the 0-based slot indices it took (an empty array: refused, or no
/// slot free).
pub const ACQUIRE_READ: Lua = Lua {
    body: acquire_read!(),
    sha1: "f1b669b19431305c90b19d311c685c0672e99999",
};

/// A writer's acquisition of a read-write lock (`kind/rwlock.rs`): `KEYS[1]` the writer key, `KEYS[2]` the intent
/// key, `KEYS[3..]` the reader slots; `ARGV[1]` the value, `ARGV[2]` the TTL in ms. Refused (0, nothing set) while
/// the writer key exists; refused while some reader slot exists, and then sets the intent key to the value for the
/// TTL (readers are refused here until it ends or a writer is granted); otherwise sets the writer key to the value
/// for the TTL, deletes the intent key (whichever writer set it) and returns 1.
pub const ACQUIRE_WRITE: Lua = Lua {
    body: acquire_write!(),
    sha1: "1779ef45819576a2708bed48b90b9a2e8beab6e2",
};

/// The scripts loaded with `SCRIPT LOAD` on every new connection: every script the lock rounds use but the queued
/// offers of semaphores and read-write locks ([`QUEUED`]), which only their waiting requests send, in full on their
/// first use on a connection (a connection's set-up is sent before anything else on it, and takes room in its
/// queue: `net/machine`).
pub const ALL: [Lua; 15] = [
    RELEASE_BATCH,
    ACQUIRE_MANY,
    EXTEND_MANY,
    RELEASE_MANY,
    ACQUIRE_FENCED,
    FENCE,
    RELEASE_FENCED,
    ACQUIRE_REENTRANT,
    RELEASE_REENTRANT,
    EXTEND_REENTRANT,
    QUEUE_ACQUIRE,
    QUEUE_LEAVE,
    ACQUIRE_PERMITS,
    ACQUIRE_READ,
    ACQUIRE_WRITE,
];

/// `EVALSHA sha numkeys keys... args...`, or `EVAL script ...` when `full`.
pub(crate) fn eval(buf: &mut BytesMut, lua: Lua, full: bool, keys: &[&[u8]], args: &[&[u8]]) {
    let (verb, body): (&[u8], &str) = match full {
        false => (b"EVALSHA", lua.sha1),
        true => (b"EVAL", lua.body),
    };
    let numkeys = crate::resp::Decimal::new(i64::try_from(keys.len()).unwrap_or(i64::MAX));
    let mut parts: Vec<&[u8]> = Vec::with_capacity(3 + keys.len() + args.len());
    parts.extend_from_slice(&[verb, body.as_bytes(), numkeys.as_bytes()]);
    parts.extend_from_slice(keys);
    parts.extend_from_slice(args);
    encode_command(&parts, buf);
}

// A kind's offer behind the nodes' waiting queue: `$body` (a script's text) runs, with its own `KEYS` and `ARGV`,
// only where the queue is empty or headed by this waiter. See [`QUEUE_ACQUIRE`].
macro_rules! queued {
    ($body:expr) => {
        queued!($body, "", "")
    };
    ($body:expr, $handed:expr, $register:expr) => {
        concat!(
            r#"local nk, na = #KEYS - 3, #ARGV - 4 local q, d, g, id = KEYS[nk + 1], KEYS[nk + 2], KEYS[nk + 3], ARGV[na + 1] local lease, line = ARGV[na + 3], ARGV[na + 4] "#,
            $handed,
            r#" local function signal(m) local k = "muxlock:turn:" .. m .. ":" .. line redis.call("incr", k) redis.call("pexpire", k, lease) end local h = redis.call("zrange", q, 0, 0)[1] local now if h and h ~= id then local t = redis.call("time") now = t[1] * 1000 + math.floor(t[2] / 1000) local dead = redis.call("zrangebyscore", d, "-inf", now) if #dead > 0 then for _, m in ipairs(dead) do redis.call("zrem", q, m) redis.call("zrem", d, m) redis.call("hdel", g, m, m .. ":px") end local n = redis.call("zrange", q, 0, 0)[1] if n and n ~= h and n ~= id then signal(n) end h = n end end local r = false if not h or h == id then r = (function(KEYS, ARGV) "#,
            $body,
            r#" end)({unpack(KEYS, 1, nk)}, {unpack(ARGV, 1, na)}) if r == 1 or (type(r) == "table" and r[1] ~= nil) then redis.call("hdel", g, id, id .. ":px") return {r, -1, 0} end end if not now then local t = redis.call("time") now = t[1] * 1000 + math.floor(t[2] / 1000) end redis.call("zadd", q, ARGV[na + 2], id) redis.call("zadd", d, now + lease, id) redis.call("pexpire", q, lease) redis.call("pexpire", d, lease) "#,
            $register,
            r#" return {r, redis.call("zrank", q, id), tonumber(redis.call("get", "muxlock:turn:" .. id .. ":" .. line) or "0") or 0}"#
        )
    };
}

/// The script a queued offer runs for the waiter at the queue's head: the spec's `SET KEYS[1] ARGV[1] NX PX
/// ARGV[2]`, answering 1 if set, else 0. Run only inside [`QUEUE_ACQUIRE`] (and by the simulator).
pub const ACQUIRE_ONE: Lua = Lua {
    body: acquire_one!(),
    sha1: "ae4ce426a849e480e5833528c46687a003509159",
};

/// A waiting request's offer behind the nodes' waiting queue (the design and its argument are in
/// `wait/handoff.rs`), for a plain lock: the offer of [`ACQUIRE_ONE`]. Every queued offer ([`QUEUED`]) is a kind's
/// offer script run inside the same gate, and takes that script's `KEYS` and `ARGV` followed by the gate's: `KEYS`
/// the queue of the waiting line (a sorted set: waiter id → ticket) and its deadlines (waiter id → this node's
/// clock in ms after which the entry is dead); `ARGV` the waiter's id, its ticket, the entry's lease in ms, and
/// the line's name (for the turn keys `muxlock:turn:<id>:<line>`).
///
/// - Entries past their deadline are dropped first (a waiter that died), when someone else heads the queue, and
///   the new head's turn key is bumped.
/// - If the queue is empty or headed by this waiter, the kind's script runs with its own keys and arguments: the
///   queue can only refuse more, never grant what the kind's script would not. A grant (1, or a non-empty list)
///   is answered `{grant, -1, 0}`, and the waiter stays where it was (at the head, or not queued) until it knows
///   it holds a majority: then it leaves with [`QUEUE_LEAVE`] on every node. (Leaving here, on a grant that turns
///   out to be partial, made the nodes' heads differ: two waiters, each at the head of one of the two live
///   nodes of 3, refused each other until an entry expired.)
/// - Otherwise (the kind's script refused, or another waiter's turn) the waiter joins or stays, with its ticket
///   and a fresh deadline, and both keys live one entry lease more; a plain lock's waiter also registers, in
///   the hand-off values, its value and TTL (`<id>` and `<id>:px`), which a release hands the key on as.
///   Answers `{reply, rank, turn}`: the kind's script's reply (nil where the queue kept it from running), the
///   waiter's place (0: it heads the queue) and its turn key's value.
pub const QUEUE_ACQUIRE: Lua = Lua {
    body: queued!(
        acquire_one!(),
        r#"local held = redis.pcall("get", KEYS[1]) if type(held) == "string" and (held == ARGV[1] or held == redis.call("hget", g, id)) then redis.call("set", KEYS[1], ARGV[1], "px", ARGV[2]) redis.call("zrem", q, id) redis.call("zrem", d, id) redis.call("hdel", g, id, id .. ":px") return {1, -2, 0} end"#,
        r#"redis.call("hset", g, id, ARGV[1], id .. ":px", ARGV[2]) redis.call("pexpire", g, lease)"#
    ),
    sha1: "618e297d2e6716c4a003913d454ccf1f3a76125a",
};

/// [`ACQUIRE_PERMITS`] behind the waiting queue (see [`QUEUE_ACQUIRE`]): a semaphore's waiting offer.
pub const QUEUE_PERMITS: Lua = Lua {
    body: queued!(acquire_permits!()),
    sha1: "533997f47aaaad52275aa2814e1c553a3b820126",
};

/// [`ACQUIRE_READ`] behind the waiting queue (see [`QUEUE_ACQUIRE`]): a waiting reader's offer.
pub const QUEUE_READ: Lua = Lua {
    body: queued!(acquire_read!()),
    sha1: "b727b273a74d07ad637fd3d345e99c8ffb238d9b",
};

/// [`ACQUIRE_WRITE`] behind the waiting queue (see [`QUEUE_ACQUIRE`]): a waiting writer's acquisition.
pub const QUEUE_WRITE: Lua = Lua {
    body: queued!(acquire_write!()),
    sha1: "c7cf43d37a3b6b1dc1637a61ced6a20c1329e826",
};

/// Each queued offer and the kind's script it runs for the queue's head: how the simulator runs them.
pub const QUEUED: [(Lua, Lua); 4] = [
    (QUEUE_ACQUIRE, ACQUIRE_ONE),
    (QUEUE_PERMITS, ACQUIRE_PERMITS),
    (QUEUE_READ, ACQUIRE_READ),
    (QUEUE_WRITE, ACQUIRE_WRITE),
];

// A Lua function that hands a plain lock's key on to the head of its line's queue (see [`QUEUE_LEAVE`]):
// `hand_on(key, queue, deadlines, handed, line, px)`.
macro_rules! hand_on {
    () => {
        r#"local function hand_on(key, q, d, g, line, px) local t = redis.call("time") local now = t[1] * 1000 + math.floor(t[2] / 1000) for _ = 1, 16 do local h = redis.call("zrange", q, 0, 0)[1] if not h then break end local left = (tonumber(redis.call("zscore", d, h)) or 0) - now local v = redis.call("hget", g, h) if left > 0 then local ttl = tonumber(redis.call("hget", g, h .. ":px")) if v and ttl then redis.call("set", key, v, "px", ttl) redis.call("set", "muxlock:turn:" .. h .. "=" .. v .. ":" .. line, 1, "px", ttl) redis.call("zrem", q, h) redis.call("zrem", d, h) if redis.call("hlen", g) > 2 * redis.call("zcard", q) + 2 then for _, f in ipairs(redis.call("hkeys", g)) do if f ~= h and string.sub(f, -3) ~= ":px" and not redis.call("zscore", q, f) then redis.call("hdel", g, f, f .. ":px") end end end else redis.call("del", key) end local k = "muxlock:turn:" .. h .. ":" .. line redis.call("incr", k) redis.call("pexpire", k, px) return end redis.call("zrem", q, h) redis.call("zrem", d, h) redis.call("hdel", g, h, h .. ":px") end redis.call("del", key) end "#
    };
}

/// A waiter leaves the queue of [`QUEUE_ACQUIRE`], and a plain lock taken by a waiting request is released,
/// handing its key on to the next waiter (`wait/handoff.rs`, "The hand-off"). `KEYS` the queue, its deadlines and
/// its hand-off values (waiter id → the value the waiter's last attempt offered), and for a plain lock's line the
/// lock key; `ARGV` as the gate's (the waiter's id, its ticket, the entry's lease, the line's name), then, for a
/// release, the lock's value.
///
/// The waiter's entry goes first. Then, if the lock key holds the value to hand on (the lock's, for a release;
/// else the value handed to this waiter: a release handed it on and the waiter will not take it; a release hands
/// that one on too, but does not count it as released: the waiter had the lock by an attempt that did not take
/// it there, and goes now), the key is set
/// to the value the queue's head last offered (its deadline not past; dead entries before it are dropped) for the
/// TTL that head's attempt asked for (the gate registered both), the head's handed marker
/// `muxlock:turn:<id>=<value>:<line>` is written for as long (its turn listener's push of it is the hand-off's
/// vote: `wait/handoff.rs`, "The grant by push"), the head leaves the queue (its hand-off values stay, for its
/// take or its leave), and its turn key is bumped (an `INCR`: that waiter's tracker is told); the next waiter,
/// which heads the queue now, is not told (it learns at its next attempt: the handed waiter's release hands the
/// key on to it; a lock that ends without a hand-off, released by value or expired, leaves it asleep until its
/// entry's refresh, a quarter of the entry lease); the hand-off values of every other waiter no longer queued are
/// dropped (a take or a leave needs them only while the key holds the value handed, which it no longer does:
/// left by a lock that ended without naming its waiter, they would pile up while the line stays busy); with
/// nobody waiting it is deleted. Otherwise, if the waiter headed the queue, the next waiter's turn
/// key is bumped. Returns 1 if the key held the value to hand on (for a release: it is no longer this lock's),
/// else 0: as the spec's compare-and-delete.
pub const QUEUE_LEAVE: Lua = Lua {
    body: concat!(
        hand_on!(),
        r#"local function signal(m) local k = "muxlock:turn:" .. m .. ":" .. ARGV[4] redis.call("incr", k) redis.call("pexpire", k, ARGV[3]) end local q, d, g, id = KEYS[1], KEYS[2], KEYS[3], ARGV[1] local from, own, held = false, false, false if KEYS[4] then own = redis.call("hget", g, id) from = ARGV[5] or own held = redis.pcall("get", KEYS[4]) end local handed = from and held == from local untaken = not handed and ARGV[5] and own and held == own local h = redis.call("zrange", q, 0, 0)[1] redis.call("zrem", q, id) redis.call("zrem", d, id) redis.call("hdel", g, id, id .. ":px") if handed or untaken then hand_on(KEYS[4], q, d, g, ARGV[4], ARGV[3]) if handed then return 1 end return 0 end if h == id then local n = redis.call("zrange", q, 0, 0)[1] if n then signal(n) end end return 0"#
    ),
    sha1: "d834b7cb1794e40665d5e1c99ec82c6e47a8ed8e",
};
