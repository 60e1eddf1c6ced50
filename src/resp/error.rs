//! Decode errors: what went wrong, and at which byte.

use std::fmt;

/// What was wrong with the input.
///
/// Every kind is fatal for the stream it came from: after a decode error the byte stream has lost its framing, and
/// the connection should be dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The first byte of a value is not a RESP2 or RESP3 type byte.
    UnknownType,
    /// A line is not terminated by CRLF: a CR not followed by LF, or a LF without CR.
    ///
    /// Simple strings and errors may contain neither byte, so this is also the error for a CR or LF inside one.
    InvalidLineEnd,
    /// A bulk payload (`$`, `!`, `=`, or a chunk of a streamed string) is not followed by CRLF: the declared length
    /// is wrong.
    InvalidBulkEnd,
    /// An integer (`:`) is not in the form Redis' `string2ll` accepts: optional `-`, no leading zeros, no `+`,
    /// no spaces, no `-0`, no empty number.
    InvalidInteger,
    /// An integer (`:`) or a length is outside the range of a signed 64-bit integer.
    IntegerOverflow,
    /// A length is malformed, negative other than `-1`, or `-1` on a type that has no null form (which includes the
    /// chunks of a streamed string). Also a streamed header whose `?` is not followed by CRLF (`$?5`).
    InvalidLength,
    /// A streamed form the RESP3 specification does not define: `!?`, `=?`, `|?` or `>?`. RESP3 streams blob
    /// strings (`$?`), arrays (`*?`), sets (`~?`) and maps (`%?`) only, and those are decoded.
    ///
    /// (muxlock 0.1 returned this for every streamed form, before they were decoded.)
    StreamedUnsupported,
    /// A bulk length is above [`Limits::max_bulk_len`](super::Limits::max_bulk_len), or a chunk would take a
    /// streamed string's total length above it.
    BulkTooLong,
    /// An aggregate length is above [`Limits::max_aggregate_len`](super::Limits::max_aggregate_len), or a streamed
    /// aggregate goes on past that many elements (pairs for maps): the offset is the first value too many.
    AggregateTooLong,
    /// Aggregates are nested deeper than [`Limits::max_depth`](super::Limits::max_depth).
    TooDeep,
    /// A line (simple string, error, double, big number) is longer than
    /// [`Limits::max_line_len`](super::Limits::max_line_len) without its CRLF.
    LineTooLong,
    /// A boolean other than `#t` or `#f`.
    InvalidBoolean,
    /// A null other than `_\r\n`.
    InvalidNull,
    /// A double outside the RESP3 grammar: `inf`, `-inf`, `nan`, or `[+|-]digits[.digits][(e|E)[+|-]digits]`.
    InvalidDouble,
    /// A big number that is not an optional sign followed by at least one digit.
    InvalidBigNumber,
    /// A verbatim string shorter than four bytes or without `:` after its three-byte format.
    InvalidVerbatim,
    /// Inside a streamed string (`$?`), a byte other than `;` where the next chunk must start.
    ExpectedChunk,
    /// A marker of a streamed value where it cannot stand: a chunk (`;`) outside a streamed string, or an end (`.`)
    /// outside a streamed aggregate (at top level, or among the values of a counted aggregate).
    StrayStreamMarker,
    /// A streamed map ended (`.`) after a key, without its value: a map holds pairs.
    OddStreamedMap,
    /// The decoder's two passes disagreed: a bug in muxlock, never the peer's fault. Please report it with the
    /// bytes that caused it.
    Internal,
}

impl ErrorKind {
    fn describe(self) -> &'static str {
        match self {
            ErrorKind::UnknownType => "unknown type byte",
            ErrorKind::InvalidLineEnd => {
                "line not terminated by CRLF (or CR/LF inside a simple string)"
            }
            ErrorKind::InvalidBulkEnd => "bulk payload not followed by CRLF",
            ErrorKind::InvalidInteger => "malformed integer",
            ErrorKind::IntegerOverflow => "integer out of the signed 64-bit range",
            ErrorKind::InvalidLength => "malformed or negative length",
            ErrorKind::StreamedUnsupported => "streamed form not defined by RESP3",
            ErrorKind::BulkTooLong => "bulk length above the limit",
            ErrorKind::AggregateTooLong => "aggregate length above the limit",
            ErrorKind::TooDeep => "aggregates nested deeper than the limit",
            ErrorKind::LineTooLong => "line longer than the limit",
            ErrorKind::InvalidBoolean => "boolean is neither #t nor #f",
            ErrorKind::InvalidNull => "malformed null",
            ErrorKind::InvalidDouble => "malformed double",
            ErrorKind::InvalidBigNumber => "malformed big number",
            ErrorKind::InvalidVerbatim => "malformed verbatim string",
            ErrorKind::ExpectedChunk => "streamed string without its next chunk",
            ErrorKind::StrayStreamMarker => "streamed chunk or end outside a streamed value",
            ErrorKind::OddStreamedMap => "streamed map ended between a key and its value",
            ErrorKind::Internal => "internal decoder error (a muxlock bug)",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A decode error: its [`ErrorKind`] and the offset of the offending byte, counted from the first byte of the value
/// being decoded (the start of the buffer passed to [`decode`](super::decode)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeError {
    kind: ErrorKind,
    offset: usize,
}

impl DecodeError {
    pub(crate) fn new(kind: ErrorKind, offset: usize) -> DecodeError {
        DecodeError { kind, offset }
    }

    /// What was wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Where: the offset of the offending byte from the start of the value being decoded.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid RESP: {} at byte {}", self.kind, self.offset)
    }
}

impl std::error::Error for DecodeError {}
