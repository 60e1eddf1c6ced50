//! Every outcome a call reports for a node is what that node did: the judge of a [`Report`] against the nodes'
//! record of what each command carrying a lock value did there (`did.rs`) and the commands the call handed to
//! its fanout ([`World::offered`]). The rule is stated in `calls.rs`' module doc; this is its arithmetic.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

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

/// What [`a_misfiled_report_is_caught`] saw: the report of a failed extension, and the judge's verdict on it
/// as it came, filed under another lock, and with two nodes' outcomes swapped.
#[derive(Debug, Default)]
pub struct Control {
    pub report: Option<String>,
    pub as_it_came: Option<String>,
    pub under_another_lock: Option<String>,
    pub swapped: Option<String>,
}

/// The rule's control, a directed history: one client takes `a` and `b` on three nodes; someone deletes `a` on
/// nodes 1 and 2; the client extends `a`, which fails (`LockLost`: node 0 granted, nodes 1 and 2 not held). Its
/// report is judged as it came (nothing wrong), as the report of `b` (whose value no node saw since the
/// extension began: a renewal's outcome filed under another renewal), and with nodes 0 and 1 swapped (a batch's
/// outcomes shifted by a node): the judge must find both misreports.
pub fn a_misfiled_report_is_caught() -> Control {
    let sim = super::directed_world(3, 1);
    {
        let mut w = sim.world();
        for n in 0..3 {
            w.fix_link(0, n, MS / 10);
        }
    }
    let seen = Rc::new(RefCell::new(Control::default()));
    super::run(&sim, |nodes, clock| {
        let seen = Rc::clone(&seen);
        async move {
            let sim = Rc::clone(clock.sim());
            let Some(engine) = super::warmed_engine(nodes, clock).await else {
                return;
            };
            let ttl = Duration::from_millis(2_000);
            let (Ok(Some(mut a)), Ok(Some(b))) = (
                engine.try_lock(b"a", ttl).await,
                engine.try_lock(b"b", ttl).await,
            ) else {
                return;
            };
            let since = {
                let mut w = sim.world();
                for n in [1, 2] {
                    w.nodes[n].node.keys.remove(&b"a"[..]);
                }
                w.forget_offers(0);
                w.now
            };
            let Err(e) = engine.extend(&mut a, ttl).await else {
                return;
            };
            let Some(report) = e.report() else { return };
            let mut w = sim.world();
            let value = |l: &muxlock::Lock| vec![Bytes::copy_from_slice(l.value().as_bytes())];
            let mut seen = seen.borrow_mut();
            seen.report = Some(e.to_string());
            seen.as_it_came = misreported(&mut w, 0, since, report, &value(&a));
            seen.under_another_lock = misreported(&mut w, 0, since, report, &value(&b));
            let (zero, one) = (w.nodes[0].node.did.clone(), w.nodes[1].node.did.clone());
            (w.nodes[0].node.did, w.nodes[1].node.did) = (one, zero);
            seen.swapped = misreported(&mut w, 0, since, report, &value(&a));
        }
    });
    Rc::into_inner(seen)
        .expect("the client is done")
        .into_inner()
}
