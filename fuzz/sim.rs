//! The `sim` target's harness: the fuzzer's bytes drive muxlock's deterministic simulator (`tests/sim/`): the
//! first 8 bytes seed it, every later byte decides one choice (the world's shape, which fault strikes
//! when, which client runs, which verb it calls and how long it waits), so that coverage guides the search for
//! histories no random seed reaches. Any property the checker finds broken (two holders, tokens out of order, a
//! key without expiry) is a crash, printed with the history's last events.
//!
//! `tests/simulation.rs` (`fuzz_inputs_replay`) runs `seeds/sim/` and `regressions/sim/` through the same
//! `run_bytes` on every `cargo test --features sim --test simulation`, on stable, without cargo-fuzz.

#[allow(dead_code)]
#[path = "../tests/sim/mod.rs"]
mod sim;

/// Runs the history `data` describes and panics if it breaks a property.
pub fn simulate(data: &[u8]) {
    let run = sim::workload::run_bytes(data);
    if let Some(v) = run.violation {
        panic!("{v}\nlast events:\n{}", run.history);
    }
}
