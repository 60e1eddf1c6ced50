#![no_main]

#[path = "../sim.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::simulate(data));
