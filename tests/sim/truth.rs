//! Every outcome a call reports for a node is what that node did: the judge of a [`Report`] against the nodes'
//! record of what each command carrying a lock value did there (`did.rs`) and the commands the call handed to
//! its fanout ([`World::offered`]). The rule is stated in `calls.rs`' module doc; this is its arithmetic.

use bytes::Bytes;
use muxlock::redlock::{Outcome, Report};

use super::did::{Did, Effect, carries};
use super::node::{MS, Time};
use super::{Member, World};

/// The simulated nodes a member stands for: a plain node, or every node of a simulated cluster.
fn nodes_of(w: &World, member: usize) -> Vec<usize> {
    match w.members.get(member) {
        Some(Member::Node(n)) => vec![*n],
        Some(Member::Cluster(c)) => (0..w.nodes.len())
            .filter(|&n| w.cluster_of.get(n).copied().flatten().map(|(c2, _)| c2) == Some(*c))
            .collect(),
        None => Vec::new(),
    }
}

/// What member `member`'s nodes did with any of `values` since `since` (the call's beginning).
fn did<'a>(w: &'a World, member: usize, values: &'a [Bytes], since: Time) -> Vec<&'a Did> {
    nodes_of(w, member)
        .into_iter()
        .flat_map(|n| w.nodes[n].node.did.iter())
        .filter(|d| d.at >= since && values.contains(&d.value))
        .collect()
}

/// The first outcome of `report` that is not what its node did, said in a sentence; `values` are the lock
/// values the report is about (the call's, by key), `since` when the call began, `me` its client (whose
/// commands since then [`World::offered`] lists).
pub fn misreported(
    w: &mut World,
    me: usize,
    since: Time,
    report: &Report,
    values: &[Bytes],
) -> Option<String> {
    if values.is_empty() {
        return None;
    }
    let mut judged = [0; 3];
    let mut wrong_one = None;
    for (member, (_, outcome)) in report.nodes().iter().enumerate() {
        let did = did(w, member, values, since);
        // A script whose reply does not say what it did: the record cannot tell (`did.rs`).
        let unknown = did.iter().any(|d| d.effect == Effect::Other);
        if !unknown {
            match outcome {
                Outcome::Granted | Outcome::Quarantined => judged[0] += 1,
                Outcome::Taken | Outcome::NotHeld => judged[1] += 1,
                _ => {}
            }
        }
        judged[2] += u64::from(*outcome == Outcome::NotSent);
        let any = |f: &dyn Fn(Effect) -> bool| unknown || did.iter().any(|d| f(d.effect));
        let wrong = match outcome {
            Outcome::Granted | Outcome::Quarantined => !any(&|e| e.granted()),
            Outcome::Taken => !any(&|e| e == Effect::Refused),
            Outcome::NotHeld => !any(&|e| e == Effect::NotFound),
            Outcome::NotSent => {
                let conns = nodes_of(w, member);
                w.offered(me)
                    .iter()
                    .any(|o| conns.contains(&o.conn) && values.iter().any(|v| carries(&o.cmd, v)))
            }
            _ => false,
        };
        if wrong {
            let seen: Vec<String> = did
                .iter()
                .map(|d| format!("{:?} at {} ms", d.effect, d.at / MS))
                .collect();
            let sent = match outcome {
                Outcome::NotSent => ", yet the call sent it a command carrying the value",
                _ => "",
            };
            wrong_one = Some(format!(
                "reported node {member} {outcome:?}{sent}; it did [{}] with the value since the call began",
                seen.join(", ")
            ));
            break;
        }
    }
    for (sum, k) in w.struck.truths.iter_mut().zip(judged) {
        *sum += k;
    }
    wrong_one
}
