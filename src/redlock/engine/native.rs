//! [`Natives`]: which native compare-and-delete each node has, learned on each of its connections.
//!
//! Every new connection pipelines `COMMAND INFO DELEX DELIFEQ MSETEX` with the rest of its set-up ([`probe_command`]);
//! the reply has one element per name, null for a command the server does not know (Valkey's and Redis'
//! `addReplyCommandInfo`). A server's version string cannot say it: Valkey reports `redis_version:7.2.4` forever,
//! and N masters may run different servers, so the choice is per node and per connection (a node restarted as
//! another version is read again on its new connection, like the restart guard's `run_id`).
//!
//! - `DELIFEQ` (Valkey >= 9.0) is preferred to `DELEX` (Redis >= 8.4, Valkey >= 9.2): one argument fewer. Either
//!   one implies `SET ... IFEQ`, the native extension.
//! - A refused probe (`NOPERM` without `+command|info`, `COMMAND` renamed) or a node not set up yet: the scripts,
//!   as before; a script refused there (`NOPERM` without `+eval` for a release, `+evalsha` for an extension) makes the round look again, and a node whose
//!   native command is refused (its ACL lacks it) goes back to the scripts for the rest of that connection
//!   (`Engine::script_round`): a refusal means nothing ran, so the other way costs no vote.
//! - Cheap on the hot path: per node and round, one atomic load of the node's session count compared with the
//!   one read last, and one of the answer; the set-up replies are read (and cloned) only on a new connection.
//!
//! - `MSETEX numkeys key value ... NX PX ttl` (Valkey >= 9.1, Redis >= 8.4) sets every key of a set or none, and
//!   no key exists before: a set's acquisition without Lua (`kind/set.rs`). Refused (an ACL without `+msetex`):
//!   the script for the rest of that connection, as for the others.
//!
//! Either way the safety is the scripts': `DELIFEQ`/`DELEX ... IFEQ` delete only a key holding our value,
//! `SET ... IFEQ ... PX` extends only such a key and never creates one (`scripts::set_if_eq`, which refuses to
//! encode it without an expiry), and `MSETEX ... NX PX` sets the keys of a set, with their expiry, only where none
//! of them exists, as [`lua::ACQUIRE_MANY`](crate::redlock::lua::ACQUIRE_MANY) does.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};

use crate::redlock::engine::seam::Nodes;
use crate::redlock::scripts::{Native, Script};
use crate::resp::{Value, encode_command};

/// `COMMAND INFO DELEX DELIFEQ MSETEX`: pipelined on every new connection; may be refused (an optional set-up
/// step).
pub(crate) fn probe_command() -> Bytes {
    let mut buf = BytesMut::new();
    encode_command(
        &[b"COMMAND", b"INFO", b"DELEX", b"DELIFEQ", b"MSETEX"],
        &mut buf,
    );
    buf.freeze()
}

/// Whether a node's reply to [`probe_command`] says it has `MSETEX` (its third element is not null).
pub(crate) fn probe_has_msetex(reply: &Value) -> bool {
    let Value::Array(items) = reply.without_attributes() else {
        return false;
    };
    items.get(2).is_some_and(known)
}

/// Whether one element of the probe's reply names a command the server knows (not a null).
fn known(v: &Value) -> bool {
    !matches!(
        v.without_attributes(),
        Value::Null | Value::NullArray | Value::NullBulk
    )
}

/// What a node's reply to [`probe_command`] says: its native compare-and-delete, if any. Anything but an array
/// of two or three elements (an error, a refusal, a reply from something that is not Redis) says none.
pub(crate) fn read_probe(reply: &Value) -> Option<Native> {
    let Value::Array(items) = reply.without_attributes() else {
        return None;
    };
    match &items[..] {
        [_, delifeq] | [_, delifeq, _] if known(delifeq) => Some(Native::DelIfEq),
        [delex, _] | [delex, _, _] if known(delex) => Some(Native::DelEx),
        _ => None,
    }
}

/// No native command (or not known yet); stored in [`Known::native`] with the two below, and the refusals.
const NONE: u8 = 0;
const DELIFEQ: u8 = 1;
const DELEX: u8 = 2;
const KIND: u8 = 3;
/// The node refused its native release (`DELIFEQ`/`DELEX`) on this connection.
const RELEASE_REFUSED: u8 = 4;
/// The node refused its native extension (`SET IFEQ`) on this connection.
const EXTEND_REFUSED: u8 = 8;
/// The node ran its native release on this connection (it is not refused there).
const RELEASE_RAN: u8 = 16;
/// The node ran its native extension on this connection.
const EXTEND_RAN: u8 = 32;
/// The node's probe says it has `MSETEX` on this connection.
const MSETEX: u8 = 64;
/// The node refused `MSETEX` on this connection.
const MSETEX_REFUSED: u8 = 128;

fn refusal(script: Script) -> u8 {
    match script {
        Script::Release => RELEASE_REFUSED,
        Script::Extend => EXTEND_REFUSED,
    }
}

fn code(native: Option<Native>) -> u8 {
    match native {
        None => NONE,
        Some(Native::DelIfEq) => DELIFEQ,
        Some(Native::DelEx) => DELEX,
    }
}

fn decode(code: u8) -> Option<Native> {
    match code & KIND {
        DELIFEQ => Some(Native::DelIfEq),
        DELEX => Some(Native::DelEx),
        _ => None,
    }
}

/// One node: the connection (session count) last read, and what it said.
#[derive(Debug, Default)]
struct Known {
    /// 0: never read (the fanout counts sessions from 1).
    session: AtomicU64,
    native: AtomicU8,
}

/// Per node, its native compare-and-delete on its current connection; see the module doc.
#[derive(Debug)]
pub(crate) struct Natives {
    /// Where the probe's reply is among the set-up replies.
    probe: usize,
    nodes: Vec<Known>,
}

impl Natives {
    /// For `n` nodes whose set-up replies hold the probe's at index `probe`.
    pub(crate) fn new(n: usize, probe: usize) -> Natives {
        Natives {
            probe,
            nodes: (0..n).map(|_| Known::default()).collect(),
        }
    }

    /// Node `node`'s native compare-and-delete on its current connection, for `script`'s native form; `None` if
    /// it has none, if its probe was refused, if that native command was refused on this connection, or if it
    /// is not set up yet.
    #[inline]
    pub(crate) fn of(&self, fanout: &impl Nodes, node: usize, script: Script) -> Option<Native> {
        let code = self.current(fanout, node)?;
        if code & refusal(script) != 0 {
            return None;
        }
        decode(code)
    }

    /// Node `node`'s code on its current connection, its probe read first if that connection is new; `None`
    /// before its first connection.
    #[inline]
    fn current(&self, fanout: &impl Nodes, node: usize) -> Option<u8> {
        let known = self.nodes.get(node)?;
        let session = fanout.sessions(node);
        if session == 0 {
            return None;
        }
        if known.session.load(Ordering::Acquire) != session {
            self.read(fanout, node, known, session);
        }
        Some(known.native.load(Ordering::Relaxed))
    }

    #[cold]
    fn read(&self, fanout: &impl Nodes, node: usize, known: &Known, session: u64) {
        let replies = fanout.setup_replies(node);
        // The connection's set-up is not all read (it dropped, and the next one is being set up): ask again later
        // (and say "none" meanwhile: what was known was of another connection).
        let probe = replies.get(self.probe).map(|(reply, _)| reply);
        let native = probe.and_then(read_probe);
        let msetex = match probe.is_some_and(probe_has_msetex) {
            true => MSETEX,
            false => 0,
        };
        known.native.store(code(native) | msetex, Ordering::Relaxed);
        if replies.get(self.probe).is_some() {
            known.session.store(session, Ordering::Release);
        }
    }

    /// Whether node `node` has `MSETEX` on its current connection and has not refused it there (see the module
    /// doc); `false` if not known yet.
    #[inline]
    pub(crate) fn msetex(&self, fanout: &impl Nodes, node: usize) -> bool {
        self.current(fanout, node)
            .is_some_and(|code| code & (MSETEX | MSETEX_REFUSED) == MSETEX)
    }

    /// Node `node` refused `MSETEX`: the script for the rest of the connection whose probe was read last.
    pub(crate) fn refused_msetex(&self, node: usize) {
        if let Some(known) = self.nodes.get(node) {
            known.native.fetch_or(MSETEX_REFUSED, Ordering::Relaxed);
        }
    }

    /// Whether what node `node` has is not known yet: its current connection's set-up (with the probe) is not
    /// read, so [`of`](Self::of) said "none" for want of knowing. A node sent the script then may refuse it (a
    /// user without `+eval`) and have a native command after all.
    pub(crate) fn unknown(&self, fanout: &impl Nodes, node: usize) -> bool {
        let session = fanout.sessions(node);
        self.nodes
            .get(node)
            .is_some_and(|k| session == 0 || k.session.load(Ordering::Acquire) != session)
    }

    /// Whether node `node` has run `script`'s native command on its connection: later ones will not be refused.
    #[inline]
    pub(crate) fn ran(&self, node: usize, script: Script) -> bool {
        let bit = match script {
            Script::Release => RELEASE_RAN,
            Script::Extend => EXTEND_RAN,
        };
        self.nodes
            .get(node)
            .is_some_and(|k| k.native.load(Ordering::Relaxed) & bit != 0)
    }

    /// Node `node` ran `script`'s native command: see [`ran`](Self::ran).
    pub(crate) fn note_ran(&self, node: usize, script: Script) {
        let bit = match script {
            Script::Release => RELEASE_RAN,
            Script::Extend => EXTEND_RAN,
        };
        if let Some(known) = self.nodes.get(node) {
            if known.native.load(Ordering::Relaxed) & bit == 0 {
                known.native.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    /// Node `node` refused `script`'s native command (its ACL lacks it, say): the script for it for the rest of
    /// the connection whose probe was read last. A new connection reads its probe again.
    pub(crate) fn refused(&self, node: usize, script: Script) {
        if let Some(known) = self.nodes.get(node) {
            known.native.fetch_or(refusal(script), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> Value {
        Value::Array(vec![
            Value::BulkString(Bytes::from_static(b"delifeq")),
            Value::Integer(3),
        ])
    }

    /// The probe's replies, in RESP2 (`$-1`, `*-1`) and RESP3 (`_`) nulls.
    #[test]
    fn reads_the_probe() {
        let table: &[(Value, Option<Native>)] = &[
            (
                Value::Array(vec![Value::NullBulk, info()]),
                Some(Native::DelIfEq),
            ),
            (
                Value::Array(vec![Value::Null, info()]),
                Some(Native::DelIfEq),
            ),
            (Value::Array(vec![info(), info()]), Some(Native::DelIfEq)),
            (
                Value::Array(vec![info(), Value::NullBulk]),
                Some(Native::DelEx),
            ),
            (
                Value::Array(vec![info(), Value::NullArray]),
                Some(Native::DelEx),
            ),
            (Value::Array(vec![Value::NullBulk, Value::NullBulk]), None),
            (Value::Array(vec![Value::Null, Value::Null]), None),
            (Value::Array(vec![info()]), None),
            (Value::Array(vec![]), None),
            (
                Value::Error(b"NOPERM User u has no permissions"[..].into()),
                None,
            ),
            (
                Value::Error(b"ERR unknown command 'COMMAND'"[..].into()),
                None,
            ),
            (Value::NullArray, None),
            (Value::Integer(1), None),
        ];
        for (reply, want) in table {
            assert_eq!(read_probe(reply), *want, "{reply:?}");
        }
    }

    #[test]
    fn reads_msetex_from_the_probe() {
        let with = Value::Array(vec![Value::NullBulk, info(), info()]);
        let without = Value::Array(vec![Value::NullBulk, info(), Value::Null]);
        let two = Value::Array(vec![Value::NullBulk, info()]);
        assert!(probe_has_msetex(&with));
        assert_eq!(read_probe(&with), Some(Native::DelIfEq));
        assert!(!probe_has_msetex(&without));
        assert_eq!(read_probe(&without), Some(Native::DelIfEq));
        assert!(!probe_has_msetex(&two));
        assert!(!probe_has_msetex(&Value::Error(b"NOPERM x"[..].into())));
        let neither = Value::Array(vec![Value::NullBulk, Value::NullBulk, info()]);
        assert_eq!(
            (read_probe(&neither), probe_has_msetex(&neither)),
            (None, true)
        );
    }

    /// A node has run a native command on its connection only once that kind's run was noted there, whatever
    /// else is known of it (its other kind run or refused).
    #[test]
    fn a_native_command_counts_as_run_only_once_noted_for_its_kind() {
        let natives = Natives::new(2, 0);
        for script in [Script::Release, Script::Extend] {
            assert!(!natives.ran(0, script), "{script:?} before anything ran");
        }
        natives.refused(0, Script::Extend);
        assert!(!natives.ran(0, Script::Release), "another kind refused");
        natives.note_ran(0, Script::Release);
        assert!(natives.ran(0, Script::Release));
        assert!(!natives.ran(0, Script::Extend), "the other kind");
        assert!(!natives.ran(1, Script::Release), "another node");
        natives.note_ran(1, Script::Extend);
        assert!(natives.ran(1, Script::Extend));
        assert!(
            !natives.ran(1, Script::Release),
            "the other kind, on the other node"
        );
        assert!(!natives.ran(2, Script::Release), "no such node");
    }

    /// One node over a fanout to nowhere whose connection (session `session`) was set up with `probe`'s reply.
    struct Probed {
        fanout: crate::net::Fanout,
        session: std::cell::Cell<u64>,
        probe: Value,
    }

    impl Nodes for Probed {
        type Round<'a> = crate::net::Round<'a>;

        fn len(&self) -> usize {
            1
        }

        fn addrs(&self) -> &[crate::net::NodeAddr] {
            self.fanout.addrs()
        }

        fn round(&self, deadline: std::time::Instant) -> crate::net::Round<'_> {
            self.fanout.round(deadline)
        }

        fn release_round(&self, deadline: std::time::Instant) -> crate::net::Round<'_> {
            self.fanout.release_round(deadline)
        }

        fn sessions(&self, _conn: usize) -> u64 {
            self.session.get()
        }

        fn setup_replies(&self, _conn: usize) -> Vec<(Value, std::time::Instant)> {
            vec![(self.probe.clone(), std::time::Instant::now())]
        }
    }

    /// A node whose probe shows `DELIFEQ` is sent it for releases and `SET IFEQ` for extensions from its set-up
    /// on; a kind it refused goes as the script for the rest of that connection (the other kind still native),
    /// and its next connection, probed again, has both again. Before any set-up: the scripts.
    #[test]
    fn a_node_is_sent_its_native_commands_until_it_refuses_one() {
        let nodes = Probed {
            fanout: crate::net::Fanout::new(
                vec![crate::net::test_peer::nobody()],
                crate::net::Options::default(),
            )
            .expect("fanout"),
            session: std::cell::Cell::new(0),
            probe: Value::Array(vec![Value::NullBulk, info()]),
        };
        let natives = Natives::new(1, 0);
        let of = |script| natives.of(&nodes, 0, script);
        assert_eq!(of(Script::Release), None, "before any set-up");
        nodes.session.set(1);
        for script in [Script::Release, Script::Extend] {
            assert_eq!(of(script), Some(Native::DelIfEq), "{script:?}");
        }
        natives.refused(0, Script::Release);
        assert_eq!(of(Script::Release), None, "a refused release");
        assert_eq!(of(Script::Extend), Some(Native::DelIfEq), "the other kind");
        natives.refused(0, Script::Extend);
        assert_eq!(of(Script::Extend), None, "a refused extension");
        nodes.session.set(2);
        for script in [Script::Release, Script::Extend] {
            assert_eq!(
                of(script),
                Some(Native::DelIfEq),
                "{script:?}, a new connection"
            );
        }
    }

    #[test]
    fn codes_round_trip() {
        for native in [Some(Native::DelIfEq), Some(Native::DelEx)] {
            for refused in [
                RELEASE_REFUSED,
                EXTEND_REFUSED,
                RELEASE_REFUSED | EXTEND_REFUSED,
            ] {
                assert_eq!(decode(code(native) | refused), native);
            }
        }
        for native in [None, Some(Native::DelIfEq), Some(Native::DelEx)] {
            assert_eq!(decode(code(native)), native);
        }
    }
}
