//! The fuzz harness for the RESP codec: the invariants the `fuzz/` targets (one-liners) check, and that
//! `tests/codec/fuzz_replay.rs` and `tests/codec/roundtrip.rs` (stable, on every `cargo test`) check on the same
//! inputs. Not part of the library: the fuzz crate and `tests/codec/main.rs` include this file with `#[path]`, so it
//! sees only muxlock's public API.
//!
//! Every function takes arbitrary bytes, never fails on valid behaviour, and panics (`assert!`) when the codec
//! breaks one of its documented guarantees: that is how a fuzzer notices.
//!
//! - [`decode`]: the bytes as a reply stream. Whole, byte by byte and in pseudo-random chunks, [`Decoder`] yields
//!   the same values and stops with the same error (or leftover); `Ok(None)` and errors consume nothing; every value
//!   encodes to bytes that decode back to it.
//! - [`roundtrip`]: the bytes as the recipe of a valid [`Value`], which must encode, decode (whole and split) and
//!   encode again to identical bytes; its encoding then goes through [`decode`]'s checks. The same value written
//!   with RESP3's streamed forms ([`encode_streamed`]) must decode to it too.

// Each includer (a fuzz target, a test) uses a part of the harness.
#![allow(dead_code)]

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};

use muxlock::resp::{self, DecodeError, Decoder, ErrorKind, Value};

/// Decodes `data` as a stream of replies and checks that however the bytes arrive, the decoder says the same thing.
///
/// # Panics
///
/// When an invariant of [`resp::decode`] or [`Decoder`] is broken (see the module docs); never on invalid input.
pub fn decode(data: &[u8]) {
    let whole = decode_whole(data);
    for value in &whole.values {
        check_reencodes(value);
    }
    let byte_by_byte = decode_chunked(data, || 1);
    same_run(&whole, &byte_by_byte, "byte by byte");
    // Chunk sizes from a PRNG seeded by the data: deterministic for a given input, so a crash replays.
    let mut rng = Rng::new(data);
    for max in [4, 32, 512] {
        let chunked = decode_chunked(data, || 1 + rng.below(max));
        same_run(&whole, &chunked, "in chunks");
    }
}

/// Builds a valid [`Value`] from `data`, then checks that it encodes, decodes back (whole and split at a
/// data-derived point) to an equal value, and that encoding the decoded value gives the same bytes.
///
/// # Panics
///
/// When the codec loses or changes the value, or the encoding is not canonical; never for any `data`.
pub fn roundtrip(data: &[u8]) {
    let mut budget = MAX_NODES;
    let value = arbitrary_value(&mut Source { data, pos: 0 }, 0, &mut budget);
    let mut encoded = BytesMut::new();
    resp::encode(&value, &mut encoded);
    let bytes = encoded.to_vec();

    let decoded = match resp::decode(&mut encoded) {
        Ok(Some(decoded)) => decoded,
        other => panic!("{value:?} encoded as {bytes:?} decodes as {other:?}"),
    };
    assert_eq!(decoded, value, "encoded as {bytes:?}");
    assert!(encoded.is_empty(), "decoding {bytes:?} left {encoded:?}");

    // The same bytes in two reads through one resumable decoder.
    let split = Rng::new(data).below(bytes.len() + 1);
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::from(&bytes[..split]);
    if split < bytes.len() {
        let got = decoder.decode(&mut buf);
        assert!(matches!(got, Ok(None)), "{bytes:?} cut at {split}: {got:?}");
        assert_eq!(
            buf.len(),
            split,
            "{bytes:?} cut at {split}: Ok(None) consumed"
        );
        buf.extend_from_slice(&bytes[split..]);
    }
    match decoder.decode(&mut buf) {
        Ok(Some(v)) => assert_eq!(v, value, "{bytes:?} cut at {split}"),
        other => panic!("{bytes:?} cut at {split} decodes as {other:?}"),
    }
    assert!(buf.is_empty(), "{bytes:?} cut at {split}: left {buf:?}");

    // Canonical: the decoded value writes exactly the bytes it came from.
    let mut again = BytesMut::new();
    resp::encode(&decoded, &mut again);
    assert_eq!(&again[..], &bytes[..], "re-encoding {value:?}");

    // Deep, valid values are rare in random bytes: give these to the streaming checks too.
    decode(&bytes);

    // The same value with streamed strings and aggregates where RESP3 has them, as the data chooses: the same value
    // again, whole and however it is split (the streaming checks).
    let mut streamed = BytesMut::new();
    encode_streamed(&value, Rng::new(data).next(), &mut streamed);
    let streamed_bytes = streamed.to_vec();
    match resp::decode(&mut streamed) {
        Ok(Some(v)) => assert_eq!(v, value, "streamed as {streamed_bytes:?}"),
        other => panic!("{value:?} streamed as {streamed_bytes:?} decodes as {other:?}"),
    }
    assert!(
        streamed.is_empty(),
        "streamed as {streamed_bytes:?}: left {streamed:?}"
    );
    decode(&streamed_bytes);
}

/// Appends `value` to `buf` using RESP3's streamed forms, choices drawn from a PRNG seeded with `seed`: each bulk
/// string, array, set and map is streamed about half the time (`$?`, `*?`, `~?`, `%?`), a streamed string is cut
/// into chunks of random sizes, and everything else is written as [`resp::encode`] writes it, around streamed
/// values where it holds them. The bytes decode to a value equal to `value`.
///
/// For the round-trip property tests and the fuzz harness: the library's encoder writes only the counted forms.
/// Iterative, as the encoder: any depth can be written.
pub fn encode_streamed(value: &Value, seed: u64, buf: &mut BytesMut) {
    /// What is left to write: values, and the ends of the streamed aggregates they are in.
    enum Todo<'a> {
        Value(&'a Value),
        End,
    }
    fn header(buf: &mut BytesMut, ty: u8, n: usize) {
        buf.put_u8(ty);
        // Writing into a BytesMut cannot fail.
        let _ = write!(buf, "{n}\r\n");
    }
    fn pairs<'a>(todo: &mut Vec<Todo<'a>>, pairs: &'a [(Value, Value)]) {
        for (k, v) in pairs.iter().rev() {
            todo.push(Todo::Value(v));
            todo.push(Todo::Value(k));
        }
    }
    let mut rng = Rng(seed | 1);
    let mut todo = vec![Todo::Value(value)];
    while let Some(next) = todo.pop() {
        let v = match next {
            Todo::Value(v) => v,
            Todo::End => {
                buf.put_slice(b".\r\n");
                continue;
            }
        };
        let streamed = rng.below(2) == 0;
        match v {
            Value::BulkString(s) if streamed => {
                buf.put_slice(b"$?\r\n");
                let mut rest = &s[..];
                while !rest.is_empty() {
                    let n = 1 + rng.below(rest.len());
                    header(buf, b';', n);
                    buf.put_slice(&rest[..n]);
                    buf.put_slice(b"\r\n");
                    rest = &rest[n..];
                }
                buf.put_slice(b";0\r\n");
            }
            Value::Array(items) | Value::Set(items) if streamed => {
                buf.put_slice(&[v.type_byte(), b'?', b'\r', b'\n']);
                todo.push(Todo::End);
                todo.extend(items.iter().rev().map(Todo::Value));
            }
            // RESP3 streams no pushes.
            Value::Array(items) | Value::Set(items) | Value::Push(items) => {
                header(buf, v.type_byte(), items.len());
                todo.extend(items.iter().rev().map(Todo::Value));
            }
            Value::Map(items) if streamed => {
                buf.put_slice(b"%?\r\n");
                todo.push(Todo::End);
                pairs(&mut todo, items);
            }
            Value::Map(items) => {
                header(buf, b'%', items.len());
                pairs(&mut todo, items);
            }
            // RESP3 streams no attributes; the values inside may be.
            Value::Attribute { attributes, value } => {
                header(buf, b'|', attributes.len());
                todo.push(Todo::Value(value));
                pairs(&mut todo, attributes);
            }
            scalar => resp::encode(scalar, buf),
        }
    }
}

/// How a byte string decodes to its end: every value, then what stopped the decoder.
#[derive(Debug)]
struct Run {
    values: Vec<Value>,
    /// The error that stopped decoding, or `None` if it stopped at `Ok(None)`.
    error: Option<DecodeError>,
    /// The bytes in the buffer when decoding stopped: the incomplete or invalid value's bytes received so far.
    leftover: Vec<u8>,
}

impl Run {
    fn stopped(values: Vec<Value>, error: Option<DecodeError>, buf: &[u8]) -> Run {
        Run {
            values,
            error,
            leftover: buf.to_vec(),
        }
    }
}

/// Decodes all of `data` in one buffer with [`resp::decode`], checking what each call consumed.
fn decode_whole(data: &[u8]) -> Run {
    let mut buf = BytesMut::from(data);
    let mut values = Vec::new();
    loop {
        let before = buf.len();
        let first = buf.first().copied();
        let got = resp::decode(&mut buf);
        check_step(&got, before, buf.len());
        let error = match got {
            Ok(Some(value)) => {
                // A value begins with its own type byte (`|` for an attributed reply).
                assert_eq!(first, Some(value.type_byte()), "{value:?}");
                values.push(value);
                continue;
            }
            Ok(None) => None,
            Err(e) => Some(e),
        };
        return Run::stopped(values, error, &buf);
    }
}

/// Feeds `data` to one [`Decoder`] in chunks of `next_len()` bytes, draining every complete value after each.
fn decode_chunked(data: &[u8], mut next_len: impl FnMut() -> usize) -> Run {
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::new();
    let mut values = Vec::new();
    let mut fed = 0;
    while fed < data.len() {
        let n = next_len().clamp(1, data.len() - fed);
        buf.extend_from_slice(&data[fed..fed + n]);
        fed += n;
        loop {
            let before = buf.len();
            let got = decoder.decode(&mut buf);
            check_step(&got, before, buf.len());
            match got {
                Ok(Some(value)) => values.push(value),
                Ok(None) => break,
                Err(e) => return Run::stopped(values, Some(e), &buf),
            }
        }
    }
    Run::stopped(values, None, &buf)
}

/// The contract of one decode call that saw `before` bytes and left `after`.
fn check_step(got: &Result<Option<Value>, DecodeError>, before: usize, after: usize) {
    match got {
        Ok(Some(_)) => assert!(after < before, "a value consumed nothing"),
        Ok(None) => assert_eq!(after, before, "Ok(None) consumed bytes"),
        Err(e) => {
            assert_eq!(after, before, "an error consumed bytes: {e:?}");
            // The offset names a byte the decoder has seen, counted from the value's first byte.
            assert!(
                e.offset() < before,
                "{e:?} past the {before} bytes received"
            );
            assert_ne!(
                e.kind(),
                ErrorKind::Internal,
                "the decoder's passes disagreed"
            );
        }
    }
}

/// Whole and streamed decoding agree: the same values, then the same error, or the same incomplete tail.
fn same_run(whole: &Run, streamed: &Run, how: &str) {
    assert_eq!(streamed.values, whole.values, "values {how}");
    assert_eq!(streamed.error, whole.error, "error {how}");
    match whole.error {
        // Streaming stops at the error, so it has received a prefix of what the whole buffer holds.
        Some(_) => assert!(
            whole.leftover.starts_with(&streamed.leftover),
            "leftover {how}: {:?} is not a prefix of {:?}",
            streamed.leftover,
            whole.leftover
        ),
        None => assert_eq!(streamed.leftover, whole.leftover, "leftover {how}"),
    }
}

/// A decoded value encodes to bytes that decode back to it, and those bytes are a fixed point of the codec.
fn check_reencodes(value: &Value) {
    let mut buf = BytesMut::new();
    resp::encode(value, &mut buf);
    let bytes = buf.to_vec();
    let back = match resp::decode(&mut buf) {
        Ok(Some(back)) => back,
        other => panic!("{value:?} encodes as {bytes:?}, which decodes as {other:?}"),
    };
    assert_eq!(&back, value, "encoded as {bytes:?}");
    assert!(buf.is_empty(), "{bytes:?} decoded with {buf:?} left");
    let mut again = BytesMut::new();
    resp::encode(&back, &mut again);
    assert_eq!(&again[..], &bytes[..], "re-encoding {value:?}");
}

/// Nesting depth of generated values: far below the decoder's default limit, and shallow enough that `Value`'s
/// recursive `Drop` and `PartialEq` are harmless.
const MAX_DEPTH: usize = 8;
/// Total number of values (scalars and aggregates) in one generated value.
const MAX_NODES: usize = 256;

/// The fuzzer's bytes, read front to back; zeros once exhausted, so generation always terminates.
struct Source<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Source<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |acc, _| acc << 8 | u64::from(self.byte()))
    }

    /// Up to 23 bytes, or up to 255 one time in eight: short strings, with long ones often enough.
    fn bytes(&mut self, f: impl Fn(u8) -> u8) -> bytes::Bytes {
        let len = match self.byte() {
            n if n % 8 == 7 => usize::from(self.byte()),
            n => usize::from(n % 24),
        };
        (0..len).map(|_| f(self.byte())).collect::<Vec<u8>>().into()
    }
}

/// A valid value of any variant: line types hold no CR or LF, big numbers are `[+-]?[0-9]+`.
fn arbitrary_value(src: &mut Source<'_>, depth: usize, budget: &mut usize) -> Value {
    *budget = budget.saturating_sub(1);
    let mut kind = src.byte() % 17;
    if kind >= 12 && (depth >= MAX_DEPTH || *budget == 0) {
        kind %= 12;
    }
    // The RESP spec forbids CR and LF in simple strings and errors; keep the byte, change its meaning.
    let no_crlf = |b: u8| {
        if b == b'\r' || b == b'\n' {
            b ^ 0x40
        } else {
            b
        }
    };
    match kind {
        0 => Value::SimpleString(src.bytes(no_crlf)),
        1 => Value::Error(src.bytes(no_crlf)),
        2 => Value::Integer(match src.byte() % 4 {
            0 => i64::from(src.byte() as i8),
            1 => i64::MIN,
            2 => i64::MAX,
            _ => src.u64() as i64,
        }),
        3 => Value::BulkString(src.bytes(|b| b)),
        4 => Value::NullBulk,
        5 => Value::NullArray,
        6 => Value::Null,
        7 => Value::Boolean(src.byte() % 2 == 1),
        8 => Value::Double(match src.byte() % 10 {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3 => -0.0,
            4 => 0.0,
            5 => f64::from_bits(1), // the smallest subnormal
            6 => f64::MAX,
            7 => f64::from(src.byte() as i8) / 4.0,
            // Any bit pattern: NaNs with payloads and signs, subnormals, huge and tiny exponents.
            _ => f64::from_bits(src.u64()),
        }),
        9 => {
            let sign: &[u8] = match src.byte() % 3 {
                0 => b"",
                1 => b"+",
                _ => b"-",
            };
            let digits = 1 + usize::from(src.byte() % 48);
            let mut s = sign.to_vec();
            s.extend((0..digits).map(|_| b'0' + src.byte() % 10));
            Value::BigNumber(s.into())
        }
        10 => Value::BulkError(src.bytes(|b| b)),
        11 => Value::Verbatim {
            format: [src.byte(), src.byte(), src.byte()],
            data: src.bytes(|b| b),
        },
        _ => {
            // Maps and attributes hold pairs: twice as many values.
            let per = if kind >= 15 { 2 } else { 1 };
            let n = per * usize::from(src.byte() % 6).min(*budget);
            let mut items = || {
                (0..n)
                    .map(|_| arbitrary_value(src, depth + 1, budget))
                    .collect::<Vec<_>>()
            };
            match kind {
                12 => Value::Array(items()),
                13 => Value::Set(items()),
                14 => Value::Push(items()),
                15 => Value::Map(pairs(items())),
                _ => {
                    let attributes = pairs(items());
                    let value = Box::new(arbitrary_value(src, depth + 1, budget));
                    Value::Attribute { attributes, value }
                }
            }
        }
    }
}

/// Pairs up consecutive values.
fn pairs(items: Vec<Value>) -> Vec<(Value, Value)> {
    let mut it = items.into_iter();
    let mut out = Vec::new();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    out
}

/// A tiny deterministic PRNG (xorshift64*) seeded from the input, so that every run of one input is the same.
struct Rng(u64);

impl Rng {
    /// A PRNG seeded from `data`.
    fn new(data: &[u8]) -> Rng {
        // FNV-1a over the bytes, then the length; never zero, which xorshift cannot leave.
        let hash = data.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        }) ^ data.len() as u64;
        Rng(hash | 1)
    }

    /// The next 64-bit output.
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() >> 32) as usize % n
    }
}
