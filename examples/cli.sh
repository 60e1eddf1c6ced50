#!/bin/sh
# A job that holds a lock across its steps, from the shell. The nodes: MUXLOCK_NODES=redis://host:port,...
# or, when it is unset, the local nodes of `muxlock cluster up`.
set -eu

v=$(muxlock acquire nightly-report --ttl 5m) || exit # 1: someone else has it; 69: no quorum
echo "step 1 under the lock"
muxlock extend nightly-report "$v" --ttl 5m || exit # 75: the lease ran out meanwhile; 3: applied, not confirmed
echo "step 2 under the lock"
muxlock release nightly-report "$v"

# One command under a guarded lock: renewed while it runs, released when it ends, stopped if the lock is lost.
muxlock exec --ttl 30s nightly-report -- echo "a command under the lock"
