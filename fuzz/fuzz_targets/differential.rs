//! Differential fuzzing: the same bytes into muxlock's decoder and redis-protocol 6's RESP3 decoder. When both
//! read a value, it must be the same value over the same bytes; when they disagree, it must be one of the intended
//! differences below, or the target panics. The logic lives in `../differential.rs`, which `tests/fuzz_replay.rs`
//! shares to replay the seeds on stable.
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
//! - **D8** frames that are not replies: the inline `HELLO` command and the streamed-string chunk and end
//!   (`;`, `.`): `UnknownType` at `H`, `;` or `.`.
//! - **D9** our limits, which they do not have: `TooDeep`, `LineTooLong`, `BulkTooLong`, `AggregateTooLong`.
//!
//! muxlock accepts, redis-protocol rejects (a predicate on our `Value`):
//!
//! - **D10** the RESP2 nulls `$-1` and `*-1`, which Redis sends on RESP3 connections too (their RESP3 decoder
//!   reads `-1` as "streamed", then refuses a streamed frame).
//! - **D11** map keys and set members that are aggregates (RESP3 allows any type; their maps and sets hash).
//! - **D12** an attribute that annotates another attributed value, or the null `_`.
//! - **D13** a verbatim format other than `txt` and `mkd` (the spec says three bytes; they know two).
//! - **D14** a simple error that is not UTF-8 (they store it as a `str`).
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
//! - **D17** they reject the constructs of D10–D13 as soon as those are complete, before the value around them
//!   is. "We need more, they reject" is allowed when their error comes from one of those checks.
//!
//! Inputs with more than `MAX_THEIR_DEPTH` (512) aggregate type bytes are not given to redis-protocol: its decoder
//! recurses once per nesting level and could overflow the stack.

#![no_main]

#[path = "../differential.rs"]
mod differential;

libfuzzer_sys::fuzz_target!(|data: &[u8]| differential::check(data));
