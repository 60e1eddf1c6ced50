//! The lock API against real servers, a module per behaviour: each kind of lock and request, guards and
//! waiting, releases, the restart guard, native commands and folded releases, ACL users, TLS, and the async API.

#[path = "../support/mod.rs"]
mod support;

mod acl;
mod all_or_nothing;
mod async_api;
mod async_edges;
mod async_handoff;
mod async_rounds;
mod batch;
mod by_value;
mod connecting;
mod fenced;
mod fold;
mod fold_edges;
mod guard;
mod handoff;
mod lost_release;
mod native;
mod native_probing;
mod native_sets;
mod old_scheme;
mod redlock;
mod reentrant;
mod request_edges;
mod requests;
mod restart_guard;
mod rwlock;
mod semaphore;
#[cfg(feature = "tls")]
mod tls;
