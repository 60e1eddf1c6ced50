//! The codec's vector table: every RESP2 and RESP3 type, the null forms, RESP3's streamed forms, nesting, and every
//! error class.
//!
//! Each vector is checked whole, at every strict prefix, with trailing bytes, fed byte by byte to a [`Decoder`],
//! and (when the input is canonical) encoded back.

use bytes::{Bytes, BytesMut};
use muxlock::resp::{Decoder, ErrorKind, Limits, Value, decode, encode};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}
fn simple(s: &str) -> Value {
    Value::SimpleString(b(s))
}
fn bulk(s: &str) -> Value {
    Value::BulkString(b(s))
}
fn int(n: i64) -> Value {
    Value::Integer(n)
}
fn arr(items: Vec<Value>) -> Value {
    Value::Array(items)
}
fn map(pairs: Vec<(Value, Value)>) -> Value {
    Value::Map(pairs)
}

/// A valid vector: input, expected value, and whether `encode` gives the input back.
struct Ok(&'static [u8], Value, bool);
/// An invalid vector: input, expected error kind and offset.
struct Bad(&'static [u8], ErrorKind, usize);

fn valid() -> Vec<Ok> {
    use Value::*;
    vec![
        Ok(b"+OK\r\n", simple("OK"), true),
        Ok(b"+\r\n", simple(""), true),
        Ok(b"+hello world\r\n", simple("hello world"), true),
        Ok(
            b"-ERR unknown command\r\n",
            Error(b("ERR unknown command")),
            true,
        ),
        Ok(b"-\r\n", Error(b("")), true),
        Ok(b":0\r\n", int(0), true),
        Ok(b":1\r\n", int(1), true),
        Ok(b":-1\r\n", int(-1), true),
        Ok(b":12345\r\n", int(12345), true),
        Ok(b":9223372036854775807\r\n", int(i64::MAX), true),
        Ok(b":-9223372036854775808\r\n", int(i64::MIN), true),
        Ok(b"$5\r\nhello\r\n", bulk("hello"), true),
        Ok(b"$0\r\n\r\n", bulk(""), true),
        Ok(b"$4\r\na\r\nb\r\n", bulk("a\r\nb"), true),
        Ok(
            b"$2\r\n\x00\xff\r\n",
            BulkString(Bytes::from_static(b"\x00\xff")),
            true,
        ),
        Ok(b"$-1\r\n", NullBulk, true),
        Ok(b"*0\r\n", arr(vec![]), true),
        Ok(b"*-1\r\n", NullArray, true),
        Ok(
            b"*2\r\n$3\r\nfoo\r\n:7\r\n",
            arr(vec![bulk("foo"), int(7)]),
            true,
        ),
        Ok(
            b"*3\r\n$-1\r\n*-1\r\n_\r\n",
            arr(vec![NullBulk, NullArray, Null]),
            true,
        ),
        Ok(
            b"*2\r\n*1\r\n:1\r\n*0\r\n",
            arr(vec![arr(vec![int(1)]), arr(vec![])]),
            true,
        ),
        Ok(
            b"*1\r\n*1\r\n*1\r\n*1\r\n+deep\r\n",
            arr(vec![arr(vec![arr(vec![arr(vec![simple("deep")])])])]),
            true,
        ),
        Ok(
            b"*2\r\n-ERR x\r\n+OK\r\n",
            arr(vec![Error(b("ERR x")), simple("OK")]),
            true,
        ),
        Ok(b"_\r\n", Null, true),
        Ok(b"#t\r\n", Boolean(true), true),
        Ok(b"#f\r\n", Boolean(false), true),
        Ok(b",1.5\r\n", Double(1.5), true),
        Ok(b",3.25\r\n", Double(3.25), true),
        Ok(b",-0.25\r\n", Double(-0.25), true),
        Ok(b",10\r\n", Double(10.0), false),
        Ok(b",+2.5\r\n", Double(2.5), false),
        Ok(b",1e300\r\n", Double(1e300), true),
        Ok(b",1.5E-7\r\n", Double(1.5e-7), false),
        Ok(b",2e+3\r\n", Double(2000.0), false),
        Ok(b",inf\r\n", Double(f64::INFINITY), true),
        Ok(b",-inf\r\n", Double(f64::NEG_INFINITY), true),
        Ok(b",nan\r\n", Double(f64::NAN), true),
        Ok(b",-nan\r\n", Double(f64::NAN), false),
        Ok(
            b"(3492890328409238509324850943850943825024385\r\n",
            BigNumber(b("3492890328409238509324850943850943825024385")),
            true,
        ),
        Ok(b"(-12\r\n", BigNumber(b("-12")), true),
        Ok(
            b"!21\r\nSYNTAX invalid syntax\r\n",
            BulkError(b("SYNTAX invalid syntax")),
            true,
        ),
        Ok(b"!0\r\n\r\n", BulkError(b("")), true),
        Ok(
            b"=15\r\ntxt:Some string\r\n",
            Verbatim {
                format: *b"txt",
                data: b("Some string"),
            },
            true,
        ),
        Ok(
            b"=4\r\nmkd:\r\n",
            Verbatim {
                format: *b"mkd",
                data: b(""),
            },
            true,
        ),
        Ok(b"%0\r\n", Map(vec![]), true),
        Ok(
            b"%2\r\n+a\r\n:1\r\n+b\r\n:2\r\n",
            Map(vec![(simple("a"), int(1)), (simple("b"), int(2))]),
            true,
        ),
        Ok(
            b"%1\r\n*1\r\n:1\r\n%1\r\n_\r\n#t\r\n",
            Map(vec![(arr(vec![int(1)]), Map(vec![(Null, Boolean(true))]))]),
            true,
        ),
        Ok(b"~0\r\n", Set(vec![]), true),
        Ok(
            b"~3\r\n+a\r\n:1\r\n,2.5\r\n",
            Set(vec![simple("a"), int(1), Double(2.5)]),
            true,
        ),
        Ok(b">0\r\n", Push(vec![]), true),
        Ok(
            b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n",
            Push(vec![bulk("message"), bulk("ch"), bulk("hi")]),
            true,
        ),
        Ok(
            b"|1\r\n+ttl\r\n:3600\r\n+OK\r\n",
            Attribute {
                attributes: vec![(simple("ttl"), int(3600))],
                value: Box::new(simple("OK")),
            },
            true,
        ),
        Ok(
            b"|0\r\n:1\r\n",
            Attribute {
                attributes: vec![],
                value: Box::new(int(1)),
            },
            true,
        ),
        Ok(
            b"|1\r\n+a\r\n+b\r\n*1\r\n:1\r\n",
            Attribute {
                attributes: vec![(simple("a"), simple("b"))],
                value: Box::new(arr(vec![int(1)])),
            },
            true,
        ),
        Ok(
            b"*2\r\n|1\r\n+k\r\n+v\r\n:1\r\n:2\r\n",
            arr(vec![
                Attribute {
                    attributes: vec![(simple("k"), simple("v"))],
                    value: Box::new(int(1)),
                },
                int(2),
            ]),
            true,
        ),
        Ok(
            b"|1\r\n+a\r\n+b\r\n|1\r\n+c\r\n+d\r\n_\r\n",
            Attribute {
                attributes: vec![(simple("a"), simple("b"))],
                value: Box::new(Attribute {
                    attributes: vec![(simple("c"), simple("d"))],
                    value: Box::new(Null),
                }),
            },
            true,
        ),
        Ok(
            b"*1\r\n>1\r\n+x\r\n",
            arr(vec![Push(vec![simple("x")])]),
            true,
        ),
        Ok(b"~1\r\n%0\r\n", Set(vec![Map(vec![])]), true),
        Ok(
            b"*4\r\n+OK\r\n$-1\r\n:1\r\n:0\r\n",
            arr(vec![simple("OK"), NullBulk, int(1), int(0)]),
            true,
        ),
        Ok(b"*1\r\n*0\r\n", arr(vec![arr(vec![])]), true),
        // RESP3 streamed strings: the same values as their counted forms, never encoded back to these bytes. (The
        // spec's own example, `Hell`, `o wor`, `d`, spells "Hello word".)
        Ok(
            b"$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;2\r\nld\r\n;0\r\n",
            bulk("Hello world"),
            false,
        ),
        Ok(b"$?\r\n;5\r\nhello\r\n;0\r\n", bulk("hello"), false),
        Ok(b"$?\r\n;0\r\n", bulk(""), false),
        Ok(
            b"$?\r\n;4\r\na\r\nb\r\n;2\r\n\r\n\r\n;0\r\n",
            bulk("a\r\nb\r\n"),
            false,
        ),
        Ok(
            b"$?\r\n;10\r\n0123456789\r\n;1\r\n\xff\r\n;0\r\n",
            BulkString(Bytes::from_static(b"0123456789\xff")),
            false,
        ),
        // Streamed aggregates.
        Ok(
            b"*?\r\n:1\r\n:2\r\n:3\r\n.\r\n",
            arr(vec![int(1), int(2), int(3)]),
            false,
        ),
        Ok(b"*?\r\n.\r\n", arr(vec![]), false),
        Ok(
            b"*?\r\n$1\r\na\r\n$2\r\nbc\r\n.\r\n",
            arr(vec![bulk("a"), bulk("bc")]),
            false,
        ),
        Ok(
            b"*?\r\n$-1\r\n*-1\r\n_\r\n.\r\n",
            arr(vec![NullBulk, NullArray, Null]),
            false,
        ),
        Ok(
            b"~?\r\n+orange\r\n+apple\r\n#t\r\n:100\r\n:999\r\n.\r\n",
            Set(vec![
                simple("orange"),
                simple("apple"),
                Boolean(true),
                int(100),
                int(999),
            ]),
            false,
        ),
        Ok(b"~?\r\n.\r\n", Set(vec![]), false),
        Ok(
            b"%?\r\n+a\r\n:1\r\n+b\r\n:2\r\n.\r\n",
            map(vec![(simple("a"), int(1)), (simple("b"), int(2))]),
            false,
        ),
        Ok(b"%?\r\n.\r\n", map(vec![]), false),
        // Streamed inside streamed, counted inside streamed, streamed inside counted.
        Ok(
            b"*?\r\n*?\r\n:1\r\n.\r\n~?\r\n.\r\n.\r\n",
            arr(vec![arr(vec![int(1)]), Set(vec![])]),
            false,
        ),
        Ok(
            b"*?\r\n*2\r\n:1\r\n:2\r\n$?\r\n;2\r\nab\r\n;1\r\nc\r\n;0\r\n.\r\n",
            arr(vec![arr(vec![int(1), int(2)]), bulk("abc")]),
            false,
        ),
        Ok(
            b"*2\r\n*?\r\n:1\r\n.\r\n:2\r\n",
            arr(vec![arr(vec![int(1)]), int(2)]),
            false,
        ),
        Ok(
            b"*2\r\n$?\r\n;1\r\na\r\n;0\r\n$1\r\nb\r\n",
            arr(vec![bulk("a"), bulk("b")]),
            false,
        ),
        Ok(
            b"%?\r\n$?\r\n;1\r\nk\r\n;0\r\n*?\r\n.\r\n%?\r\n.\r\n~1\r\n:1\r\n.\r\n",
            map(vec![
                (bulk("k"), arr(vec![])),
                (map(vec![]), Set(vec![int(1)])),
            ]),
            false,
        ),
        Ok(
            b"%1\r\n+k\r\n%?\r\n+a\r\n$?\r\n;0\r\n.\r\n",
            map(vec![(simple("k"), map(vec![(simple("a"), bulk(""))]))]),
            false,
        ),
        // Attributes annotating streamed values, and inside them.
        Ok(
            b"*?\r\n|1\r\n+ttl\r\n:3600\r\n:3\r\n.\r\n",
            arr(vec![Attribute {
                attributes: vec![(simple("ttl"), int(3600))],
                value: Box::new(int(3)),
            }]),
            false,
        ),
        Ok(
            b"|1\r\n+a\r\n+b\r\n*?\r\n:1\r\n.\r\n",
            Attribute {
                attributes: vec![(simple("a"), simple("b"))],
                value: Box::new(arr(vec![int(1)])),
            },
            false,
        ),
        Ok(
            b"|1\r\n$?\r\n;1\r\nk\r\n;0\r\n~?\r\n.\r\n$?\r\n;0\r\n",
            Attribute {
                attributes: vec![(bulk("k"), Set(vec![]))],
                value: Box::new(bulk("")),
            },
            false,
        ),
        Ok(
            b">2\r\n$7\r\nmessage\r\n$?\r\n;2\r\nhi\r\n;0\r\n",
            Push(vec![bulk("message"), bulk("hi")]),
            false,
        ),
    ]
}

fn invalid() -> Vec<Bad> {
    use ErrorKind::*;
    vec![
        Bad(b"x", UnknownType, 0),
        Bad(b"\r\n", UnknownType, 0),
        Bad(b"*1\r\n?\r\n", UnknownType, 4),
        Bad(b"+O\nK\r\n", InvalidLineEnd, 2),
        Bad(b"+OK\rX\r\n", InvalidLineEnd, 3),
        Bad(b"+OK\n", InvalidLineEnd, 3),
        Bad(b"-ERR\n\r\n", InvalidLineEnd, 4),
        Bad(b":+1\r\n", InvalidInteger, 1),
        Bad(b": 1\r\n", InvalidInteger, 1),
        Bad(b":01\r\n", InvalidInteger, 2),
        Bad(b":-0\r\n", InvalidInteger, 2),
        Bad(b":\r\n", InvalidInteger, 1),
        Bad(b":12a\r\n", InvalidInteger, 3),
        Bad(b":1\r\r\n", InvalidLineEnd, 3),
        Bad(b":9223372036854775808\r\n", IntegerOverflow, 1),
        Bad(b":-9223372036854775809\r\n", IntegerOverflow, 1),
        Bad(b":123456789012345678901234567890\r\n", IntegerOverflow, 21),
        Bad(b"$3\r\nabcd\r\n", InvalidBulkEnd, 7),
        Bad(b"$3\r\nab\r\n\r\n", InvalidBulkEnd, 7),
        Bad(b"$-2\r\n", InvalidLength, 1),
        Bad(b"$+3\r\nabc\r\n", InvalidLength, 1),
        Bad(b"$03\r\nabc\r\n", InvalidLength, 2),
        Bad(b"$\r\n", InvalidLength, 1),
        Bad(b"*-2\r\n", InvalidLength, 1),
        Bad(b"%-1\r\n", InvalidLength, 1),
        Bad(b"~-1\r\n", InvalidLength, 1),
        Bad(b"!-1\r\n", InvalidLength, 1),
        Bad(b"$4611686018427387904\r\n", BulkTooLong, 1),
        Bad(b"$536870913\r\n", BulkTooLong, 1),
        Bad(b"*2147483648\r\n", AggregateTooLong, 1),
        Bad(b"%2147483648\r\n", AggregateTooLong, 1),
        Bad(b"_x\r\n", InvalidNull, 1),
        Bad(b"_\rx", InvalidNull, 2),
        Bad(b"#x\r\n", InvalidBoolean, 1),
        Bad(b"#T\r\n", InvalidBoolean, 1),
        Bad(b"#tt\r\n", InvalidLineEnd, 2),
        Bad(b",1.\r\n", InvalidDouble, 1),
        Bad(b",.5\r\n", InvalidDouble, 1),
        Bad(b",Infinity\r\n", InvalidDouble, 1),
        Bad(b",1,5\r\n", InvalidDouble, 1),
        Bad(b",\r\n", InvalidDouble, 1),
        Bad(b"(12a\r\n", InvalidBigNumber, 1),
        Bad(b"(\r\n", InvalidBigNumber, 1),
        Bad(b"=3\r\ntxt\r\n", InvalidVerbatim, 1),
        Bad(b"=5\r\ntxt;x\r\n", InvalidVerbatim, 7),
        Bad(b"*1\r\n:x\r\n", InvalidInteger, 5),
        Bad(b"%1\r\n+k\r\n$1\r\nab\r\n", InvalidBulkEnd, 13),
        // Streamed forms the spec does not define.
        Bad(b"!?\r\n", StreamedUnsupported, 1),
        Bad(b"=?\r\n;1\r\na\r\n;0\r\n", StreamedUnsupported, 1),
        Bad(b"|?\r\n", StreamedUnsupported, 1),
        Bad(b">?\r\n.\r\n", StreamedUnsupported, 1),
        Bad(b"*1\r\n>?\r\n", StreamedUnsupported, 5),
        // Streamed headers: `?` then CRLF.
        Bad(b"$?5\r\n", InvalidLength, 2),
        Bad(b"*??\r\n", InvalidLength, 2),
        Bad(b"~?\rx", InvalidLineEnd, 3),
        Bad(b"%?\n", InvalidLength, 2),
        // Chunks: `;`, a length as strict as a bulk length, the payload, CRLF.
        Bad(b"$?\r\n+OK\r\n", ExpectedChunk, 4),
        Bad(b"$?\r\n$1\r\na\r\n", ExpectedChunk, 4),
        Bad(b"$?\r\n;1\r\na\r\n.\r\n", ExpectedChunk, 11),
        Bad(b"$?\r\n;1\r\na\r\n\r\n", ExpectedChunk, 11),
        Bad(b"$?\r\n;03\r\nabc\r\n;0\r\n", InvalidLength, 6),
        Bad(b"$?\r\n;+3\r\nabc\r\n;0\r\n", InvalidLength, 5),
        Bad(b"$?\r\n;-1\r\n", InvalidLength, 5),
        Bad(b"$?\r\n;-0\r\n", InvalidLength, 6),
        Bad(b"$?\r\n;\r\n", InvalidLength, 5),
        Bad(b"$?\r\n;?\r\n", InvalidLength, 5),
        Bad(b"$?\r\n;1 \r\na\r\n", InvalidLength, 6),
        Bad(b"$?\r\n;0\r\r\n", InvalidLineEnd, 7),
        Bad(b"$?\r\n;3\r\nabcd\r\n;0\r\n", InvalidBulkEnd, 11),
        Bad(b"*1\r\n$?\r\n;1\r\nab\r\n", InvalidBulkEnd, 13),
        Bad(b"$?\r\n;9223372036854775808\r\n", IntegerOverflow, 5),
        Bad(b"$?\r\n;536870913\r\n", BulkTooLong, 5),
        // The markers out of place: `;` outside a streamed string, `.` outside a streamed aggregate.
        Bad(b".\r\n", StrayStreamMarker, 0),
        Bad(b";3\r\nabc\r\n", StrayStreamMarker, 0),
        Bad(b"*1\r\n.\r\n", StrayStreamMarker, 4),
        Bad(b"*2\r\n:1\r\n.\r\n", StrayStreamMarker, 8),
        Bad(b"*?\r\n*1\r\n.\r\n", StrayStreamMarker, 8),
        Bad(b"*?\r\n|1\r\n+a\r\n.\r\n", StrayStreamMarker, 12),
        Bad(b"*?\r\n;1\r\na\r\n.\r\n", StrayStreamMarker, 4),
        Bad(b"*?\r\n:1\r\n;0\r\n", StrayStreamMarker, 8),
        Bad(b"%1\r\n.\r\n", StrayStreamMarker, 4),
        // The end marker is `.` and CRLF.
        Bad(b"*?\r\n.x\r\n", InvalidLineEnd, 5),
        Bad(b"~?\r\n.\rx", InvalidLineEnd, 6),
        // A streamed map holds pairs.
        Bad(b"%?\r\n+a\r\n.\r\n", OddStreamedMap, 8),
        Bad(b"%?\r\n+a\r\n:1\r\n+b\r\n.\r\n", OddStreamedMap, 16),
        Bad(b"*?\r\n%?\r\n*?\r\n.\r\n.\r\n", OddStreamedMap, 15),
        // Errors inside streamed values are reported where they are.
        Bad(b"~?\r\n*?\r\n:x\r\n", InvalidInteger, 9),
        Bad(b"*?\r\n@\r\n", UnknownType, 4),
    ]
}

#[track_caller]
fn check_valid(input: &[u8], want: &Value, canonical: bool) {
    let name = String::from_utf8_lossy(input).into_owned();
    // Whole: exactly the value, exactly its bytes.
    let mut buf = BytesMut::from(input);
    assert_eq!(decode(&mut buf), Result::Ok(Some(want.clone())), "{name:?}");
    assert!(buf.is_empty(), "{name:?}: left {:?}", &buf[..]);
    // Every strict prefix: incomplete, nothing consumed.
    for cut in 0..input.len() {
        let mut buf = BytesMut::from(&input[..cut]);
        assert_eq!(decode(&mut buf), Result::Ok(None), "{name:?} cut at {cut}");
        assert_eq!(
            &buf[..],
            &input[..cut],
            "{name:?} cut at {cut} consumed bytes"
        );
    }
    // Trailing bytes change nothing about what is consumed.
    for trailer in [&b"+OK\r\n"[..], b"garbage", b"\r\n", b"*", b"$1"] {
        let mut buf = BytesMut::from(input);
        buf.extend_from_slice(trailer);
        assert_eq!(
            decode(&mut buf),
            Result::Ok(Some(want.clone())),
            "{name:?} + {trailer:?}"
        );
        assert_eq!(&buf[..], trailer, "{name:?} + {trailer:?}");
    }
    // Byte by byte through a resumable decoder: same value.
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::new();
    for (i, &byte) in input.iter().enumerate() {
        buf.extend_from_slice(&[byte]);
        let got = decoder.decode(&mut buf);
        if i + 1 < input.len() {
            assert_eq!(got, Result::Ok(None), "{name:?} streamed, byte {i}");
        } else {
            assert_eq!(got, Result::Ok(Some(want.clone())), "{name:?} streamed");
        }
    }
    assert!(buf.is_empty());
    if canonical {
        let mut out = BytesMut::new();
        encode(want, &mut out);
        assert_eq!(&out[..], input, "{name:?}: encode");
    }
}

#[track_caller]
fn check_invalid(input: &[u8], kind: ErrorKind, offset: usize) {
    let name = String::from_utf8_lossy(input).into_owned();
    let mut buf = BytesMut::from(input);
    let got = decode(&mut buf);
    assert_eq!(
        got.map_err(|e| (e.kind(), e.offset())),
        Err((kind, offset)),
        "{name:?}"
    );
    assert_eq!(&buf[..], input, "{name:?}: an error consumes nothing");
    // A prefix is either still incomplete or already the same error; never a value, never another error.
    let mut decoder = Decoder::new();
    let mut streamed = BytesMut::new();
    for cut in 0..input.len() {
        let mut buf = BytesMut::from(&input[..cut]);
        match decode(&mut buf) {
            Result::Ok(None) => assert_eq!(&buf[..], &input[..cut]),
            Err(e) => assert_eq!(
                (e.kind(), e.offset()),
                (kind, offset),
                "{name:?} cut at {cut}"
            ),
            other => panic!("{name:?} cut at {cut}: {other:?}"),
        }
        streamed.extend_from_slice(&input[cut..=cut]);
        match decoder.decode(&mut streamed) {
            Result::Ok(None) => {}
            Err(e) => {
                assert_eq!(
                    (e.kind(), e.offset()),
                    (kind, offset),
                    "{name:?} streamed to {cut}"
                );
                return;
            }
            other => panic!("{name:?} streamed to {cut}: {other:?}"),
        }
    }
    panic!("{name:?}: streaming byte by byte never reported the error");
}

#[test]
fn valid_vectors() {
    let vectors = valid();
    assert!(
        vectors.len() >= 83,
        "keep the table large: {}",
        vectors.len()
    );
    for Ok(input, want, canonical) in &vectors {
        check_valid(input, want, *canonical);
    }
}

#[test]
fn invalid_vectors() {
    let vectors = invalid();
    assert!(
        vectors.len() >= 88,
        "keep the table large: {}",
        vectors.len()
    );
    for Bad(input, kind, offset) in &vectors {
        check_invalid(input, *kind, *offset);
    }
}

#[test]
fn limits_are_enforced_before_the_payload_arrives() {
    let limits = Limits::default()
        .with_max_bulk_len(4)
        .with_max_aggregate_len(2)
        .with_max_line_len(3);
    let cases: &[(&[u8], ErrorKind, usize)] = &[
        (b"$5\r\n", ErrorKind::BulkTooLong, 1),
        (b"!5\r\n", ErrorKind::BulkTooLong, 1),
        (b"=5\r\n", ErrorKind::BulkTooLong, 1),
        (b"*3\r\n", ErrorKind::AggregateTooLong, 1),
        (b"~3\r\n", ErrorKind::AggregateTooLong, 1),
        (b">3\r\n", ErrorKind::AggregateTooLong, 1),
        (b"%3\r\n", ErrorKind::AggregateTooLong, 1),
        (b"|3\r\n", ErrorKind::AggregateTooLong, 1),
        (b"+abcd", ErrorKind::LineTooLong, 4),
        (b"-abcd\r\n", ErrorKind::LineTooLong, 4),
        (b",1234", ErrorKind::LineTooLong, 4),
    ];
    for &(input, kind, offset) in cases {
        let mut buf = BytesMut::from(input);
        let got = Decoder::with_limits(limits)
            .decode(&mut buf)
            .map_err(|e| (e.kind(), e.offset()));
        assert_eq!(
            got,
            Err((kind, offset)),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    // At the limit is fine.
    let mut buf = BytesMut::from(&b"*2\r\n$4\r\nabcd\r\n+abc\r\n"[..]);
    let got = Decoder::with_limits(limits).decode(&mut buf);
    assert_eq!(
        got,
        Result::Ok(Some(arr(vec![bulk("abcd"), simple("abc")])))
    );
}

#[test]
fn streamed_values_are_bounded_by_the_same_limits_as_each_part_arrives() {
    let limits = Limits::default()
        .with_max_bulk_len(4)
        .with_max_aggregate_len(2)
        .with_max_depth(3);
    let cases: &[(&[u8], ErrorKind, usize)] = &[
        // A chunk above the limit, or one that takes the sum above it: refused at its header.
        (b"$?\r\n;5\r\n", ErrorKind::BulkTooLong, 5),
        (b"$?\r\n;3\r\nabc\r\n;2\r\n", ErrorKind::BulkTooLong, 14),
        (
            b"$?\r\n;1\r\na\r\n;1\r\nb\r\n;1\r\nc\r\n;1\r\nd\r\n;1\r\n",
            ErrorKind::BulkTooLong,
            33,
        ),
        // One value too many: refused at its first byte, whatever it is.
        (b"*?\r\n:1\r\n:2\r\n:", ErrorKind::AggregateTooLong, 12),
        (
            b"~?\r\n$1\r\na\r\n$1\r\nb\r\n$",
            ErrorKind::AggregateTooLong,
            18,
        ),
        (b"*?\r\n*0\r\n*?\r\n.\r\n*", ErrorKind::AggregateTooLong, 15),
        (b"*?\r\n:1\r\n:2\r\n;", ErrorKind::AggregateTooLong, 12),
        // Maps count pairs: two pairs fit, the fifth value does not.
        (
            b"%?\r\n:1\r\n:1\r\n:2\r\n:2\r\n+",
            ErrorKind::AggregateTooLong,
            20,
        ),
        // Streamed aggregates are levels of nesting like the counted ones.
        (b"*?\r\n*1\r\n~?\r\n%?\r\n", ErrorKind::TooDeep, 12),
    ];
    for &(input, kind, offset) in cases {
        let name = String::from_utf8_lossy(input);
        let mut buf = BytesMut::from(input);
        let got = Decoder::with_limits(limits)
            .decode(&mut buf)
            .map_err(|e| (e.kind(), e.offset()));
        assert_eq!(got, Err((kind, offset)), "{name:?}");
        // Fed byte by byte: the same error, as soon as its last byte arrives (each input ends there).
        let mut decoder = Decoder::with_limits(limits);
        let mut buf = BytesMut::new();
        for (i, &byte) in input.iter().enumerate() {
            buf.extend_from_slice(&[byte]);
            let got = decoder.decode(&mut buf).map_err(|e| (e.kind(), e.offset()));
            if i + 1 < input.len() {
                assert_eq!(got, Result::Ok(None), "{name:?} at byte {i}");
            } else {
                assert_eq!(got, Err((kind, offset)), "{name:?} byte by byte");
            }
        }
    }
    // At the limits is fine.
    for (input, want) in [
        (&b"$?\r\n;2\r\nab\r\n;2\r\ncd\r\n;0\r\n"[..], bulk("abcd")),
        (b"*?\r\n:1\r\n:2\r\n.\r\n", arr(vec![int(1), int(2)])),
        (
            b"%?\r\n:1\r\n:1\r\n:2\r\n:2\r\n.\r\n",
            map(vec![(int(1), int(1)), (int(2), int(2))]),
        ),
        (
            b"*?\r\n*1\r\n~?\r\n.\r\n.\r\n",
            arr(vec![arr(vec![Value::Set(vec![])])]),
        ),
    ] {
        let mut buf = BytesMut::from(input);
        let got = Decoder::with_limits(limits).decode(&mut buf);
        assert_eq!(
            got,
            Result::Ok(Some(want)),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    // A limit of zero elements leaves a streamed aggregate room for its end only.
    let none = Limits::default().with_max_aggregate_len(0);
    let mut buf = BytesMut::from(&b"%?\r\n.\r\n*?\r\n+"[..]);
    let mut decoder = Decoder::with_limits(none);
    assert_eq!(decoder.decode(&mut buf), Result::Ok(Some(map(vec![]))));
    let e = decoder.decode(&mut buf).expect_err("one element too many");
    assert_eq!((e.kind(), e.offset()), (ErrorKind::AggregateTooLong, 4));
}

#[test]
fn an_endless_stream_ends_at_the_limit() {
    // 1-byte chunks up to the default 512 MiB would take a while; a 64 KiB limit shows the same bound.
    let limits = Limits::default()
        .with_max_bulk_len(64 * 1024)
        .with_max_aggregate_len(64 * 1024);
    for (header, part, kind) in [
        (&b"$?\r\n"[..], &b";1\r\nx\r\n"[..], ErrorKind::BulkTooLong),
        (b"*?\r\n", b":1\r\n", ErrorKind::AggregateTooLong),
        (b"~?\r\n", b"$1\r\nx\r\n", ErrorKind::AggregateTooLong),
        (b"%?\r\n", b"_\r\n", ErrorKind::AggregateTooLong),
    ] {
        let mut decoder = Decoder::with_limits(limits);
        let mut buf = BytesMut::from(header);
        let mut sent = 0;
        let e = loop {
            // Many parts per read, as a socket delivers them.
            for _ in 0..100 {
                buf.extend_from_slice(part);
            }
            sent += 100;
            match decoder.decode(&mut buf) {
                Result::Ok(None) => assert!(sent <= 2 * 64 * 1024 + 100, "never refused"),
                Result::Ok(Some(v)) => panic!("an endless stream ended: {v:?}"),
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), kind, "{:?}", String::from_utf8_lossy(part));
    }
}

#[test]
fn a_stream_of_many_chunks_in_many_reads_is_scanned_once() {
    // 200,000 chunks, one read each: rescanning from the start on every read would take 2 * 10^10 steps and never
    // finish in time; scanning once takes milliseconds.
    const CHUNKS: usize = 200_000;
    let limits = Limits::default();
    let mut decoder = Decoder::with_limits(limits);
    let mut buf = BytesMut::from(&b"*?\r\n$?\r\n"[..]);
    assert_eq!(decoder.decode(&mut buf), Result::Ok(None));
    for i in 0..CHUNKS {
        buf.extend_from_slice(if i % 2 == 0 {
            b";1\r\na\r\n"
        } else {
            b";1\r\nb\r\n"
        });
        assert_eq!(decoder.decode(&mut buf), Result::Ok(None));
    }
    buf.extend_from_slice(b";0\r\n");
    for _ in 0..CHUNKS {
        buf.extend_from_slice(b":1\r\n");
        assert_eq!(decoder.decode(&mut buf), Result::Ok(None));
    }
    buf.extend_from_slice(b".\r\n");
    let Result::Ok(Some(Value::Array(items))) = decoder.decode(&mut buf) else {
        panic!("a complete array");
    };
    assert_eq!(items.len(), 1 + CHUNKS);
    assert_eq!(items[0], bulk(&"ab".repeat(CHUNKS / 2)));
    assert!(buf.is_empty());
}

#[test]
fn a_streamed_string_of_one_chunk_is_a_slice_of_the_read_buffer() {
    for (input, zero_copy) in [
        (&b"$?\r\n;5\r\nhello\r\n;0\r\n"[..], true),
        (b"|0\r\n$?\r\n;5\r\nhello\r\n;0\r\n", true),
        (b"*1\r\n$?\r\n;5\r\nhello\r\n;0\r\n", true),
        (b"$?\r\n;2\r\nhe\r\n;3\r\nllo\r\n;0\r\n", false),
    ] {
        let mut buf = BytesMut::from(input);
        let read = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
        let v = decode(&mut buf).expect("valid").expect("complete");
        let s = match v.without_attributes() {
            Value::BulkString(s) => s,
            Value::Array(items) => match &items[..] {
                [Value::BulkString(s)] => s,
                _ => panic!("{v:?}"),
            },
            _ => panic!("{v:?}"),
        };
        assert_eq!(&s[..], b"hello");
        assert_eq!(
            read.contains(&(s.as_ptr() as usize)),
            zero_copy,
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
}

/// A fast path must not inherit the line-end search position of an earlier partial line.
#[test]
fn a_value_after_a_partial_line_is_scanned_from_its_own_start() {
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::from(&b"+OK"[..]);
    assert_eq!(decoder.decode(&mut buf), Result::Ok(None));
    buf.extend_from_slice(b"\r\n+\nKK\r\n");
    assert_eq!(decoder.decode(&mut buf), Result::Ok(Some(simple("OK"))));
    let err = decoder
        .decode(&mut buf)
        .expect_err("LF inside a simple string");
    assert_eq!((err.kind(), err.offset()), (ErrorKind::InvalidLineEnd, 1));
}
