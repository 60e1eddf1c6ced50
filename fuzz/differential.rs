//! Differential check: muxlock's RESP decoder against redis-protocol 6's RESP3 decoder
//! (`redis_protocol::resp3::decode::streaming::decode_bytes`, driven by [`their_decode`] as a client drives it, so
//! that RESP3's streamed strings and aggregates are compared too).
//!
//! Shared by the `differential` fuzz target and `tests/codec/fuzz_replay.rs` (both include this file with `#[path]`).
//! The same bytes go to both decoders, value after value. When both return a value, the values must be equal
//! (after converting redis-protocol's frame to a [`Value`]) and span the same bytes. When they disagree, the
//! disagreement must be one of the intended differences — muxlock is deliberately stricter than
//! redis-protocol, and supports a few things it does not — or the check panics.
//!
//! The intended differences, D1–D17, are listed in `fuzz_targets/differential.rs` and `fuzz/README.md`; the
//! predicates below name them.
//!
//! Inputs that could nest more than [`MAX_THEIR_DEPTH`] levels are not given to redis-protocol: its decoder
//! recurses once per level and would overflow the stack, which is not what this check is about.

use bytes::{Bytes, BytesMut};
use muxlock::resp::{self, DecodeError, ErrorKind, Value};
use redis_protocol::error::{RedisProtocolError, RedisProtocolErrorKind};
use redis_protocol::resp3::decode::streaming::decode_bytes;
use redis_protocol::resp3::types::{
    BytesAttributes, BytesFrame, DecodedFrame, FrameKind, FrameMap, Resp3Frame,
    VerbatimStringFormat,
};

/// The most aggregate type bytes an input may hold for redis-protocol to see it: each could open a level of its
/// recursion. Well above our own depth limit (128), so D9's `TooDeep` stays reachable.
pub const MAX_THEIR_DEPTH: usize = 512;

/// Decodes `data` with both decoders, value after value, and panics on a disagreement that is not an intended
/// difference (see the module docs).
pub fn check(data: &[u8]) {
    let aggregates = data.iter().filter(|b| b"*%~>|".contains(b)).count();
    if aggregates > MAX_THEIR_DEPTH {
        return;
    }
    let all = Bytes::copy_from_slice(data);
    let mut at = 0;
    while at < all.len() {
        let rest = all.slice(at..);
        let mut buf = BytesMut::from(&rest[..]);
        let ours = resp::decode(&mut buf);
        let ours_len = rest.len() - buf.len();
        let theirs = their_decode(&rest);
        match (ours, theirs) {
            (Ok(Some(value)), Ok(Some((frame, their_len)))) => {
                let Some(converted) = convert(&frame) else {
                    panic!("at {at}: we read {value:?}, they read a non-reply frame {frame:?}");
                };
                assert!(
                    same(&value, &converted, false),
                    "at {at}: we read {value:?}, they read {converted:?} ({frame:?})"
                );
                assert_eq!(
                    ours_len, their_len,
                    "at {at}: {value:?} spans different bytes"
                );
                at += ours_len;
            }
            (Ok(Some(value)), Err(e)) => {
                assert!(
                    we_accept(&value).is_some() || we_accept_bytes(&rest[..ours_len]).is_some(),
                    "at {at}: we read {value:?}, they reject: {e:?}"
                );
                return;
            }
            (Ok(Some(value)), Ok(None)) => {
                panic!("at {at}: we read {value:?}, they need more bytes")
            }
            (Ok(None), Ok(Some((frame, _)))) => {
                panic!("at {at}: we need more bytes, they read {frame:?}")
            }
            (Ok(None), Err(e)) => {
                assert!(
                    they_reject_early(&e).is_some(),
                    "at {at}: we need more bytes, they reject: {e:?}"
                );
                return;
            }
            (Err(e), Ok(Some((frame, their_len)))) => {
                assert!(
                    we_reject(&e, &rest).is_some(),
                    "at {at}: we reject ({e}), they read {frame:?}"
                );
                // Our error must lie inside what they read: otherwise the two disagree on where the value ends.
                assert!(
                    e.offset() < their_len,
                    "at {at}: we reject ({e}) past the {their_len} bytes of their {frame:?}"
                );
                return;
            }
            // D16, or both reject, or both need more.
            (Err(_), Ok(None) | Err(_)) | (Ok(None), Ok(None)) => return,
        }
    }
}

/// Messages of the errors [`their_decode`] makes itself, where it stands in for redis-protocol's own refusal.
const THEIR_NULL_STREAM: &str =
    "driver: a -1 length, which their RESP3 decoder reads as a streamed header";
const THEIR_UNHASHABLE: &str = "driver: an unhashable member or key in a streamed set or map";

/// redis-protocol's RESP3 decoder in streaming mode, driven as its docs show a client driving it (and as a client
/// must, to read nested streams): a streamed header opens a buffer, the frames that follow fill it until an end
/// frame, and `Resp3Frame::from_buffer` turns the buffer into one frame. The answer has the shape of
/// `complete::decode_bytes`: a frame and the bytes it spans, `None` while incomplete, or an error.
///
/// Two things their `StreamedFrame` would do are refused here instead, as their complete decoder refuses them:
/// a `-1` length opening a stream (their decoder reads `-1` as `?`: D10), and hashing a set member or map key that
/// their `Hash` panics on (D11).
pub fn their_decode(data: &Bytes) -> Result<Option<(BytesFrame, usize)>, RedisProtocolError> {
    /// A stream being read: its kind, the attributes before its header, and its frames so far.
    struct Open {
        kind: FrameKind,
        attributes: Option<BytesAttributes>,
        frames: Vec<BytesFrame>,
    }
    let refuse = |why: &'static str| {
        Err(RedisProtocolError::new(
            RedisProtocolErrorKind::DecodeError,
            why,
        ))
    };
    let mut open: Vec<Open> = Vec::new();
    let mut at = 0;
    loop {
        let rest = data.slice(at..);
        let Some((decoded, used)) = decode_bytes(&rest)? else {
            return Ok(None);
        };
        at += used;
        let mut frame = match decoded {
            DecodedFrame::Streaming(mut stream) => {
                // The header is the last thing read: `X?\r\n` or `X-1\r\n`.
                if used < 3 || rest[used - 3] != b'?' {
                    return refuse(THEIR_NULL_STREAM);
                }
                // Attributes before the header are only reachable through `take`.
                let attributes = stream.take()?.take_attributes();
                open.push(Open {
                    kind: stream.kind,
                    attributes,
                    frames: Vec::new(),
                });
                continue;
            }
            DecodedFrame::Complete(frame) => frame,
        };
        // Hand the frame up, closing every stream it ends.
        loop {
            if open.is_empty() {
                return Ok(Some((frame, at)));
            }
            if !frame.is_end_stream_frame() {
                if let Some(top) = open.last_mut() {
                    top.frames.push(frame);
                }
                break;
            }
            let Some(done) = open.pop() else {
                break;
            };
            // Sets hash every member, maps every key.
            let step = match done.kind {
                FrameKind::Set => 1,
                FrameKind::Map => 2,
                _ => 0,
            };
            if step > 0
                && done
                    .frames
                    .iter()
                    .step_by(step)
                    .any(|f| !f.kind().can_hash())
            {
                return refuse(THEIR_UNHASHABLE);
            }
            frame = BytesFrame::from_buffer(done.kind, done.frames, done.attributes)?;
        }
    }
}

/// D1–D9, D18–D20: why redis-protocol may accept bytes we reject with `e`; `input` starts at the value `e` is
/// about.
pub fn we_reject(e: &DecodeError, input: &[u8]) -> Option<&'static str> {
    let byte = input.get(e.offset()).copied();
    Some(match e.kind() {
        ErrorKind::InvalidInteger | ErrorKind::InvalidLength
            if matches!(byte, Some(b'+' | b'0'..=b'9')) =>
        {
            "D1: sign or leading zero"
        }
        ErrorKind::InvalidLineEnd if matches!(byte, Some(b'\r' | b'\n')) => "D2: lone CR or LF",
        ErrorKind::InvalidBulkEnd => "D3: bulk terminator",
        ErrorKind::InvalidDouble => "D4: double grammar",
        ErrorKind::InvalidBigNumber => "D5: big number grammar",
        ErrorKind::InvalidNull => "D6: null with content",
        ErrorKind::InvalidVerbatim => "D7: verbatim separator",
        ErrorKind::UnknownType if byte == Some(b'H') => "D8: not a reply",
        ErrorKind::StrayStreamMarker => "D8: stream marker out of place",
        ErrorKind::TooDeep
        | ErrorKind::LineTooLong
        | ErrorKind::BulkTooLong
        | ErrorKind::AggregateTooLong => "D9: limits",
        ErrorKind::ExpectedChunk if matches!(byte, Some(b'$' | b'.')) => {
            "D18: blob string or end in a streamed string"
        }
        ErrorKind::OddStreamedMap => "D19: odd streamed map",
        ErrorKind::InvalidLineEnd
            if input[..e.offset()].ends_with(b".") || input[..e.offset()].ends_with(b".\r") =>
        {
            "D20: end marker with content"
        }
        _ => return None,
    })
}

/// D10–D14: why redis-protocol may reject a value we accept.
pub fn we_accept(value: &Value) -> Option<&'static str> {
    let not_hashable = |v: &Value| {
        matches!(
            v.without_attributes(),
            Value::Array(_) | Value::Map(_) | Value::Set(_) | Value::Push(_)
        )
    };
    let mut todo = vec![value];
    while let Some(v) = todo.pop() {
        match v {
            Value::NullBulk | Value::NullArray => return Some("D10: RESP2 null"),
            Value::Error(s) if std::str::from_utf8(s).is_err() => {
                return Some("D14: simple error not UTF-8");
            }
            Value::Verbatim { format, .. } if format != b"txt" && format != b"mkd" => {
                return Some("D13: verbatim format");
            }
            Value::Array(items) | Value::Push(items) => todo.extend(items),
            Value::Set(items) => {
                if items.iter().any(not_hashable) {
                    return Some("D11: aggregate set member");
                }
                todo.extend(items);
            }
            Value::Map(pairs) => {
                if pairs.iter().any(|(k, _)| not_hashable(k)) {
                    return Some("D11: aggregate map key");
                }
                todo.extend(pairs.iter().flat_map(|(k, v)| [k, v]));
            }
            Value::Attribute { attributes, value } => {
                if matches!(**value, Value::Attribute { .. } | Value::Null) {
                    return Some("D12: attribute on an attribute or null");
                }
                if attributes.iter().any(|(k, _)| not_hashable(k)) {
                    return Some("D11: aggregate attribute key");
                }
                todo.extend(attributes.iter().flat_map(|(k, v)| [k, v]));
                todo.push(value);
            }
            _ => {}
        }
    }
    None
}

/// D21: why redis-protocol may reject the bytes of a value we accept, when the value itself does not say (a
/// streamed value decodes to the same `Value` as a counted one).
pub fn we_accept_bytes(bytes: &[u8]) -> Option<&'static str> {
    streamed_in_counted(bytes).then_some("D21: streamed value inside a counted aggregate")
}

/// Whether `bytes`, a value we decoded (so valid RESP), holds a streamed header where their decoder wants a
/// complete frame: among the values of a counted aggregate or an attribute's pairs. An attribute's annotated value
/// is read where the attribute stands, as theirs reads it; the values of a streamed aggregate are read at top level
/// by [`their_decode`].
fn streamed_in_counted(bytes: &[u8]) -> bool {
    fn number(s: &[u8]) -> Option<i64> {
        std::str::from_utf8(s).ok()?.parse().ok()
    }
    /// The end of the line starting at `at`: the offset of its CR.
    fn line_end(bytes: &[u8], at: usize) -> Option<usize> {
        Some(at + bytes.get(at..)?.windows(2).position(|w| w == b"\r\n")?)
    }
    // Each open aggregate: its type byte and the values it still expects (`None`: streamed, until its end).
    let mut open: Vec<(u8, Option<i64>)> = Vec::new();
    let mut at = 0;
    while let Some(&ty) = bytes.get(at) {
        let Some(end) = line_end(bytes, at) else {
            return false;
        };
        let head = &bytes[at + 1..end];
        let mut next = end + 2;
        let mut complete = true;
        if head == b"?" {
            let context = open
                .iter()
                .rev()
                .find(|&&(t, left)| !(t == b'|' && left == Some(1)));
            if matches!(context, Some((_, Some(_)))) {
                return true;
            }
            if ty == b'$' {
                // Its chunks, up to the empty one.
                loop {
                    let Some(end) = line_end(bytes, next) else {
                        return false;
                    };
                    let Some(n) = bytes.get(next + 1..end).and_then(number) else {
                        return false;
                    };
                    next = end + 2;
                    if n == 0 {
                        break;
                    }
                    next += n as usize + 2;
                }
            } else {
                open.push((ty, None));
                complete = false;
            }
        } else {
            match ty {
                b'$' | b'!' | b'=' => match number(head) {
                    Some(n) if n >= 0 => next += n as usize + 2,
                    _ => {}
                },
                b'*' | b'%' | b'~' | b'>' | b'|' => {
                    let n = number(head).unwrap_or(0).max(0);
                    let values = match ty {
                        b'%' => 2 * n,
                        b'|' => 2 * n + 1,
                        _ => n,
                    };
                    if values > 0 {
                        open.push((ty, Some(values)));
                        complete = false;
                    }
                }
                b'.' => {
                    open.pop();
                }
                _ => {}
            }
        }
        at = next;
        // A complete value counts against its counted parent, which may complete in turn.
        while complete {
            match open.last_mut() {
                Some((_, Some(left))) => {
                    *left -= 1;
                    complete = *left == 0;
                    if complete {
                        open.pop();
                    }
                }
                _ => complete = false,
            }
        }
    }
    false
}

/// D17: whether redis-protocol's error comes from one of its checks of D10–D14 or D21, which it makes as soon as
/// the construct is complete. Its errors carry no kind, only the failing parser's name in the message.
pub fn they_reject_early(e: &RedisProtocolError) -> Option<&'static str> {
    let details = e.details();
    [
        // nom's `map_res` around a nested frame: a streamed frame (D10, D21) or an unhashable map key (D11).
        (
            "MapRes",
            "D10/D11/D21: nested RESP2 null, streamed value or aggregate map key",
        ),
        (THEIR_NULL_STREAM, "D10: RESP2 null in a streamed aggregate"),
        // A simple error is made a `str` when its frame is built: for a value of a streamed aggregate, when that
        // value is read, before the aggregate ends. (`Utf8Error` says "invalid utf-8 sequence ..." or "incomplete
        // utf-8 byte sequence ...".)
        (
            "utf-8",
            "D14: simple error not UTF-8 in a streamed aggregate",
        ),
        (
            THEIR_UNHASHABLE,
            "D11: aggregate in a streamed set or map key",
        ),
        ("to_set", "D11: aggregate set member"),
        (
            "parse_non_attribute_frame",
            "D12: attribute on an attribute",
        ),
        ("attach_attributes", "D12: attribute on null"),
        ("to_verbatimstring_format", "D13: verbatim format"),
        ("parse_utf8", "D13: verbatim format not UTF-8"),
    ]
    .into_iter()
    .find(|(needle, _)| details.contains(needle))
    .map(|(_, why)| why)
}

/// Their frame as our value; `None` for frames that are not replies (HELLO, streamed chunks and ends).
fn convert(frame: &BytesFrame) -> Option<Value> {
    let list = |frames: &[BytesFrame]| frames.iter().map(convert).collect::<Option<Vec<_>>>();
    let (value, attributes) = match frame {
        BytesFrame::BlobString { data, attributes } => {
            (Value::BulkString(data.clone()), attributes)
        }
        BytesFrame::BlobError { data, attributes } => (Value::BulkError(data.clone()), attributes),
        BytesFrame::SimpleString { data, attributes } => {
            (Value::SimpleString(data.clone()), attributes)
        }
        BytesFrame::SimpleError { data, attributes } => (
            Value::Error(Bytes::copy_from_slice(data.as_bytes())),
            attributes,
        ),
        BytesFrame::Boolean { data, attributes } => (Value::Boolean(*data), attributes),
        BytesFrame::Null => return Some(Value::Null),
        BytesFrame::Number { data, attributes } => (Value::Integer(*data), attributes),
        BytesFrame::Double { data, attributes } => (Value::Double(*data), attributes),
        BytesFrame::BigNumber { data, attributes } => (Value::BigNumber(data.clone()), attributes),
        BytesFrame::VerbatimString {
            data,
            format,
            attributes,
        } => {
            let format = match format {
                VerbatimStringFormat::Text => *b"txt",
                VerbatimStringFormat::Markdown => *b"mkd",
            };
            let data = data.clone();
            (Value::Verbatim { format, data }, attributes)
        }
        BytesFrame::Array { data, attributes } => (Value::Array(list(data)?), attributes),
        BytesFrame::Push { data, attributes } => (Value::Push(list(data)?), attributes),
        BytesFrame::Set { data, attributes } => {
            let members = data.iter().map(convert).collect::<Option<_>>()?;
            (Value::Set(members), attributes)
        }
        BytesFrame::Map { data, attributes } => (Value::Map(convert_map(data)?), attributes),
        BytesFrame::Hello { .. } | BytesFrame::ChunkedString(_) => return None,
    };
    // They keep attributes on the frame they annotate; we wrap that frame's value.
    Some(match attributes {
        None => value,
        Some(attributes) => Value::Attribute {
            attributes: convert_map(attributes)?,
            value: Box::new(value),
        },
    })
}

fn convert_map(map: &FrameMap<BytesFrame, BytesFrame>) -> Option<Vec<(Value, Value)>> {
    map.iter()
        .map(|(k, v)| Some((convert(k)?, convert(v)?)))
        .collect()
}

/// Whether our value `a` and their converted value `b` are the same reply. Exact, except D15 for maps, sets and
/// attributes; `loose` compares keys as their hash maps do (`0.0 == -0.0`).
fn same(a: &Value, b: &Value, loose: bool) -> bool {
    let all = |xs: &[Value], ys: &[Value]| {
        xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same(x, y, loose))
    };
    match (a, b) {
        (Value::Double(x), Value::Double(y)) => {
            (x.is_nan() && y.is_nan())
                || if loose {
                    x == y
                } else {
                    x.to_bits() == y.to_bits()
                }
        }
        (Value::Array(xs), Value::Array(ys)) | (Value::Push(xs), Value::Push(ys)) => all(xs, ys),
        (Value::Set(xs), Value::Set(ys)) => {
            ys.iter().all(|y| xs.iter().any(|x| same(x, y, loose)))
                && xs.iter().all(|x| ys.iter().any(|y| same(x, y, true)))
        }
        (Value::Map(xs), Value::Map(ys)) => same_map(xs, ys, loose),
        (
            Value::Attribute {
                attributes: xs,
                value: x,
            },
            Value::Attribute {
                attributes: ys,
                value: y,
            },
        ) => same_map(xs, ys, loose) && same(x, y, loose),
        // Scalars: Value's own equality (NaN equals NaN).
        _ => a == b,
    }
}

/// D15: the same distinct keys, and every pair they kept is one of ours (a collapsed duplicate keeps one key and
/// the value of another occurrence, so keys compare loosely).
fn same_map(ours: &[(Value, Value)], theirs: &[(Value, Value)], loose: bool) -> bool {
    theirs.iter().all(|(ky, vy)| {
        ours.iter()
            .any(|(kx, vx)| same(kx, ky, true) && same(vx, vy, loose))
    }) && ours
        .iter()
        .all(|(kx, _)| theirs.iter().any(|(ky, _)| same(kx, ky, true)))
}
