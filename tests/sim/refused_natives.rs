//! Directed histories of releases on a node whose server has a native compare-and-delete (`DELIFEQ`) that the
//! user's ACL refuses (`-delifeq`, as a user set up before the server had it): nothing tells the client but the
//! refusal itself, so the first native release on each connection must be followed by the script, whether its
//! reply is read (a lone release) or not (the unawaited release of a failed batch's keys).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use muxlock::Config;
use muxlock::redlock::sim::{Clock, Engine};

use super::Sim;
use super::node::{Acl, MS, Native, Time};

/// What [`releases_beside_a_refusing_node`] saw.
#[derive(Debug, Default)]
pub struct Refusing {
    /// The batch: `a` granted, `b` refused (taken on nodes 0 and 1).
    pub batch_ran: bool,
    /// Node 2 still had `b` (set there by the failed batch) 50 ms after the batch returned.
    pub failed_key_left: bool,
    /// `a`'s release, and whether node 2 still had `a` 50 ms after it returned.
    pub release: Option<String>,
    pub released_key_left: bool,
    /// The native releases node 2's ACL refused in all (none would mean the history never met the refusal).
    pub native_refusals: u64,
}

/// One client on three nodes, all with `DELIFEQ`; node 2's ACL refuses it, and node 2 answers last (a 5 ms link,
/// nodes 0 and 1 on 0.1 ms ones). Someone else holds `b` on nodes 0 and 1. After a first lock (not released:
/// node 2's connection has run no native release yet, and its set-up, read by 40 ms, says `DELIFEQ`), the
/// client tries `a` and `b` in one batch: `b` fails, and its key, set on node 2, is released there unawaited.
/// Then it releases `a`, decided by nodes 0 and 1 before node 2's refusal comes. Both keys must be gone from
/// node 2: the script sent beside the unread native release, and after the refused one.
pub fn releases_beside_a_refusing_node() -> Refusing {
    let sim = super::directed_world(3, 1);
    {
        let mut w = sim.world();
        for n in 0..3 {
            w.nodes[n].node.native = Native::DelIfEq;
            w.fix_link(0, n, MS / 10);
        }
        w.fix_link(0, 2, 5 * MS);
        w.nodes[2].node.denied = Acl::NATIVE;
        for n in [0, 1] {
            w.nodes[n].node.hold(b"b", b"someone-else", 10_000 * MS);
        }
    }
    let seen = Rc::new(RefCell::new(Refusing::default()));
    super::run(&sim, |nodes, clock| {
        let seen = Rc::clone(&seen);
        async move {
            let sim = Rc::clone(clock.sim());
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(false);
            let nodes = nodes.members(&config);
            let Ok(engine) = Engine::new(nodes, clock, config, [1; 32]) else {
                return;
            };
            let ttl = Duration::from_millis(2_000);
            let Ok(Some(_first)) = engine.try_lock(b"first", ttl).await else {
                return;
            };
            let clock = engine.clock();
            clock.sleep(Duration::from_millis(40)).await;
            let mut got = engine.try_lock_batch(&[b"a", b"b"], ttl).await.into_iter();
            let (Some(Ok(Some(a))), Some(Ok(None))) = (got.next(), got.next()) else {
                return;
            };
            clock.sleep(Duration::from_millis(50)).await;
            seen.borrow_mut().batch_ran = true;
            seen.borrow_mut().failed_key_left = on_node_2(&sim, b"b");
            let released = engine.unlock(a).await;
            clock.sleep(Duration::from_millis(50)).await;
            let mut seen = seen.borrow_mut();
            seen.release = Some(format!("{released:?}"));
            seen.released_key_left = on_node_2(&sim, b"a");
        }
    });
    let mut seen = Rc::into_inner(seen)
        .expect("the client is done")
        .into_inner();
    seen.native_refusals =
        sim.world().nodes[2].node.refusals[Acl::NATIVE.trailing_zeros() as usize];
    seen
}

/// Whether node 2 has `key` now.
fn on_node_2(sim: &Sim, key: &[u8]) -> bool {
    let w = sim.world();
    let now: Time = w.now;
    w.nodes[2].node.sees(key, now)
}
