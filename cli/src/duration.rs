//! Durations on the command line: `500ms`, `10s`, `2m`, `1h`, `1.5s`, `1m30s`; and how they are shown.
//!
//! Waits and the kill delay take a bare number as seconds ([`parse_wait`]), as flock(1)'s `-w 10` and
//! timeout(1)'s `-k 5` do: a shell user's hands type them so. Leases and round timeouts need a unit ([`parse`]): a
//! bare `30` is refused there, because Redis' own `PX` and many clients count them in milliseconds, and a lease or
//! a round timeout read a thousand times too long or too short is the wrong place to guess. `0` is the same in every
//! unit.

use std::time::Duration;

/// The units, longest name first so that `ms` is not read as `m` followed by junk.
const UNITS: [(&str, u64); 4] = [
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a duration: one or more `<number><unit>` parts (`1m30s`), the number a decimal with an optional
/// fraction, the unit `ms`, `s`, `m` or `h`. `0` alone is zero.
///
/// # Errors
///
/// A message saying what is wrong and what to write instead.
pub fn parse(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("an empty duration: write e.g. 500ms, 10s, 2m or 1h".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err(format!("{s:?} is negative: a duration is 0 or more"));
    }
    let mut rest = s;
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        if number.is_empty() {
            return Err(format!(
                "{s:?} is not a duration: write e.g. 500ms, 10s, 2m or 1h"
            ));
        }
        let word: String = after.chars().take_while(|c| c.is_alphabetic()).collect();
        let Some((unit, scale)) = UNITS.iter().find(|(u, _)| *u == word) else {
            return Err(if word.is_empty() {
                format!(
                    "{s:?} has no unit: write {number}s for seconds or {number}ms for milliseconds (units: ms, s, m, h)"
                )
            } else {
                format!("{s:?} has an unknown unit {word:?}: use ms, s, m or h")
            });
        };
        let part = scaled(number, *scale)
            .ok_or_else(|| format!("{s:?} is not a number followed by a unit"))?;
        nanos = nanos
            .checked_add(part)
            .ok_or_else(|| format!("{s:?} is too long"))?;
        rest = &after[unit.len()..];
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| format!("{s:?} is too long"))?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// Parses a wait or a delay: a bare number is seconds (`10`, `0.5`), else as [`parse`] (`500ms`, `2m`).
///
/// # Errors
///
/// As [`parse`].
pub fn parse_wait(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    let bare = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    match bare {
        true => parse(&format!("{s}s")).map_err(|_| format!("{s:?} is not a number of seconds")),
        false => parse(s),
    }
}

/// `number` (digits, at most one `.`) times `scale` nanoseconds, rounded down to the nanosecond.
fn scaled(number: &str, scale: u64) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut nanos = whole.checked_mul(u128::from(scale))?;
    let mut unit = u128::from(scale);
    for digit in fraction.bytes() {
        unit /= 10;
        nanos = nanos.checked_add(u128::from(digit - b'0') * unit)?;
    }
    Some(nanos)
}

/// A duration for people, with three significant digits below a minute: `81µs`, `1.49ms`, `250ms`, `9.84s`,
/// `2m5s`, `1h30m`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        let us = d.as_micros();
        return match us {
            0 if d.is_zero() => "0s".to_owned(),
            0..1000 => format!("{us}µs"),
            1000..10_000 => trimmed(format!("{:.2}", us as f64 / 1000.0), "ms"),
            10_000..100_000 => trimmed(format!("{:.1}", us as f64 / 1000.0), "ms"),
            _ => format!("{ms}ms"),
        };
    }
    let secs = d.as_secs();
    if secs < 60 {
        return trimmed(format!("{:.2}", d.as_secs_f64()), "s");
    }
    if secs < 3600 {
        return match secs % 60 {
            0 => format!("{}m", secs / 60),
            s => format!("{}m{s}s", secs / 60),
        };
    }
    match (secs % 3600) / 60 {
        0 => format!("{}h", secs / 3600),
        m => format!("{}h{m}m", secs / 3600),
    }
}

/// `number` without trailing zeros after its point, then `unit`.
fn trimmed(number: String, unit: &str) -> String {
    let number = if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        &number
    };
    format!("{number}{unit}")
}

/// Milliseconds, for machines (`--json`): whole, rounded down.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted() {
        let ms = Duration::from_millis;
        for (input, want) in [
            ("500ms", ms(500)),
            ("10s", ms(10_000)),
            ("2m", ms(120_000)),
            ("1h", ms(3_600_000)),
            ("1.5s", ms(1_500)),
            (".5s", ms(500)),
            ("1m30s", ms(90_000)),
            ("1h1ms", ms(3_600_001)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            (" 10s ", ms(10_000)),
            ("0.001ms", Duration::from_micros(1)),
        ] {
            assert_eq!(parse(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn refused_with_a_hint() {
        for (input, want) in [
            ("", "empty"),
            ("30", "has no unit: write 30s"),
            ("1.5", "has no unit"),
            ("10x", "unknown unit \"x\""),
            ("10sec", "unknown unit \"sec\""),
            ("10s!", "not a duration"),
            ("-1s", "negative"),
            ("s", "not a duration"),
            ("1..5s", "not a number"),
            (".s", "not a number"),
            ("10s5", "has no unit"),
            ("99999999999999999999999h", "too long"),
        ] {
            let got = parse(input).unwrap_err();
            assert!(got.contains(want), "{input}: {got}");
        }
    }

    #[test]
    fn a_bare_wait_is_seconds() {
        let ms = Duration::from_millis;
        for (input, want) in [
            ("10", ms(10_000)),
            ("0.5", ms(500)),
            (" 2 ", ms(2_000)),
            ("0", Duration::ZERO),
            ("500ms", ms(500)),
            ("1m30s", ms(90_000)),
        ] {
            assert_eq!(parse_wait(input), Ok(want), "{input}");
        }
        for (input, want) in [
            ("", "empty"),
            ("1..5", "not a number of seconds"),
            ("-1", "negative"),
            ("10x", "unknown unit"),
        ] {
            let got = parse_wait(input).unwrap_err();
            assert!(got.contains(want), "{input}: {got}");
        }
    }

    #[test]
    fn shown_for_people() {
        let ms = Duration::from_millis;
        assert_eq!(human(ms(250)), "250ms");
        assert_eq!(human(Duration::from_micros(81)), "81µs");
        assert_eq!(human(Duration::ZERO), "0s");
        assert_eq!(human(Duration::from_micros(1_488)), "1.49ms");
        assert_eq!(human(Duration::from_micros(2_000)), "2ms");
        assert_eq!(human(Duration::from_micros(31_007)), "31ms");
        assert_eq!(human(Duration::from_micros(31_260)), "31.3ms");
        assert_eq!(human(ms(9_840)), "9.84s");
        assert_eq!(human(ms(10_000)), "10s");
        assert_eq!(human(ms(125_000)), "2m5s");
        assert_eq!(human(ms(120_000)), "2m");
        assert_eq!(human(ms(5_400_000)), "1h30m");
        assert_eq!(millis(ms(1_500)), 1_500);
    }
}
