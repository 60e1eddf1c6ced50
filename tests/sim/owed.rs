//! A directed history of a failed attempt decided while a second request it sent a node is still unanswered: the
//! request sets the attempt's key there after the decision, so the attempt's clean-up must go to that node,
//! although the node's only answer read was a refusal (`engine/untouched.rs`: a node is skipped only when every
//! request sent to it was answered, each with a refusal). The random worlds judge safety, not a key left behind
//! until its lease ends; and their links seldom time a second request so.
//!
//! One client, five nodes on links of fixed one-way delays: 0.1, 2, 2.25, 5 and 0.5 ms. Someone else holds the
//! key on nodes 1, 2 and 4 for 10 s, and on node 3 until 7 ms after the attempt's start. The client tries once:
//!
//! - 0.2 ms: node 0 grants. Every "taken" from then on is asked again while the round is undecided, up to
//!   `ASKS` times in all (`Quorum::take_back_taken`): node 4's third refusal (3 ms) stands.
//! - 10 ms: node 3 refuses (the other key is still there at 5 ms); with node 4's, two refusals, and nodes 1 and 2
//!   could still make a majority with node 0: node 3 is asked again. (Its scripts flushed, it answers
//!   `NOSCRIPT` instead, and is sent the script in full.)
//! - 12 ms, 13.5 ms: the third refusals of nodes 1 and 2: the attempt fails, held elsewhere; its clean-up leaves.
//! - 15 ms: node 3's second request runs there, the other key gone since 7 ms: it sets the attempt's key.
//! - 18.5 ms: the clean-up reaches node 3 and deletes it.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use super::Sim;
use super::directed::sleep_until;
use super::node::MS;

/// Which second request of the attempt node 3 runs after the attempt is decided.
#[derive(Clone, Copy, Debug)]
pub enum Second {
    /// A plain lock's `SET NX`, asked again after node 3's refusal.
    PlainAskedAgain,
    /// A writer's script, asked again after node 3's refusal (the pipelined round's ask again).
    WriterAskedAgain,
    /// A writer's script in full after node 3's `NOSCRIPT` (its scripts were flushed before the attempt).
    WriterAfterNoScript,
}

/// What the history left on node 3.
#[derive(Debug)]
pub struct Left {
    /// The attempt failed (held elsewhere), as planned.
    pub failed: bool,
    /// 16 ms after the attempt's start, node 3's key held another value than the other holder's: the second
    /// request had set it, as planned.
    pub set: bool,
    /// 100 ms after the attempt's start, the key was still there: the clean-up missed it.
    pub left: bool,
}

/// Runs the history (see the module docs) with `second` as node 3's second request.
pub fn history(second: Second) -> Left {
    let sim = super::directed_world(5, 1);
    let key = match second {
        Second::PlainAskedAgain => b"owed".to_vec(),
        _ => muxlock::redlock::writer_key(b"owed"),
    };
    // When the attempt starts (ms): the connections are set up by then.
    let start = 20;
    {
        let mut w = sim.world();
        // One-way delays in hundredths of a millisecond.
        for (n, delay) in [10, 200, 225, 500, 50].into_iter().enumerate() {
            w.fix_link(0, n, delay * MS / 100);
        }
        for n in [1, 2, 4] {
            w.nodes[n].node.hold(&key, b"someone-else", 10_000 * MS);
        }
        w.nodes[3]
            .node
            .hold(&key, b"someone-else", (start + 7) * MS);
    }
    let seen = Rc::new(Cell::new((false, false, false)));
    super::run(&sim, |nodes, clock| {
        let (seen, key) = (Rc::clone(&seen), key.clone());
        async move {
            let sim = Rc::clone(clock.sim());
            let Some(engine) = super::warmed_engine(nodes, clock).await else {
                return;
            };
            let clock = engine.clock();
            let ttl = Duration::from_millis(2_000);
            if let Second::WriterAfterNoScript = second {
                sim.world().nodes[3].node.flush_scripts();
            }
            sleep_until(&sim, clock, start).await;
            let got = match second {
                Second::PlainAskedAgain => engine.try_lock(b"owed", ttl).await,
                _ => engine.lock_rw(b"owed", true, ttl, (false, false)).await,
            };
            let failed = matches!(got, Ok(None));
            // Read without touching the keyspace: live, and not the other holder's value.
            let ours = |sim: &Sim| {
                let w = sim.world();
                let node = &w.nodes[3].node;
                node.sees(&key, w.now) && !node.keeps(&key, b"someone-else", w.now, w.now)
            };
            sleep_until(&sim, clock, start + 16).await;
            let set = ours(&sim);
            sleep_until(&sim, clock, start + 100).await;
            seen.set((failed, set, ours(&sim)));
        }
    });
    let (failed, set, left) = seen.get();
    Left { failed, set, left }
}
