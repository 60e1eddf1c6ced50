//! The encoder: canonical RESP bytes into a buffer the caller owns.

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};

use super::value::Value;

const CRLF: &[u8] = b"\r\n";

/// Appends the canonical RESP bytes of `value` to `buf`: RESP2 forms for RESP2 types, RESP3 forms for RESP3 types,
/// `$-1` / `*-1` for the RESP2 nulls and `_` for the RESP3 null.
///
/// Doubles are written as `inf`, `-inf`, `nan`, or the shortest decimal that reads back as the same `f64`.
/// Nesting costs heap, not stack: any value can be encoded.
///
/// The encoder does not validate: a [`Value::SimpleString`] holding CR or LF, or a [`Value::BigNumber`] holding
/// something other than digits, is written as it is and will not decode. Values produced by the decoder always
/// encode back to the bytes they were decoded from, except for the spellings the decoder accepts beyond the
/// canonical one (a `+` sign or an exponent in a double, `-nan`).
///
/// # Examples
///
/// ```
/// use bytes::BytesMut;
/// use muxlock::resp::{encode, Value};
///
/// let mut buf = BytesMut::new();
/// encode(&Value::Array(vec![Value::Integer(1), Value::BulkString("a".into())]), &mut buf);
/// assert_eq!(&buf[..], b"*2\r\n:1\r\n$1\r\na\r\n");
/// ```
pub fn encode(value: &Value, buf: &mut BytesMut) {
    // Values still to write, last first; only aggregates push onto it.
    let mut stack: Vec<&Value> = Vec::new();
    let mut next = Some(value);
    while let Some(v) = next.take().or_else(|| stack.pop()) {
        match v {
            Value::SimpleString(s) => line(buf, b'+', s),
            Value::Error(s) => line(buf, b'-', s),
            Value::Integer(n) => line(buf, b':', Decimal::new(*n).as_bytes()),
            Value::BulkString(s) => bulk(buf, b'$', &[], s),
            Value::NullBulk => buf.put_slice(b"$-1\r\n"),
            Value::NullArray => buf.put_slice(b"*-1\r\n"),
            Value::Null => buf.put_slice(b"_\r\n"),
            Value::Boolean(b) => buf.put_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            Value::Double(d) => double(buf, *d),
            Value::BigNumber(s) => line(buf, b'(', s),
            Value::BulkError(s) => bulk(buf, b'!', &[], s),
            Value::Verbatim { format, data } => {
                bulk(buf, b'=', &[format[0], format[1], format[2], b':'], data);
            }
            Value::Array(items) | Value::Set(items) | Value::Push(items) => {
                header(buf, v.type_byte(), items.len());
                stack.extend(items.iter().rev());
            }
            Value::Map(pairs) => {
                header(buf, b'%', pairs.len());
                push_pairs(&mut stack, pairs);
            }
            Value::Attribute { attributes, value } => {
                header(buf, b'|', attributes.len());
                stack.push(value);
                push_pairs(&mut stack, attributes);
            }
        }
    }
}

fn push_pairs<'a>(stack: &mut Vec<&'a Value>, pairs: &'a [(Value, Value)]) {
    for (k, v) in pairs.iter().rev() {
        stack.push(v);
        stack.push(k);
    }
}

/// Appends a command, a RESP array of bulk strings, to `buf`: the form in which Redis expects every request.
///
/// The buffer is grown once, by the exact size, and nothing else is allocated. Integer arguments can be formatted
/// on the stack with [`Decimal`].
///
/// # Examples
///
/// ```
/// use bytes::BytesMut;
/// use muxlock::resp::{encode_command, Decimal};
///
/// let mut buf = BytesMut::new();
/// let ttl = Decimal::new(30_000);
/// encode_command(&[b"SET", b"key", b"value", b"NX", b"PX", ttl.as_bytes()], &mut buf);
/// assert_eq!(&buf[..], &b"*6\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n"[..]);
/// ```
pub fn encode_command(args: &[&[u8]], buf: &mut BytesMut) {
    let mut len = header_len(args.len());
    for arg in args {
        len += header_len(arg.len()) + arg.len() + CRLF.len();
    }
    // Sized once and written in place: `put_slice` per piece (two per argument, plus the headers) cost more than
    // the bytes themselves. Zeroing the new bytes first is the price of doing it without `unsafe`.
    let start = buf.len();
    buf.resize(start + len, 0);
    let out = &mut buf[start..];
    let mut at = header_at(out, 0, b'*', args.len());
    for arg in args {
        at = header_at(out, at, b'$', arg.len());
        out[at..at + arg.len()].copy_from_slice(arg);
        at += arg.len();
        out[at..at + CRLF.len()].copy_from_slice(CRLF);
        at += CRLF.len();
    }
    debug_assert_eq!(at, len);
}

/// Writes `<type><n>\r\n` at `out[at..]`, which has room for [`header_len`]`(n)` bytes; returns where it ends.
#[inline]
fn header_at(out: &mut [u8], at: usize, ty: u8, n: usize) -> usize {
    let end = at + header_len(n) - CRLF.len();
    out[at] = ty;
    put_digits(&mut out[at + 1..end], n as u64);
    out[end..end + CRLF.len()].copy_from_slice(CRLF);
    end + CRLF.len()
}

/// The size of a `<type><decimal>\r\n` header.
#[inline]
fn header_len(n: usize) -> usize {
    1 + digit_count(n as u64) + CRLF.len()
}

/// How many decimal digits `n` has.
#[inline]
fn digit_count(n: u64) -> usize {
    // Most lengths in a command have one or two digits: test for them before the general `ilog10`.
    if n < 10 {
        1
    } else if n < 100 {
        2
    } else {
        n.ilog10() as usize + 1
    }
}

/// Writes the decimal digits of `n` into `out`, which is [`digit_count`]`(n)` bytes long.
#[inline]
fn put_digits(out: &mut [u8], mut n: u64) {
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

fn line(buf: &mut BytesMut, ty: u8, content: &[u8]) {
    buf.put_u8(ty);
    buf.put_slice(content);
    buf.put_slice(CRLF);
}

/// Appends `<type><n>\r\n` to `buf`, formatted on the stack and appended at once.
#[inline]
fn header(buf: &mut BytesMut, ty: u8, n: usize) {
    let mut out = [0u8; 24];
    let end = header_at(&mut out, 0, ty, n);
    buf.put_slice(&out[..end]);
}

fn bulk(buf: &mut BytesMut, ty: u8, prefix: &[u8], payload: &[u8]) {
    header(buf, ty, prefix.len() + payload.len());
    buf.put_slice(prefix);
    buf.put_slice(payload);
    buf.put_slice(CRLF);
}

fn double(buf: &mut BytesMut, d: f64) {
    buf.put_u8(b',');
    if d.is_nan() {
        buf.put_slice(b"nan");
    } else if d.is_infinite() {
        buf.put_slice(if d > 0.0 { b"inf" } else { b"-inf" });
    } else {
        // `{:?}` is the shortest representation that round-trips, in a form the RESP3 grammar accepts ("1.5",
        // "1e300", "-0.0"). Writing into a BytesMut cannot fail.
        let _ = write!(buf, "{d:?}");
    }
    buf.put_slice(CRLF);
}

/// The decimal digits of an integer, formatted on the stack.
///
/// # Examples
///
/// ```
/// use muxlock::resp::Decimal;
///
/// assert_eq!(Decimal::new(-42).as_bytes(), b"-42");
/// assert_eq!(Decimal::new(i64::MIN).as_bytes(), b"-9223372036854775808");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Decimal {
    digits: [u8; 20],
    start: u8,
}

impl Decimal {
    /// Formats `n`.
    #[inline]
    pub fn new(n: i64) -> Decimal {
        let mut digits = [0u8; 20];
        let m = n.unsigned_abs();
        let start = digits.len() - digit_count(m);
        put_digits(&mut digits[start..], m);
        let start = if n < 0 {
            digits[start - 1] = b'-';
            start - 1
        } else {
            start
        };
        Decimal {
            digits,
            start: start as u8,
        }
    }

    /// The digits, with a leading `-` for negative numbers.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.digits[usize::from(self.start)..]
    }

    /// How many bytes [`as_bytes`](Decimal::as_bytes) has.
    #[allow(clippy::len_without_is_empty)] // never empty
    pub fn len(&self) -> usize {
        self.digits.len() - usize::from(self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_matches_std_formatting() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            -1,
            -10,
            12345,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ] {
            assert_eq!(Decimal::new(n).as_bytes(), n.to_string().as_bytes());
            assert_eq!(Decimal::new(n).len(), n.to_string().len());
        }
    }

    #[test]
    fn commands_match_naive_formatting_at_every_digit_boundary() {
        let lens = [0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 12_345];
        let payloads: Vec<Vec<u8>> = lens.iter().map(|&n| vec![b'x'; n]).collect();
        for count in 0..=payloads.len() {
            // Argument counts 0..=11 with every length, appended after existing bytes.
            let args: Vec<&[u8]> = payloads.iter().take(count).map(Vec::as_slice).collect();
            let mut want = format!("prefix*{count}\r\n").into_bytes();
            for a in &args {
                want.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                want.extend_from_slice(a);
                want.extend_from_slice(b"\r\n");
            }
            let mut buf = BytesMut::from(&b"prefix"[..]);
            encode_command(&args, &mut buf);
            assert_eq!(&buf[..], &want[..], "{count} arguments");
        }
        let mut buf = BytesMut::new();
        let many: Vec<&[u8]> = vec![b"a"; 1234];
        encode_command(&many, &mut buf);
        assert!(buf.starts_with(b"*1234\r\n$1\r\na\r\n") && buf.len() == 7 + 1234 * 7);
    }

    #[test]
    fn deep_values_encode_without_recursion() {
        let mut v = Value::Integer(1);
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        let mut buf = BytesMut::new();
        encode(&v, &mut buf);
        assert_eq!(buf.len(), 100_000 * 4 + 4);
        // Value's derived Drop recurses; unwind the nesting by hand so the test does not overflow its stack.
        while let Value::Array(mut items) = v {
            v = items.pop().unwrap_or(Value::Null);
        }
    }
}
