//! The RESP codec side by side with `redis-protocol` (its RESP2 and RESP3 decoders) and redis-rs' parser: the same
//! inputs in the same run, so that the ratios between libraries mean something on a noisy machine.
//!
//! - Building each input buffer (a copy of a prepared `Bytes`) happens in `iter_batched`'s setup, outside the
//!   timing; the drained buffer is handed back so that freeing it is outside the timing too.
//! - Decoding a stream means calling the decoder until the buffer is empty; every value is `black_box`ed and dropped
//!   inside the timing, since dropping a reply is part of consuming it.
//! - redis-rs reads from a `&[u8]` through its own buffer (at most 8 KiB per read) and copies every payload; it has
//!   no "decode from my buffer" entry point. Its numbers include that copy: it is what a redis-rs user pays.
//!
//! Results and the command that produced them: `benchmarks/results/2026-11-21-resp-codec.md` (the current
//! figures: `BENCHMARKS.md`).

#![allow(missing_docs)] // criterion_group! and criterion_main! generate undocumented items

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::measurement::WallTime;
use criterion::{
    BatchSize, BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main,
};
use muxlock::resp::{Decoder, Value};
use redis_protocol::resp2::decode as rp2;
use redis_protocol::resp3::decode::complete as rp3;

mod resp_cases;
use resp_cases::{
    SET_NX_PX, bulk, bulk_array, muxlock_set, redis_protocol_set, redis_rs_set, redlock_replies,
    repeated,
};

/// Values in the reply-stream cases (a), (b), (e) and elements in the array case (d).
const N: usize = 1000;
/// Elements of the streaming case (g).
const STREAM_N: usize = 100_000;
/// Piece size of the streaming case: one socket read.
const PIECE: usize = 16 * 1024;
/// Inputs per timed batch in the bulk case (c). `LargeInput` would time each 1 MiB decode alone, adding `Instant`'s
/// own cost (~20 ns) to a decode of well under a microsecond, and to that size only: a fixed batch treats all sizes
/// alike.
const BULK_BATCH: BatchSize = BatchSize::NumIterations(16);

// ---------------------------------------------------------------- decoders, each draining a buffer

/// Decodes until `buf` is empty, `black_box`ing each value; returns how many there were.
fn drain<T>(buf: &mut BytesMut, mut decode: impl FnMut(&mut BytesMut) -> Option<T>) -> usize {
    let mut n = 0;
    while !buf.is_empty() {
        black_box(decode(buf).expect("a whole value"));
        n += 1;
    }
    n
}

/// The decoders that read from a `BytesMut`. redis-rs, which reads from a `&[u8]`, runs beside them.
#[derive(Clone, Copy)]
enum Lib {
    Muxlock,
    Resp2,
    Resp3,
}

use Lib::{Muxlock, Resp2, Resp3};

impl Lib {
    fn id(self) -> &'static str {
        match self {
            Muxlock => "muxlock",
            Resp2 => "redis-protocol-resp2",
            Resp3 => "redis-protocol-resp3",
        }
    }

    /// `decoder` is muxlock's per-connection state, reused from one buffer to the next as a connection reuses it
    /// (redis-protocol has none).
    fn drain(self, decoder: &mut Decoder, buf: &mut BytesMut) -> usize {
        match self {
            Muxlock => drain(buf, |b| decoder.decode(b).expect("valid RESP")),
            Resp2 => drain(buf, |b| rp2::decode_bytes_mut(b).expect("valid RESP")),
            Resp3 => drain(buf, |b| rp3::decode_bytes_mut(b).expect("valid RESP")),
        }
    }
}

const ALL: &[Lib] = &[Muxlock, Resp2, Resp3];
/// redis-protocol's RESP3 decoder reads `$-1` as the header of a streamed string (`$?`) and fails: it cannot decode
/// the RESP2 null, which Redis sends on RESP2 connections.
const RESP2_ONLY: &[Lib] = &[Muxlock, Resp2];
/// The RESP3 null `_` is not RESP2.
const RESP3_ONLY: &[Lib] = &[Muxlock, Resp3];

/// redis-rs buffers what it reads, so "until empty" is "until the known number of values". The parser is reused, as
/// a connection reuses it; it holds nothing between inputs since each input is parsed to its end.
fn redis_rs_drain(parser: &mut redis::Parser, mut input: &[u8], values: usize) -> usize {
    for _ in 0..values {
        black_box(parser.parse_value(&mut input).expect("valid RESP"));
    }
    values
}

type Group<'a> = BenchmarkGroup<'a, WallTime>;

/// One decode case: `decode/{name}/{library}`.
struct Case {
    name: &'static str,
    /// Holds `values` values.
    input: Bytes,
    values: usize,
    throughput: Throughput,
    batch: BatchSize,
    libs: &'static [Lib],
}

/// Every library decodes the input into exactly `values` values, consuming all of it: the benches measure real work.
fn check(input: &Bytes, values: usize, libs: &[Lib]) {
    for lib in libs {
        let mut buf = BytesMut::from(&input[..]);
        assert_eq!(
            lib.drain(&mut Decoder::new(), &mut buf),
            values,
            "{}",
            lib.id()
        );
        assert!(buf.is_empty(), "{}", lib.id());
    }
    let mut rest = &input[..];
    let mut parser = redis::Parser::new();
    for _ in 0..values {
        parser.parse_value(&mut rest).expect("valid RESP");
    }
    assert!(rest.is_empty() && parser.parse_value(&mut rest).is_err());
}

/// Benches `lib` draining a fresh copy of `input`, built outside the timing and freed outside it too.
fn bench_drain(g: &mut Group<'_>, id: &str, lib: Lib, input: &Bytes, batch: BatchSize) {
    let mut decoder = Decoder::new();
    g.bench_function(id, |b| {
        b.iter_batched(
            || BytesMut::from(&input[..]),
            |mut buf| {
                black_box(lib.drain(&mut decoder, &mut buf));
                buf
            },
            batch,
        );
    });
}

fn decode_case(c: &mut Criterion, case: Case) {
    let Case { input, values, .. } = &case;
    check(input, *values, case.libs);
    let mut g = c.benchmark_group(format!("decode/{}", case.name));
    g.throughput(case.throughput.clone());
    for &lib in case.libs {
        bench_drain(&mut g, lib.id(), lib, input, case.batch);
    }
    let mut parser = redis::Parser::new();
    g.bench_function("redis-rs", |b| {
        b.iter(|| redis_rs_drain(&mut parser, black_box(input), *values))
    });
    g.finish();
}

fn decode_cases(c: &mut Criterion) {
    let replies = |name, input, libs| Case {
        name,
        input,
        values: N,
        throughput: Throughput::Elements(N as u64),
        batch: BatchSize::SmallInput,
        libs,
    };
    decode_case(c, replies("ok_x1000", repeated(b"+OK\r\n", N), ALL));
    decode_case(c, replies("int_x1000", repeated(b":12345\r\n", N), ALL));
    for (name, len) in [
        ("bulk_1KiB", 1 << 10),
        ("bulk_64KiB", 1 << 16),
        ("bulk_1MiB", 1 << 20),
    ] {
        let (values, throughput, batch) = (1, Throughput::Bytes(len as u64), BULK_BATCH);
        let case = replies(name, bulk(len), ALL);
        decode_case(
            c,
            Case {
                values,
                throughput,
                batch,
                ..case
            },
        );
    }
    let array = replies("array_1000_bulk", bulk_array(N), ALL);
    decode_case(c, Case { values: 1, ..array });
    let redlock = redlock_replies(N, b"$-1\r\n");
    decode_case(c, replies("redlock_x1000", redlock, RESP2_ONLY));
    let redlock = redlock_replies(N, b"_\r\n");
    decode_case(c, replies("redlock_resp3_x1000", redlock, RESP3_ONLY));
}

/// (f) `SET key value NX PX 30000` into a buffer that is reused, as a connection's write buffer is. The TTL is an
/// integer that each library formats, as a lock's TTL would be.
fn encode_cases(c: &mut Criterion) {
    let mut g = c.benchmark_group("encode/set_nx_px");
    g.throughput(Throughput::Elements(1));
    for (id, encode) in [
        ("muxlock", muxlock_set as fn(&mut BytesMut, i64)),
        ("redis-protocol", redis_protocol_set),
    ] {
        let mut buf = BytesMut::with_capacity(256);
        encode(&mut buf, 30_000);
        assert_eq!(&buf[..], SET_NX_PX);
        g.bench_function(id, |b| {
            b.iter(|| {
                buf.clear();
                encode(&mut buf, black_box(30_000));
                black_box(&buf);
            });
        });
    }
    assert_eq!(redis_rs_set(30_000), SET_NX_PX);
    g.bench_function("redis-rs", |b| b.iter(|| redis_rs_set(black_box(30_000))));
    g.finish();
}

// ---------------------------------------------------------------- (g) streaming

/// Appends `input` to `buf` one piece at a time, calling `decode` after each, until it yields the value.
fn feed<T>(
    input: &[u8],
    buf: &mut BytesMut,
    mut decode: impl FnMut(&mut BytesMut) -> Option<T>,
) -> T {
    for piece in input.chunks(PIECE) {
        buf.extend_from_slice(piece);
        if let Some(value) = decode(buf) {
            return value;
        }
    }
    panic!("the input holds no whole value");
}

/// The buffer a reader would own: sized once, so that the pieces are measured, not the buffer's growth.
fn reader_buf(input: &Bytes) -> BytesMut {
    BytesMut::with_capacity(input.len())
}

fn stream_cases(c: &mut Criterion) {
    let input = bulk_array(STREAM_N);
    check(&input, 1, ALL);
    let mut decoder = Decoder::new();
    let value = feed(&input, &mut reader_buf(&input), |b| {
        decoder.decode(b).expect("valid")
    });
    assert!(matches!(value, Value::Array(v) if v.len() == STREAM_N));

    let mut g = c.benchmark_group("stream/array_100k_bulk");
    g.throughput(Throughput::Elements(STREAM_N as u64));
    for &lib in ALL {
        bench_drain(
            &mut g,
            &format!("{}-whole", lib.id()),
            lib,
            &input,
            BatchSize::LargeInput,
        );
    }
    g.bench_function("muxlock-16KiB-pieces", |b| {
        b.iter_batched(
            || reader_buf(&input),
            |mut buf| {
                black_box(feed(&input, &mut buf, |b| {
                    decoder.decode(b).expect("valid RESP")
                }));
                buf
            },
            BatchSize::LargeInput,
        );
    });
    // redis-rs always reads at most 8 KiB at a time and keeps its partial parse: it has no "whole" mode.
    let mut parser = redis::Parser::new();
    g.bench_function("redis-rs-8KiB-reads", |b| {
        b.iter(|| redis_rs_drain(&mut parser, black_box(&input), 1))
    });
    // Fed in pieces, redis-protocol parses from the first byte on every call: quadratic, so fewer samples.
    g.sample_size(10);
    g.bench_function("redis-protocol-resp2-16KiB-pieces", |b| {
        b.iter_batched(
            || reader_buf(&input),
            |mut buf| {
                black_box(feed(&input, &mut buf, |b| {
                    rp2::decode_bytes_mut(b).expect("valid RESP")
                }));
                buf
            },
            BatchSize::LargeInput,
        );
    });
    g.finish();
}

// ---------------------------------------------------------------- the floor under every zero-copy decoder

/// What the `bytes` crate alone costs a zero-copy decoder, with no parsing at all: the part of (c) and (d) that no
/// decoder built on `Bytes` can remove, measured in the same run as the decoders.
///
/// - `slice_drop_x1000`: 1,000 `Bytes::slice`s of 8 bytes pushed into a `Vec`, then dropped: one atomic increment
///   and one atomic decrement of the shared refcount per element, as every array element of (d) pays.
/// - `fresh_split_freeze_drop`: a fresh `BytesMut` (as in (c)) split once, frozen and dropped: turning its `Vec` into
///   shared storage allocates a header, and dropping frees it.
fn floor_cases(c: &mut Criterion) {
    let mut g = c.benchmark_group("floor");
    let element = bulk_array(N);
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("slice_drop_x1000", |b| {
        b.iter(|| {
            let mut v: Vec<Bytes> = Vec::with_capacity(N);
            for i in 0..N {
                v.push(element.slice(i * 14..i * 14 + 8));
            }
            black_box(v)
        })
    });
    let input = bulk(1 << 10);
    g.throughput(Throughput::Elements(1));
    g.bench_function("fresh_split_freeze_drop", |b| {
        b.iter_batched(
            || BytesMut::from(&input[..]),
            |mut buf| {
                black_box(buf.split_to(input.len() - 2).freeze());
                buf
            },
            BULK_BATCH,
        )
    });
    g.finish();
}

criterion_group!(
    benches,
    decode_cases,
    encode_cases,
    stream_cases,
    floor_cases
);
criterion_main!(benches);
