//! Lock values: 20 random bytes per acquisition from a ChaCha20 stream seeded by the OS, written as 40 hex digits.
//!
//! The spec asks for a value unique across all clients and all acquisitions, so that a client only ever deletes or
//! extends its own key. A CSPRNG seeded from the OS gives that with overwhelming probability, and the hex form keeps
//! the value printable (logs, the CLI) at no risk: 160 bits either way.

use std::sync::Mutex;

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use crate::redlock::error::{Error, Result};
use crate::sync::lock;

/// The random bytes behind one value.
const RAW_LEN: usize = 20;
/// The length of a lock value: hex digits of [`RAW_LEN`] bytes.
pub(crate) const VALUE_LEN: usize = 2 * RAW_LEN;

/// A lock value: 40 lowercase hex digits.
pub(crate) type Value = [u8; VALUE_LEN];

/// A source of lock values, safe to share between threads.
#[derive(Debug)]
pub(crate) struct Tokens {
    state: Mutex<Option<(ChaCha20Rng, u32)>>,
}

impl Tokens {
    pub(crate) fn new() -> Tokens {
        Tokens {
            state: Mutex::new(None),
        }
    }

    /// A stream seeded with `seed` instead of the OS's randomness: the same seed, the same values (the
    /// simulator's determinism). Never for locks on real nodes.
    #[cfg(feature = "sim")]
    pub(crate) fn seeded(seed: [u8; 32]) -> Tokens {
        Tokens {
            state: Mutex::new(Some((ChaCha20Rng::from_seed(seed), std::process::id()))),
        }
    }

    /// A fresh value.
    ///
    /// # Errors
    ///
    /// The OS's error if it cannot provide a seed (only on the first call, or the first after a `fork`).
    pub(crate) fn next(&self) -> Result<Value, getrandom::Error> {
        let mut state = lock(&self.state);
        let pid = std::process::id();
        // A forked child inherits the stream: reseed it, or parent and child would hand out the same values.
        if !matches!(&*state, Some((_, seeded_by)) if *seeded_by == pid) {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed)?;
            *state = Some((ChaCha20Rng::from_seed(seed), pid));
        }
        let mut raw = [0u8; RAW_LEN];
        if let Some((rng, _)) = state.as_mut() {
            rng.fill_bytes(&mut raw);
        }
        Ok(hex(&raw))
    }

    /// A fresh value, or [`Error::Os`] saying what it was for (`doing`) if the OS
    /// cannot provide a seed: what every lock value, owner and hold id is drawn with.
    pub(crate) fn draw(&self, doing: &'static str) -> Result<Value> {
        self.next().map_err(|e| Error::Os {
            doing,
            error: std::io::Error::from(e).into(),
        })
    }

    /// `count` fresh values, drawn under one lock (a batch).
    ///
    /// # Errors
    ///
    /// As [`next`](Tokens::next).
    pub(crate) fn next_many(&self, count: usize) -> Result<Vec<Value>, getrandom::Error> {
        let mut state = lock(&self.state);
        let pid = std::process::id();
        if !matches!(&*state, Some((_, seeded_by)) if *seeded_by == pid) {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed)?;
            *state = Some((ChaCha20Rng::from_seed(seed), pid));
        }
        let mut out = Vec::with_capacity(count);
        let mut raw = [0u8; RAW_LEN];
        if let Some((rng, _)) = state.as_mut() {
            for _ in 0..count {
                rng.fill_bytes(&mut raw);
                out.push(hex(&raw));
            }
        }
        Ok(out)
    }

    /// A random number from the same stream (for retry jitter).
    pub(crate) fn random_u64(&self) -> Result<u64, getrandom::Error> {
        let value = self.next()?;
        let mut n = 0u64;
        for &digit in &value[..16] {
            n = (n << 4)
                | u64::from(if digit.is_ascii_digit() {
                    digit - b'0'
                } else {
                    digit - b'a' + 10
                });
        }
        Ok(n)
    }
}

fn hex(raw: &[u8; RAW_LEN]) -> Value {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; VALUE_LEN];
    for (i, b) in raw.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn values_are_hex_and_unique() {
        let tokens = Tokens::new();
        let mut seen = HashSet::new();
        for _ in 0..10_000 {
            let v = tokens.next().unwrap();
            assert!(
                v.iter()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
            assert!(seen.insert(v), "repeated value");
        }
        // Two sources (two managers) do not share a stream.
        assert_ne!(Tokens::new().next().unwrap(), Tokens::new().next().unwrap());
    }
}
