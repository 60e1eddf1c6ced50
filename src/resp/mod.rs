//! RESP2 and RESP3: the codec muxlock speaks to Redis with. Pure functions over bytes; no I/O, no clock.
//!
//! - [`decode`] / [`Decoder`]: bytes to [`Value`]s. Incomplete input is `Ok(None)` and consumes nothing; payloads
//!   are slices of the read buffer (zero copy); every length is checked against [`Limits`] before anything is
//!   allocated or awaited; nesting costs heap, never stack. RESP3's streamed strings and aggregates are decoded
//!   too (see [Streamed values](#streamed-values)).
//! - [`encode`]: any [`Value`] to its canonical bytes. [`encode_command`]: a request (array of bulk strings) with
//!   no allocation beyond the buffer's growth.
//!
//! # Strictness
//!
//! The decoder accepts only what the RESP specification and Redis' own parser allow, and rejects the rest with a
//! [`DecodeError`] naming the byte:
//!
//! - every line ends in CRLF, and every bulk payload is followed by CRLF (the declared length must be exact);
//! - simple strings and errors contain neither CR nor LF;
//! - integers and lengths follow Redis' `string2ll`: optional `-`, no `+`, no spaces, no leading zeros, no `-0`,
//!   the full `i64` range, overflow rejected;
//! - `-1` is the only negative length, and only on `$` and `*` (the RESP2 nulls, which RESP3 connections may also
//!   send);
//! - doubles follow the RESP3 grammar (`inf`, `-inf`, `nan`, `[+|-]digits[.digits][(e|E)[+|-]digits]`), plus
//!   `-nan`, which Redis 7.0 writes for a negative NaN;
//! - booleans are `#t` or `#f`; the null is `_`; a verbatim string has a three-byte format and a `:`;
//! - unknown type bytes are errors, and so are streamed forms the spec does not define (`!?`, `=?`, `|?`, `>?`),
//!   chunks (`;`) outside a streamed string and ends (`.`) outside a streamed aggregate.
//!
//! # Streamed values
//!
//! RESP3 lets a server send a string or an aggregate before it knows its size: a streamed string is `$?` followed by
//! chunks `;<len>\r\n<bytes>\r\n` and the empty chunk `;0\r\n`; a streamed array, set or map is `*?`, `~?` or
//! `%?` followed by its values and `.\r\n`. Redis itself does not send them, but the spec defines them and
//! other servers and proxies may. The decoder reads them:
//!
//! - into the same [`Value`]s as the counted forms ([`Value::BulkString`], [`Value::Array`], [`Value::Set`],
//!   [`Value::Map`]); nothing tells a caller how a value was sent, and [`encode`] writes the counted form;
//! - under the same [`Limits`], checked as each part arrives: a string's total length against `max_bulk_len`, an
//!   aggregate's elements against `max_aggregate_len` (pairs for a map, which must end on a whole pair), nesting
//!   against `max_depth`; an endless stream is an error once it passes a limit, never unbounded memory;
//! - resumably: every part is scanned once however many reads deliver it, and an unfinished streamed string is
//!   held as a few words, however many chunks it has had;
//! - with zero copy where the chunks allow: a string of one chunk is a slice of the read buffer; a string of
//!   several chunks is copied once, into one allocation of its total length, when its last chunk has arrived.
//!
//! Chunk lengths follow the rules of bulk lengths above (no `+`, no leading zeros, no `-1`).
//!
//! # Examples
//!
//! ```
//! use bytes::BytesMut;
//! use muxlock::resp::{decode, encode, Value};
//!
//! let mut buf = BytesMut::from(&b"%1\r\n+server\r\n$5\r\nredis\r\n"[..]);
//! let value = decode(&mut buf)?.expect("a whole value");
//! assert_eq!(value, Value::Map(vec![(Value::SimpleString("server".into()), Value::BulkString("redis".into()))]));
//!
//! let mut out = BytesMut::new();
//! encode(&value, &mut out);
//! assert_eq!(&out[..], b"%1\r\n+server\r\n$5\r\nredis\r\n");
//! # Ok::<(), muxlock::resp::DecodeError>(())
//! ```

mod build;
mod decode;
mod encode;
mod error;
mod limits;
mod scan;
mod value;

pub use decode::{Decoder, decode};
pub use encode::{Decimal, encode, encode_command};
pub use error::{DecodeError, ErrorKind};
pub use limits::Limits;
pub use value::Value;
