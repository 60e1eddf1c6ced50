//! The commands that start nodes of their own, `muxlock cluster up|down|status` (`cluster`) and `muxlock demo`
//! (`demo`), with real `redis-server` processes.
//!
//! A binary of their own: their tests make the test process the reaper of orphaned descendants
//! (`support::become_subreaper`), so that a stopped node is seen gone for good rather than a zombie, which would
//! also adopt the orphans of every other test running in the same process.

#[path = "../cli/support/mod.rs"]
mod support;

mod cluster;
mod demo;
