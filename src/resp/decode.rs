//! The streaming decoder: bytes in, [`Value`]s out, zero copy.
//!
//! Decoding runs in two passes. The first ([`scan`](super::scan)) validates the value token by token and records
//! each token on a *tape*; it is resumable, so a large reply arriving in many reads is scanned once, not from its
//! start on every read. When the value is complete, its bytes are split off the buffer, frozen, and the second pass
//! turns the tape into a `Value` whose payloads are slices of those bytes. Scalars at top level skip the tape.

use bytes::{Buf, Bytes, BytesMut};

use super::build::{build, take_scalar};
use super::error::DecodeError;
use super::limits::Limits;
use super::scan::{self, Step, Token};
use super::value::Value;

/// Decodes one value from the front of `buf` with the default [`Limits`].
///
/// - `Ok(Some(value))`: exactly the bytes of `value` were removed from the front of `buf`; what follows stays.
/// - `Ok(None)`: `buf` holds only part of a value; nothing was consumed. Append more bytes and call again.
/// - `Err(_)`: the bytes are not valid RESP; nothing was consumed, and the stream cannot be resynchronised.
///
/// Each call starts from the first byte; a reader that calls again as bytes trickle in should keep a [`Decoder`],
/// which resumes where it stopped.
///
/// # Examples
///
/// ```
/// use bytes::BytesMut;
/// use muxlock::resp::{decode, Value};
///
/// let mut buf = BytesMut::from(&b"$5\r\nhello\r\n:1"[..]);
/// assert_eq!(decode(&mut buf)?, Some(Value::BulkString("hello".into())));
/// assert_eq!(decode(&mut buf)?, None); // `:1` needs its CRLF
/// assert_eq!(&buf[..], b":1");
/// # Ok::<(), muxlock::resp::DecodeError>(())
/// ```
pub fn decode(buf: &mut BytesMut) -> Result<Option<Value>, DecodeError> {
    Decoder::new().decode(buf)
}

/// A resumable decoder for one byte stream.
///
/// It behaves exactly like [`decode`] (same values, same errors, nothing consumed unless a whole value is returned),
/// but remembers how far it validated an incomplete value, so the bytes of a large reply are scanned once however
/// many reads deliver them.
///
/// **Contract:** between calls that return `Ok(None)`, the caller may only *append* to the buffer (as a socket
/// reader does). To decode from a different buffer, call [`reset`](Decoder::reset) first. Breaking the contract
/// cannot cause a panic or unsafety, only wrong values.
///
/// # Examples
///
/// ```
/// use bytes::BytesMut;
/// use muxlock::resp::{Decoder, Value};
///
/// let mut decoder = Decoder::new();
/// let mut buf = BytesMut::new();
/// buf.extend_from_slice(b"*2\r\n:1\r\n");
/// assert_eq!(decoder.decode(&mut buf)?, None);
/// buf.extend_from_slice(b":2\r\n");
/// let want = Value::Array(vec![Value::Integer(1), Value::Integer(2)]);
/// assert_eq!(decoder.decode(&mut buf)?, Some(want));
/// assert!(buf.is_empty());
/// # Ok::<(), muxlock::resp::DecodeError>(())
/// ```
#[derive(Debug, Default)]
pub struct Decoder {
    limits: Limits,
    /// Offset of the first token not yet scanned; every byte before it is validated and on the tape.
    pos: usize,
    /// Where the line-end search of the token at `pos` resumes (0: from its start).
    resume: usize,
    /// Values still expected by each open aggregate, outermost first.
    open: Vec<usize>,
    /// The tokens of the value being decoded, in wire order.
    tape: Vec<Token>,
}

/// Tapes longer than this are freed after use rather than kept for the next value: one huge reply should not pin
/// its memory for the life of the connection.
const TAPE_KEEP: usize = 4096;

impl Decoder {
    /// A decoder with the default [`Limits`].
    pub fn new() -> Decoder {
        Decoder::with_limits(Limits::default())
    }

    /// A decoder enforcing `limits`.
    pub fn with_limits(limits: Limits) -> Decoder {
        Decoder {
            limits,
            pos: 0,
            resume: 0,
            open: Vec::new(),
            tape: Vec::new(),
        }
    }

    /// The limits this decoder enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Forgets the progress on an incomplete value, so that the next call starts from the first byte.
    pub fn reset(&mut self) {
        self.pos = 0;
        self.resume = 0;
        self.open.clear();
        if self.tape.capacity() > TAPE_KEEP {
            self.tape = Vec::new();
        } else {
            self.tape.clear();
        }
    }

    /// Decodes one value from the front of `buf`; see [`decode`] for the contract and the [`Decoder`] docs for what
    /// may happen to `buf` between calls.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] when the bytes are not valid RESP or exceed the limits. The decoder is then reset; the
    /// stream has lost its framing and should be dropped.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Value>, DecodeError> {
        if self.pos > buf.len() {
            // The contract was broken (the buffer shrank): start over rather than index out of range.
            self.reset();
        }
        if self.pos == 0 {
            // Only from a clean start: `resume` from an earlier partial line must not be carried past a value
            // that `quick` consumed (found by the fuzzer: `+OK` then `\r\n+\nKK\r\n` fed in two reads).
            if self.resume == 0 {
                if let Some(value) = quick(buf, &self.limits) {
                    return Ok(Some(value));
                }
            }
            // Nothing scanned yet: a top-level scalar needs no tape.
            match scan::token(buf, 0, self.resume, &self.limits, 0) {
                Ok(Step::Done(token @ Token::Aggregate(..), next)) => self.push(token, next),
                Ok(Step::Done(token, next)) => {
                    self.resume = 0;
                    return take_scalar(token, buf, next).map(Some);
                }
                Ok(Step::Partial(resume)) => {
                    self.resume = resume;
                    return Ok(None);
                }
                Err(e) => {
                    self.reset();
                    return Err(e);
                }
            }
        }
        match self.scan(buf) {
            Ok(Some(len)) => {
                let frame = buf.split_to(len).freeze();
                let value = build(&self.tape, &frame);
                self.reset();
                value.map(Some)
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.reset();
                Err(e)
            }
        }
    }

    /// Records a complete token that ends at `next`.
    fn push(&mut self, token: Token, next: usize) {
        self.tape.push(token);
        self.pos = next;
        self.resume = 0;
        let values = match token {
            // The scanner checked values_after_header for overflow.
            Token::Aggregate(kind, n) => kind.values_after_header(n).unwrap_or(usize::MAX),
            _ => 0,
        };
        if values > 0 {
            self.open.push(values);
        } else if let Some(parent) = self.open.last_mut() {
            // A scalar or an empty aggregate is a complete value of its parent.
            *parent -= 1;
        }
    }

    /// Scans tokens from `pos` until the value completes (`Some(its length)`) or the bytes run out (`None`).
    fn scan(&mut self, buf: &[u8]) -> Result<Option<usize>, DecodeError> {
        loop {
            // An aggregate whose values have all been scanned is complete and counts as a value of its parent.
            while self.open.last() == Some(&0) {
                self.open.pop();
                if let Some(parent) = self.open.last_mut() {
                    *parent -= 1;
                }
            }
            let Some(remaining) = self.open.last_mut() else {
                return Ok(Some(self.pos));
            };
            // Runs of complete bulk strings (arrays of keys or values) in a tight loop.
            let mut pos = self.pos;
            while *remaining > 0 {
                let Some((token, next)) = scan::quick_bulk(buf, pos, &self.limits) else {
                    break;
                };
                self.tape.push(token);
                *remaining -= 1;
                pos = next;
            }
            if pos != self.pos {
                self.pos = pos;
                self.resume = 0;
                continue;
            }
            match scan::token(buf, self.pos, self.resume, &self.limits, self.open.len())? {
                Step::Partial(resume) => {
                    self.resume = resume;
                    return Ok(None);
                }
                Step::Done(token, next) => self.push(token, next),
            }
        }
    }
}

/// The replies of the Redlock hot path, complete and in canonical form, decoded without the general machinery:
/// `+OK`, `:n`, `$-1`, `_` and `$n` bulk strings. Anything else, or anything unusual about these, returns `None`
/// and takes the general path, which gives the same value or the exact error.
///
/// `+OK` is the static `"OK"`: the reply of every granted `SET`, and no need to hold on to the read buffer for it.
#[inline]
fn quick(buf: &mut BytesMut, limits: &Limits) -> Option<Value> {
    let (value, used) = match *buf.first()? {
        b'+' if buf.get(1..5)? == b"OK\r\n" => (Value::SimpleString(Bytes::from_static(b"OK")), 5),
        b':' => {
            let (n, next) = scan::quick_number(buf, 1)?;
            (Value::Integer(n), next)
        }
        b'$' if buf.get(1..5)? == b"-1\r\n" => (Value::NullBulk, 5),
        b'$' => {
            let (Token::Bulk { start, end }, next) = scan::quick_bulk(buf, 0, limits)? else {
                return None;
            };
            // Header off, payload split, CRLF off: cheaper than splitting the whole frame and trimming it.
            buf.advance(start);
            let payload = buf.split_to(end - start).freeze();
            buf.advance(next - end);
            return Some(Value::BulkString(payload));
        }
        b'_' if buf.get(1..3)? == b"\r\n" => (Value::Null, 3),
        _ => return None,
    };
    buf.advance(used);
    Some(value)
}
