//! What a round did, in words: the cause that decided a failed verb, one line per node, what a failed
//! extension left on the nodes, and the nodes that failed under a verb that succeeded (a degraded quorum).
//!
//! - **The headline names the cause that decided**, in this order: another holder ([`Cause::Held`]); a value no
//!   majority holds any more ([`Cause::Lost`]); refused logins, when their votes could have made the majority
//!   ([`Cause::Auth`]); young nodes, when their grants could have ([`Cause::Young`]: the restart guard); else
//!   nodes down, hung or failing ([`Cause::Unreachable`]). The exit code follows the cause (see `exit.rs`).
//! - **Each node's line says what it did**, in the verb's words: an extension was *applied*, *applied, not
//!   counted*, *refused* or got *no answer*. The lock scripts answer 0 both for an absent key and for a key that
//!   holds another value; after a refused extension or release a read of the key ([`LockManager::inspect`])
//!   tells the two apart, so that a node is called "held by another value" only when it is.
//! - **A degraded quorum**: the nodes that failed (or were not counted) in a verb's round although the verb
//!   succeeded, found from the manager's per-node tallies before and after the verb ([`Mark`]), and why (a read
//!   of those nodes gives each one's error). A node that had not answered when the majority decided is not
//!   judged: nothing is known of it.

use std::time::Duration;

use muxlock::{Error, Inspection, KeyState, LockManager, NodeError, Outcome, Report};
use serde::Serialize;

use crate::duration::{self, millis};

/// What the round was for: the words of each node's line depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Acquire,
    Extend,
    Release,
}

/// The cause that decided a failed verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Another holder has the lock.
    Held,
    /// A majority no longer holds the value (extend, release).
    Lost,
    /// Nodes granted, but the restart guard does not count them yet, and their grants would have made the majority.
    Young,
    /// Nodes refused the login, and their votes would have made the majority.
    Auth,
    /// A majority granted, too late: the round outlasted the lease's validity.
    Slow,
    /// Nodes down, hung, refusing, answering errors.
    Unreachable,
}

impl Cause {
    /// The cause for machines (`--json`'s `cause`).
    pub fn word(self) -> &'static str {
        match self {
            Cause::Held => "held",
            Cause::Lost => "lost",
            Cause::Young => "young",
            Cause::Auth => "auth",
            Cause::Slow => "slow",
            Cause::Unreachable => "unreachable",
        }
    }
}

/// The cause that decided `e`, for the errors that come from a round.
pub fn cause(e: &Error) -> Option<Cause> {
    let report = e.report()?;
    Some(match e {
        Error::Held(_) => Cause::Held,
        Error::LockLost(_) => Cause::Lost,
        _ => quorum_cause(report),
    })
}

/// Why a round that was not refused by holders found no majority: the first kind of failure without which a
/// majority could still have been reached (counting the nodes not awaited as possible grants). Refused logins
/// come first (they never heal by themselves), then young nodes; nodes down or failing otherwise.
fn quorum_cause(r: &Report) -> Cause {
    let count = |f: &dyn Fn(&Outcome) -> bool| r.nodes().iter().filter(|(_, o)| f(o)).count();
    let granted = r.granted();
    let young = count(&|o| *o == Outcome::Quarantined);
    let auth = count(&|o| matches!(o, Outcome::Failed(NodeError::Auth(_))));
    let unknown = count(&|o| *o == Outcome::NotAwaited);
    let quorum = r.quorum();
    if granted >= quorum {
        Cause::Slow
    } else if auth > 0 && granted + auth + unknown >= quorum {
        Cause::Auth
    } else if young > 0 && granted + young + unknown >= quorum {
        Cause::Young
    } else {
        Cause::Unreachable
    }
}

/// One node's line: the node (password hidden), what it did in words, and a word for machines.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeLine {
    pub node: String,
    pub outcome: String,
    pub state: &'static str,
}

/// Whether a request that got `e` may still have run on the node: it may have been sent (a timeout, a connection
/// that closed or was reset after the request went out, a clock check that threw away its reply). Only failures
/// known to come before anything was sent say no.
fn may_have_run(e: &NodeError) -> bool {
    !matches!(
        e,
        NodeError::Refused
            | NodeError::ConnectTimeout
            | NodeError::Resolve(_)
            | NodeError::Auth(_)
            | NodeError::Setup(_)
            | NodeError::Loading
            | NodeError::Overloaded
    )
}

/// Each node's line for a failed round of `verb`. `seen` (a read after the round) and `value` (the lock's)
/// tell an absent key from another holder's where the node answered "not ours".
pub fn node_lines(
    r: &Report,
    verb: Verb,
    seen: Option<&Inspection>,
    value: Option<&[u8]>,
) -> Vec<NodeLine> {
    r.nodes()
        .iter()
        .enumerate()
        .map(|(i, (addr, outcome))| {
            let young = r
                .not_counted()
                .find(|(a, _, _)| *a == addr)
                .map(|(_, up, left)| {
                    format!(
                        "up {}, counted in {} (restart guard)",
                        duration::human(up),
                        duration::human(left)
                    )
                })
                .unwrap_or_else(|| "restart guard".to_owned());
            let key = seen.and_then(|s| s.nodes().get(i)).map(|(_, k)| k);
            let (state, text) = line(verb, outcome, &young, key, value);
            NodeLine {
                node: addr.to_string(),
                outcome: text,
                state,
            }
        })
        .collect()
}

/// One node's `(state, words)`.
fn line(
    verb: Verb,
    outcome: &Outcome,
    young: &str,
    key: Option<&KeyState>,
    value: Option<&[u8]>,
) -> (&'static str, String) {
    use Verb::*;
    match (verb, outcome) {
        (Acquire, Outcome::Granted) => ("granted", "granted".into()),
        (Extend, Outcome::Granted) => ("applied", "applied".into()),
        (Release, Outcome::Granted) => ("released", "released".into()),
        (Acquire, Outcome::Taken) => ("held", "held by another holder".into()),
        (_, Outcome::Taken | Outcome::NotHeld) => not_ours(verb, key, value),
        (Acquire, Outcome::Quarantined) => {
            ("not_counted", format!("granted, not counted: {young}"))
        }
        (_, Outcome::Quarantined) => ("not_counted", format!("applied, not counted: {young}")),
        (_, Outcome::ErrorReply(m)) => ("error", format!("error reply: {m}")),
        (_, Outcome::Failed(e @ NodeError::Auth(_))) => ("auth", e.to_string()),
        (Extend, Outcome::Failed(e)) if may_have_run(e) => {
            ("no_answer", format!("{e}{}", unsure(key, value)))
        }
        (Release, Outcome::Failed(e)) if may_have_run(e) => {
            ("no_answer", format!("{e}: may have released"))
        }
        (_, Outcome::Failed(e)) => ("failed", e.to_string()),
        (Acquire, Outcome::NotAwaited) => ("not_awaited", "not awaited: decided without it".into()),
        (Extend, Outcome::NotAwaited) => (
            "not_awaited",
            format!("not awaited (decided without it){}", unsure(key, value)),
        ),
        (Release, Outcome::NotAwaited) => (
            "not_awaited",
            "not awaited (decided without it): deletes the key if it still holds the value".into(),
        ),
        (_, Outcome::NotSent) => (
            "not_asked",
            "not asked: the acquisition never reached it".into(),
        ),
        (_, other) => ("other", other.to_string()),
    }
}

/// What the read after an extension says of a node whose answer is unknown: whether the key holds the value.
fn unsure(key: Option<&KeyState>, value: Option<&[u8]>) -> String {
    match key {
        Some(KeyState::Absent) => "; the key is absent: not applied".into(),
        Some(KeyState::Held { value: v, ttl }) if Some(&v[..]) == value => match ttl {
            Some(ttl) => format!(
                "; the key holds this value, {} left: may have applied",
                duration::human(*ttl)
            ),
            None => "; the key holds this value, without expiry".into(),
        },
        Some(KeyState::Held { .. }) => "; the key holds another value: not applied".into(),
        _ => ": may have applied".into(),
    }
}

/// A node that answered "not ours" to an extension or a release, as the read after it saw the key.
fn not_ours(verb: Verb, key: Option<&KeyState>, value: Option<&[u8]>) -> (&'static str, String) {
    let refused = match verb {
        Verb::Release => "not released",
        _ => "refused",
    };
    match key {
        Some(KeyState::Absent) => (
            "absent",
            format!("{refused}: the key is absent (expired or released)"),
        ),
        Some(KeyState::Held { value: v, .. }) if Some(&v[..]) != value => (
            "held",
            format!("{refused}: the key holds another value (another holder)"),
        ),
        Some(KeyState::Held { .. }) => (
            "refused",
            format!("{refused}; the key holds this value now"),
        ),
        Some(KeyState::Failed(o)) => (
            "refused",
            format!("{refused}: the key did not hold this value (read after: {o})"),
        ),
        _ => (
            "refused",
            format!("{refused}: the key did not hold this value"),
        ),
    }
}

/// How many nodes had the key absent, and how many held another value, in the lines.
pub fn absent_and_other(lines: &[NodeLine]) -> (usize, usize) {
    let n = |state: &str| lines.iter().filter(|l| l.state == state).count();
    (n("absent"), n("held"))
}

/// The headline of a failed round of `verb` on `resource`: the cause that decided, and the counts.
pub fn headline(e: &Error, verb: Verb, resource: &str) -> String {
    let Some(r) = e.report() else {
        return e.to_string();
    };
    let n = r.nodes().len();
    let quorum = r.quorum();
    let granted = r.granted();
    let done = match verb {
        Verb::Acquire => "granted",
        Verb::Extend => "applied",
        Verb::Release => "released",
    };
    match cause(e) {
        Some(Cause::Held) => {
            let mut s = format!(
                "lock {resource:?} is held by another holder (on {} of {n} nodes",
                r.taken()
            );
            if let Some(ttl) = r.holder_ttl() {
                s.push_str(&format!("; its lease runs {} more", duration::human(ttl)));
            }
            s.push(')');
            s
        }
        Some(Cause::Lost) => format!(
            "lock {resource:?} is not held with this value by a majority: {done} on {granted} of {n} nodes, \
             {quorum} needed"
        ),
        Some(Cause::Young) => young_headline(r, resource),
        Some(Cause::Auth) => {
            let refused = r
                .nodes()
                .iter()
                .filter(|(_, o)| matches!(o, Outcome::Failed(NodeError::Auth(_))))
                .count();
            format!(
                "no quorum for lock {resource:?}: {refused} of {n} nodes refused the login (wrong or missing \
                 password: give it in the URL or MUXLOCK_PASSWORD); {done} on {granted}, {quorum} needed"
            )
        }
        Some(Cause::Slow) => format!(
            "no quorum for lock {resource:?}: {done} on {granted} of {n} nodes, too late: the round outlasted \
             the lease's validity (a longer --ttl leaves it more)"
        ),
        _ => {
            let failing = r
                .nodes()
                .iter()
                .filter(|(_, o)| matches!(o, Outcome::Failed(_) | Outcome::ErrorReply(_)))
                .count();
            format!(
                "no quorum for lock {resource:?}: {failing} of {n} nodes unreachable or failing; {done} on \
                 {granted}, {quorum} needed"
            )
        }
    }
}

/// The one line on young nodes: how many, until when, and what to do.
fn young_headline(r: &Report, resource: &str) -> String {
    let young: Vec<_> = r.not_counted().collect();
    let n = r.nodes().len();
    let left = r.restart_wait().unwrap_or_default();
    // A node's window is how long it has been up plus how long until it counts.
    let window = young
        .iter()
        .map(|&(_, up, left)| up + left)
        .max()
        .unwrap_or_default();
    format!(
        "no quorum for lock {resource:?}: young nodes: {} of {n} nodes granted but started less than {} ago \
         (the restart window: the lease, or --restart-window if longer) and may have forgotten locks in a restart, so the restart guard \
         counts them in {}. Use nodes that persist every write (appendonly yes, appendfsync always: `muxlock \
         cluster up` starts such nodes), or retry in {}",
        young.len(),
        duration::human(window),
        duration::human(left),
        duration::human(left),
    )
}

/// What a failed extension left on the nodes, from a read after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct After {
    /// Nodes whose key holds the value.
    pub holding: usize,
    pub nodes: usize,
    pub quorum: usize,
    /// The longest time the key has left on those nodes (null: none holds it, or no expiry).
    pub ttl_ms: Option<u64>,
    /// Nodes that did not answer the read.
    pub unknown: usize,
}

impl After {
    /// The state of the lock whose value is `value`, as `seen`.
    pub fn of(seen: &Inspection, value: &[u8]) -> After {
        let ttl = seen
            .nodes()
            .iter()
            .filter_map(|(_, k)| match k {
                KeyState::Held { value: v, ttl } if v.as_slice() == value => *ttl,
                _ => None,
            })
            .max();
        After {
            holding: seen.holding(value),
            nodes: seen.nodes().len(),
            quorum: seen.quorum(),
            ttl_ms: ttl.map(millis),
            unknown: seen.nodes().len() - seen.answered(),
        }
    }

    /// What the caller should assume, in words.
    pub fn words(&self) -> String {
        let ttl = self
            .ttl_ms
            .map(|ms| duration::human(Duration::from_millis(ms)))
            .unwrap_or_else(|| "no expiry".to_owned());
        let mut s = match self.holding {
            0 => "no node holds this value now".to_owned(),
            h if h >= self.quorum => format!(
                "the lock stands on {h} of {} nodes for up to {ttl} more, unconfirmed: release it, or extend \
                 it again",
                self.nodes
            ),
            h => format!(
                "it stands on {h} of {} nodes (not a majority) for up to {ttl} more: treat the lock as lost, and \
                 release it to free them",
                self.nodes
            ),
        };
        if self.unknown > 0 {
            s.push_str(&format!(
                " ({} of {} nodes did not answer the read after it)",
                self.unknown, self.nodes
            ));
        }
        s
    }
}

/// A node that failed (or was not counted) in a verb that succeeded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Degraded {
    pub node: String,
    pub why: String,
}

/// The manager's per-node tallies at one moment: a verb's round is what changed them since.
#[derive(Clone, Debug)]
pub struct Mark(Vec<(u64, u64)>);

impl Mark {
    /// The tallies now.
    pub fn now(locks: &LockManager) -> Mark {
        Mark(
            locks
                .stats()
                .nodes
                .iter()
                .map(|n| (n.failed, n.quarantined))
                .collect(),
        )
    }

    /// The nodes that failed or were not counted since the mark, and why: for a failed node, its error in a
    /// read of `resource` (one round, made only when some node failed).
    pub fn degraded(&self, locks: &LockManager, resource: &str) -> Vec<Degraded> {
        let stats = locks.stats();
        let changed: Vec<(usize, bool, Option<Duration>)> = stats
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let (failed, quarantined) = self.0.get(i).copied().unwrap_or_default();
                let failed = n.failed > failed;
                (failed || n.quarantined > quarantined).then_some((i, failed, n.counted_in))
            })
            .collect();
        if changed.is_empty() {
            return Vec::new();
        }
        let seen = match changed.iter().any(|&(_, failed, _)| failed) {
            true => locks.inspect(resource).ok(),
            false => None,
        };
        changed
            .into_iter()
            .map(|(i, failed, counted_in)| {
                let why = match (failed, seen.as_ref().and_then(|s| s.nodes().get(i))) {
                    (true, Some((_, KeyState::Failed(o)))) => o.to_string(),
                    (true, _) => "failed in the round (it answers now)".to_owned(),
                    (false, _) => format!(
                        "young: granted, not counted for {} more (restart guard)",
                        duration::human(counted_in.unwrap_or_default())
                    ),
                };
                Degraded {
                    node: stats.nodes[i].addr.to_string(),
                    why,
                }
            })
            .collect()
    }
}

/// The nodes of an inspection that gave no usable answer (for `status`).
pub fn degraded_in(seen: &Inspection) -> Vec<Degraded> {
    seen.nodes()
        .iter()
        .filter_map(|(addr, k)| match k {
            KeyState::Failed(o) => Some(Degraded {
                node: addr.to_string(),
                why: o.to_string(),
            }),
            _ => None,
        })
        .collect()
}

/// The warning line of a degraded quorum: `what` is what the majority did ("acquired", "read").
pub fn warning(degraded: &[Degraded], nodes: usize, quorum: usize, what: &str) -> Option<String> {
    if degraded.is_empty() {
        return None;
    }
    let k = degraded.len();
    let list: Vec<String> = degraded
        .iter()
        .map(|d| format!("{}: {}", d.node, d.why))
        .collect();
    let spare = nodes.saturating_sub(k).saturating_sub(quorum);
    let margin = match spare {
        0 => "one more failing node and no majority is left".to_owned(),
        s => format!("{} more failing nodes and no majority is left", s + 1),
    };
    Some(format!(
        "warning: degraded: {k} of {nodes} nodes failing ({}); {what} by the others, {margin}",
        list.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(holding: usize, ttl_ms: Option<u64>, unknown: usize) -> After {
        After {
            holding,
            nodes: 3,
            quorum: 2,
            ttl_ms,
            unknown,
        }
    }

    #[test]
    fn the_state_after_a_failed_extension_says_what_to_assume() {
        assert_eq!(after(0, None, 0).words(), "no node holds this value now");
        let w = after(3, Some(59_950), 0).words();
        assert!(
            w.starts_with("the lock stands on 3 of 3 nodes for up to 59.95s more, unconfirmed"),
            "{w}"
        );
        let w = after(1, Some(1_000), 1).words();
        assert!(
            w.contains("not a majority") && w.contains("treat the lock as lost"),
            "{w}"
        );
        assert!(
            w.ends_with("(1 of 3 nodes did not answer the read after it)"),
            "{w}"
        );
    }

    #[test]
    fn what_was_sent_may_have_run_unless_it_never_left() {
        assert!(may_have_run(&NodeError::Timeout));
        assert!(may_have_run(&NodeError::Closed));
        assert!(!may_have_run(&NodeError::Refused));
        assert!(!may_have_run(&NodeError::Auth("WRONGPASS".into())));
    }

    #[test]
    fn a_degraded_quorum_says_how_many_more_failures_it_takes() {
        let d = |n: &str| Degraded {
            node: n.into(),
            why: "connection refused".into(),
        };
        assert_eq!(warning(&[], 3, 2, "acquired"), None);
        let w = warning(&[d("a")], 3, 2, "acquired").unwrap();
        assert_eq!(
            w,
            "warning: degraded: 1 of 3 nodes failing (a: connection refused); acquired by the others, one more \
             failing node and no majority is left"
        );
        let w = warning(&[d("a")], 5, 3, "released").unwrap();
        assert!(
            w.ends_with("2 more failing nodes and no majority is left"),
            "{w}"
        );
    }
}
