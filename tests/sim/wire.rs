//! What a node reads off the wire: a write's bytes cut into its commands, as a server's request parser cuts them.
//!
//! A client writes each command as an array of bulk strings (`*N\r\n` then `$len\r\n<bytes>\r\n` per argument).
//! They are read in place: an argument is a slice of the write's bytes, found by its length prefix
//! without copying (a set-up's `SCRIPT LOAD`s and a first `EVAL` carry whole script bodies, most of what goes
//! over the wire). Anything else (another type, a number not in canonical form) is left to the codec's general
//! decoder, from that command on: the commands a node runs are the decoder's either way ([`each_command`]).

use bytes::{Bytes, BytesMut};
use muxlock::resp::{Value, decode};

/// A canonical decimal (digits only, no sign, no leading zero but `0` itself) ending in `\r\n` at `b[at..]`:
/// its value and where what follows starts.
fn number(b: &[u8], at: usize) -> Option<(usize, usize)> {
    let (mut n, mut end) = (0usize, at);
    while let Some(&c) = b.get(end) {
        if !c.is_ascii_digit() {
            break;
        }
        n = n * 10 + usize::from(c - b'0');
        end += 1;
        if end - at > 18 {
            return None;
        }
    }
    let digits = end - at;
    if digits == 0 || digits > 1 && b[at] == b'0' || b.get(end..end + 2)? != b"\r\n" {
        return None;
    }
    Some((n, end + 2))
}

/// One command at `b[at..]` in the form a client writes (an array of bulk strings): its arguments in `args`
/// and where the next command starts; `None` for anything else, `args` then in any state.
fn quick<'a>(b: &'a [u8], at: usize, args: &mut Vec<&'a [u8]>) -> Option<usize> {
    args.clear();
    if *b.get(at)? != b'*' {
        return None;
    }
    let (n, mut at) = number(b, at + 1)?;
    for _ in 0..n {
        if *b.get(at)? != b'$' {
            return None;
        }
        let (len, from) = number(b, at + 1)?;
        let end = from.checked_add(len)?;
        if b.get(end..end.checked_add(2)?)? != b"\r\n" {
            return None;
        }
        args.push(&b[from..end]);
        at = end + 2;
    }
    Some(at)
}

/// The general decoder's commands in `b`, in order, until it finds something that is not an array (or not
/// whole): an array's elements that are not bulk strings are empty arguments.
fn decoded(b: &[u8]) -> Vec<Vec<Bytes>> {
    let mut buf = BytesMut::from(b);
    let mut out = Vec::new();
    while let Ok(Some(Value::Array(items))) = decode(&mut buf) {
        out.push(
            items
                .into_iter()
                .map(|v| match v {
                    Value::BulkString(b) => b,
                    _ => Bytes::new(),
                })
                .collect(),
        );
    }
    out
}

/// Runs `each` on every command of `request`, in order, with its arguments.
pub fn each_command(request: &[u8], mut each: impl FnMut(&[&[u8]])) {
    let mut args: Vec<&[u8]> = Vec::with_capacity(16);
    let mut at = 0;
    while at < request.len() {
        let Some(next) = quick(request, at, &mut args) else {
            // Not in the client's form: the decoder reads the rest.
            for cmd in decoded(&request[at..]) {
                let args: Vec<&[u8]> = cmd.iter().map(|a| &a[..]).collect();
                each(&args);
            }
            return;
        };
        each(&args);
        at = next;
    }
}
