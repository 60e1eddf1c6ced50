//! The RESP codec: its vector table, property tests, every type a real server sends, and the checked-in fuzz
//! inputs replayed.

#[path = "../support/mod.rs"]
mod support;

// The fuzz targets' harness, shared by the replay and the property tests.
#[path = "../../fuzz/harness.rs"]
mod harness;

mod fuzz_replay;
mod roundtrip;
mod server_types;
mod vectors;
