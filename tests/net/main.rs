//! The network layer against real and hostile servers: the fanout, patient rounds, every outcome under its
//! command's id, servers that send what they should not, and the test support itself (the fault proxy, the
//! server guards, the servers' fake clock).

#[path = "../support/mod.rs"]
mod support;

mod fanout;
mod fault_proxy;
mod hostile_servers;
mod outcomes_by_id;
mod patience;
mod patience_edges;
mod server_clock;
mod test_support;
