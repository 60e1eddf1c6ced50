//! muxlock's benchmarks, a package of their own so that the tests do not build criterion and the peers' crates.
//! The benchmarks are its `[[bench]]` targets (`cargo bench -p muxlock-benches --bench lock`); this library is
//! empty. BENCHMARKS.md has the figures and the command behind each.
