//! Raw RESP bytes for test set-up: encode a command, read whole replies off a socket.
//!
//! This is deliberately not a RESP parser (that is `muxlock::resp`, the code under test): it
//! only finds where a reply ends, so that a helper knows when to stop reading without
//! sleeping. Tests compare the returned bytes with exact expected replies, e.g. `b"+PONG\r\n"`.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::acceptor::is_retry;

/// `PING` as a RESP array.
pub const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// Encodes `parts` as a RESP array of bulk strings, the form every Redis command takes.
///
/// # Examples
/// ```ignore
/// assert_eq!(cmd(&["GET", "k"]), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
/// ```
pub fn cmd(parts: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for part in parts {
        out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Returns the length of the first complete reply in `buf`, or `None` if more bytes are needed.
///
/// Knows the RESP2 and RESP3 type bytes only well enough to skip over them: lines (`+ - : _ # , (`),
/// length-prefixed blobs (`$ = !`) and aggregates (`* ~ >` with n items, `%` with n pairs, `|`
/// with n pairs and then the value they annotate). An unknown type byte or an unparsable length is
/// treated as a one-line reply, so a garbled reply still ends rather than hanging the test.
pub fn reply_len(buf: &[u8]) -> Option<usize> {
    frame_end(buf, 0)
}

fn frame_end(buf: &[u8], start: usize) -> Option<usize> {
    let kind = *buf.get(start)?;
    let crlf = start
        + 1
        + buf
            .get(start + 1..)?
            .windows(2)
            .position(|w| w == b"\r\n")?;
    let line_end = crlf + 2;
    let count = || -> Option<i64> {
        std::str::from_utf8(&buf[start + 1..crlf])
            .ok()?
            .parse()
            .ok()
    };
    match kind {
        b'$' | b'=' | b'!' => match count() {
            Some(n) if n >= 0 => {
                let end = line_end + usize::try_from(n).ok()? + 2;
                (buf.len() >= end).then_some(end)
            }
            // `$-1` (RESP2 null) or garbage: the header line is the whole reply.
            _ => Some(line_end),
        },
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let Some(n) = count().filter(|n| *n >= 0) else {
                return Some(line_end); // `*-1`, the RESP2 null array
            };
            let items = match kind {
                b'%' => 2 * n,
                b'|' => 2 * n + 1, // attributes precede the reply they annotate
                _ => n,
            };
            let mut pos = line_end;
            for _ in 0..items {
                pos = frame_end(buf, pos)?;
            }
            Some(pos)
        }
        _ => Some(line_end),
    }
}

/// Reads `n` whole replies from `stream`, waiting at most until `deadline`.
///
/// Returns exactly the bytes of those replies: the caller sends the commands, so nothing
/// follows them and no byte is lost.
///
/// # Errors
/// `TimedOut` if the deadline passes first, `UnexpectedEof` if the server closes the
/// connection first, or the socket's own error. The error message includes the bytes read so far.
pub fn read_replies(stream: &mut TcpStream, n: usize, deadline: Instant) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if complete(&buf, n) {
            return Ok(buf);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(partial(io::ErrorKind::TimedOut, &buf));
        }
        // A zero timeout is an error for `set_read_timeout`, hence the floor.
        stream.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Err(partial(io::ErrorKind::UnexpectedEof, &buf)),
            Ok(got) => buf.extend_from_slice(&chunk[..got]),
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Reads one whole reply from `stream`, waiting at most until `deadline`. See [`read_replies`].
pub fn read_reply(stream: &mut TcpStream, deadline: Instant) -> io::Result<Vec<u8>> {
    read_replies(stream, 1, deadline)
}

/// Writes `bytes` (commands) and reads `replies` whole replies, all before `deadline`.
///
/// # Errors
/// As [`read_replies`], or the socket's write error.
pub fn roundtrip(
    stream: &mut TcpStream,
    bytes: &[u8],
    replies: usize,
    deadline: Instant,
) -> io::Result<Vec<u8>> {
    let left = deadline.saturating_duration_since(Instant::now());
    stream.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
    stream.write_all(bytes)?;
    read_replies(stream, replies, deadline)
}

/// Shows reply bytes readably in assertion messages.
pub fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

fn complete(buf: &[u8], n: usize) -> bool {
    let mut pos = 0;
    for _ in 0..n {
        match frame_end(buf, pos) {
            Some(end) => pos = end,
            None => return false,
        }
    }
    true
}

fn partial(kind: io::ErrorKind, buf: &[u8]) -> io::Error {
    io::Error::new(kind, format!("after reading {:?}", show(buf)))
}
