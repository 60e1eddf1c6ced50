//! The decoder's second pass: a complete value's tape of tokens into a [`Value`] whose payloads are slices of the
//! value's frozen bytes (or, for a streamed string of several chunks, one copy of them).

use bytes::{Buf, Bytes, BytesMut};

use super::error::{DecodeError, ErrorKind};
use super::scan::{self, Aggregate, Token};
use super::value::Value;

/// The value of a scalar token; `payload(start, end)` supplies the bytes of those that carry some. `None` for an
/// aggregate header, and for the tokens of streamed values (a chunked string needs [`concat`]).
#[inline]
fn scalar(token: Token, payload: impl FnOnce(usize, usize) -> Bytes) -> Option<Value> {
    Some(match token {
        Token::Simple { start, end } => Value::SimpleString(payload(start, end)),
        Token::Error { start, end } => Value::Error(payload(start, end)),
        Token::Bulk { start, end } => Value::BulkString(payload(start, end)),
        Token::BigNumber { start, end } => Value::BigNumber(payload(start, end)),
        Token::BulkError { start, end } => Value::BulkError(payload(start, end)),
        Token::Verbatim { format, start, end } => Value::Verbatim {
            format,
            data: payload(start, end),
        },
        Token::Integer(n) => Value::Integer(n),
        Token::NullBulk => Value::NullBulk,
        Token::NullArray => Value::NullArray,
        Token::Null => Value::Null,
        Token::Boolean(b) => Value::Boolean(b),
        Token::Double(d) => Value::Double(d),
        Token::Aggregate(..)
        | Token::Chunked { .. }
        | Token::StreamedString
        | Token::StreamedAggregate(_)
        | Token::Chunk { .. }
        | Token::End => return None,
    })
}

/// Takes a top-level scalar's `next` bytes off `buf` and builds its value. Only the payload's bytes are kept (by
/// reference, not copied); scalars without payload just advance the buffer.
// Inlined into `Decoder::decode`, as it was when both lived in one module: top-level scalars off the fast path
// (`:0`, `-ERR`) pay for a call otherwise.
#[inline]
pub(super) fn take_scalar(
    token: Token,
    buf: &mut BytesMut,
    next: usize,
) -> Result<Value, DecodeError> {
    let mut split = false;
    let value = scalar(token, |start, end| {
        split = true;
        // The scanner guarantees start <= end <= next; saturating keeps a broken invariant from panicking.
        buf.advance(start);
        let payload = buf.split_to(end.saturating_sub(start)).freeze();
        buf.advance(next.saturating_sub(end));
        payload
    });
    if !split {
        buf.advance(next);
    }
    value.ok_or(DecodeError::new(ErrorKind::Internal, 0))
}

/// The common case of [`build`]: an array of scalars (`MGET`, `EXEC`, `KEYS` replies), straight into its vector.
fn build_flat(tape: &[Token], frame: &Bytes) -> Option<Value> {
    let (&Token::Aggregate(Aggregate::Array, n), items) = tape.split_first()? else {
        return None;
    };
    if items.len() != n {
        return None; // nested aggregates
    }
    let mut values = Vec::with_capacity(n);
    for &token in items {
        // Bulk strings spelled out: built in place rather than through `scalar`'s `Option`.
        let value = match token {
            Token::Bulk { start, end } => Value::BulkString(frame.slice(start..end)),
            other => scalar(other, |start, end| frame.slice(start..end))?,
        };
        values.push(value);
    }
    Some(Value::Array(values))
}

/// An aggregate being rebuilt from the tape.
struct Frame {
    kind: Aggregate,
    /// Values still to come.
    remaining: usize,
    items: Vec<Value>,
    pairs: Vec<(Value, Value)>,
    key: Option<Value>,
}

impl Frame {
    fn new(kind: Aggregate, n: usize, remaining: usize) -> Frame {
        // n counts elements the scanner has seen in full, so reserving for them is bounded by the input's size.
        let (items, pairs) = match kind {
            Aggregate::Map | Aggregate::Attribute => (Vec::new(), Vec::with_capacity(n)),
            _ => (Vec::with_capacity(n), Vec::new()),
        };
        Frame {
            kind,
            remaining,
            items,
            pairs,
            key: None,
        }
    }

    fn push(&mut self, v: Value) {
        self.remaining -= 1;
        match self.kind {
            Aggregate::Array | Aggregate::Set | Aggregate::Push => self.items.push(v),
            // The attribute's last value is the reply it annotates.
            Aggregate::Attribute if self.remaining == 0 => self.items.push(v),
            Aggregate::Map | Aggregate::Attribute => match self.key.take() {
                Some(k) => self.pairs.push((k, v)),
                None => self.key = Some(v),
            },
        }
    }

    fn finish(self) -> Value {
        match self.kind {
            Aggregate::Array => Value::Array(self.items),
            Aggregate::Set => Value::Set(self.items),
            Aggregate::Push => Value::Push(self.items),
            Aggregate::Map => Value::Map(self.pairs),
            Aggregate::Attribute => Value::Attribute {
                attributes: self.pairs,
                value: Box::new(self.items.into_iter().next().unwrap_or(Value::Null)),
            },
        }
    }
}

/// Rebuilds the value recorded on `tape`, whose offsets point into `frame`. Iterative: nesting costs heap, not stack.
pub(super) fn build(tape: &[Token], frame: &Bytes) -> Result<Value, DecodeError> {
    if let Some(flat) = build_flat(tape, frame) {
        return Ok(flat);
    }
    let mut stack: Vec<Frame> = Vec::new();
    for &token in tape {
        let mut value = match token {
            Token::Aggregate(kind, n) => match kind.values_after_header(n) {
                Some(0) => Frame::new(kind, 0, 0).finish(),
                Some(remaining) => {
                    stack.push(Frame::new(kind, n, remaining));
                    continue;
                }
                None => break,
            },
            Token::Chunked { from, total } => match concat(frame, from, total) {
                Some(bytes) => Value::BulkString(bytes),
                None => break,
            },
            other => match scalar(other, |start, end| frame.slice(start..end)) {
                Some(v) => v,
                None => break,
            },
        };
        // Hand the value up, closing every aggregate it completes.
        loop {
            let Some(top) = stack.last_mut() else {
                return Ok(value);
            };
            top.push(value);
            if top.remaining > 0 {
                break;
            }
            match stack.pop() {
                Some(done) => value = done.finish(),
                None => break,
            }
        }
    }
    // The scanner only reports a value complete when its tape closes every aggregate it opens.
    Err(DecodeError::new(ErrorKind::Internal, 0))
}

/// The payload of a streamed string of two chunks or more: its chunks, from the one at `from`, copied into one
/// allocation of `total` bytes. `None` if the chunks are not what the scanner validated (a bug).
fn concat(frame: &Bytes, from: usize, total: usize) -> Option<Bytes> {
    // The scanner saw every byte of the chunks in this frame: a larger total is a broken invariant, not a reason to
    // allocate.
    if total > frame.len() {
        return None;
    }
    let mut out = BytesMut::with_capacity(total);
    let mut at = from;
    while out.len() < total {
        if frame.get(at) != Some(&b';') {
            return None;
        }
        let (len, start) = scan::number(frame, at + 1, ErrorKind::InvalidLength).ok()??;
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        let end = start.checked_add(len)?;
        out.extend_from_slice(frame.get(start..end)?);
        at = end + 2;
    }
    (out.len() == total).then(|| out.freeze())
}
