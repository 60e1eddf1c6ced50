//! Replays the checked-in fuzz inputs on every `cargo test`, on stable, without cargo-fuzz: each file of
//! `fuzz/seeds/<target>/` and `fuzz/regressions/<target>/` goes through the harness of its target, so the seeds
//! stay valid and no past crash comes back.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

#[path = "../../fuzz/cluster.rs"]
mod cluster;
#[path = "../../fuzz/differential.rs"]
mod differential;
use crate::harness;

/// The replay inputs of `target`, sorted; each seed directory must exist and hold a real corpus.
fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files = Vec::new();
    for kind in ["seeds", "regressions"] {
        let dir = fuzz.join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            assert_ne!(kind, "seeds", "{} is missing", dir.display());
            continue;
        };
        for entry in entries {
            let path = entry.expect("readable fuzz directory").path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(
        files.len() >= 20,
        "{target}: only {} seed files; the corpus should not shrink",
        files.len()
    );
    files
}

/// A stack as roomy as a fuzzer's main thread gets, and then some: redis-protocol's decoder recurses once per
/// nesting level, and an unoptimised build needs far more stack per level than the 2 MiB of a test thread.
const STACK: usize = 256 << 20;

/// Runs `harness` on every input of `target`, naming each input that fails.
#[track_caller]
fn replay(target: &'static str, harness: fn(&[u8])) {
    let failed = std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || {
            let mut failed = Vec::new();
            for path in inputs(target) {
                let data = std::fs::read(&path).expect("readable fuzz input");
                if catch_unwind(AssertUnwindSafe(|| harness(&data))).is_err() {
                    failed.push(path.display().to_string());
                }
            }
            failed
        })
        .expect("spawn the replay thread")
        .join()
        .expect("the replay thread catches every panic");
    assert!(failed.is_empty(), "{target} fails on {failed:#?}");
}

#[test]
fn decode_seeds_and_regressions() {
    replay("decode", harness::decode);
}

#[test]
fn roundtrip_seeds_and_regressions() {
    replay("roundtrip", harness::roundtrip);
}

#[test]
fn cluster_seeds_and_regressions() {
    replay("cluster", cluster::check);
}

#[test]
fn differential_seeds_and_regressions() {
    replay("differential", differential::check);
}

/// The differential predicates are not vacuous: each side of a documented difference is seen where expected.
#[test]
fn differences_are_recognised() {
    use bytes::BytesMut;
    use muxlock::resp::decode;

    for (input, why) in [
        (&b":+1\r\n"[..], "D1"),
        (b"+a\rb\r\n", "D2"),
        (b"$1\r\naXY", "D3"),
        (b",.5\r\n", "D4"),
        (b"(1a\r\n", "D5"),
        (b"_x\r\n", "D6"),
        (b"=5\r\ntxt;x\r\n", "D7"),
        (b"HELLO 3\r\n", "D8"),
        (b";1\r\na\r\n", "D8"),
        (b"*1\r\n.\r\n", "D8"),
        (b"*?\r\n:1\r\n;0\r\n", "D8"),
        (b"$?\r\n$1\r\na\r\n;0\r\n", "D18"),
        (b"$?\r\n;1\r\na\r\n.\r\n", "D18"),
        (b"%?\r\n+a\r\n.\r\n", "D19"),
        (b"*?\r\n.x\r\n", "D20"),
    ] {
        let e = decode(&mut BytesMut::from(input)).expect_err("invalid for us");
        let got = differential::we_reject(&e, input).unwrap_or("none");
        assert!(got.starts_with(why), "{input:?}: {got}");
        differential::check(input);
    }
    for (input, why) in [
        (&b"*1\r\n$-1\r\n"[..], "D10"),
        (b"~1\r\n*0\r\n", "D11"),
        (b"|0\r\n_\r\n", "D12"),
        (b"=7\r\nabc:xyz\r\n", "D13"),
        (b"-\xff\r\n", "D14"),
    ] {
        let v = decode(&mut BytesMut::from(input))
            .expect("valid for us")
            .expect("complete");
        let got = differential::we_accept(&v).unwrap_or("none");
        assert!(got.starts_with(why), "{input:?}: {got}");
        differential::check(input);
    }
    for (input, why) in [
        (&b"*1\r\n*?\r\n.\r\n"[..], "D21"),
        (b"%1\r\n$?\r\n;0\r\n:1\r\n", "D21"),
        (b"|1\r\n+a\r\n~?\r\n.\r\n:1\r\n", "D21"),
        (b"*?\r\n*1\r\n|0\r\n$?\r\n;0\r\n.\r\n", "D21"),
    ] {
        decode(&mut BytesMut::from(input))
            .expect("valid for us")
            .expect("complete");
        let got = differential::we_accept_bytes(input).unwrap_or("none");
        assert!(got.starts_with(why), "{input:?}: {got}");
        differential::check(input);
    }
    // Undocumented disagreements are not excused.
    let e = decode(&mut BytesMut::from(&b":x\r\n"[..])).expect_err("invalid");
    assert_eq!(differential::we_reject(&e, b":x\r\n"), None);
    assert_eq!(
        differential::we_accept(&muxlock::resp::Value::Integer(1)),
        None
    );
    // A streamed value at top level, inside another, or annotated, is not D21: theirs is read there too.
    for input in [
        &b"*?\r\n*?\r\n:1\r\n.\r\n.\r\n"[..],
        b"|1\r\n+a\r\n+b\r\n%?\r\n.\r\n",
        b"~?\r\n|0\r\n$?\r\n;0\r\n.\r\n",
    ] {
        assert_eq!(differential::we_accept_bytes(input), None, "{input:?}");
    }
}

/// The differential target compares streamed values: redis-protocol, driven as a client drives its streaming
/// decoder, reads the same ones (and not as a refusal both sides happen to share).
#[test]
fn streamed_values_are_compared_not_excused() {
    use bytes::{Bytes, BytesMut};
    use muxlock::resp::decode;

    for input in [
        &b"$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n"[..],
        b"$?\r\n;0\r\n",
        b"*?\r\n:1\r\n$?\r\n;1\r\na\r\n;0\r\n*2\r\n+x\r\n_\r\n.\r\n",
        b"%?\r\n+a\r\n:1\r\n+b\r\n~?\r\n.\r\n.\r\n",
        b"~?\r\n+orange\r\n#t\r\n.\r\n",
        b"*?\r\n*?\r\n.\r\n%?\r\n.\r\n.\r\n",
        b"|1\r\n+ttl\r\n:1\r\n*?\r\n:1\r\n.\r\n",
    ] {
        let ours = decode(&mut BytesMut::from(input))
            .expect("valid for us")
            .expect("complete");
        let theirs = differential::their_decode(&Bytes::copy_from_slice(input));
        assert!(
            matches!(theirs, Ok(Some((_, n))) if n == input.len()),
            "{input:?}: we read {ours:?}, they {theirs:?}"
        );
        differential::check(input);
    }
}
