//! Redlock members that are whole Redis Clusters, on real clusters the tests build: the slot map, locking
//! through the routing layer, the replication check on every write (master id, replica list, `WAIT`), vacant
//! connections, and what failovers, migrations and refusals must not break.

#[path = "../support/mod.rs"]
mod support;

mod master_id;
mod member_edges;
mod members;
mod replica_list;
mod replication_check;
mod replication_wait;
mod slot_map;
mod slot_migration;
mod slot_refusals;
mod vacant_connections;
