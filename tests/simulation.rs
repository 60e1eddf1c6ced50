//! Deterministic simulation of the lock engine (placeholder while it is written).
