//! Loud skips: a test that returns early because a kind of server is missing says so where a person and
//! `scripts/test` both see it.
//!
//! [`skip`] prints one line, `MUXLOCK-SKIP kind=<kind> test=<crate>::<test> reason=<why>`, to stderr (shown with
//! `--nocapture` or when the test fails) and appends the same line to the file named by `$MUXLOCK_SKIP_LOG`
//! when that is set. `scripts/test` sets it, counts and names the skipped tests in its summary, and under
//! `CI=true` fails the run when a [`Kind::Valkey`] or [`Kind::Cluster`] skip happened.
//!
//! Test binaries run one after another but their tests run on parallel threads, and several binaries may share
//! the file: each line is one `write` on a file opened with `O_APPEND`, which the kernel places at the end as a
//! whole (a line is far shorter than any limit that could split it).

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;

/// The environment variable naming the file [`skip`] appends to.
pub const LOG_VAR: &str = "MUXLOCK_SKIP_LOG";

/// The first word of every skip line.
pub const MARK: &str = "MUXLOCK-SKIP";

/// The kind of server (or server feature) whose absence made a test skip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A Valkey server binary (`$VALKEY_SERVER` or where `scripts/test` installs it).
    Valkey,
    /// A server that runs in cluster mode (`--cluster-enabled yes`).
    Cluster,
    /// A C compiler, to build the shim that moves a node's wall clock (`support::clock`).
    Faketime,
}

impl Kind {
    /// The word the skip line uses for the kind (what `scripts/test` matches).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Valkey => "valkey",
            Kind::Cluster => "cluster",
            Kind::Faketime => "faketime",
        }
    }
}

/// Records that the running test skips (all or part of its checks) because `kind` is missing, for `why` (which
/// should say what to do to have it): prints the skip line to stderr and appends it to `$MUXLOCK_SKIP_LOG`.
///
/// The test is named `<test crate>::<test thread's name>` (libtest names each test's thread after the test), so
/// call it from the test's own thread.
///
/// # Panics
/// If `$MUXLOCK_SKIP_LOG` is set and the line cannot be appended: a skip nobody counts is the silence this
/// exists to end.
#[track_caller]
pub fn skip(kind: Kind, why: &str) {
    let thread = std::thread::current();
    let test = format!(
        "{}::{}",
        env!("CARGO_CRATE_NAME"),
        thread.name().unwrap_or("(unnamed thread)")
    );
    let line = line(kind, &test, why);
    eprint!("{line}");
    if let Some(log) = std::env::var_os(LOG_VAR) {
        if let Err(e) = append(Path::new(&log), &line) {
            panic!(
                "{LOG_VAR}={}: cannot append the skip of {test}: {e}",
                Path::new(&log).display()
            );
        }
    }
}

/// Appends `line` to `log` (created if absent) in one `write` on a file opened with `O_APPEND`: the kernel puts
/// it at the end in one piece, whoever else appends at the same time.
///
/// # Errors
/// When `log` cannot be opened for appending or written.
pub fn append(log: &Path, line: &str) -> io::Result<()> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?
        .write_all(line.as_bytes())
}

/// The skip line, newline included. Spaces in `test` and line breaks in `why` would break its fields: they
/// become `_` and spaces.
pub fn line(kind: Kind, test: &str, why: &str) -> String {
    let test: String = test
        .chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect();
    let why: String = why
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    format!("{MARK} kind={} test={test} reason={why}\n", kind.as_str())
}
