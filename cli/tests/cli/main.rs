//! The `muxlock` command against real `redis-server` nodes, one module per behaviour: the verbs and their exit
//! codes (`locks`), what they say a round did (`verdicts`), the shell's conventions (`conventions`), TLS (`tls`),
//! `exec` and its guarantee (`exec`, `exec_faults`, `exec_lost_before_start`), and what the package ships
//! (`package`). The commands that start nodes of their own are in `tests/nodes`.

mod support;

mod conventions;
mod exec;
mod exec_faults;
mod exec_lost_before_start;
mod locks;
mod package;
mod tls;
mod verdicts;
