//! The codec against a real redis-server: every type the server can send, in RESP2 and RESP3.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use muxlock::resp::{Decoder, Value, encode_command};
use support::RedisServer;

/// A blocking RESP connection made of our codec and a std socket.
struct Client {
    stream: TcpStream,
    buf: BytesMut,
    decoder: Decoder,
}

impl Client {
    fn connect(server: &RedisServer) -> Client {
        let stream = server.connect();
        Client {
            stream,
            buf: BytesMut::new(),
            decoder: Decoder::new(),
        }
    }

    /// Sends one command and reads one value (a push counts as a value).
    #[track_caller]
    fn call(&mut self, args: &[&str]) -> Value {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut out = BytesMut::new();
        encode_command(&args, &mut out);
        self.stream.write_all(&out).expect("write");
        self.read()
    }

    #[track_caller]
    fn read(&mut self) -> Value {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(v) = self
                .decoder
                .decode(&mut self.buf)
                .expect("valid RESP from redis-server")
            {
                return v;
            }
            assert!(
                Instant::now() < until,
                "no complete reply; have {:?}",
                &self.buf[..]
            );
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn bulk(s: &str) -> Value {
    Value::BulkString(Bytes::copy_from_slice(s.as_bytes()))
}
fn simple(s: &str) -> Value {
    Value::SimpleString(Bytes::copy_from_slice(s.as_bytes()))
}
fn int(n: i64) -> Value {
    Value::Integer(n)
}

#[test]
#[allow(clippy::approx_constant)] // 3.141 is what DEBUG PROTOCOL double sends, not an attempt at pi
fn debug_protocol_in_resp3_gives_every_resp3_type() {
    let server = RedisServer::builder().enable_debug().start();
    let mut c = Client::connect(&server);
    let hello = c.call(&["HELLO", "3"]);
    let Value::Map(pairs) = &hello else {
        panic!("HELLO 3 is a map in RESP3: {hello:?}")
    };
    assert!(pairs.contains(&(bulk("proto"), int(3))), "{pairs:?}");

    let cases: Vec<(&str, Value)> = vec![
        ("string", bulk("Hello World")),
        ("integer", int(12345)),
        ("double", Value::Double(3.141)),
        (
            "bignum",
            Value::BigNumber("1234567999999999999999999999999999999".into()),
        ),
        ("null", Value::Null),
        ("array", Value::Array(vec![int(0), int(1), int(2)])),
        ("set", Value::Set(vec![int(0), int(1), int(2)])),
        (
            "map",
            Value::Map(vec![
                (int(0), Value::Boolean(false)),
                (int(1), Value::Boolean(true)),
                (int(2), Value::Boolean(false)),
            ]),
        ),
        (
            "attrib",
            Value::Attribute {
                attributes: vec![(
                    bulk("key-popularity"),
                    Value::Array(vec![bulk("key:123"), int(90)]),
                )],
                value: Box::new(bulk("Some real reply following the attribute")),
            },
        ),
        ("true", Value::Boolean(true)),
        ("false", Value::Boolean(false)),
        (
            "verbatim",
            Value::Verbatim {
                format: *b"txt",
                data: "This is a verbatim\nstring".into(),
            },
        ),
    ];
    for (name, want) in cases {
        assert_eq!(
            c.call(&["DEBUG", "PROTOCOL", name]),
            want,
            "DEBUG PROTOCOL {name}"
        );
    }
    // A push is out of band: it comes first, then the command's own reply.
    assert_eq!(
        c.call(&["DEBUG", "PROTOCOL", "push"]),
        Value::Push(vec![bulk("server-cpu-usage"), int(42)]),
    );
    assert_eq!(c.read(), bulk("Some real reply following the push reply"));
}

#[test]
fn debug_protocol_in_resp2_gives_the_resp2_forms() {
    let server = RedisServer::builder().enable_debug().start();
    let mut c = Client::connect(&server);
    let cases: Vec<(&str, Value)> = vec![
        ("string", bulk("Hello World")),
        ("integer", int(12345)),
        ("double", bulk("3.141")),
        ("bignum", bulk("1234567999999999999999999999999999999")),
        ("null", Value::NullBulk),
        ("array", Value::Array(vec![int(0), int(1), int(2)])),
        ("set", Value::Array(vec![int(0), int(1), int(2)])),
        (
            "map",
            Value::Array(vec![int(0), int(0), int(1), int(1), int(2), int(0)]),
        ),
        ("attrib", bulk("Some real reply following the attribute")),
        ("true", int(1)),
        ("false", int(0)),
        ("verbatim", bulk("This is a verbatim\nstring")),
    ];
    for (name, want) in cases {
        assert_eq!(
            c.call(&["DEBUG", "PROTOCOL", name]),
            want,
            "DEBUG PROTOCOL {name}"
        );
    }
    assert!(
        c.call(&["DEBUG", "PROTOCOL", "push"]).is_error(),
        "pushes need RESP3"
    );
}

/// Replies of everyday commands, checked in both protocols.
#[test]
fn normal_command_replies_in_resp2_and_resp3() {
    let server = RedisServer::start();
    let mut c = Client::connect(&server);
    let big = "x".repeat(1 << 20);
    for resp3 in [false, true] {
        if resp3 {
            assert!(matches!(c.call(&["HELLO", "3"]), Value::Map(_)));
        }
        assert_eq!(c.call(&["FLUSHALL"]), simple("OK"));
        assert_eq!(
            c.call(&["SET", "k", "v", "NX", "PX", "30000"]),
            simple("OK")
        );
        let null = if resp3 { Value::Null } else { Value::NullBulk };
        assert_eq!(
            c.call(&["SET", "k", "w", "NX", "PX", "30000"]),
            null,
            "NX on an existing key"
        );
        assert_eq!(c.call(&["GET", "missing"]), null);
        assert_eq!(c.call(&["GET", "k"]), bulk("v"));
        assert_eq!(c.call(&["INCR", "n"]), int(1));
        assert_eq!(c.call(&["DEL", "n", "missing"]), int(1));
        let Value::Error(e) = c.call(&["NOSUCHCOMMAND"]) else {
            panic!("an error reply")
        };
        assert!(e.starts_with(b"ERR unknown command"), "{e:?}");
        c.call(&["HSET", "h", "f", "1"]);
        let hash = c.call(&["HGETALL", "h"]);
        let want = if resp3 {
            Value::Map(vec![(bulk("f"), bulk("1"))])
        } else {
            Value::Array(vec![bulk("f"), bulk("1")])
        };
        assert_eq!(hash, want);
        c.call(&["SADD", "s", "a"]);
        let set = c.call(&["SMEMBERS", "s"]);
        assert_eq!(
            set,
            if resp3 {
                Value::Set(vec![bulk("a")])
            } else {
                Value::Array(vec![bulk("a")])
            }
        );
        c.call(&["ZADD", "z", "1.5", "m"]);
        assert_eq!(
            c.call(&["ZSCORE", "z", "m"]),
            if resp3 {
                Value::Double(1.5)
            } else {
                bulk("1.5")
            }
        );
        assert_eq!(c.call(&["EXISTS", "k"]), int(1));
        let lrange = c.call(&["LRANGE", "nolist", "0", "-1"]);
        assert_eq!(lrange, Value::Array(vec![]));
        // A 1 MiB value arrives in many reads and decodes to exactly its bytes.
        assert_eq!(c.call(&["SET", "big", &big]), simple("OK"));
        assert_eq!(c.call(&["GET", "big"]), bulk(&big));
        // The Redlock scripts' replies: compare-and-delete gives 1, then 0.
        let release = "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";
        assert_eq!(c.call(&["EVAL", release, "1", "k", "v"]), int(1));
        assert_eq!(c.call(&["EVAL", release, "1", "k", "v"]), int(0));
        let Value::Error(e) = c.call(&["EVALSHA", "0000000000000000000000000000000000000000", "0"])
        else {
            panic!("NOSCRIPT is an error")
        };
        assert!(e.starts_with(b"NOSCRIPT"), "{e:?}");
    }
}
