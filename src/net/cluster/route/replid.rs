//! The replication check of a cluster member's votes: a grant counts only if the shard's history it was made in
//! is the one this manager knows, and the replicas that could take over have it.
//!
//! # What it closes
//!
//! - **A failover and a failback this manager never saw.** A master M of a cluster member, its replica R. R
//!   takes over (M follows it), a client takes a lock on R, R dies before M has the key, M takes over again:
//!   M never had the grant. A manager that sent nothing to that shard meanwhile sees no `MOVED` and no new
//!   map, and its connection to M never dropped (a master turned replica keeps its clients): nothing says M
//!   was promoted, and M's grant would count at once — two holders.
//! - **A deposed master that has not learnt it yet.** M stalls (a pause, a partition); R takes over; a
//!   manager that saw the takeover counts R a window later. M wakes and answers the commands waiting in its
//!   socket before it reads the news: still a master in its own eyes, with its old id. Its grant is then
//!   dropped by the full sync that makes it R's replica — two holders. Nothing M says at that moment tells;
//!   what tells is that the grant never reached R.
//!
//! Every promotion gives the promoted node a new replication id (`master_replid`, random, never reused), and a
//! replica that syncs takes its master's. So a node whose `master_replid` is the one this connection read at
//! its set-up (`INFO server replication`, judged by the restart guard then) and that is a master has served
//! one unbroken history since that reading. And a write that every replica of the shard acknowledged
//! (`WAIT`) survives a failover to any of them.
//!
//! # The check
//!
//! Every command a routed round sends to a cluster node (a release round's excepted: a release makes no
//! holder) is followed in the same write by `WAIT n t` (when `n` > 0), `CLUSTER REPLICAS <id>` (the node's
//! id in the member's last map) and `INFO replication`, and the command's outcome is handed up only once
//! their replies are read: readings taken **after** the command ran, on the same connection. `n` is the
//! largest of the replicas the member's last map shows for that master's shard (all of them, those the cluster
//! marked failed too) and the replicas that connection's last check saw (online in its reading, or listed by
//! the node); `t` is half of what is left of the round. Then, per connection (under one lock, shared by every
//! round):
//!
//! - **the same master id** as the one seen before on this connection's set-up, the node's own id (`CLUSTER
//!   MYID`, asked in the first write of each connection session, and again until answered) the one its
//!   replicas were asked by, and at least as many acknowledgements as
//!   `n`, as the replicas this reading shows online and as the replicas the node lists: the outcomes stand;
//! - **another id** (a promotion since, or a sync from another master): the connection is quarantined as a
//!   promoted replica from the instant the reading is judged (later than the promotion: the safe side), and
//!   before the lock is let go; the new id becomes the one to compare with; the restart guard then counts
//!   none of its "yes" votes for a window, these ones included (they are handed up after the quarantine);
//! - **no proof** (a timeout, a dropped connection, an error, a node that is not a master now, a replication
//!   id or node id missing, a node id not the node's own, no replica list, fewer acknowledgements than
//!   replicas): the outcomes that were replies become failed votes
//!   (`NodeError::Cluster`), never counted, and the member's map is read again (a replica gone, a failover).
//!
//! The set-up reading is per connection *session* (a reconnection reads `INFO` again, and the restart guard
//! judges that reading: a master ever promoted, `second_repl_offset` set, waits a window from it). A check
//! judged after the connection was reset compares against the new session's reading; that cannot hide a
//! failback before the grant, since the new reading shows the promotion too. A deposed master that turns
//! replica while a `WAIT` blocks drops the connection: no proof either.
//!
//! After a write whose replicas fell short, that connection's writes skip `WAIT` for a second (their outcomes
//! prove nothing meanwhile), then one tries again: a replica down but still in the map would otherwise block
//! its master's connection (and the releases behind it) for half a round per write.
//!
//! Why the node's own list: the map and the last reading are what this manager saw *before* the write. A
//! replica that joined the shard since both, its link down, can take over a stalled master whose queued
//! commands are answered before it learns it was deposed: `n` would be 0, and its grant would count. The
//! deposed master still lists that replica (it learnt of it when it joined), so its grant needs an
//! acknowledgement it cannot get.
//!
//! What it costs: one `CLUSTER REPLICAS` and one `INFO replication` per connection per write of a round (~3 µs
//! of a server's time for the `INFO`, ~450 bytes of reply), and where a shard has replicas, their
//! acknowledgement (a round trip from the master to its replicas, during which the connection's later replies
//! wait: `WAIT` blocks its client). A replica that is down but still listed makes its shard's grants fail (`t`
//! each) until it is back or forgotten (`CLUSTER FORGET`): the member votes no meanwhile, the safe side. Only on cluster members, and only when the
//! restart guard is on (without the guard no failover is guarded against anyway).

use std::sync::Mutex;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::resp::{Value, encode_command};
use crate::sync::lock;

/// `INFO replication`, encoded.
pub(super) const CHECK: &[u8] = b"*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n";

/// `CLUSTER MYID`, encoded.
pub(super) const MYID: &[u8] = b"*2\r\n$7\r\nCLUSTER\r\n$4\r\nMYID\r\n";

/// The check's books, shared by every round of a manager.
#[derive(Debug)]
pub(super) struct ReplCheck {
    /// Where the set-up's `INFO server replication` reply is among a connection's set-up replies.
    info_at: usize,
    /// Per connection: the session it was last judged on, and the master id seen last on it.
    seen: Mutex<Vec<Seen>>,
}

#[derive(Debug, Default, Clone)]
struct Seen {
    /// [`Fanout::sessions`](crate::net::Fanout::sessions) when last judged; 0: never.
    session: u64,
    replid: Option<Bytes>,
    /// The node's own id, read by `CLUSTER MYID` in a write of that session.
    myid: Option<Bytes>,
    /// How many replicas the last check saw: online in its reading, or listed by the node.
    replicas: usize,
    /// Until when writes skip `WAIT` after one whose replicas fell short (see [`ReplCheck::is_short`]).
    short_until: Option<Instant>,
}

/// After a write whose replicas fell short, how long the next writes on that connection skip `WAIT` (and prove
/// nothing) before one tries again.
const SHORT_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// What a check's reading says of the connection's master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The same master, one unbroken history since the last reading: the outcomes stand.
    Same,
    /// Another history: the connection is to be quarantined as a promoted replica.
    Changed,
    /// No proof either way (not a master, no id): the outcomes must not count.
    Unproven,
}

impl ReplCheck {
    pub(super) fn new(info_at: usize, conns: usize) -> ReplCheck {
        ReplCheck {
            info_at,
            seen: Mutex::new(vec![Seen::default(); conns]),
        }
    }

    /// Judges connection `conn`'s check `reply`: `session` is the connection's session now, `setup` its set-up
    /// replies (read only when the session changed since the last judgment). On [`Verdict::Changed`],
    /// `quarantine` runs before this check's lock is let go: another thread's check of the new id, judged
    /// `Same` after it, must find the node quarantined already (lock order: this lock, then the quarantine's).
    pub(super) fn judge(
        &self,
        conn: usize,
        session: u64,
        setup: impl FnOnce() -> Vec<(Value, Instant)>,
        reply: &Value,
        quarantine: impl FnOnce(),
    ) -> Verdict {
        let Some(now) = master_replid(reply) else {
            return Verdict::Unproven;
        };
        let mut seen = lock(&self.seen);
        let Some(cell) = seen.get_mut(conn) else {
            return Verdict::Unproven;
        };
        if cell.session != session || session == 0 {
            // A new session: its own set-up reading is the one to compare with (whatever role it showed: a
            // replica then, a master now, was promoted since).
            let replies = setup();
            cell.session = session;
            cell.replid = replies
                .get(self.info_at)
                .and_then(|(v, _)| replication_id(v));
            // Its node id is asked in its own writes (`CLUSTER MYID`, until one is noted).
            cell.myid = None;
        }
        if cell.replid.as_ref() == Some(&now) {
            Verdict::Same
        } else {
            cell.replid = Some(now);
            quarantine();
            Verdict::Changed
        }
    }
}

impl ReplCheck {
    /// Whether `id` is the node id noted for connection `conn`'s session `session`, which must be the one last
    /// [judged](ReplCheck::judge) ([`ReplCheck::note_myid`]): the replica list asked by `id` in a write of that
    /// session was then the node's own shard's.
    pub(super) fn is_own_id(&self, conn: usize, session: u64, id: &[u8]) -> bool {
        lock(&self.seen)
            .get(conn)
            .filter(|s| s.session == session)
            .and_then(|s| s.myid.as_deref())
            .is_some_and(|own| own == id)
    }

    /// Forgets the node id noted for connection `conn` (it was not the one asked by): the next write asks
    /// `CLUSTER MYID` again.
    pub(super) fn forget_id(&self, conn: usize) {
        if let Some(s) = lock(&self.seen).get_mut(conn) {
            s.myid = None;
        }
    }

    /// Whether connection `conn`'s session `session` was judged already and its node id is known (asked in
    /// one of its writes): if not, the next write asks `CLUSTER MYID`.
    pub(super) fn knows_id(&self, conn: usize, session: u64) -> bool {
        lock(&self.seen)
            .get(conn)
            .is_some_and(|s| s.session == session && s.myid.is_some())
    }

    /// Records `id`, read by `CLUSTER MYID` in a write of connection `conn`'s session `session`, as that
    /// session's node id (if that session is the one last judged; a later session reads its own).
    pub(super) fn note_myid(&self, conn: usize, session: u64, id: Bytes) {
        if let Some(s) = lock(&self.seen).get_mut(conn) {
            if s.session == session {
                s.myid = Some(id);
            }
        }
    }

    /// How many replicas connection `conn`'s last check saw (online in its reading, or listed by the node
    /// itself; 0 before the first): its next writes wait for as many at least.
    pub(super) fn seen(&self, conn: usize) -> usize {
        lock(&self.seen).get(conn).map_or(0, |s| s.replicas)
    }

    /// Whether writes on `conn` skip `WAIT` at `now`: its replicas fell short less than [`SHORT_PAUSE`] ago.
    pub(super) fn is_short(&self, conn: usize, now: Instant) -> bool {
        lock(&self.seen)
            .get(conn)
            .and_then(|s| s.short_until)
            .is_some_and(|until| now < until)
    }

    /// Records whether `conn`'s replicas fell short on its latest check (a pause of [`SHORT_PAUSE`] starts,
    /// unless one runs) or were all there (the pause ends).
    pub(super) fn note_short(&self, conn: usize, short: bool, now: Instant) {
        if let Some(s) = lock(&self.seen).get_mut(conn) {
            s.short_until = match (short, s.short_until) {
                (false, _) => None,
                (true, Some(until)) if now < until => Some(until),
                (true, _) => Some(now + SHORT_PAUSE),
            };
        }
    }

    /// Records how many replicas connection `conn`'s latest check saw (see [`ReplCheck::seen`]).
    pub(super) fn note_seen(&self, conn: usize, replicas: usize) {
        if let Some(s) = lock(&self.seen).get_mut(conn) {
            s.replicas = replicas;
        }
    }
}

/// `WAIT replicas timeout_ms`, encoded.
pub(super) fn wait_command(replicas: usize, timeout_ms: u64) -> BytesMut {
    let mut buf = BytesMut::new();
    let (n, t) = (replicas.to_string(), timeout_ms.to_string());
    encode_command(&[b"WAIT", n.as_bytes(), t.as_bytes()], &mut buf);
    buf
}

/// `CLUSTER REPLICAS id`, encoded.
pub(super) fn replicas_command(id: &[u8]) -> BytesMut {
    let mut buf = BytesMut::new();
    encode_command(&[b"CLUSTER", b"REPLICAS", id], &mut buf);
    buf
}

/// How many replicas a `CLUSTER REPLICAS` reply lists (one line each, whatever their flags: `fail`, no link,
/// handshake); `None` for an error or a reply of another shape.
pub(super) fn listed_replicas(reply: &Value) -> Option<usize> {
    match reply.without_attributes() {
        Value::Array(lines) | Value::Set(lines) => Some(lines.len()),
        _ => None,
    }
}

/// The node id of a `CLUSTER MYID` reply.
pub(super) fn node_id(reply: &Value) -> Option<Bytes> {
    match reply.without_attributes() {
        Value::BulkString(b) | Value::SimpleString(b) if !b.is_empty() => Some(b.clone()),
        _ => None,
    }
}

/// How many replicas an `INFO replication` reply shows online (`slaveN:...,state=online,...`).
pub(super) fn online_replicas(reply: &Value) -> usize {
    let text = match reply.without_attributes() {
        Value::BulkString(b) | Value::Verbatim { data: b, .. } => b,
        _ => return 0,
    };
    text.split(|&c| c == b'\n')
        .filter(|line| line.starts_with(b"slave") && contains(line, b"state=online"))
        .count()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The `master_replid` of an `INFO` reply with the replication section, if it says the node is a master.
pub(super) fn master_replid(reply: &Value) -> Option<Bytes> {
    let (role, id) = fields(reply)?;
    (&role[..] == b"master").then_some(id?)
}

/// The `master_replid` of an `INFO` reply with the replication section, whatever the node's role.
fn replication_id(reply: &Value) -> Option<Bytes> {
    fields(reply)?.1
}

/// `role` and `master_replid` of an `INFO` reply (a bulk string in RESP2, verbatim in RESP3).
fn fields(reply: &Value) -> Option<(Bytes, Option<Bytes>)> {
    let text = match reply.without_attributes() {
        Value::BulkString(b) | Value::Verbatim { data: b, .. } => b,
        _ => return None,
    };
    let (mut role, mut id) = (None, None);
    for line in text.split(|&c| c == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(v) = line.strip_prefix(b"role:") {
            role = Some(text.slice_ref(v));
        } else if let Some(v) = line.strip_prefix(b"master_replid:") {
            id = Some(text.slice_ref(v)).filter(|v| !v.is_empty());
        }
    }
    Some((role?, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(role: &str, id: &str) -> Value {
        Value::BulkString(Bytes::from(format!(
            "# Replication\r\nrole:{role}\r\nconnected_slaves:0\r\nmaster_replid:{id}\r\n\
             master_replid2:0000\r\nmaster_repl_offset:0\r\nsecond_repl_offset:-1\r\n"
        )))
    }

    /// A judgment, checking that the quarantine ran exactly when it says the node changed.
    fn judged(
        c: &ReplCheck,
        conn: usize,
        session: u64,
        setup: impl FnOnce() -> Vec<(Value, Instant)>,
        reply: &Value,
    ) -> Verdict {
        let mut ran = false;
        let verdict = c.judge(conn, session, setup, reply, || ran = true);
        assert_eq!(
            ran,
            verdict == Verdict::Changed,
            "quarantined exactly on a change"
        );
        verdict
    }

    fn setup(id: &str) -> Vec<(Value, Instant)> {
        vec![
            (Value::Integer(1), Instant::now()),
            (info("master", id), Instant::now()),
        ]
    }

    #[test]
    fn a_master_keeping_its_id_is_the_same_and_a_new_id_is_a_change() {
        let c = ReplCheck::new(1, 2);
        assert_eq!(
            judged(&c, 0, 1, || setup("aa"), &info("master", "aa")),
            Verdict::Same
        );
        assert_eq!(
            judged(&c, 0, 1, || setup("aa"), &info("master", "aa")),
            Verdict::Same
        );
        // A failback: another id; then that id is the one compared with.
        assert_eq!(
            judged(&c, 0, 1, || setup("aa"), &info("master", "bb")),
            Verdict::Changed
        );
        assert_eq!(
            judged(&c, 0, 1, || setup("aa"), &info("master", "bb")),
            Verdict::Same
        );
        // The other connection has books of its own.
        assert_eq!(
            judged(&c, 1, 1, || setup("cc"), &info("master", "bb")),
            Verdict::Changed
        );
    }

    #[test]
    fn the_first_check_of_a_session_is_compared_with_that_sessions_set_up_reading() {
        let c = ReplCheck::new(1, 1);
        // The failback happened between the set-up and the first check: seen.
        assert_eq!(
            judged(&c, 0, 1, || setup("aa"), &info("master", "bb")),
            Verdict::Changed
        );
        // A new session whose set-up read the new id: the same.
        assert_eq!(
            judged(&c, 0, 2, || setup("dd"), &info("master", "dd")),
            Verdict::Same
        );
        // A replica at set-up (its master's id), a master with a new id now: a change.
        let replica = || {
            vec![
                (Value::Integer(1), Instant::now()),
                (info("slave", "dd"), Instant::now()),
            ]
        };
        assert_eq!(
            judged(&c, 0, 3, replica, &info("master", "ee")),
            Verdict::Changed
        );
        // No set-up reading at all: no id to compare with, a change.
        assert_eq!(
            judged(&c, 0, 4, Vec::new, &info("master", "ee")),
            Verdict::Changed
        );
    }

    #[test]
    fn no_proof_without_a_master_and_an_id() {
        let c = ReplCheck::new(1, 1);
        assert_eq!(
            judged(&c, 0, 1, || setup("aa"), &info("slave", "aa")),
            Verdict::Unproven
        );
        assert_eq!(
            judged(&c, 0, 1, || setup("aa"), &info("master", "")),
            Verdict::Unproven
        );
        let error = Value::Error(Bytes::from_static(b"NOPERM"));
        assert_eq!(judged(&c, 0, 1, || setup("aa"), &error), Verdict::Unproven);
        assert_eq!(
            judged(&c, 5, 1, || setup("aa"), &info("master", "aa")),
            Verdict::Unproven
        );
        let resp3 = Value::Verbatim {
            format: *b"txt",
            data: Bytes::from_static(b"role:master\nmaster_replid:aa\n"),
        };
        assert_eq!(judged(&c, 0, 1, || setup("aa"), &resp3), Verdict::Same);
    }

    #[test]
    fn a_replica_list_is_trusted_only_when_asked_by_the_nodes_own_id() {
        let c = ReplCheck::new(1, 1);
        let id = |id: &'static [u8]| Bytes::from_static(id);
        assert!(
            !c.knows_id(0, 1) && !c.is_own_id(0, 1, b"n1"),
            "no session judged yet"
        );
        judged(&c, 0, 1, || setup("aa"), &info("master", "aa"));
        assert!(
            !c.knows_id(0, 1),
            "judged, but no id asked yet: the next write asks it"
        );
        c.note_myid(0, 1, id(b"n1"));
        assert!(c.knows_id(0, 1) && c.is_own_id(0, 1, b"n1"));
        assert!(!c.is_own_id(0, 1, b"n2"), "another node's id");
        assert!(!c.knows_id(0, 2), "a new session asks again");
        // A write meant for another session than the one judged: its list is not the node's own.
        assert!(!c.is_own_id(0, 2, b"n1") && !c.is_own_id(0, 0, b"n1"));
        // A new session (another node at that address, say): the old id is not its own.
        judged(&c, 0, 2, || setup("aa"), &info("master", "aa"));
        assert!(!c.is_own_id(0, 1, b"n1") && !c.is_own_id(0, 2, b"n1"));
        // An id read on an older session is not noted for the new one.
        c.note_myid(0, 1, id(b"n1"));
        assert!(!c.is_own_id(0, 2, b"n1") && !c.knows_id(0, 2));
        c.note_myid(0, 2, id(b"n2"));
        assert!(c.is_own_id(0, 2, b"n2") && c.knows_id(0, 2));
        // Forgotten (it was not the map's id): asked again in the same session.
        c.forget_id(0);
        assert!(!c.knows_id(0, 2) && !c.is_own_id(0, 2, b"n2"));
        assert_eq!(node_id(&Value::BulkString(id(b"n3"))), Some(id(b"n3")));
        let loading = Value::Error(Bytes::from_static(
            b"LOADING Redis is loading the dataset in memory",
        ));
        assert_eq!(
            node_id(&loading),
            None,
            "refused while loading: asked again"
        );
    }

    /// The replicas an `INFO replication` reply shows online are its `slaveN` lines in state `online`: none on a
    /// master without replicas, not one still syncing; an error or another type shows none.
    #[test]
    fn only_the_replicas_info_shows_online_count() {
        let info = |text: &'static str| Value::BulkString(Bytes::from_static(text.as_bytes()));
        let alone = info("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n");
        assert_eq!(online_replicas(&alone), 0);
        let three = info(
            "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n\
             slave0:ip=10.0.0.2,port=7001,state=online,offset=10,lag=0\r\n\
             slave1:ip=10.0.0.3,port=7002,state=wait_bgsave,offset=0,lag=0\r\n\
             slave2:ip=10.0.0.4,port=7003,state=online,offset=10,lag=1\r\n\
             master_repl_offset:10\r\n",
        );
        assert_eq!(online_replicas(&three), 2);
        let error = Value::Error(Bytes::from_static(b"NOPERM no"));
        assert_eq!(online_replicas(&error), 0);
        assert_eq!(online_replicas(&Value::Integer(2)), 0);
    }

    #[test]
    fn every_listed_replica_counts_and_an_error_is_no_list() {
        let line = |l: &'static str| Value::BulkString(Bytes::from_static(l.as_bytes()));
        let two = Value::Array(vec![
            line("r1 127.0.0.1:7004@17004 slave n1 0 0 1 connected"),
            line("r2 127.0.0.1:7005@17005 slave,fail n1 0 0 1 disconnected"),
        ]);
        assert_eq!(listed_replicas(&two), Some(2), "a failed one too");
        assert_eq!(listed_replicas(&Value::Array(Vec::new())), Some(0));
        let error = Value::Error(Bytes::from_static(
            b"ERR The specified node is not a master",
        ));
        assert_eq!(listed_replicas(&error), None);
        assert_eq!(listed_replicas(&Value::Integer(2)), None);
        assert_eq!(
            &replicas_command(b"n1")[..],
            b"*3\r\n$7\r\nCLUSTER\r\n$8\r\nREPLICAS\r\n$2\r\nn1\r\n"
        );
    }
    /// A check whose replicas fell short makes the connection's writes skip `WAIT` for a pause, not before it nor
    /// after it; a check with every replica there ends it at once.
    #[test]
    fn writes_skip_wait_for_a_pause_after_replicas_fell_short() {
        let c = ReplCheck::new(1, 2);
        let t0 = Instant::now();
        let ms = std::time::Duration::from_millis;
        assert!(!c.is_short(0, t0), "nothing fell short yet");
        c.note_short(0, true, t0);
        assert!(c.is_short(0, t0) && c.is_short(0, t0 + ms(999)));
        assert!(!c.is_short(0, t0 + SHORT_PAUSE), "past the pause");
        assert!(!c.is_short(0, t0 + ms(5_000)));
        assert!(!c.is_short(1, t0 + ms(1)), "another connection");
        c.note_short(0, true, t0 + ms(10));
        c.note_short(0, false, t0 + ms(20));
        assert!(
            !c.is_short(0, t0 + ms(30)),
            "every replica back: the pause ends"
        );
    }

    /// The writes of a pause skip `WAIT`, so each of their checks falls short again: those must not lengthen
    /// the pause (under steady traffic `WAIT` would never be tried again, and the master's votes never count
    /// after its replica is back). A shortfall after the pause starts a new one.
    #[test]
    fn shortfalls_within_a_pause_do_not_lengthen_it_and_one_after_starts_another() {
        let c = ReplCheck::new(1, 1);
        let t0 = Instant::now();
        let ms = std::time::Duration::from_millis;
        c.note_short(0, true, t0);
        c.note_short(0, true, t0 + ms(500));
        c.note_short(0, true, t0 + ms(900));
        assert!(c.is_short(0, t0 + ms(999)));
        assert!(
            !c.is_short(0, t0 + SHORT_PAUSE),
            "the pause ran a second from the first shortfall, not from the last"
        );
        c.note_short(0, true, t0 + ms(1_500));
        assert!(
            c.is_short(0, t0 + ms(1_600)) && c.is_short(0, t0 + ms(2_499)),
            "a shortfall after the pause pauses the writes again"
        );
        assert!(!c.is_short(0, t0 + ms(2_500)));
    }
}
