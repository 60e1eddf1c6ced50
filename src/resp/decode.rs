//! The streaming decoder: bytes in, [`Value`]s out, zero copy.
//!
//! Decoding runs in two passes. The first ([`scan`](super::scan)) validates the value token by token and records
//! each token on a *tape*; it is resumable, so a large reply arriving in many reads is scanned once, not from its
//! start on every read. When the value is complete, its bytes are split off the buffer, frozen, and the second pass
//! turns the tape into a `Value` whose payloads are slices of those bytes. Scalars at top level skip the tape.
//!
//! RESP3's streamed forms are recorded so that the second pass never sees them as such. A streamed aggregate's
//! header goes on the tape as a placeholder, rewritten as a counted header (`*3`) when its end (`.`) arrives; the
//! end itself is not recorded. A streamed string's chunks are not recorded at all: the decoder keeps its length and
//! its first chunk, and when the empty chunk ends it, rewrites its header as the bulk string of that chunk (zero copy)
//! or, for two chunks or more, as [`Token::Chunked`], which the second pass concatenates. Either way the state of an
//! unfinished streamed string is a few words, however many chunks it has.

use bytes::{Buf, Bytes, BytesMut};

use super::build::{build, take_scalar};
use super::error::{DecodeError, ErrorKind};
use super::limits::Limits;
use super::scan::{self, Aggregate, Step, Token};
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
/// # Streamed values
///
/// RESP3's streamed strings (`$?` followed by `;<len>` chunks and the empty chunk `;0`) and streamed arrays, sets
/// and maps (`*?`, `~?`, `%?`, their values, then `.`) decode to the same [`Value`]s as their counted forms
/// ([`Value::BulkString`], [`Value::Array`], [`Value::Set`], [`Value::Map`]): a caller cannot tell them apart. They
/// are bounded by the same [`Limits`], checked as each chunk or value arrives: the sum of a string's chunks by
/// `max_bulk_len`, the values of an aggregate by `max_aggregate_len` (pairs for a map), nesting by `max_depth`. An
/// endless stream therefore ends in an error, not in unbounded memory.
///
/// A streamed string of one chunk is a slice of the read buffer, like a bulk string. A string of several chunks
/// cannot be: its chunks are copied into one allocation, made once the string is complete and its length known.
/// The spec defines no streamed bulk errors, verbatim strings, attributes or pushes (`!?`, `=?`, `|?`, `>?`): those
/// are [`ErrorKind::StreamedUnsupported`].
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
    /// Values still expected by each open aggregate, outermost first. For a streamed aggregate, the values it may
    /// still hold before it exceeds the limit.
    open: Vec<usize>,
    /// The streamed aggregates among `open`, outermost first.
    streams: Vec<OpenStream>,
    /// The streamed string being read: inside every open aggregate, so only its chunks may come next.
    string: Option<OpenString>,
    /// The tokens of the value being decoded, in wire order.
    tape: Vec<Token>,
}

/// A streamed aggregate whose end has not arrived.
#[derive(Clone, Copy, Debug)]
struct OpenStream {
    /// Its index in `Decoder::open`.
    level: usize,
    /// Its header's index on the tape: a placeholder until the end gives the count.
    header: usize,
    kind: Aggregate,
    /// Its entry in `Decoder::open` when it was opened: the number of values it may hold.
    budget: usize,
}

/// A streamed string whose empty chunk has not arrived.
#[derive(Clone, Copy, Debug)]
struct OpenString {
    /// Its header's index on the tape: a placeholder until the string is complete.
    header: usize,
    /// The offset of its first chunk's `;`.
    from: usize,
    /// The sum of its chunks' lengths so far.
    total: usize,
    /// How many chunks it has had, counting no further than 2.
    chunks: u8,
    /// The payload of its first chunk (empty before there is one).
    first: (usize, usize),
}

/// Tapes longer than this are freed after use rather than kept for the next value: one huge reply should not pin
/// its memory for the life of the connection.
const TAPE_KEEP: usize = 4096;

/// How many values a streamed aggregate of `kind` may hold: `max_aggregate_len` elements, or pairs for a map (an
/// even number, so that a map's parity can be read off what is left of it).
fn stream_budget(kind: Aggregate, limits: &Limits) -> usize {
    match kind {
        Aggregate::Map => limits.max_aggregate_len().saturating_mul(2) & !1,
        _ => limits.max_aggregate_len(),
    }
}

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
            streams: Vec::new(),
            string: None,
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
        self.streams.clear();
        self.string = None;
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
        // Only from a clean start: `resume` from an earlier partial line must not be carried past a value that
        // `quick` consumed (found by the fuzzer: `+OK` then `\r\n+\nKK\r\n` fed in two reads).
        if self.pos == 0 && self.resume == 0 {
            if let Some(value) = quick(buf, &self.limits) {
                return Ok(Some(value));
            }
        }
        self.decode_general(buf)
    }

    /// [`decode`](Decoder::decode) off the fast path: top-level scalars `quick` does not take, aggregates,
    /// streamed values, and every call after an `Ok(None)`.
    // Out of line so that the fast path's frame stays small: inlined into `decode`, this code (and the streamed
    // values' bookkeeping in `scan`) made every `+OK` save and restore more registers. Measured with
    // scripts/instructions: `+OK` 151 -> 142, `:12345` 224 -> 216, a 1 KiB bulk string 485 -> 473; a call off the
    // fast path costs about 20 more.
    #[inline(never)]
    fn decode_general(&mut self, buf: &mut BytesMut) -> Result<Option<Value>, DecodeError> {
        if self.pos > buf.len() {
            // The contract was broken (the buffer shrank): start over rather than index out of range.
            self.reset();
        }
        if self.pos == 0 {
            // Nothing scanned yet: a top-level scalar needs no tape.
            match scan::token(buf, 0, self.resume, &self.limits, 0, false) {
                Ok(Step::Done(
                    token @ (Token::Aggregate(..)
                    | Token::StreamedAggregate(_)
                    | Token::StreamedString),
                    next,
                )) => self.push(token, next),
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

    /// Records a complete token that ends at `next`: a scalar, or the header of an aggregate or streamed value.
    fn push(&mut self, token: Token, next: usize) {
        self.pos = next;
        self.resume = 0;
        let values = match token {
            // The scanner checked values_after_header for overflow.
            Token::Aggregate(kind, n) => kind.values_after_header(n).unwrap_or(usize::MAX),
            Token::StreamedAggregate(kind) => {
                let budget = stream_budget(kind, &self.limits);
                self.streams.push(OpenStream {
                    level: self.open.len(),
                    header: self.tape.len(),
                    kind,
                    budget,
                });
                self.open.push(budget);
                self.tape.push(Token::Aggregate(kind, 0));
                return;
            }
            Token::StreamedString => {
                self.string = Some(OpenString {
                    header: self.tape.len(),
                    from: next,
                    total: 0,
                    chunks: 0,
                    first: (next, next),
                });
                self.tape.push(Token::Bulk {
                    start: next,
                    end: next,
                });
                return;
            }
            _ => 0,
        };
        self.tape.push(token);
        if values > 0 {
            self.open.push(values);
        } else {
            // A scalar or an empty aggregate is a complete value of its parent.
            self.completed();
        }
    }

    /// A value has been completed: it counts against its parent's remaining values (or budget, if streamed).
    fn completed(&mut self) {
        if let Some(parent) = self.open.last_mut() {
            *parent -= 1;
        }
    }

    /// Whether the innermost open aggregate is streamed.
    fn in_stream(&self) -> bool {
        self.streams
            .last()
            .is_some_and(|s| s.level + 1 == self.open.len())
    }

    /// Scans the chunks of the open streamed string from `pos`: `Ok(true)` once its empty chunk has been read (or if
    /// no string is open), `Ok(false)` when the bytes run out first.
    fn scan_string(&mut self, buf: &[u8]) -> Result<bool, DecodeError> {
        let Some(string) = self.string.as_mut() else {
            return Ok(true);
        };
        loop {
            match scan::chunk(buf, self.pos, string.total, &self.limits)? {
                Step::Partial(_) => return Ok(false),
                Step::Done(Token::Chunk { start, end }, next) => {
                    if string.chunks == 0 {
                        string.first = (start, end);
                    }
                    string.chunks = string.chunks.saturating_add(1).min(2);
                    // The scanner bounds the sum by max_bulk_len.
                    string.total = string.total.saturating_add(end - start);
                    self.pos = next;
                }
                Step::Done(_, next) => {
                    // The end: one chunk (or none) is a slice of the frame, several are concatenated by `build`.
                    let whole = match string.chunks {
                        0 | 1 => Token::Bulk {
                            start: string.first.0,
                            end: string.first.1,
                        },
                        _ => Token::Chunked {
                            from: string.from,
                            total: string.total,
                        },
                    };
                    let header = string.header;
                    self.string = None;
                    self.pos = next;
                    self.patch(header, whole)?;
                    self.completed();
                    return Ok(true);
                }
            }
        }
    }

    /// Closes the innermost streamed aggregate, whose end (`.`) ends at `next`: its header becomes a counted one.
    fn end_stream(&mut self, next: usize) -> Result<(), DecodeError> {
        let (Some(stream), Some(left)) = (self.streams.pop(), self.open.pop()) else {
            return Err(DecodeError::new(ErrorKind::Internal, self.pos));
        };
        let values = stream.budget.saturating_sub(left);
        let n = match stream.kind {
            // `scan` refused an end after a key; this only guards the invariant.
            Aggregate::Map if values % 2 == 1 => {
                return Err(DecodeError::new(ErrorKind::Internal, self.pos));
            }
            Aggregate::Map => values / 2,
            _ => values,
        };
        self.pos = next;
        self.resume = 0;
        self.patch(stream.header, Token::Aggregate(stream.kind, n))?;
        self.completed();
        Ok(())
    }

    /// Rewrites the placeholder at `index` on the tape.
    fn patch(&mut self, index: usize, token: Token) -> Result<(), DecodeError> {
        match self.tape.get_mut(index) {
            Some(slot) => {
                *slot = token;
                Ok(())
            }
            None => Err(DecodeError::new(ErrorKind::Internal, self.pos)),
        }
    }

    /// Judges the byte at `pos` inside a streamed aggregate, before the scanner reads a token there: an end after
    /// a map's key, or a value past the limit, is refused at its first byte, as the scanner refuses a bad byte.
    fn check_stream(&self, buf: &[u8]) -> Result<(), DecodeError> {
        let (Some(stream), Some(&left)) = (self.streams.last(), self.open.last()) else {
            return Ok(());
        };
        match buf.get(self.pos) {
            None => Ok(()),
            Some(b'.') => {
                let values = stream.budget.saturating_sub(left);
                if stream.kind == Aggregate::Map && values % 2 == 1 {
                    return Err(DecodeError::new(ErrorKind::OddStreamedMap, self.pos));
                }
                Ok(())
            }
            Some(_) if left == 0 => Err(DecodeError::new(ErrorKind::AggregateTooLong, self.pos)),
            Some(_) => Ok(()),
        }
    }

    /// Scans tokens from `pos` until the value completes (`Some(its length)`) or the bytes run out (`None`).
    fn scan(&mut self, buf: &[u8]) -> Result<Option<usize>, DecodeError> {
        loop {
            if self.string.is_some() && !self.scan_string(buf)? {
                return Ok(None);
            }
            // An aggregate whose values have all been scanned is complete and counts as a value of its parent. A
            // streamed one is complete only at its end, however many values it has.
            while self.open.last() == Some(&0) {
                if self.in_stream() {
                    break;
                }
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
            let in_stream = self.in_stream();
            if in_stream {
                self.check_stream(buf)?;
            }
            let depth = self.open.len();
            match scan::token(buf, self.pos, self.resume, &self.limits, depth, in_stream)? {
                Step::Partial(resume) => {
                    self.resume = resume;
                    return Ok(None);
                }
                Step::Done(Token::End, next) => self.end_stream(next)?,
                Step::Done(token, next) => self.push(token, next),
            }
        }
    }
}

/// The replies of the Redlock hot path, complete and in canonical form, decoded without the general machinery:
/// `+OK`, `:n` (`:0` included), `$-1`, `_` and `$n` bulk strings. Anything else, or anything unusual about these,
/// returns `None` and takes the general path, which gives the same value or the exact error.
///
/// `+OK` is the static `"OK"`: the reply of every granted `SET`, and no need to hold on to the read buffer for it.
#[inline]
fn quick(buf: &mut BytesMut, limits: &Limits) -> Option<Value> {
    let (value, used) = match *buf.first()? {
        b'+' if buf.get(1..5)? == b"OK\r\n" => (Value::SimpleString(Bytes::from_static(b"OK")), 5),
        b':' => match scan::quick_number(buf, 1) {
            Some((n, next)) => (Value::Integer(n), next),
            // `:0`, the reply to a release or an extension of a lock no longer held. Here rather than in
            // `quick_number`, which every length goes through.
            None if buf.get(1..4)? == b"0\r\n" => (Value::Integer(0), 4),
            None => return None,
        },
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
