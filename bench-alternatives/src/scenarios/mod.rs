//! The scenarios: [`latency`] (uncontended), [`throughput`] (16 threads), [`handoff`] (8 contenders, one
//! resource), [`faults`] (kill and pause, with the mutual-exclusion checker).

pub mod faults;
pub mod handoff;
pub mod latency;
pub mod throughput;
