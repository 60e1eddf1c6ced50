//! Instruction counts of the RESP codec cases of `benches/resp.rs`, for callgrind: deterministic, so codec changes
//! can be compared on a noisy machine where wall times swing by tens of percent.
//!
//! `scripts/instructions` builds this and runs it under `valgrind --tool=callgrind --toggle-collect=*measured*`, one
//! process per case and library: only the work inside `measured` (decoding and dropping the values, or encoding) is
//! counted, not building the inputs. Run with no arguments (as `cargo test --all-targets` does), it runs every case
//! once and checks the results. With `CASE LIB REPS`, it runs that case `REPS`
//! times; the script subtracts a run of 1 from a run of 21, which removes one-time costs (the first allocation, the
//! lazy dispatch of `memchr`).

#![allow(missing_docs)]

use std::hint::black_box;
use std::process::ExitCode;

use bytes::{Bytes, BytesMut};
use muxlock::resp::{Decimal, Decoder, encode_command};
use redis_protocol::resp2::decode as rp2;
use redis_protocol::resp2::encode::extend_encode_borrowed;
use redis_protocol::resp2::types::BorrowedFrame;
use redis_protocol::resp3::decode::complete as rp3;

const PIECE: usize = 16 * 1024;

/// A case: its input and how many values (or elements) the count is divided by.
struct Case {
    name: &'static str,
    input: Bytes,
    /// Values the input decodes into.
    values: usize,
    /// What the per-unit count is divided by: values, or array elements.
    units: usize,
    pieces: bool,
}

fn cases() -> Vec<Case> {
    let repeated = |r: &[u8]| Bytes::from(r.repeat(1000));
    let bulk = |len: usize| {
        let mut v = format!("${len}\r\n").into_bytes();
        v.resize(v.len() + len, b'x');
        v.extend_from_slice(b"\r\n");
        Bytes::from(v)
    };
    let array = |n: usize| {
        let mut v = format!("*{n}\r\n").into_bytes();
        for i in 0..n {
            v.extend_from_slice(format!("$8\r\nkey:{:04}\r\n", i % 10_000).as_bytes());
        }
        Bytes::from(v)
    };
    // The same fixed xorshift order as benches/resp.rs.
    let mix = |null: &[u8]| {
        let replies: [&[u8]; 4] = [b"+OK\r\n", null, b":1\r\n", b":0\r\n"];
        let mut x: u32 = 0x9E37_79B9;
        let mut v = Vec::new();
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.extend_from_slice(replies[(x % 4) as usize]);
        }
        Bytes::from(v)
    };
    let c = |name, input, values, units, pieces| Case {
        name,
        input,
        values,
        units,
        pieces,
    };
    vec![
        c("ok", repeated(b"+OK\r\n"), 1000, 1000, false),
        c("int", repeated(b":12345\r\n"), 1000, 1000, false),
        c("bulk_1KiB", bulk(1 << 10), 1, 1, false),
        c("bulk_1MiB", bulk(1 << 20), 1, 1, false),
        c("array_1000", array(1000), 1, 1000, false),
        c("redlock_resp2", mix(b"$-1\r\n"), 1000, 1000, false),
        c("redlock_resp3", mix(b"_\r\n"), 1000, 1000, false),
        c("stream_100k", array(100_000), 1, 100_000, false),
        c("stream_100k_pieces", array(100_000), 1, 100_000, true),
    ]
}

/// The counted region: drains `buf` with `decode`, dropping each value. Never inlined, so that callgrind can toggle
/// on its name; generic, so that each library's decode call is inlined into its own copy.
#[inline(never)]
fn measured<T, E>(
    buf: &mut BytesMut,
    mut decode: impl FnMut(&mut BytesMut) -> Result<Option<T>, E>,
) -> usize {
    let mut n = 0;
    while !buf.is_empty() {
        match decode(buf) {
            Ok(Some(v)) => drop(black_box(v)),
            _ => return usize::MAX,
        }
        n += 1;
    }
    n
}

/// The counted region of the streaming case fed in pieces (muxlock only: the others start over on every call).
#[inline(never)]
fn measured_pieces(decoder: &mut Decoder, input: &[u8], buf: &mut BytesMut) -> usize {
    for piece in input.chunks(PIECE) {
        buf.extend_from_slice(piece);
        if let Ok(Some(v)) = decoder.decode(buf) {
            drop(black_box(v));
            return 1;
        }
    }
    usize::MAX
}

/// The counted region of the encode case (f).
#[inline(never)]
fn measured_encode(lib: &str, buf: &mut BytesMut, ttl: i64) -> usize {
    match lib {
        "muxlock" => {
            let ttl = Decimal::new(ttl);
            encode_command(
                &[b"SET", b"key", b"value", b"NX", b"PX", ttl.as_bytes()],
                buf,
            );
        }
        "rp2" => {
            use BorrowedFrame::{BulkString, Integer};
            let args = [
                BulkString(b"SET"),
                BulkString(b"key"),
                BulkString(b"value"),
                BulkString(b"NX"),
                BulkString(b"PX"),
                Integer(ttl),
            ];
            if extend_encode_borrowed(buf, &BorrowedFrame::Array(&args), true).is_err() {
                return usize::MAX;
            }
        }
        "redis-rs" => {
            let cmd = redis::cmd("SET")
                .arg("key")
                .arg("value")
                .arg("NX")
                .arg("PX")
                .arg(ttl)
                .get_packed_command();
            buf.extend_from_slice(&cmd);
        }
        _ => return usize::MAX,
    }
    1
}

/// Runs one case `reps` times; `Err` names what went wrong.
fn run(case: &str, lib: &str, reps: usize) -> Result<(), String> {
    if case == "encode" {
        let mut buf = BytesMut::with_capacity(256);
        for _ in 0..reps {
            buf.clear();
            if measured_encode(lib, &mut buf, black_box(30_000)) != 1 {
                return Err(format!("encode: unknown library {lib}"));
            }
            let want: &[u8] = b"*6\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n";
            if buf[..] != *want {
                return Err(format!("encode/{lib}: wrong bytes"));
            }
        }
        return Ok(());
    }
    let all = cases();
    let Some(c) = all.iter().find(|c| c.name == case) else {
        return Err(format!("unknown case {case}"));
    };
    let mut decoder = Decoder::new();
    for _ in 0..reps {
        let (got, left) = if c.pieces {
            if lib != "muxlock" {
                return Err(format!("{case}: muxlock only"));
            }
            let mut buf = BytesMut::with_capacity(c.input.len());
            (measured_pieces(&mut decoder, &c.input, &mut buf), buf.len())
        } else {
            let mut buf = BytesMut::from(&c.input[..]);
            let got = match lib {
                "muxlock" => measured(&mut buf, |b| decoder.decode(b)),
                "rp2" => measured(&mut buf, rp2::decode_bytes_mut),
                "rp3" => measured(&mut buf, rp3::decode_bytes_mut),
                _ => return Err(format!("unknown library {lib}")),
            };
            (got, buf.len())
        };
        if got != c.values || left != 0 {
            return Err(format!("{case}/{lib}: {got} values, {left} bytes left"));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let result = match &args[..] {
        [case, lib, reps] => match reps.parse() {
            Ok(reps) => run(case, lib, reps),
            Err(_) => Err(format!("not a count: {reps}")),
        },
        // `units CASE`: what scripts/instructions divides the count of one repetition by.
        [units, case] if units == "units" => match cases().iter().find(|c| c.name == case) {
            Some(c) => {
                println!("{}", c.units);
                Ok(())
            }
            None if case == "encode" => {
                println!("1");
                Ok(())
            }
            None => Err(format!("unknown case {case}")),
        },
        [] => {
            // A smoke run of every case and library, once: what `cargo test --all-targets` does.
            let mut r = Ok(());
            for c in cases() {
                let libs: &[&str] = match c.name {
                    "redlock_resp2" => &["muxlock", "rp2"],
                    "redlock_resp3" => &["muxlock", "rp3"],
                    "stream_100k_pieces" => &["muxlock"],
                    _ => &["muxlock", "rp2", "rp3"],
                };
                for lib in libs {
                    r = r.and_then(|()| run(c.name, lib, 1));
                }
            }
            for lib in ["muxlock", "rp2", "redis-rs"] {
                r = r.and_then(|()| run("encode", lib, 1));
            }
            r
        }
        _ => Err("usage: resp_count [CASE LIB REPS | units CASE]".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resp_count: {e}");
            ExitCode::FAILURE
        }
    }
}
