#![no_main]

#[path = "../cluster.rs"]
mod cluster;

libfuzzer_sys::fuzz_target!(|data: &[u8]| cluster::check(data));
