//! `MOVED`/`ASK` errors and `redis+cluster://` URLs: the forms Redis writes and users give, and the refused ones.

use super::*;

#[test]
fn redirections() {
    use RedirectKind::{Ask, Moved};
    let host = |h: &str| Endpoint::Host(h.into());
    let cases: Vec<(&[u8], RedirectKind, u16, Endpoint, u16)> = vec![
        (
            b"MOVED 3999 127.0.0.1:6381",
            Moved,
            3999,
            host("127.0.0.1"),
            6381,
        ),
        (
            b"ASK 3999 127.0.0.1:6381",
            Ask,
            3999,
            host("127.0.0.1"),
            6381,
        ),
        (
            b"MOVED 0 redis-2.example.com:7000",
            Moved,
            0,
            host("redis-2.example.com"),
            7000,
        ),
        (b"MOVED 16383 ::1:7000", Moved, 16383, host("::1"), 7000),
        (
            b"ASK 5 2001:db8::7:65535",
            Ask,
            5,
            host("2001:db8::7"),
            65535,
        ),
        (
            b"MOVED 5 [2001:db8::7]:7000",
            Moved,
            5,
            host("2001:db8::7"),
            7000,
        ),
        (
            b"MOVED 12182 :23103",
            Moved,
            12182,
            Endpoint::SameHost,
            23103,
        ),
        (b"ASK 12182 ?:7000", Ask, 12182, Endpoint::Unknown, 7000),
    ];
    for (text, kind, slot, endpoint, port) in cases {
        let want = Redirect {
            kind,
            slot,
            endpoint,
            port,
        };
        assert_eq!(
            Redirect::parse(text),
            Ok(Some(want.clone())),
            "{}",
            text.escape_ascii()
        );
        // Display writes it back as the server did (brackets aside).
        if !text.contains(&b'[') {
            assert_eq!(want.to_string().as_bytes(), text);
        }
    }
    for other in [
        &b"ERR wrong"[..],
        b"",
        b"MOVEDX 1 h:1",
        b"moved 1 h:1",
        b"CROSSSLOT Keys",
        b"TRYAGAIN x",
    ] {
        assert_eq!(Redirect::parse(other), Ok(None), "{}", other.escape_ascii());
    }
    let bad: Vec<(&[u8], RedirectError)> = vec![
        (b"MOVED", RedirectError::Shape),
        (b"MOVED 1", RedirectError::Shape),
        (b"MOVED 1 h:1 extra", RedirectError::Shape),
        (b"MOVED 16384 h:1", RedirectError::Slot),
        (b"MOVED -1 h:1", RedirectError::Slot),
        (b"MOVED +1 h:1", RedirectError::Slot),
        (b"MOVED 01 h:1", RedirectError::Slot),
        (b"MOVED x h:1", RedirectError::Slot),
        (b"ASK 1 h", RedirectError::NoPort),
        (b"ASK 1 h:", RedirectError::Port),
        (b"ASK 1 h:0", RedirectError::Port),
        (b"ASK 1 h:65536", RedirectError::Port),
        (b"ASK 1 h:07000", RedirectError::Port),
        (b"ASK 1 \xff:1", RedirectError::Endpoint),
        (b"ASK 1 h\t:1", RedirectError::Endpoint),
    ];
    for (text, want) in bad {
        assert_eq!(Redirect::parse(text), Err(want), "{}", text.escape_ascii());
    }
}

#[test]
fn cluster_urls() {
    let a: ClusterAddr = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"
        .parse()
        .unwrap();
    assert_eq!(
        a.seeds().iter().map(|s| s.port()).collect::<Vec<_>>(),
        [7000, 7001]
    );
    assert!(a.seeds().iter().all(|s| !s.tls() && s.password().is_none()));
    let a: ClusterAddr = "rediss+cluster://u:p%40w@h1,h2:7001/0?protocol=resp3#insecure"
        .parse()
        .unwrap();
    for s in a.seeds() {
        assert!(s.tls() && s.insecure() && s.resp3());
        assert_eq!(
            (s.username(), s.password(), s.db()),
            (Some("u"), Some("p@w"), Some(0))
        );
    }
    assert_eq!((a.seeds()[0].host(), a.seeds()[0].port()), ("h1", 6379));
    assert_eq!(
        a.to_string(),
        "rediss+cluster://u:***@h1:6379,h2:7001/0?protocol=resp3#insecure"
    );
    let node = a.node("10.0.0.9", 7005);
    assert!(node.tls() && node.resp3() && node.password() == Some("p@w"));
    let one: ClusterAddr = "REDIS+CLUSTER://[::1]:7000".parse().unwrap();
    assert_eq!(one.seeds()[0].host(), "::1");
    // A password holding '#' and ',' (escaped or not).
    let a: ClusterAddr = "redis+cluster://:p#w,x@h:1,h:2".parse().unwrap();
    assert_eq!(a.seeds()[1].password(), Some("p#w,x"));

    for (input, want) in [
        ("redis+cluster://", "at least one seed"),
        ("redis+cluster://u:p@", "at least one seed"),
        ("redis+cluster://h:1,,h:2", "a seed in the list is empty"),
        ("redis+cluster://h:1,", "a seed in the list is empty"),
        ("redis+cluster://h:1,h:1", "given twice"),
        ("redis+cluster://h:1/2", "database 0 only"),
        ("redis+cluster://h:1,h:x", "port is not a number"),
        ("redis+cluster://u:secret@h:1,::1:2", "needs brackets"),
        ("redis://h:1", "scheme is redis+cluster://"),
        ("h:1,h:2", "a cluster is redis+cluster://"),
    ] {
        let err = input.parse::<ClusterAddr>().unwrap_err().to_string();
        assert!(err.contains(want), "{input}: {err}");
        assert!(!err.contains("secret"), "{err}");
    }
    assert!(ClusterAddr::new(vec![]).is_err());
    let seed = |port| crate::net::NodeAddr::new("h", port);
    assert!(ClusterAddr::new(vec![seed(1), seed(1)]).is_err());
    assert!(ClusterAddr::new(vec![seed(1).with_db(1)]).is_err());
    assert_eq!(
        ClusterAddr::new(vec![seed(1), seed(2)])
            .unwrap()
            .to_string(),
        "redis+cluster://h:1,h:2"
    );

    assert!(matches!(
        "redis+cluster://h:1".parse(),
        Ok(MemberAddr::Cluster(_))
    ));
    assert!(matches!("redis://h:1".parse(), Ok(MemberAddr::Node(_))));
    assert!(matches!("h:1".parse(), Ok(MemberAddr::Node(_))));
    let e = "redis+cluster://h:1"
        .parse::<crate::net::NodeAddr>()
        .unwrap_err();
    assert!(e.to_string().contains("not one node"), "{e}");
}
