//! The inputs of the RESP codec cases and the `SET key value NX PX ttl` encoders, shared by `benches/resp.rs`
//! (wall time, criterion) and `benches/resp_count.rs` (instruction counts, callgrind), so that both measure the
//! same work.

use bytes::{Bytes, BytesMut};
use muxlock::resp::{Decimal, encode_command};
use redis_protocol::resp2::encode::extend_encode_borrowed;
use redis_protocol::resp2::types::BorrowedFrame;

/// `n` copies of `reply`.
pub fn repeated(reply: &[u8], n: usize) -> Bytes {
    reply.repeat(n).into()
}

/// One bulk string of `len` bytes.
pub fn bulk(len: usize) -> Bytes {
    let mut v = format!("${len}\r\n").into_bytes();
    v.resize(v.len() + len, b'x');
    v.extend_from_slice(b"\r\n");
    v.into()
}

/// An array of `n` eight-byte bulk strings: `$8\r\nkey:0001\r\n`, ...
pub fn bulk_array(n: usize) -> Bytes {
    let mut v = format!("*{n}\r\n").into_bytes();
    for i in 0..n {
        v.extend_from_slice(format!("$8\r\nkey:{:04}\r\n", i % 10_000).as_bytes());
    }
    v.into()
}

/// What a Redlock client reads: `+OK` (acquired) or `null` (`$-1` or `_`: held elsewhere) from
/// `SET key token NX PX ttl`, `:1` (released) or `:0` (expired) from the release script, in a fixed pseudo-random
/// order.
pub fn redlock_replies(n: usize, null: &[u8]) -> Bytes {
    let replies: [&[u8]; 4] = [b"+OK\r\n", null, b":1\r\n", b":0\r\n"];
    let mut x: u32 = 0x9E37_79B9; // xorshift32 with a fixed seed: the same stream every run
    let mut v = Vec::new();
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v.extend_from_slice(replies[(x % 4) as usize]);
    }
    v.into()
}

/// What every encoder must write for a TTL of 30,000.
pub const SET_NX_PX: &[u8] =
    b"*6\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n";

/// muxlock: `encode_command` with the TTL formatted by `Decimal`.
pub fn muxlock_set(buf: &mut BytesMut, ttl: i64) {
    let ttl = Decimal::new(ttl);
    encode_command(
        &[b"SET", b"key", b"value", b"NX", b"PX", ttl.as_bytes()],
        buf,
    );
}

/// redis-protocol: a borrowed RESP2 array, the integer written as a bulk string.
pub fn redis_protocol_set(buf: &mut BytesMut, ttl: i64) {
    use BorrowedFrame::{BulkString, Integer};
    let args = [
        BulkString(b"SET"),
        BulkString(b"key"),
        BulkString(b"value"),
        BulkString(b"NX"),
        BulkString(b"PX"),
        Integer(ttl),
    ];
    // `true`: integers are written as bulk strings, the form a request needs.
    extend_encode_borrowed(buf, &BorrowedFrame::Array(&args), true).expect("encodable");
}

/// redis-rs' API builds a `Cmd` and returns a new `Vec`: that is its cost per command.
pub fn redis_rs_set(ttl: i64) -> Vec<u8> {
    redis::cmd("SET")
        .arg("key")
        .arg("value")
        .arg("NX")
        .arg("PX")
        .arg(ttl)
        .get_packed_command()
}
