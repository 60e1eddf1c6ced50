#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| muxlock::fuzzing::decode(data));
