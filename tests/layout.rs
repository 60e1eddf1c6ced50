//! The rooms of `src/redlock/` keep their direction (issue #22; `src/redlock/mod.rs`'s `# Layout`): the engine
//! and the kinds know nothing of guards, waiting or the manager; the kinds know nothing of the engine; every
//! `impl LockManager` is in `manager/` and every `impl Engine` in `engine/`; the engine reads time only
//! through its clock. A change that breaks one of these fails here, naming the file and the line.

use std::fs;
use std::path::{Path, PathBuf};

fn redlock() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/redlock")
}

/// Every `.rs` file under `dir`, with its path relative to `src/redlock`.
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("read src/redlock") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path
                    .strip_prefix(redlock())
                    .expect("under src/redlock")
                    .to_string_lossy()
                    .into_owned();
                out.push((name, fs::read_to_string(&path).expect("read file")));
            }
        }
    }
    out.sort();
    out
}

/// The code lines of a file, numbered from 1: without comments and without its `#[cfg(test)]` module (unit
/// tests may use the real clock).
fn code(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .take_while(|(_, l)| !l.starts_with("#[cfg(test)]"))
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
}

/// Lines of the files under `room` that mention one of `forbidden`.
fn breaches(room: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (name, text) in files(&redlock()) {
        // Unit tests may use the real clock (a `tests.rs` module is one).
        if !name.starts_with(room) || name.ends_with("/tests.rs") {
            continue;
        }
        for (n, line) in code(&text) {
            for f in forbidden {
                if line.contains(f) {
                    found.push(format!(
                        "src/redlock/{name}:{n}: {} (mentions {f})",
                        line.trim()
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn the_engine_knows_no_guard_waiting_or_manager() {
    let found = breaches(
        "engine",
        &[
            "redlock::guard",
            "redlock::wait",
            "redlock::manager",
            "LockManager",
            "Keeper",
            "Watchdog",
            "WaitRoom",
        ],
    );
    assert!(
        found.is_empty(),
        "the engine reaches up:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_kinds_know_no_engine_guard_waiting_or_manager() {
    let found = breaches(
        "kind",
        &[
            "redlock::engine",
            "redlock::guard",
            "redlock::wait",
            "redlock::manager",
            "LockManager",
            "Engine",
        ],
    );
    assert!(found.is_empty(), "a kind reaches up:\n{}", found.join("\n"));
}

#[test]
fn the_guard_room_knows_no_waiting_loop_or_manager() {
    let found = breaches(
        "guard",
        &["redlock::wait::", "redlock::manager", "LockManager"],
    );
    assert!(
        found.is_empty(),
        "the guard room reaches up:\n{}",
        found.join("\n")
    );
}

#[test]
fn impl_blocks_live_in_their_homes() {
    let mut found = Vec::new();
    for (name, text) in files(&redlock()) {
        for (n, line) in code(&text) {
            let l = line.trim_start();
            if !l.starts_with("impl") {
                continue;
            }
            if l.contains("LockManager {") && !name.starts_with("manager/") {
                found.push(format!("src/redlock/{name}:{n}: {l}"));
            }
            // The simulator's wrapper (`sim.rs`) is a type of its own, also named `Engine`.
            let engine = l.contains(" Engine<") || l.contains(" Engine {");
            if engine && !name.starts_with("engine") && name != "sim.rs" {
                found.push(format!("src/redlock/{name}:{n}: {l}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "impl blocks away from home:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_engine_reads_time_only_through_its_clock() {
    let mut found = breaches(
        "engine",
        &["Instant::now()", "thread::sleep", "SystemTime::now"],
    );
    found.retain(|l| !l.starts_with("src/redlock/engine/seam.rs"));
    assert!(
        found.is_empty(),
        "the engine reads the real clock:\n{}",
        found.join("\n")
    );
}
