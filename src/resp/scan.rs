//! The tokenizer: reads one RESP header or scalar at a given offset, validating it completely.
//!
//! A token is all-or-nothing: either its bytes are all present and valid ([`Step::Done`]), or more bytes are needed
//! ([`Step::Partial`]), or the input is invalid. A token never depends on what follows it, so scanning a stream split
//! at any points yields the same tokens and the same errors as scanning it whole.

use super::error::{DecodeError, ErrorKind};
use super::limits::Limits;

/// One validated token. Offsets are absolute in the scanned buffer; payloads are `start..end` (CRLF excluded).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Token {
    Simple {
        start: usize,
        end: usize,
    },
    Error {
        start: usize,
        end: usize,
    },
    Integer(i64),
    Bulk {
        start: usize,
        end: usize,
    },
    NullBulk,
    NullArray,
    Null,
    Boolean(bool),
    Double(f64),
    BigNumber {
        start: usize,
        end: usize,
    },
    BulkError {
        start: usize,
        end: usize,
    },
    Verbatim {
        format: [u8; 3],
        start: usize,
        end: usize,
    },
    /// An aggregate header and its declared element count (pairs for maps and attributes).
    Aggregate(Aggregate, usize),
    /// A streamed string of two or more chunks, as the decoder records it once the string is complete: `from` is
    /// the offset of its first chunk header, `total` the sum of the chunk lengths. (A streamed string of one chunk,
    /// or none, is recorded as the [`Token::Bulk`] of that chunk.)
    Chunked {
        from: usize,
        total: usize,
    },
    /// The header of a streamed string, `$?`: chunks follow.
    StreamedString,
    /// The header of a streamed aggregate (`*?`, `%?`, `~?`): values follow, then [`Token::End`].
    StreamedAggregate(Aggregate),
    /// A non-empty chunk of a streamed string, `;<len>\r\n<payload>\r\n`; `start..end` is the payload.
    Chunk {
        start: usize,
        end: usize,
    },
    /// The end of a streamed value: the empty chunk `;0` of a string, or `.` after an aggregate's values.
    End,
}

/// The five aggregate kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Aggregate {
    Array,
    Map,
    Set,
    Push,
    Attribute,
}

impl Aggregate {
    /// How many values follow a header declaring `n` elements, or `None` on overflow.
    pub(crate) fn values_after_header(self, n: usize) -> Option<usize> {
        match self {
            Aggregate::Array | Aggregate::Set | Aggregate::Push => Some(n),
            Aggregate::Map => n.checked_mul(2),
            // An attribute map is followed by the value it annotates.
            Aggregate::Attribute => n.checked_mul(2)?.checked_add(1),
        }
    }
}

/// The outcome of reading one token.
#[derive(Debug)]
pub(crate) enum Step {
    /// The token is complete; the next token starts at the given offset.
    Done(Token, usize),
    /// More bytes are needed. The offset says where a resumed search for the line end may start (bytes before it
    /// were already checked), or is 0 when there is nothing to resume.
    Partial(usize),
}

const CR: u8 = b'\r';
const LF: u8 = b'\n';

type Scan<T> = Result<T, DecodeError>;

fn err<T>(kind: ErrorKind, at: usize) -> Scan<T> {
    Err(DecodeError::new(kind, at))
}

/// Reads the token starting at `at`. `resume` is the hint of a previous [`Step::Partial`] for this same token (or 0).
/// `depth` is the number of aggregates open around this token; `in_stream` says whether the innermost of them is
/// streamed, the one place where `.` (its end) may stand.
pub(crate) fn token(
    buf: &[u8],
    at: usize,
    resume: usize,
    limits: &Limits,
    depth: usize,
    in_stream: bool,
) -> Scan<Step> {
    let Some(&ty) = buf.get(at) else {
        return Ok(Step::Partial(0));
    };
    match ty {
        b'+' => line_token(buf, at, resume, limits, |start, end| {
            Ok(Token::Simple { start, end })
        }),
        b'-' => line_token(buf, at, resume, limits, |start, end| {
            Ok(Token::Error { start, end })
        }),
        b':' => Ok(match number(buf, at + 1, ErrorKind::InvalidInteger)? {
            Some((n, next)) => Step::Done(Token::Integer(n), next),
            None => Step::Partial(0),
        }),
        b'$' | b'!' | b'=' => bulk(buf, at, ty, limits),
        b'*' => aggregate(buf, at, Aggregate::Array, limits, depth),
        b'%' => aggregate(buf, at, Aggregate::Map, limits, depth),
        b'~' => aggregate(buf, at, Aggregate::Set, limits, depth),
        b'>' => aggregate(buf, at, Aggregate::Push, limits, depth),
        b'|' => aggregate(buf, at, Aggregate::Attribute, limits, depth),
        b'_' => fixed(buf, at, b"_\r\n", ErrorKind::InvalidNull, Token::Null),
        b'#' => match buf.get(at + 1) {
            None => Ok(Step::Partial(0)),
            Some(b't') => fixed(
                buf,
                at,
                b"#t\r\n",
                ErrorKind::InvalidLineEnd,
                Token::Boolean(true),
            ),
            Some(b'f') => fixed(
                buf,
                at,
                b"#f\r\n",
                ErrorKind::InvalidLineEnd,
                Token::Boolean(false),
            ),
            Some(_) => err(ErrorKind::InvalidBoolean, at + 1),
        },
        b',' => line_token(buf, at, resume, limits, |start, end| {
            parse_double(&buf[start..end])
                .map(Token::Double)
                .ok_or(DecodeError::new(ErrorKind::InvalidDouble, start))
        }),
        b'(' => line_token(buf, at, resume, limits, |start, end| {
            match is_big_number(&buf[start..end]) {
                true => Ok(Token::BigNumber { start, end }),
                false => err(ErrorKind::InvalidBigNumber, start),
            }
        }),
        b'.' if in_stream => fixed(buf, at, b".\r\n", ErrorKind::InvalidLineEnd, Token::End),
        // Markers of streamed values, out of place: a chunk is only valid inside `$?`, an end only inside `*?`,
        // `%?` or `~?` (the decoder reads chunks with `chunk`, never here).
        b'.' | b';' => err(ErrorKind::StrayStreamMarker, at),
        _ => err(ErrorKind::UnknownType, at),
    }
}

/// A token of known bytes (`_\r\n`, `#t\r\n`): `buf[at..]` must start with `expected`; the first wrong byte is an
/// error of `kind`.
fn fixed(buf: &[u8], at: usize, expected: &[u8], kind: ErrorKind, token: Token) -> Scan<Step> {
    let have = &buf[at..];
    for (i, (&got, &want)) in have.iter().zip(expected).enumerate() {
        if got != want {
            return err(kind, at + i);
        }
    }
    if have.len() < expected.len() {
        return Ok(Step::Partial(0));
    }
    Ok(Step::Done(token, at + expected.len()))
}

/// A line-typed token: the content runs from `at + 1` to the first CRLF, holds neither CR nor LF, and is at most
/// `max_line_len` bytes. `make` validates the content and builds the token.
fn line_token(
    buf: &[u8],
    at: usize,
    resume: usize,
    limits: &Limits,
    make: impl FnOnce(usize, usize) -> Scan<Token>,
) -> Scan<Step> {
    let start = at + 1;
    // The CR of a valid line lies at most max_line_len bytes after the content's start: search no further, so the
    // verdict on a line never depends on how much of what follows has arrived.
    let window_end = start
        .saturating_add(limits.max_line_len())
        .saturating_add(1);
    let from = resume.max(start);
    let to = window_end.min(buf.len());
    let found = if from < to {
        find_line_end(&buf[from..to])
    } else {
        None
    };
    match found {
        Some(i) => {
            let end = from + i;
            if buf[end] == LF {
                return err(ErrorKind::InvalidLineEnd, end);
            }
            match buf.get(end + 1) {
                // Resume at the CR itself: it is a valid line end if a LF follows.
                None => Ok(Step::Partial(end)),
                Some(&LF) => Ok(Step::Done(make(start, end)?, end + 2)),
                Some(_) => err(ErrorKind::InvalidLineEnd, end),
            }
        }
        None if buf.len() >= window_end => err(ErrorKind::LineTooLong, window_end - 1),
        None => Ok(Step::Partial(to)),
    }
}

/// The first CR or LF in `s`. Replies are mostly short lines (`+OK`): a plain loop over their first bytes beats
/// setting up `memchr2`, which takes over for longer lines.
#[inline]
fn find_line_end(s: &[u8]) -> Option<usize> {
    const SHORT: usize = 16;
    for (i, &c) in s.iter().take(SHORT).enumerate() {
        if c == CR || c == LF {
            return Some(i);
        }
    }
    if s.len() <= SHORT {
        return None;
    }
    memchr::memchr2(CR, LF, &s[SHORT..]).map(|i| i + SHORT)
}

/// Parses a number as Redis' `string2ll` accepts it, starting at `at` and ending with CRLF. Returns the number and
/// the offset after the CRLF, or `None` if more bytes are needed.
///
/// The bytes are read in order and each is judged as soon as it is present, so the first invalid byte is reported
/// at the same offset however the input is split. Overflow bounds the length: no valid number has more than 20
/// characters, as `string2ll`'s own limit.
#[inline]
pub(crate) fn number(buf: &[u8], at: usize, invalid: ErrorKind) -> Scan<Option<(i64, usize)>> {
    if let Some(quick) = quick_number(buf, at) {
        return Ok(Some(quick));
    }
    let mut i = at;
    let negative = buf.get(i) == Some(&b'-');
    if negative {
        i += 1;
    }
    let mut magnitude: u64 = match buf.get(i) {
        None => return Ok(None),
        Some(&b'0') if !negative => 0,
        Some(&d @ b'1'..=b'9') => u64::from(d - b'0'),
        // Empty number, `+`, space, leading zero, `-0`.
        Some(_) => return err(invalid, i),
    };
    i += 1;
    if magnitude != 0 {
        loop {
            match buf.get(i) {
                None => return Ok(None),
                Some(&d @ b'0'..=b'9') => {
                    magnitude = match magnitude
                        .checked_mul(10)
                        .and_then(|m| m.checked_add(u64::from(d - b'0')))
                    {
                        Some(m) => m,
                        None => return err(ErrorKind::IntegerOverflow, i),
                    };
                    i += 1;
                }
                Some(_) => break,
            }
        }
    }
    match buf.get(i) {
        None => return Ok(None),
        Some(&CR) => {}
        Some(_) => return err(invalid, i),
    }
    match buf.get(i + 1) {
        None => return Ok(None),
        Some(&LF) => {}
        Some(_) => return err(ErrorKind::InvalidLineEnd, i + 1),
    }
    let value = if negative {
        // -(2^63) is the one negative number whose magnitude is not an i64.
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    };
    match value {
        Some(v) => Ok(Some((v, i + 2))),
        None => err(ErrorKind::IntegerOverflow, at),
    }
}

/// The common case of [`number`], without its checks: at most 17 digits (so no overflow is possible), all
/// present, in canonical form, followed by CRLF. `None` sends anything else down the careful path, which also
/// produces the exact error.
#[inline]
pub(crate) fn quick_number(buf: &[u8], at: usize) -> Option<(i64, usize)> {
    let s = buf.get(at..)?;
    // One and two digits (short lengths, `:1`) are most of what a client reads.
    match *s {
        [d @ b'1'..=b'9', CR, LF, ..] => return Some((i64::from(d - b'0'), at + 3)),
        [a @ b'1'..=b'9', b @ b'0'..=b'9', CR, LF, ..] => {
            return Some((i64::from(a - b'0') * 10 + i64::from(b - b'0'), at + 4));
        }
        _ => {}
    }
    if let Some((n, used)) = swar_number(s) {
        return Some((n, at + used));
    }
    let negative = *s.first()? == b'-';
    let digits = &s[usize::from(negative)..];
    let first = digits.first()?.wrapping_sub(b'1');
    if first > 8 {
        return None; // `0`, a sign, or garbage: rare, careful path
    }
    let mut n = u64::from(first) + 1;
    let mut i = 1;
    loop {
        let d = digits.get(i)?.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        n = n * 10 + u64::from(d);
        i += 1;
        if i > 17 {
            return None;
        }
    }
    if digits.get(i..i + 2)? != b"\r\n" {
        return None;
    }
    let v = n as i64;
    Some((
        if negative { -v } else { v },
        at + usize::from(negative) + i + 2,
    ))
}

/// Three to seven digits (typical lengths: a 1 KiB payload is `$1024`, 64 KiB `$65536`) and CRLF, read as one
/// 8-byte word instead of a byte at a time. `None` when fewer than 8 bytes are there, on a sign or a leading zero,
/// on 8 or more digits, or when CRLF does not follow: the caller's loop decides those.
#[inline]
fn swar_number(s: &[u8]) -> Option<(i64, usize)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    let word = u64::from_le_bytes(s.get(..8)?.try_into().ok()?);
    // A byte is a digit iff its high nibble is 3 and stays 3 when 6 is added (0x3A..=0x3F become 0x40..). Carries
    // and borrows only move towards later bytes, so every byte up to the first non-digit is judged correctly.
    let bad =
        ((word & HIGH) ^ (ONES * 0x30)) | ((word.wrapping_add(ONES * 6) & HIGH) ^ (ONES * 0x30));
    let n = (bad.trailing_zeros() / 8) as usize;
    if !(3..8).contains(&n) || s[0] == b'0' || s.get(n..n + 2)? != b"\r\n" {
        return None;
    }
    // Digit values, the first digit in the lowest byte; shifting left drops the bytes after the digits and puts
    // zeros (leading zeros of an 8-digit number) in front. Then pairs, quads and the whole, as in simdjson.
    let v = word.wrapping_sub(ONES * 0x30) << (8 * (8 - n));
    let v = ((v & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(2561)) >> 8;
    let v = ((v & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601)) >> 16;
    let v = ((v & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001)) >> 32;
    Some((v as i64, n + 2))
}

/// The common case of a bulk string (`$n` with its payload and CRLF all present, `n` in canonical form, within
/// the limit), for the hot loops. `None` sends anything else down [`token`].
#[inline]
pub(crate) fn quick_bulk(buf: &[u8], at: usize, limits: &Limits) -> Option<(Token, usize)> {
    if *buf.get(at)? != b'$' {
        return None;
    }
    let (len, start) = quick_number(buf, at + 1)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= limits.max_bulk_len())?;
    let end = start.checked_add(len)?;
    let next = end.checked_add(2)?;
    (buf.get(end..next)? == b"\r\n").then_some((Token::Bulk { start, end }, next))
}

/// A length header (`$`, `*`, ...): a number, where `-1` means null and is returned as `None` in the inner option.
fn length(buf: &[u8], at: usize) -> Scan<Option<(Option<usize>, usize)>> {
    let Some((n, next)) = number(buf, at + 1, ErrorKind::InvalidLength)? else {
        return Ok(None);
    };
    match n {
        -1 => Ok(Some((None, next))),
        n => match usize::try_from(n) {
            Ok(n) => Ok(Some((Some(n), next))),
            Err(_) => err(ErrorKind::InvalidLength, at + 1),
        },
    }
}

/// A bulk-typed token: `$` (bulk string, RESP2 null, or the header of a streamed string), `!` (bulk error) or `=`
/// (verbatim string).
fn bulk(buf: &[u8], at: usize, ty: u8, limits: &Limits) -> Scan<Step> {
    if buf.get(at + 1) == Some(&b'?') {
        // RESP3 streams only blob strings among the bulk types ("Streamed strings").
        return match ty {
            b'$' => streamed_header(buf, at, Token::StreamedString),
            _ => err(ErrorKind::StreamedUnsupported, at + 1),
        };
    }
    let Some((len, start)) = length(buf, at)? else {
        return Ok(Step::Partial(0));
    };
    let Some(len) = len else {
        return match ty {
            b'$' => Ok(Step::Done(Token::NullBulk, start)),
            _ => err(ErrorKind::InvalidLength, at + 1),
        };
    };
    if len > limits.max_bulk_len() {
        return err(ErrorKind::BulkTooLong, at + 1);
    }
    if ty == b'=' && len < 4 {
        return err(ErrorKind::InvalidVerbatim, at + 1);
    }
    // len <= max_bulk_len <= usize::MAX, but start + len + 2 may still overflow on a 32-bit target.
    let Some(end) = start.checked_add(len) else {
        return err(ErrorKind::BulkTooLong, at + 1);
    };
    let Some(after) = end.checked_add(2) else {
        return err(ErrorKind::BulkTooLong, at + 1);
    };
    if buf.len() < after {
        return Ok(Step::Partial(0));
    }
    if buf[end] != CR || buf[end + 1] != LF {
        return err(ErrorKind::InvalidBulkEnd, end);
    }
    let token = match ty {
        b'$' => Token::Bulk { start, end },
        b'!' => Token::BulkError { start, end },
        _ => {
            if buf[start + 3] != b':' {
                return err(ErrorKind::InvalidVerbatim, start + 3);
            }
            Token::Verbatim {
                format: [buf[start], buf[start + 1], buf[start + 2]],
                start: start + 4,
                end,
            }
        }
    };
    Ok(Step::Done(token, after))
}

/// An aggregate header. Only the declared count is checked here; the elements are separate tokens.
fn aggregate(buf: &[u8], at: usize, kind: Aggregate, limits: &Limits, depth: usize) -> Scan<Step> {
    if buf.get(at + 1) == Some(&b'?') {
        // RESP3 streams arrays, sets and maps ("Streamed aggregated data types"); not attributes or pushes.
        if matches!(kind, Aggregate::Attribute | Aggregate::Push) {
            return err(ErrorKind::StreamedUnsupported, at + 1);
        }
        let step = streamed_header(buf, at, Token::StreamedAggregate(kind))?;
        if matches!(step, Step::Done(..)) && depth >= limits.max_depth() {
            return err(ErrorKind::TooDeep, at);
        }
        return Ok(step);
    }
    let Some((len, next)) = length(buf, at)? else {
        return Ok(Step::Partial(0));
    };
    let Some(len) = len else {
        return match kind {
            Aggregate::Array => Ok(Step::Done(Token::NullArray, next)),
            _ => err(ErrorKind::InvalidLength, at + 1),
        };
    };
    if len > limits.max_aggregate_len() || kind.values_after_header(len).is_none() {
        return err(ErrorKind::AggregateTooLong, at + 1);
    }
    if depth >= limits.max_depth() {
        return err(ErrorKind::TooDeep, at);
    }
    Ok(Step::Done(Token::Aggregate(kind, len), next))
}

/// The header of a streamed value, `$?`, `*?`, `%?` or `~?`: the `?` stands where the length would, and is followed
/// by CRLF. A wrong byte after the `?` is judged as after a length: `InvalidLength` in its place, `InvalidLineEnd`
/// after a CR.
fn streamed_header(buf: &[u8], at: usize, token: Token) -> Scan<Step> {
    match buf.get(at + 2) {
        None => return Ok(Step::Partial(0)),
        Some(&CR) => {}
        Some(_) => return err(ErrorKind::InvalidLength, at + 2),
    }
    match buf.get(at + 3) {
        None => Ok(Step::Partial(0)),
        Some(&LF) => Ok(Step::Done(token, at + 4)),
        Some(_) => err(ErrorKind::InvalidLineEnd, at + 3),
    }
}

/// The chunk of a streamed string at `at`: `;<len>\r\n<payload>\r\n`, or its end, `;0\r\n` ([`Token::End`]).
/// `so_far` is the length of the string's chunks before this one: their sum may not exceed `max_bulk_len`.
///
/// The length follows the grammar of a bulk length (Redis' `string2ll`), without `-1`: RESP3 gives a streamed
/// string no null form.
pub(crate) fn chunk(buf: &[u8], at: usize, so_far: usize, limits: &Limits) -> Scan<Step> {
    match buf.get(at) {
        None => return Ok(Step::Partial(0)),
        Some(&b';') => {}
        Some(_) => return err(ErrorKind::ExpectedChunk, at),
    }
    let Some((len, start)) = number(buf, at + 1, ErrorKind::InvalidLength)? else {
        return Ok(Step::Partial(0));
    };
    let Ok(len) = usize::try_from(len) else {
        return err(ErrorKind::InvalidLength, at + 1);
    };
    if len == 0 {
        return Ok(Step::Done(Token::End, start));
    }
    if len > limits.max_bulk_len().saturating_sub(so_far) {
        return err(ErrorKind::BulkTooLong, at + 1);
    }
    let Some(end) = start.checked_add(len) else {
        return err(ErrorKind::BulkTooLong, at + 1);
    };
    let Some(after) = end.checked_add(2) else {
        return err(ErrorKind::BulkTooLong, at + 1);
    };
    if buf.len() < after {
        return Ok(Step::Partial(0));
    }
    if buf[end] != CR || buf[end + 1] != LF {
        return err(ErrorKind::InvalidBulkEnd, end);
    }
    Ok(Step::Done(Token::Chunk { start, end }, after))
}

/// Parses a RESP3 double: `inf`, `-inf`, `nan` (and `-nan`, which glibc's printf writes for a negative NaN, as
/// Redis 7.0 can send from a Lua script), or `[+|-]digits[.digits][(e|E)[+|-]digits]`.
fn parse_double(s: &[u8]) -> Option<f64> {
    match s {
        b"inf" => return Some(f64::INFINITY),
        b"-inf" => return Some(f64::NEG_INFINITY),
        b"nan" | b"-nan" => return Some(f64::NAN),
        _ => {}
    }
    let mut i = usize::from(matches!(s.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let from = *i;
        while s.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > from
    };
    if !digits(&mut i) {
        return None;
    }
    if s.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return None;
        }
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return None;
        }
    }
    if i != s.len() {
        return None;
    }
    // The grammar above is a subset of what Rust's float parser accepts, and it is ASCII.
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// A RESP3 big number: an optional sign and at least one digit.
fn is_big_number(s: &[u8]) -> bool {
    let digits = match s.first() {
        Some(b'+' | b'-') => &s[1..],
        _ => s,
    };
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `quick_number` may return for `s`: the canonical number before the first CRLF, as std parses it.
    fn reference(s: &[u8]) -> Option<(i64, usize)> {
        let end = s.windows(2).position(|w| w == b"\r\n")?;
        let text = std::str::from_utf8(&s[..end]).ok()?;
        let n: i64 = text.parse().ok()?;
        (n.to_string() == text).then_some((n, end + 2))
    }

    #[test]
    fn quick_numbers_agree_with_std_for_every_byte_in_every_position() {
        for base in [
            &b"1234567\r\nxx"[..],
            b"123\r\nxxxxx",
            b"65536\r\n$x",
            b"12345678\r\n",
            b"99\r\n123456",
        ] {
            for pos in 0..base.len() {
                for byte in 0..=255u8 {
                    let mut s = base.to_vec();
                    s[pos] = byte;
                    if let Some(got) = quick_number(&s, 0) {
                        assert_eq!(
                            Some(got),
                            reference(&s),
                            "{:?}",
                            String::from_utf8_lossy(&s)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn quick_numbers_take_the_word_path_for_three_to_seven_digits() {
        let mut n = 100_i64;
        while n < 10_000_000 {
            let s = format!("{n}\r\n--------");
            assert_eq!(swar_number(s.as_bytes()), Some((n, s.len() - 8)), "{n}");
            assert_eq!(quick_number(s.as_bytes(), 0), Some((n, s.len() - 8)), "{n}");
            n = n * 7 / 5 + 1;
        }
        // Leading zeros, signs, eight digits and short buffers are left to the careful path.
        for s in [
            &b"0123\r\n----"[..],
            b"-123\r\n----",
            b"12345678\r\n",
            b"123\r\n",
        ] {
            assert_eq!(swar_number(s), None, "{:?}", String::from_utf8_lossy(s));
        }
    }

    #[test]
    fn number_follows_string2ll() {
        let ok: &[(&[u8], i64)] = &[
            (b"0\r\n", 0),
            (b"-1\r\n", -1),
            (b"9223372036854775807\r\n", i64::MAX),
            (b"-9223372036854775808\r\n", i64::MIN),
            (b"10\r\n", 10),
        ];
        for &(input, want) in ok {
            assert_eq!(
                number(input, 0, ErrorKind::InvalidInteger),
                Ok(Some((want, input.len()))),
                "{input:?}"
            );
        }
        let bad: &[(&[u8], ErrorKind, usize)] = &[
            (b"\r\n", ErrorKind::InvalidInteger, 0),
            (b"+1\r\n", ErrorKind::InvalidInteger, 0),
            (b" 1\r\n", ErrorKind::InvalidInteger, 0),
            (b"01\r\n", ErrorKind::InvalidInteger, 1),
            (b"-0\r\n", ErrorKind::InvalidInteger, 1),
            (b"-\r\n", ErrorKind::InvalidInteger, 1),
            (b"1 \r\n", ErrorKind::InvalidInteger, 1),
            (b"1\rx", ErrorKind::InvalidLineEnd, 2),
            (b"9223372036854775808\r\n", ErrorKind::IntegerOverflow, 0),
            (b"-9223372036854775809\r\n", ErrorKind::IntegerOverflow, 0),
            (b"99999999999999999999\r\n", ErrorKind::IntegerOverflow, 19),
        ];
        for &(input, kind, at) in bad {
            assert_eq!(
                number(input, 0, ErrorKind::InvalidInteger),
                err(kind, at),
                "{input:?}"
            );
        }
    }

    #[test]
    fn doubles_follow_the_resp3_grammar() {
        for (s, want) in [
            ("1.5", 1.5),
            ("-2", -2.0),
            ("+3e2", 300.0),
            ("1E-2", 0.01),
            ("inf", f64::INFINITY),
        ] {
            assert_eq!(parse_double(s.as_bytes()), Some(want), "{s}");
        }
        assert!(parse_double(b"nan").is_some_and(f64::is_nan));
        for s in [
            "", ".5", "1.", "1e", "e5", "infinity", "NaN", "+inf", "1_0", "0x10", " 1", "1.5.5",
        ] {
            assert_eq!(parse_double(s.as_bytes()), None, "{s}");
        }
    }
}
