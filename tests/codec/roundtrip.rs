//! Property tests: random values encode and decode back to themselves, however the bytes are split; written with
//! RESP3's streamed forms (`$?`, `*?`, `~?`, `%?`) at random, they decode to the same values.

use crate::harness::encode_streamed;
use bytes::{Bytes, BytesMut};
use muxlock::resp::{Decoder, Value, decode, encode};
use proptest::prelude::*;

/// Bytes for a line type: anything but CR and LF.
fn line_bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(
        any::<u8>().prop_filter("no CR/LF", |b| *b != b'\r' && *b != b'\n'),
        0..12,
    )
    .prop_map(Bytes::from)
}

fn any_bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn big_number() -> impl Strategy<Value = Bytes> {
    ("[+-]?", "[0-9]{1,40}").prop_map(|(sign, digits)| Bytes::from(format!("{sign}{digits}")))
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        line_bytes().prop_map(Value::SimpleString),
        line_bytes().prop_map(Value::Error),
        any::<i64>().prop_map(Value::Integer),
        any_bytes().prop_map(Value::BulkString),
        Just(Value::NullBulk),
        Just(Value::NullArray),
        Just(Value::Null),
        any::<bool>().prop_map(Value::Boolean),
        any::<f64>().prop_map(Value::Double),
        prop_oneof![
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::NAN),
            Just(-0.0)
        ]
        .prop_map(Value::Double),
        big_number().prop_map(Value::BigNumber),
        any_bytes().prop_map(Value::BulkError),
        (any::<[u8; 3]>(), any_bytes()).prop_map(|(format, data)| Value::Verbatim { format, data }),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(6, 64, 6, |inner| {
        let items = proptest::collection::vec(inner.clone(), 0..6);
        let pairs = proptest::collection::vec((inner.clone(), inner.clone()), 0..4);
        prop_oneof![
            items.clone().prop_map(Value::Array),
            items.clone().prop_map(Value::Set),
            items.prop_map(Value::Push),
            pairs.clone().prop_map(Value::Map),
            (pairs, inner).prop_map(|(attributes, v)| Value::Attribute {
                attributes,
                value: Box::new(v)
            }),
        ]
    })
}

/// Feeds `bytes` to one resumable decoder in pieces cut at `cuts`, collecting every value that comes out.
fn decode_in_pieces(bytes: &[u8], cuts: &[usize]) -> Vec<Value> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.push(bytes.len());
    cuts.sort_unstable();
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut from = 0;
    for cut in cuts {
        buf.extend_from_slice(&bytes[from..cut]);
        from = cut;
        while let Some(v) = decoder.decode(&mut buf).expect("valid bytes") {
            out.push(v);
        }
    }
    assert!(buf.is_empty(), "bytes left over");
    out
}

proptest! {
    // Past failures are kept next to this file, in `roundtrip.proptest-regressions`: the default would look for
    // a `main.rs` above the file and use `tests/proptest-regressions/roundtrip.txt`.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::with_cases(2000)
    })]

    #[test]
    fn encode_then_decode_is_identity(v in value()) {
        let mut buf = BytesMut::new();
        encode(&v, &mut buf);
        let bytes = buf.clone().freeze();
        prop_assert_eq!(decode(&mut buf), Ok(Some(v.clone())));
        prop_assert!(buf.is_empty());
        // Canonical: decoding and encoding again gives the same bytes.
        let mut again = BytesMut::new();
        encode(&v, &mut again);
        prop_assert_eq!(&again[..], &bytes[..]);
    }

    #[test]
    fn any_split_gives_the_same_values(values in proptest::collection::vec(value(), 1..5),
                                       cuts in proptest::collection::vec(any::<usize>(), 0..12)) {
        let mut buf = BytesMut::new();
        for v in &values {
            encode(v, &mut buf);
        }
        prop_assert_eq!(decode_in_pieces(&buf, &cuts), values);
    }

    /// `encode_streamed` streams each string and aggregate it can with probability 1/2, at every depth, and cuts
    /// streamed strings into random chunks; the seed varies those choices for the same value.
    #[test]
    fn streamed_forms_decode_to_the_same_values(values in proptest::collection::vec(value(), 1..5),
                                                seed in any::<u64>(),
                                                cuts in proptest::collection::vec(any::<usize>(), 0..12)) {
        let mut buf = BytesMut::new();
        for (i, v) in values.iter().enumerate() {
            encode_streamed(v, seed.wrapping_add(i as u64), &mut buf);
        }
        let bytes = buf.clone().freeze();
        // Whole, one value per call.
        for v in &values {
            prop_assert_eq!(decode(&mut buf), Ok(Some(v.clone())));
        }
        prop_assert!(buf.is_empty());
        // Split anywhere, through one resumable decoder.
        prop_assert_eq!(decode_in_pieces(&bytes, &cuts), values.clone());
        // Byte by byte: nothing until the last byte of each value.
        let mut decoder = Decoder::new();
        let mut fed = BytesMut::new();
        let mut out = Vec::new();
        for &byte in &bytes[..] {
            fed.extend_from_slice(&[byte]);
            if let Some(v) = decoder.decode(&mut fed).expect("valid bytes") {
                prop_assert!(fed.is_empty());
                out.push(v);
            }
        }
        prop_assert_eq!(out, values);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_prefixes_agree(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut whole = BytesMut::from(&bytes[..]);
        let result = decode(&mut whole);
        // Byte by byte through a resumable decoder: the same outcome at the same point.
        let mut decoder = Decoder::new();
        let mut buf = BytesMut::new();
        let mut streamed = Ok(None);
        let mut fed = 0;
        for &byte in &bytes {
            buf.extend_from_slice(&[byte]);
            fed += 1;
            streamed = decoder.decode(&mut buf);
            if !matches!(streamed, Ok(None)) {
                break;
            }
        }
        match (&result, &streamed) {
            (Ok(Some(a)), Ok(Some(b))) => {
                prop_assert_eq!(a, b);
                // The same bytes consumed: the stream stopped feeding at the value's end, the whole input may go
                // on after it (`+\r\n` then a byte), so what is left over may differ and is not compared.
                prop_assert_eq!(bytes.len() - whole.len(), fed - buf.len());
            }
            _ => prop_assert_eq!(&result, &streamed),
        }
        if matches!(result, Ok(None) | Err(_)) {
            prop_assert_eq!(&whole[..], &bytes[..]);
        }
    }
}

/// The streamed encoder is not vacuous: over a few seeds it writes every streamed form, strings of several chunks
/// and the counted forms too.
#[test]
fn encode_streamed_writes_every_streamed_form() {
    let v = Value::Array(vec![
        Value::BulkString(Bytes::from_static(b"hello world")),
        Value::Set(vec![Value::Integer(1)]),
        Value::Map(vec![(Value::Null, Value::BulkString(Bytes::new()))]),
    ]);
    let mut seen = [false; 6];
    for seed in 0..64 {
        let mut buf = BytesMut::new();
        encode_streamed(&v, seed, &mut buf);
        let text = String::from_utf8_lossy(&buf).into_owned();
        for (i, needle) in ["*?", "~?", "%?", "$?\r\n;0", ";1\r\n", "*3\r\n"]
            .iter()
            .enumerate()
        {
            seen[i] |= text.contains(needle);
        }
        assert_eq!(decode(&mut buf), Ok(Some(v.clone())), "{text:?}");
    }
    assert_eq!(seen, [true; 6]);
}

/// The input proptest found: a complete value then one more byte. Decoded whole or fed byte by byte, the value and
/// the bytes it consumed agree.
#[test]
fn a_value_followed_by_more_bytes_is_consumed_alike_whole_and_streamed() {
    let bytes = b"+\r\n\0";
    let mut whole = BytesMut::from(&bytes[..]);
    let value = decode(&mut whole).expect("valid").expect("complete");
    assert_eq!(whole.len(), 1, "the trailing byte stays");
    let mut decoder = Decoder::new();
    let mut buf = BytesMut::new();
    for (i, &byte) in bytes.iter().enumerate() {
        buf.extend_from_slice(&[byte]);
        if let Some(streamed) = decoder.decode(&mut buf).expect("valid") {
            assert_eq!(streamed, value);
            assert_eq!((i + 1) - buf.len(), bytes.len() - whole.len());
            return;
        }
    }
    panic!("the streamed decoder never completed the value");
}
