//! What a test does to a running [`RedisCluster`]: move a slot (in steps, so that `ASK` and `MOVED` can be seen),
//! fail a master over to its replica, restart a node.

use super::super::wire::show;
use super::{Failover, RedisCluster, SlotMigration, bulk_array, bulk_text};

impl RedisCluster {
    /// Puts `slot` half-way to shard `to`'s master: `IMPORTING` on the target, then `MIGRATING` on the source.
    /// From now on the source answers `-ASK` for the slot's keys it does not hold.
    ///
    /// # Panics
    /// If shard `to` already owns `slot`, or a node refuses.
    #[track_caller]
    pub fn begin_migration(&self, slot: u16, to: usize) -> SlotMigration {
        let from = self.owner_of(slot);
        let to = self.master_index(to);
        assert_ne!(from, to, "slot {slot} is already on node {to}");
        let slot_s = slot.to_string();
        self.command_ok(
            to,
            &[
                "CLUSTER",
                "SETSLOT",
                &slot_s,
                "IMPORTING",
                self.node_id(from),
            ],
        );
        self.command_ok(
            from,
            &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", self.node_id(to)],
        );
        SlotMigration { slot, from, to }
    }

    /// Moves every key of the migrating slot from the source to the target (`CLUSTER GETKEYSINSLOT`, `MIGRATE
    /// ... KEYS`), 100 at a time; returns how many moved.
    ///
    /// # Panics
    /// If a `MIGRATE` fails, or the slot still has keys after 1,000 batches.
    #[track_caller]
    pub fn move_slot_keys(&self, migration: &SlotMigration) -> usize {
        let slot = migration.slot.to_string();
        let port = self.node(migration.to).port().to_string();
        let mut moved = 0;
        for _ in 0..1_000 {
            let reply = self.command(migration.from, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
            let keys = bulk_array(&reply)
                .unwrap_or_else(|| panic!("GETKEYSINSLOT answered {}", show(&reply)));
            if keys.is_empty() {
                return moved;
            }
            let mut parts = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "10000", "KEYS"];
            parts.extend(keys.iter().map(String::as_str));
            let reply = self.command(migration.from, &parts);
            assert_eq!(reply, b"+OK\r\n", "MIGRATE: {}", show(&reply));
            moved += keys.len();
        }
        panic!("slot {slot} still has keys after 1,000 batches")
    }

    /// Ends a migration: `SETSLOT <slot> NODE <target>` on the target, the source, then every other master (the
    /// order `CLUSTER SETSLOT`'s documentation gives), and waits until every live node agrees. From now on the
    /// source answers `-MOVED` for the slot.
    ///
    /// # Panics
    /// If a node refuses, or the cluster does not converge in time.
    #[track_caller]
    pub fn finish_migration(&mut self, migration: SlotMigration) {
        let slot = migration.slot.to_string();
        let target = self.node_id(migration.to).to_owned();
        let mut order = vec![migration.to, migration.from];
        order.extend(
            self.shards
                .iter()
                .map(|s| s.master)
                .filter(|m| *m != migration.to && *m != migration.from),
        );
        for i in order {
            self.command_ok(i, &["CLUSTER", "SETSLOT", &slot, "NODE", &target]);
        }
        self.owner[usize::from(migration.slot)] = migration.to;
        self.wait_converged("the slot migration");
    }

    /// Starts a new, empty master and has it join the cluster (`CLUSTER MEET`), as a scale-out does: a new shard,
    /// serving no slot until one is migrated to it ([`migrate_slot`](Self::migrate_slot)). Returns its shard
    /// number. It is stopped with the others, by PID.
    ///
    /// # Panics
    /// If it does not start, a node refuses, or the cluster does not converge in time.
    #[track_caller]
    pub fn add_master(&mut self) -> usize {
        let node = super::start_node(&self.server, self.node_timeout);
        let i = self.nodes.len();
        self.nodes.push(node);
        // An epoch of its own, above every one the cluster may have reached (no collision to resolve).
        self.command_ok(
            i,
            &["CLUSTER", "SET-CONFIG-EPOCH", &(1_000 + i).to_string()],
        );
        let (port, bus) = (
            self.node(i).port().to_string(),
            self.bus_port(i).to_string(),
        );
        self.command_ok(0, &["CLUSTER", "MEET", "127.0.0.1", &port, &bus]);
        self.shards.push(super::ShardNodes {
            master: i,
            replicas: Vec::new(),
        });
        let total = self.nodes.len();
        let live: Vec<usize> = (0..total)
            .filter(|&n| self.nodes[n].server.is_running())
            .collect();
        self.wait_until("the new master to be known by every node", || {
            for &n in &live {
                let view = super::parse_nodes(&bulk_text(&self.command(n, &["CLUSTER", "NODES"])));
                if view.known < total || view.handshaking > 0 {
                    return Err(format!("node {n} knows {} of {total}", view.known));
                }
            }
            Ok(())
        });
        self.wait_converged("a master added");
        self.shards.len() - 1
    }

    /// Moves `slot` with its keys to shard `to`'s master: the three steps above. Returns how many keys moved.
    #[track_caller]
    pub fn migrate_slot(&mut self, slot: u16, to: usize) -> usize {
        let migration = self.begin_migration(slot, to);
        let moved = self.move_slot_keys(&migration);
        self.finish_migration(migration);
        moved
    }

    /// Kills shard `s`'s master (SIGKILL) and promotes its first replica with `CLUSTER FAILOVER FORCE` or
    /// `TAKEOVER`, then waits until the replica is master, every live node gives it the shard's slots, and every
    /// live node says `cluster_state:ok`. The killed node stays in the shard as a replica that is down
    /// ([`restart_node`](Self::restart_node) brings it back; it rejoins as a replica). Returns the new master's
    /// node index.
    ///
    /// # Panics
    /// If the shard has no replica, the replica refuses, or the cluster does not converge in time.
    #[track_caller]
    pub fn fail_over(&mut self, s: usize, how: Failover) -> usize {
        let old = self.shards[s].master;
        let Some(&new) = self.shards[s].replicas.first() else {
            panic!("shard {s} has no replica to promote")
        };
        self.nodes[old].server.kill();
        let mode = match how {
            Failover::Force => "FORCE",
            Failover::Takeover => "TAKEOVER",
        };
        self.command_ok(new, &["CLUSTER", "FAILOVER", mode]);
        self.shards[s].master = new;
        self.shards[s].replicas.retain(|r| *r != new);
        self.shards[s].replicas.push(old);
        for owner in &mut self.owner {
            if *owner == old {
                *owner = new;
            }
        }
        self.wait_until("the promoted replica to report role:master", || {
            let info = bulk_text(&self.command(new, &["INFO", "replication"]));
            info.contains("role:master\r\n")
                .then_some(())
                .ok_or_else(|| format!("node {new}: {}", info.lines().nth(1).unwrap_or("")))
        });
        self.wait_converged("the failover");
        new
    }

    /// Restarts node `i` (killed or not) on its port with its directory, so with its `nodes.conf`: it rejoins the
    /// cluster under its id. Waits until it answers `cluster_state:ok` and agrees on every slot's owner.
    #[track_caller]
    pub fn restart_node(&mut self, i: usize) {
        self.nodes[i].server.restart();
        self.wait_converged("the restarted node to rejoin");
    }
}
