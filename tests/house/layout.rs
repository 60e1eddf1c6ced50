//! The source tree keeps its layout: every `impl LockManager` is in `manager/` and every `impl Engine` in
//! `engine/`; the engine reads time only through its clock. (Which room may reach which is `imports.rs`'s.)
//! `src/`, `cli/src/`, the tests (all of `tests/` but this file, which quotes references on purpose), the
//! command's tests, the benches, the fuzz harnesses and targets and the examples cite no issues, findings, reviews
//! or commits: a comment states a contract, the story is in the commit message. And no test file, the library's
//! or the command's, is named after a review. A change that breaks one of these fails here, naming the file and
//! the line.

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

/// Every `.rs` file under `dir` (relative to the crate root), with its path relative to the crate root.
fn rs_files(dir: &str) -> Vec<(String, String)> {
    rs_files_under(dir, true)
}

/// The `.rs` files of `dir` (relative to the crate root), under its subdirectories too if `deep`, with their
/// paths relative to the crate root.
fn rs_files_under(dir: &str, deep: bool) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut stack = vec![root.join(dir)];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("read {}: {e}", d.display())) {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                if deep {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let name = path
                    .strip_prefix(root)
                    .expect("under the crate root")
                    .to_string_lossy()
                    .into_owned();
                out.push((name, fs::read_to_string(&path).expect("read file")));
            }
        }
    }
    out.sort();
    out
}

/// What in `line` cites an issue, a finding or a review, if anything: `issue #N` or a bare `#N`, `word#N`
/// (`owner/repo#N` is allowed: a full upstream reference, such as `redis/redis#416`; so is an upper-case
/// name such as `PKCS#8`, and a quoted colour such as `"#555"`), `finding N`, `review of`.
fn reference(line: &str) -> Option<String> {
    let lower = line.to_ascii_lowercase();
    if lower.contains("review of") {
        return Some("\"review of\"".to_owned());
    }
    for (i, _) in lower.match_indices("finding") {
        let rest = lower[i + "finding".len()..].trim_start();
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Some("a finding number".to_owned());
        }
    }
    let bytes = line.as_bytes();
    for (i, _) in line.match_indices('#') {
        if !bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            continue;
        }
        // A colour in quotes (an SVG attribute, `fill="#555"`): 3, 4, 6 or 8 hex digits between the quotes.
        let hex = line[i + 1..]
            .bytes()
            .take_while(u8::is_ascii_hexdigit)
            .count();
        let quoted = |at: usize| matches!(bytes.get(at), Some(b'"' | b'\''));
        if i > 0 && quoted(i - 1) && quoted(i + 1 + hex) && [3, 4, 6, 8].contains(&hex) {
            continue;
        }
        // The word the `#` is glued to: `owner/repo`, `PKCS`, or nothing (a bare `#N`).
        let word: &str = {
            let start = line[..i]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || "/-_.".contains(c)))
                .map_or(0, |j| j + 1);
            &line[start..i]
        };
        let upstream = word.contains('/') && !word.starts_with('/') && !word.ends_with('/');
        let upper = !word.is_empty()
            && word
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
        if !upstream && !upper {
            let n: String = line[i..]
                .chars()
                .take_while(|&c| c == '#' || c.is_ascii_digit())
                .collect();
            return Some(format!(
                "{word}{n} (write a full upstream reference, owner/repo#N, or none)"
            ));
        }
    }
    None
}

/// A word of a comment that looks like an abbreviated commit hash (7 to 12 lower-case hex digits, letters and
/// digits both), if any.
fn commit_hash(comment: &str) -> Option<&str> {
    comment
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|w| {
            (7..=12).contains(&w.len())
                && w.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                && w.bytes().any(|b| b.is_ascii_digit())
                && w.bytes().any(|b| b.is_ascii_lowercase())
        })
}

/// A comment line's text without its `//`, `///` or `//!`; `None` for a line that is not a comment.
fn comment_text(line: &str) -> Option<&str> {
    let t = line.trim_start().strip_prefix("//")?;
    Some(t.trim_start_matches(['/', '!']).trim())
}

/// The files the reference check reads: every `.rs` file of the library, the command, their tests (but this
/// file, which quotes references on purpose, in the check's self-test), the benches, the fuzz harnesses and
/// targets (not `fuzz/`'s build or corpus directories) and the examples.
fn checked_sources() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for dir in [
        "src",
        "cli/src",
        "cli/tests",
        "tests",
        "benches",
        "fuzz/fuzz_targets",
        "examples",
    ] {
        files.extend(rs_files(dir));
    }
    files.extend(rs_files_under("fuzz", false));
    files.retain(|(name, _)| name != "tests/house/layout.rs");
    files
}

#[test]
fn the_sources_cite_no_issues_findings_reviews_or_commits() {
    let mut found = Vec::new();
    let files = checked_sources();
    // A file of each place named above is read: a walk that skipped a place would fail here, not pass quietly.
    for place in [
        "src/lib.rs",
        "cli/src/main.rs",
        "cli/tests/cli/exec.rs",
        "tests/api/main.rs",
        "tests/mutex.rs",
        "tests/mutex/sets.rs",
        "tests/sim/mod.rs",
        "tests/support/mod.rs",
        "tests/house/docs.rs",
        "benches/lock.rs",
        "fuzz/harness.rs",
        "fuzz/fuzz_targets/sim.rs",
        "examples/first_lock.rs",
    ] {
        assert!(
            files.iter().any(|(name, _)| name == place),
            "the reference check does not read {place}"
        );
    }
    for (name, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let n = i + 1;
            if let Some(what) = reference(line) {
                found.push(format!("{name}:{n}: {} (cites {what})", line.trim()));
                continue;
            }
            if let Some(hash) = comment_text(line).and_then(commit_hash) {
                found.push(format!("{name}:{n}: {} (cites commit {hash})", line.trim()));
                continue;
            }
            // A reference a comment wraps across two lines: "... finding" / "4 ...", "... review" / "of ...".
            let (Some(this), Some(next)) = (
                comment_text(line),
                lines.get(i + 1).and_then(|l| comment_text(l)),
            ) else {
                continue;
            };
            let (this, next) = (this.to_ascii_lowercase(), next.to_ascii_lowercase());
            let wrapped = (this.ends_with("finding")
                && next.starts_with(|c: char| c.is_ascii_digit()))
                || (this.ends_with("review") && next.starts_with("of "));
            if wrapped {
                found.push(format!(
                    "{name}:{n}: {} (cites a finding or a review across two lines)",
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "issue, finding, review or commit references in the sources (a comment states the contract; the story goes in \
         the commit message):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_reference_check_tells_references_from_upstream_links() {
    for cited in [
        "// issue #27: key slots",
        "//! (the review of the check)",
        "/// (#24: 3 nodes)",
        "// see muxlock#25",
        "// tests/cluster/replication_wait.rs, finding 1",
        "// Finding 12 of the audit",
        "// a bare number in parentheses (#555)",
    ] {
        assert!(reference(cited).is_some(), "not caught: {cited}");
    }
    for clean in [
        "// redis/redis#416 explains the expiry",
        "// https://github.com/redis/redis/issues/416",
        "/// (PEM: PKCS#8, PKCS#1 or SEC1)",
        "#[derive(Debug)]",
        "//! an \"inside\" marker (finding one already there is a violation)",
        "let s = r#\"local r = {}\"#;",
        "// a review, in general",
        r##"r#"<text fill="#555" stroke='#00aa00'>"#"##,
    ] {
        assert_eq!(reference(clean), None, "flagged: {clean}");
    }
    assert_eq!(
        commit_hash("catches the order before 91f41a7 within"),
        Some("91f41a7")
    );
    for clean in [
        "a 1234567 ms lease",
        "deadbeef",
        "0x9e37_79b9_7f4a_7c15",
        "SHA1 of a 40-digit value",
    ] {
        assert_eq!(commit_hash(clean), None, "flagged: {clean}");
    }
}

/// Whether a test file's name says when or why it was written rather than what it checks.
fn named_after_a_review(stem: &str) -> bool {
    stem.starts_with("break_")
        || stem.starts_with("review_")
        || stem.ends_with("_review")
        || stem == "hostile"
}

#[test]
fn no_test_file_is_named_after_a_review() {
    let named: Vec<String> = ["tests", "cli/tests"]
        .into_iter()
        .flat_map(rs_files)
        .map(|(name, _)| name)
        .filter(|name| {
            Path::new(name)
                .file_stem()
                .and_then(|s| s.to_str())
                .is_some_and(named_after_a_review)
        })
        .collect();
    assert!(
        named.is_empty(),
        "test files named after a review (name them for what they check):\n{}",
        named.join("\n")
    );
    for review in [
        "break_held",
        "review_async",
        "fold_review",
        "exec_review",
        "hostile",
    ] {
        assert!(named_after_a_review(review), "not caught: {review}");
    }
    for behaviour in [
        "detached_releases",
        "async_edges",
        "hostile_servers",
        "fold",
    ] {
        assert!(!named_after_a_review(behaviour), "flagged: {behaviour}");
    }
}
