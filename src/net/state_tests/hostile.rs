//! Bytes a real Redis never sends: garbage, absurd declared sizes, nesting too deep, replies that never end. Each
//! must fail the connection with a protocol error naming the byte, and never allocate what a size claims.

use super::*;

#[track_caller]
fn assert_protocol(reply: Option<Reply>, kind: ErrorKind, offset: usize, case: &str) {
    match reply {
        Some(Err(NodeError::Protocol(e))) => {
            assert_eq!((e.kind(), e.offset()), (kind, offset), "{case}: {e}");
        }
        other => panic!("{case}: want {kind} at byte {offset}, got {other:?}"),
    }
}

#[test]
fn garbage_is_a_protocol_error_naming_the_byte() {
    use ErrorKind::*;
    let cases: &[(&str, &[u8], ErrorKind, usize)] = &[
        ("HTTP", b"HTTP/1.1 400 Bad Request\r\n\r\n", UnknownType, 0),
        ("TLS alert", b"\x15\x03\x03\x00\x02\x02\x46", UnknownType, 0),
        ("unknown type", b"@5\r\nhello\r\n", UnknownType, 0),
        ("unknown type, nested", b"*2\r\n:1\r\n@\r\n", UnknownType, 8),
        ("letter in integer", b":12a\r\n", InvalidInteger, 3),
        ("bulk too long", b"$3\r\nabcdef\r\n", InvalidBulkEnd, 7),
        ("bare LF", b"+OK\n", InvalidLineEnd, 3),
        ("negative length", b"$-2\r\n", InvalidLength, 1),
        // Streamed strings and aggregates decode (RESP3); a streamed error is not defined.
        (
            "streamed error",
            b"!?\r\n;4\r\nHell\r\n;0\r\n",
            StreamedUnsupported,
            1,
        ),
        ("bad boolean", b"#x\r\n", InvalidBoolean, 1),
    ];
    for &(case, bytes, kind, offset) in cases {
        let mut node = Node::plain();
        node.up(0);
        node.ask(&["PING"], 0);
        node.feed(bytes, 1);
        assert_protocol(node.outcome(), kind, offset, case);
        assert!(!node.state.is_up(), "{case}: dropped");
        // Redialled after the backoff, not before.
        assert!(node.state.needs_dial(node.at(1)).is_err(), "{case}");
        assert_eq!(node.state.needs_dial(node.at(11)), Ok(true), "{case}");
    }
}

/// `depth` arrays, each holding the next, around `:1`.
fn nested(depth: usize) -> Vec<u8> {
    let mut out = b"*1\r\n".repeat(depth);
    out.extend_from_slice(b":1\r\n");
    out
}

#[test]
fn declared_sizes_are_refused_or_awaited_without_allocating_them() {
    use ErrorKind::*;
    let wide = || Options::default().with_limits(Limits::default());
    let refused: Vec<(&str, Vec<u8>, bool, ErrorKind, usize)> = vec![
        (
            "2^62 bulk",
            b"$4611686018427387904\r\n".to_vec(),
            false,
            BulkTooLong,
            1,
        ),
        (
            "2^31 array",
            b"*2147483648\r\n".to_vec(),
            false,
            AggregateTooLong,
            1,
        ),
        (
            "2^31 map",
            b"%2147483648\r\n".to_vec(),
            false,
            AggregateTooLong,
            1,
        ),
        (
            "2^62 bulk, wide",
            b"$4611686018427387904\r\n".to_vec(),
            true,
            BulkTooLong,
            1,
        ),
        (
            "2^31 array, wide",
            b"*2147483648\r\n".to_vec(),
            true,
            AggregateTooLong,
            1,
        ),
        ("10,000 deep", nested(10_000), false, TooDeep, 128),
        ("10,000 deep, wide", nested(10_000), true, TooDeep, 512),
    ];
    for (case, bytes, is_wide, kind, offset) in refused {
        let opts = if is_wide { wide() } else { Options::default() };
        let mut node = Node::new("redis://h:1", opts);
        node.up(0);
        node.ask(&["PING"], 0);
        node.feed(&bytes, 1);
        assert_protocol(node.outcome(), kind, offset, case);
    }
    // Inside the limits a declaration is only a promise: the reply is awaited, and costs what arrived.
    let awaited: &[(&str, &[u8], bool)] = &[
        ("2^31 - 1 elements", b"*2147483647\r\n:1\r\n", true),
        ("512 MiB bulk", b"$536870912\r\nabc", true),
        ("4 MiB bulk", b"$4194304\r\nabc", false),
        ("65,536 pairs", b"%65536\r\n+a\r\n", false),
    ];
    for &(case, bytes, is_wide) in awaited {
        let opts = if is_wide { wide() } else { Options::default() };
        let mut node = Node::new("redis://h:1", opts);
        node.up(0);
        node.ask(&["PING"], 0);
        node.feed(bytes, 1);
        assert_eq!(node.outcome(), None, "{case}");
        assert!(node.state.is_up(), "{case}");
        assert!(
            node.inbound.capacity() < 64 << 10,
            "{case}: {}",
            node.inbound.capacity()
        );
    }
}

#[test]
fn a_reply_that_never_ends_is_cut_at_the_connections_limits() {
    type Case = (&'static str, &'static [u8], &'static [u8], ErrorKind, usize);
    let cases: &[Case] = &[
        // A line may hold 64 KiB before its CRLF: the byte after that is the error.
        (
            "simple string",
            b"+",
            b"x",
            ErrorKind::LineTooLong,
            1 + 65_536,
        ),
        (
            "error line",
            b"-ERR ",
            b"x",
            ErrorKind::LineTooLong,
            1 + 65_536,
        ),
        // A bulk is buffered up to its length, which the limits bound (4 MiB); then its CRLF is missing.
        (
            "4 MiB bulk",
            b"$4194304\r\n",
            b"x",
            ErrorKind::InvalidBulkEnd,
            10 + (4 << 20),
        ),
        // Above the connection's limit, the header alone is refused.
        (
            "16 MiB bulk",
            b"$16777216\r\n",
            b"x",
            ErrorKind::BulkTooLong,
            1,
        ),
    ];
    for &(case, prefix, filler, kind, offset) in cases {
        let mut node = Node::plain();
        node.up(0);
        node.ask(&["PING"], 0);
        node.feed(prefix, 1);
        // Reads of any size: 16 KiB and a byte, so that no read ends exactly where a limit does.
        let chunk = filler.repeat((16 << 10) + 1);
        let mut fed = 0;
        while node.state.is_up() {
            assert!(fed < 8 << 20, "{case}: never cut");
            node.feed(&chunk, 2);
            fed += chunk.len();
        }
        assert_protocol(node.outcome(), kind, offset, case);
    }
    // Valid all along: every header within the limits, the whole past `max_reply_len`.
    let mut node = Node::new(
        "redis://h:1",
        Options::default().with_max_reply_len(1 << 20),
    );
    node.up(0);
    node.ask(&["PING"], 0);
    node.feed(b"*65536\r\n", 1);
    let element = crate::resp::Value::BulkString(vec![b'y'; 64 << 10].into());
    let mut bytes = BytesMut::new();
    crate::resp::encode(&element, &mut bytes);
    for _ in 0..17 {
        node.feed(&bytes, 2);
    }
    assert_eq!(node.outcome(), Some(Err(NodeError::ReplyTooLarge(1 << 20))));
}
