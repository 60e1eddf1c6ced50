//! What the CLI writes: results on stdout (text for people, one JSON document per line with `--json`), errors as
//! one line on stderr (with a line per node under it when nodes are to blame), warnings, and nothing that could
//! show a password.
//!
//! Passwords reach the CLI in node URLs (`redis://:secret@host`) and in `MUXLOCK_PASSWORD`. muxlock's own types
//! never display them (`NodeAddr` shows `***`), clap is told not to show environment values, and every line of an
//! error passes through [`scrub`] on its way out, which hides the credentials of any URL in it, whoever wrote it.

use std::io::{self, IsTerminal, Write};

use serde::Serialize;

use crate::exit::{self, CliError};
use crate::verdict::{self, Degraded, NodeLine};

/// Hides the credentials of every `scheme://user:password@host` in `text`: `scheme://***@host`.
pub fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The URL ends at whitespace, a quote or a comma (the `--nodes` separator). Its credentials end at its last
        // '@', even if the password has a '/' or a '?' that should have been %-escaped.
        let end = tail
            .find(|c: char| matches!(c, '"' | '\'' | '`' | ',') || c.is_whitespace())
            .unwrap_or(tail.len());
        let url = &tail[..end];
        match url.rfind('@') {
            Some(at) => {
                // A user name is no secret: `redis://user:***@host`, as muxlock shows node addresses.
                if let Some((user, _)) = url[..at].split_once(':') {
                    out.push_str(user);
                    out.push(':');
                }
                out.push_str("***");
                out.push_str(&url[at..]);
            }
            None => out.push_str(url),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Writes `text` to stdout and flushes.
///
/// # Errors
///
/// The write's error (a closed pipe, a full disk).
pub fn print(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Writes `value` as one line of JSON on stdout.
///
/// # Errors
///
/// The write's error.
pub fn print_json(value: &impl Serialize) -> io::Result<()> {
    let mut line = serde_json::to_string(value).map_err(io::Error::other)?;
    line.push('\n');
    print(&line)
}

/// A command's result printed: text for people, or JSON. A closed stdout (`| head -1`) ends the command quietly;
/// another write error is EX_IOERR.
///
/// # Errors
///
/// [`exit::IOERR`] when stdout cannot be written.
pub fn emit(
    json: bool,
    value: &impl Serialize,
    text: impl FnOnce() -> String,
) -> Result<(), CliError> {
    let written = if json {
        print_json(value)
    } else {
        print(&text())
    };
    match written {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::new(
            exit::IOERR,
            "io",
            format!("cannot write to stdout: {e}"),
        )),
    }
}

/// A note for people on stderr (what was started, where it is recorded): not part of the machine output.
pub fn note(text: &str) {
    let _ = writeln!(io::stderr().lock(), "muxlock: {}", scrub(text));
}

/// Reports `error`: its headline on stderr, then a line per node when nodes are to blame (unless they were shown
/// already), and with `json` an object on stdout as well (unless the command printed its result already):
/// `{"error":{"code":69,"kind":"quorum","cause":"unreachable","message":"...","nodes":[{"node":"...",
/// "outcome":"...","state":"..."}]}}`.
pub fn report(error: &CliError, json: bool) {
    let message = scrub(&one_line(&error.message));
    let nodes: Vec<NodeLine> = error
        .nodes
        .iter()
        .map(|line| NodeLine {
            node: scrub(&line.node),
            outcome: scrub(&one_line(&line.outcome)),
            state: line.state,
        })
        .collect();
    {
        let mut err = io::stderr().lock();
        let _ = writeln!(err, "muxlock: {message}");
        if !error.nodes_shown {
            let _ = err.write_all(node_lines(&nodes).as_bytes());
        }
    }
    if json && !error.after_output {
        let doc = ErrorDoc {
            error: ErrorBody {
                code: error.code,
                kind: error.kind,
                cause: error.cause,
                message: &message,
                nodes,
                extra: &error.extra,
            },
        };
        let _ = print_json(&doc);
    }
}

/// The lines under a headline, one per node: `muxlock:   NODE: OUTCOME`.
pub fn node_lines(nodes: &[NodeLine]) -> String {
    nodes
        .iter()
        .map(|l| {
            format!(
                "muxlock:   {}: {}\n",
                scrub(&l.node),
                scrub(&one_line(&l.outcome))
            )
        })
        .collect()
}

/// A note with the node lines under it, as an error's, on stderr.
pub fn note_with_nodes(text: &str, nodes: &[NodeLine]) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "muxlock: {}", scrub(&one_line(text)));
    let _ = err.write_all(node_lines(nodes).as_bytes());
}

/// The warning line of a degraded quorum on stderr, if any node failed: `what` is what the others did.
pub fn warn_degraded(degraded: &[Degraded], locks: &muxlock::LockManager, what: &str) {
    if let Some(line) = verdict::warning(degraded, locks.nodes().len(), locks.quorum(), what) {
        note(&line);
    }
}

/// Joins the lines of a multi-line message, so that an error is always one line.
pub fn one_line(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join("; ")
}

/// Whether stderr is a terminal: live progress bars there, plain lines otherwise.
pub fn stderr_is_terminal() -> bool {
    io::stderr().is_terminal()
}

#[derive(Serialize)]
struct ErrorDoc<'a> {
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: u8,
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cause: Option<&'a str>,
    message: &'a str,
    nodes: Vec<NodeLine>,
    #[serde(flatten)]
    extra: &'a serde_json::Map<String, serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_urls_are_hidden() {
        for (input, want) in [
            ("redis://:hunter22@h:1", "redis://:***@h:1"),
            (
                "redis://u:hunter22@h:1/2 and more",
                "redis://u:***@h:1/2 and more",
            ),
            (
                "invalid value 'redis://u:p@ss@h:1' for '--ttl'",
                "invalid value 'redis://u:***@h:1' for '--ttl'",
            ),
            (
                "a,redis://:x@a:1,redis://:y@b:2",
                "a,redis://:***@a:1,redis://:***@b:2",
            ),
            ("no url here", "no url here"),
            ("redis://h:1 redis://***@h:2", "redis://h:1 redis://***@h:2"),
            ("ends with ://", "ends with ://"),
            ("redis://:pa/ss?x@h:1/0", "redis://:***@h:1/0"),
            ("redis://secret@h:1", "redis://***@h:1"),
        ] {
            assert_eq!(scrub(input), want, "{input}");
        }
    }

    #[test]
    fn messages_are_one_line() {
        assert_eq!(one_line("error: a\n\n  b\n"), "error: a; b");
    }
}
