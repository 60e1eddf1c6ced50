//! The checker: a history of holds over virtual time, and the properties every history must keep.
//!
//! - **Mutual exclusion**: no two holders' `[granted, valid_until)` intervals overlap for one resource, whatever
//!   the kinds (a plain lock, a batch's, a set's, a fenced lock, a reentrant owner's holds, a guard: one holder
//!   each). A hold begins when the verb returned it, ends at its validity (as extended) or when its release
//!   began. A guard's hold ends at the earlier of its release and its deadline as of the last time it told its
//!   holder it was not lost ([`History::rely`]): what the holder was entitled to rely on.
//! - **A guard that reports itself held is held by a majority**: whenever a guard tells its holder it is not
//!   lost, a majority of nodes hold its value on each of its keys, or came back without their data since it was
//!   acquired (checked on the nodes' state at that instant by the workload; [`History::breaks`] records it).
//! - **A reentrant owner's outer hold stays on a majority while it reports valid**: after each nested hold and
//!   its release, a majority of nodes hold the owner's value on the key, or came back without their data since
//!   the outer hold was taken (checked on the nodes by the workload, recorded by [`History::breaks`]).
//! - **An owned hold is on a majority whenever its holder relies on it** (`owned.rs`): at each look, every
//!   hold of an owner that is not lost (a guard) or still valid (a bare `Lock`) has the owner's value on a majority
//!   of nodes, or on nodes that came back without their data since it was taken (recorded by [`History::breaks`]).
//! - **Fencing tokens** strictly increase in grant order, per resource.
//! - **At most `k` holders of a semaphore** of `k` permits at any instant, and at most one per permit index
//!   ([`Permit`]; a permit is judged apart from the locks' holds: `k` holders of one name are no violation).
//! - **Never a writer beside any other holder of a read-write lock** ([`RwHold`]): while a writer of a name
//!   holds, no reader and no other writer of that name does (readers beside readers are no violation).
//! - **No key without expiry** is left on a node, except the fence counters and the persistence marker.
//!
//! The majority checks also excuse a node whose wall clock moved ahead of real time since the hold was taken (a
//! step forward, a fast run): its copies expire early, and the clock check, not the keys, keeps the lock safe
//! (`World::holding`). Mutual exclusion excuses nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::node::{MS, Time};

/// One hold: a holder's claim on a resource.
#[derive(Clone, Debug)]
pub struct Hold {
    pub client: usize,
    pub kind: &'static str,
    pub resource: Vec<u8>,
    /// The value (or a reentrant owner's value) that holds it.
    pub holder: Vec<u8>,
    pub from: Time,
    pub until: Time,
    pub token: Option<u64>,
}

/// One holder of a semaphore's permit: its claim on one of the `permits` of `name` (at the permit `index`; none
/// for the majority-of-counters control, whose holds have no index).
#[derive(Clone, Debug)]
pub struct Permit {
    pub client: usize,
    pub name: Vec<u8>,
    pub permits: u32,
    pub index: Option<u32>,
    pub holder: Vec<u8>,
    pub from: Time,
    pub until: Time,
}

/// One holder of a read-write lock: a reader or the writer (`write`) of `name`.
#[derive(Clone, Debug)]
pub struct RwHold {
    pub client: usize,
    pub name: Vec<u8>,
    pub write: bool,
    pub holder: Vec<u8>,
    pub from: Time,
    pub until: Time,
}

/// Everything that happened, for the checks and for a readable report.
#[derive(Debug, Default)]
pub struct History {
    pub holds: Vec<Hold>,
    pub lines: Vec<String>,
    pub ops: u64,
    /// Grants of queued attempts (the waiting queue across processes).
    pub queued: u64,
    /// Of them, grants by push (`workload::waiting`).
    pub granted_by_push: u64,
    /// The first property found broken as it happened (a guard held by too few nodes), if any.
    pub broken: Option<String>,
    /// Holders of semaphores' permits.
    pub permits: Vec<Permit>,
    /// Readers and writers of read-write locks.
    pub rw: Vec<RwHold>,
}

pub fn ms(t: Time) -> String {
    format!("{}.{:03}ms", t / MS, (t % MS) / 1000)
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl History {
    pub fn note(&mut self, line: String) {
        self.lines.push(line);
    }

    /// Records a hold; returns its index, to extend or end it.
    pub fn hold(&mut self, hold: Hold) -> usize {
        self.lines.push(format!(
            "{} c{} {} {} granted until {} (holder {}{})",
            ms(hold.from),
            hold.client,
            hold.kind,
            show(&hold.resource),
            ms(hold.until),
            show(&hold.holder[..8.min(hold.holder.len())]),
            hold.token
                .map(|t| format!(", token {t}"))
                .unwrap_or_default(),
        ));
        self.holds.push(hold);
        self.holds.len() - 1
    }

    pub fn extend(&mut self, i: usize, now: Time, until: Time) {
        let h = &mut self.holds[i];
        h.until = h.until.max(until);
        let line = format!(
            "{} c{} extended {} until {}",
            ms(now),
            h.client,
            show(&h.resource),
            ms(until)
        );
        self.lines.push(line);
    }

    /// An extension, granted or failed, told its holder at `now` that its lease ends at `until`: the hold runs
    /// until then, earlier or later than before (an extension to a shorter TTL, granted, or failed after it may
    /// have run on nodes, shortens it).
    pub fn counts(&mut self, i: usize, now: Time, until: Time) {
        let h = &mut self.holds[i];
        h.until = until;
        let line = format!(
            "{} c{} counts {} until {}",
            ms(now),
            h.client,
            show(&h.resource),
            ms(until)
        );
        self.lines.push(line);
    }

    /// A guard told its holder at `now` that it may rely on it until `until`: its hold runs until then, if that
    /// is later (logged only when it moves: after a renewal).
    pub fn rely(&mut self, i: usize, now: Time, until: Time) {
        if until > self.holds[i].until {
            self.extend(i, now, until);
        }
    }

    /// A property broken at this point of the history (the first one is kept, and logged).
    pub fn breaks(&mut self, what: String) {
        self.lines.push(format!("BROKEN: {what}"));
        self.broken.get_or_insert(what);
    }

    pub fn end(&mut self, i: usize, now: Time) {
        let h = &mut self.holds[i];
        h.until = h.until.min(now);
        let line = format!("{} c{} releases {}", ms(now), h.client, show(&h.resource));
        self.lines.push(line);
    }

    /// Records a holder of a semaphore's permit; returns its index, to end it or move its end
    /// ([`History::permit_until`]).
    pub fn permit(&mut self, p: Permit) -> usize {
        self.lines.push(format!(
            "{} c{} permit {:?} of {} ({}) granted until {} (holder {})",
            ms(p.from),
            p.client,
            p.index,
            show(&p.name),
            p.permits,
            ms(p.until),
            show(&p.holder[..8.min(p.holder.len())]),
        ));
        self.permits.push(p);
        self.permits.len() - 1
    }

    /// A permit's holder was told at `now` that it holds until `until` (an extension's verdict, a guard's
    /// deadline), or released it (`until` = `now`).
    pub fn permit_until(&mut self, i: usize, now: Time, until: Time) {
        let p = &mut self.permits[i];
        p.until = until;
        let line = format!(
            "{} c{} counts permit {:?} of {} until {}",
            ms(now),
            p.client,
            p.index,
            show(&p.name),
            ms(until)
        );
        self.lines.push(line);
    }

    /// Records a reader or writer of a read-write lock; returns its index, to end it or move its end
    /// ([`History::rw_until`]).
    pub fn rw(&mut self, h: RwHold) -> usize {
        self.lines.push(format!(
            "{} c{} {} of {} granted until {} (holder {})",
            ms(h.from),
            h.client,
            match h.write {
                true => "writer",
                false => "reader",
            },
            show(&h.name),
            ms(h.until),
            show(&h.holder[..8.min(h.holder.len())]),
        ));
        self.rw.push(h);
        self.rw.len() - 1
    }

    /// A read-write lock's holder was told at `now` that it holds until `until`.
    pub fn rw_until(&mut self, i: usize, now: Time, until: Time) {
        let h = &mut self.rw[i];
        h.until = until;
        let line = format!(
            "{} c{} counts {} of {} until {}",
            ms(now),
            h.client,
            match h.write {
                true => "writer",
                false => "reader",
            },
            show(&h.name),
            ms(until)
        );
        self.lines.push(line);
    }

    /// The first writer of a read-write lock found holding beside another holder (a reader or a writer) of the
    /// same name.
    pub fn writer_beside_another(&self) -> Option<String> {
        let live: Vec<&RwHold> = self.rw.iter().filter(|h| h.from < h.until).collect();
        for w in live.iter().filter(|h| h.write) {
            let beside = live.iter().find(|o| {
                o.name == w.name && o.holder != w.holder && o.from < w.until && w.from < o.until
            });
            if let Some(o) = beside {
                return Some(format!(
                    "a writer of {} beside a {}: c{} [{}, {}) and c{} [{}, {})",
                    show(&w.name),
                    match o.write {
                        true => "writer",
                        false => "reader",
                    },
                    w.client,
                    ms(w.from),
                    ms(w.until),
                    o.client,
                    ms(o.from),
                    ms(o.until)
                ));
            }
        }
        None
    }

    /// The first instant some semaphore had more holders than permits, or one permit index two holders.
    pub fn too_many_permits(&self) -> Option<String> {
        let mut by_name: BTreeMap<&[u8], Vec<&Permit>> = BTreeMap::new();
        for p in self.permits.iter().filter(|p| p.from < p.until) {
            by_name.entry(&p.name).or_default().push(p);
        }
        for (name, mut holds) in by_name {
            holds.sort_by_key(|p| (p.from, p.until));
            let k = holds.iter().map(|p| p.permits).min().unwrap_or(0) as usize;
            for (i, a) in holds.iter().enumerate() {
                // Everyone holding at `a.from` (holds are half-open: one that ends then does not count).
                let at: Vec<&&Permit> = holds[..=i].iter().filter(|b| b.until > a.from).collect();
                if let Some(b) = at
                    .iter()
                    .find(|b| b.index.is_some() && b.index == a.index && b.holder != a.holder)
                {
                    return Some(format!(
                        "two holders of permit {:?} of {}: c{} [{}, {}) and c{} [{}, {})",
                        a.index,
                        show(name),
                        b.client,
                        ms(b.from),
                        ms(b.until),
                        a.client,
                        ms(a.from),
                        ms(a.until)
                    ));
                }
                let mut holders: Vec<&[u8]> = at.iter().map(|b| &b.holder[..]).collect();
                holders.sort_unstable();
                holders.dedup();
                if holders.len() > k {
                    let who: Vec<String> = at
                        .iter()
                        .map(|b| format!("c{} [{}, {})", b.client, ms(b.from), ms(b.until)))
                        .collect();
                    return Some(format!(
                        "{} holders of a semaphore of {k} permits, {} at {}: {}",
                        holders.len(),
                        show(name),
                        ms(a.from),
                        who.join(", ")
                    ));
                }
            }
        }
        None
    }

    /// How many fenced grants came before `before` (the ones whose tokens [`violation`](History::violation)
    /// compares).
    pub fn tokens_before(&self, before: Time) -> u64 {
        self.holds
            .iter()
            .filter(|h| h.token.is_some() && h.from < h.until && h.from < before)
            .count() as u64
    }

    /// The first violation found, described; `None` if the history is safe. Fencing tokens are compared among the
    /// grants made before `tokens_before`, the first loss of a node's counters (fencing assumes they survive
    /// restarts, `fenced.rs`; before the loss the assumption holds).
    pub fn violation(&self, tokens_before: Time) -> Option<String> {
        if let Some(broken) = &self.broken {
            return Some(broken.clone());
        }
        if let Some(too_many) = self.too_many_permits() {
            return Some(too_many);
        }
        if let Some(beside) = self.writer_beside_another() {
            return Some(beside);
        }
        let mut by_resource: BTreeMap<&[u8], Vec<&Hold>> = BTreeMap::new();
        for h in &self.holds {
            if h.from < h.until {
                by_resource.entry(&h.resource).or_default().push(h);
            }
        }
        for (resource, holds) in &mut by_resource {
            holds.sort_by_key(|h| (h.from, h.until));
            for (i, a) in holds.iter().enumerate() {
                for b in &holds[i + 1..] {
                    if b.from >= a.until {
                        break;
                    }
                    if a.holder != b.holder {
                        return Some(format!(
                            "two holders of {}: c{} ({}) [{}, {}) and c{} ({}) [{}, {})",
                            show(resource),
                            a.client,
                            a.kind,
                            ms(a.from),
                            ms(a.until),
                            b.client,
                            b.kind,
                            ms(b.from),
                            ms(b.until)
                        ));
                    }
                }
            }
        }
        for (resource, mut holds) in by_resource {
            holds.sort_by_key(|h| (h.from, h.until));
            let mut last: Option<&Hold> = None;
            for h in holds
                .iter()
                .filter(|h| h.token.is_some() && h.from < tokens_before)
            {
                if let Some(prev) = last {
                    if h.token <= prev.token {
                        return Some(format!(
                            "fencing token of {} went from {:?} (c{} at {}) to {:?} (c{} at {})",
                            show(resource),
                            prev.token,
                            prev.client,
                            ms(prev.from),
                            h.token,
                            h.client,
                            ms(h.from)
                        ));
                    }
                }
                last = Some(h);
            }
        }
        None
    }

    /// The history as text, the last `lines` lines.
    pub fn tail(&self, lines: usize) -> String {
        let mut out = String::new();
        let skip = self.lines.len().saturating_sub(lines);
        for l in &self.lines[skip..] {
            let _ = writeln!(out, "  {l}");
        }
        out
    }
}
