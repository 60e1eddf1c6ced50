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
use muxlock::resp::Decoder;
use redis_protocol::resp2::decode as rp2;
use redis_protocol::resp3::decode::complete as rp3;

mod resp_cases;
use resp_cases::{
    SET_NX_PX, bulk, bulk_array, muxlock_set, redis_protocol_set, redis_rs_set, redlock_replies,
    repeated,
};

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
    let c = |name, input, values, units, pieces| Case {
        name,
        input,
        values,
        units,
        pieces,
    };
    vec![
        c("ok", repeated(b"+OK\r\n", 1000), 1000, 1000, false),
        c("int", repeated(b":12345\r\n", 1000), 1000, 1000, false),
        c("bulk_1KiB", bulk(1 << 10), 1, 1, false),
        c("bulk_1MiB", bulk(1 << 20), 1, 1, false),
        c("array_1000", bulk_array(1000), 1, 1000, false),
        c(
            "redlock_resp2",
            redlock_replies(1000, b"$-1\r\n"),
            1000,
            1000,
            false,
        ),
        c(
            "redlock_resp3",
            redlock_replies(1000, b"_\r\n"),
            1000,
            1000,
            false,
        ),
        c("stream_100k", bulk_array(100_000), 1, 100_000, false),
        c("stream_100k_pieces", bulk_array(100_000), 1, 100_000, true),
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
fn measured_encode(encode: fn(&mut BytesMut, i64), buf: &mut BytesMut, ttl: i64) {
    encode(buf, ttl);
}

/// Runs one case `reps` times; `Err` names what went wrong.
fn run(case: &str, lib: &str, reps: usize) -> Result<(), String> {
    if case == "encode" {
        let encode: fn(&mut BytesMut, i64) = match lib {
            "muxlock" => muxlock_set,
            "rp2" => redis_protocol_set,
            "redis-rs" => |buf, ttl| buf.extend_from_slice(&redis_rs_set(ttl)),
            _ => return Err(format!("encode: unknown library {lib}")),
        };
        let mut buf = BytesMut::with_capacity(256);
        for _ in 0..reps {
            buf.clear();
            measured_encode(encode, &mut buf, black_box(30_000));
            if buf[..] != *SET_NX_PX {
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
