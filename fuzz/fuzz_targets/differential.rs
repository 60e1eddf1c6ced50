//! Differential fuzzing: the same bytes into muxlock's decoder and redis-protocol 6's RESP3 decoder. When both
//! read a value, it must be the same value over the same bytes; when they disagree, it must be one of the intended
//! differences below, or the target panics. The logic lives in `../differential.rs`, which `tests/codec/fuzz_replay.rs`
//! shares to replay the seeds on stable.
//!
//! redis-protocol reads RESP3's streamed strings and aggregates only in its streaming mode, one part per call; its
//! complete mode refuses them. `their_decode` drives the streaming mode as a client would (a streamed header opens
//! a buffer, parts fill it up to an end frame, `from_buffer` makes one frame of it), so streamed values are
//! compared like any other.
//!
//! # Intended differences
//!
//! muxlock rejects, redis-protocol accepts (a predicate on our `ErrorKind` and the byte it names):
//!
//! - **D1** integers and lengths with a `+` sign, a leading zero or `-0` (we follow Redis' `string2ll`; they use
//!   Rust's `FromStr`): `InvalidInteger` / `InvalidLength` at a `+` or a digit.
//! - **D2** a lone CR or LF inside a simple string, error or big number (they cut the line at the first CRLF):
//!   `InvalidLineEnd` at a CR or LF.
//! - **D3** a bulk payload not followed by CRLF (they skip two bytes unchecked): `InvalidBulkEnd`.
//! - **D4** doubles outside the RESP3 grammar that Rust's `f64` parser takes (`.5`, `1.`, `infinity`, `NaN`,
//!   `+inf`): `InvalidDouble`.
//! - **D5** big numbers that are not `[+-]?[0-9]+` (they take any line): `InvalidBigNumber`.
//! - **D6** a null with content, `_x\r\n` (they skip to the CRLF): `InvalidNull`.
//! - **D7** a verbatim string without `:` after its format (unchecked by them): `InvalidVerbatim`.
//! - **D8** frames that are not replies: the inline `HELLO` command (`UnknownType` at `H`), and the markers of
//!   streamed values where they cannot stand (`StrayStreamMarker`): a chunk `;` outside a streamed string, an end
//!   `.` outside a streamed aggregate. They read both as frames anywhere, so a chunk can be an array's element and
//!   `;0` can end a streamed aggregate.
//! - **D9** our limits, which they do not have: `TooDeep`, `LineTooLong`, `BulkTooLong`, `AggregateTooLong`.
//! - **D18** inside a streamed string, a blob string (`$3\r\nabc\r\n`) or an end `.` where a chunk must be (they
//!   take a blob string as a part and `.` as the end): `ExpectedChunk` at `$` or `.`.
//! - **D19** a streamed map that ends after a key (they drop the key): `OddStreamedMap`.
//! - **D20** an end with content, `.x\r\n` (they read to the CRLF): `InvalidLineEnd` after the `.`.
//!
//! muxlock accepts, redis-protocol rejects (a predicate on our `Value`):
//!
//! - **D10** the RESP2 nulls `$-1` and `*-1`, which Redis sends on RESP3 connections too (their RESP3 decoder
//!   reads `-1` as `?`; their complete mode refuses it, and `their_decode` refuses it as a stream's header).
//! - **D11** map keys and set members that are aggregates (RESP3 allows any type; their maps and sets hash, and
//!   their `Hash` panics on aggregates, so `their_decode` refuses those in streamed sets and maps).
//! - **D12** an attribute that annotates another attributed value, or the null `_`.
//! - **D13** a verbatim format other than `txt` and `mkd` (the spec says three bytes; they know two).
//! - **D14** a simple error that is not UTF-8 (they store it as a `str`).
//! - **D21** a streamed value among the values of a counted aggregate or in an attribute's pairs (their counted
//!   aggregates want complete frames): a predicate on our value's bytes, since the value cannot show it.
//!
//! Both accept:
//!
//! - **D15** their maps, sets and attribute maps are `HashMap`s/`HashSet`s: order is lost, and duplicate keys or
//!   members collapse (also `0.0` with `-0.0`). They are compared as: the same distinct keys (members), and every
//!   pair they kept is one of ours.
//!
//! Verdict timing:
//!
//! - **D16** we reject the first invalid byte as soon as it arrives, and limits at the header; they wait for the
//!   CRLF or the declared bytes. "We reject, they need more" is always allowed.
//! - **D17** they reject the constructs of D10–D13 and D21 as soon as those are complete, before the value around
//!   them is, and D14 as soon as its value is read, which inside a streamed aggregate is before the aggregate ends.
//!   "We need more, they reject" is allowed when their error comes from one of those checks.
//!
//! Inputs with more than `MAX_THEIR_DEPTH` (512) aggregate type bytes are not given to redis-protocol: its decoder
//! recurses once per nesting level and could overflow the stack.

#![no_main]

#[path = "../differential.rs"]
mod differential;

libfuzzer_sys::fuzz_target!(|data: &[u8]| differential::check(data));
