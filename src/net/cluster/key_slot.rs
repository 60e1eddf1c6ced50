//! Which of a Redis Cluster's 16,384 slots a key lives in: CRC16 of the key, or of its `{hash tag}`, modulo 16,384.
//!
//! The rules are the cluster specification's ("Redis cluster specification", *Keys distribution model* and *Hash
//! tags*): CRC16-CCITT in its XMODEM form (polynomial `0x1021`, initial value 0, no reflection, no final XOR; the
//! check value of `"123456789"` is `0x31C3`), of which the low 14 bits are the slot. A key holding a `{`, followed
//! later by a `}` with at least one byte between them, is hashed by those bytes only; otherwise the whole key is.
//! Only the first `{` and the first `}` after it count.

/// The number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16_384;

/// The CRC16 lookup table for polynomial `0x1021`, built at compile time.
const TABLE: [u16; 256] = table();

const fn table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

/// CRC16-CCITT (XMODEM) of `bytes`, the checksum Redis Cluster hashes keys with.
///
/// # Examples
///
/// ```
/// use muxlock::net::cluster::crc16;
///
/// assert_eq!(crc16(b"123456789"), 0x31C3); // the spec's check value
/// ```
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// The part of `key` that is hashed: the bytes between the first `{` and the first `}` after it when there is at
/// least one, else the whole key.
///
/// # Examples
///
/// ```
/// use muxlock::net::cluster::hash_tag;
///
/// assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
/// assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}"); // an empty tag: the whole key
/// assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
/// assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
/// ```
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = memchr::memchr(b'{', key) else {
        return key;
    };
    let after = &key[open + 1..];
    match memchr::memchr(b'}', after) {
        Some(close) if close > 0 => &after[..close],
        _ => key,
    }
}

/// The slot of `key` (0 to 16,383), as `CLUSTER KEYSLOT` computes it.
///
/// # Examples
///
/// ```
/// use muxlock::net::cluster::key_slot;
///
/// assert_eq!(key_slot(b"foo"), 12182);
/// // Keys sharing a hash tag share a slot: one script may touch them all without CROSSSLOT.
/// assert_eq!(key_slot(b"{invoice:42}"), key_slot(b"muxlock:fence:{invoice:42}"));
/// ```
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) & (SLOT_COUNT - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bit-by-bit CRC16, the reference the table-driven one must match.
    fn crc16_naive(bytes: &[u8]) -> u16 {
        let mut crc = 0u16;
        for &b in bytes {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    #[test]
    fn crc16_matches_the_check_value_and_the_naive_form() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
        let mut bytes = Vec::new();
        for i in 0..600u32 {
            bytes.push((i.wrapping_mul(2_654_435_761) >> 13) as u8);
            assert_eq!(crc16(&bytes), crc16_naive(&bytes), "{} bytes", bytes.len());
        }
    }

    #[test]
    fn hash_tags_follow_the_spec() {
        // (key, hashed part): the spec's examples first, then the edges.
        let cases: &[(&[u8], &[u8])] = &[
            (b"{user1000}.following", b"user1000"),
            (b"{user1000}.followers", b"user1000"),
            (b"foo{}{bar}", b"foo{}{bar}"),
            (b"foo{{bar}}zap", b"{bar"),
            (b"foo{bar}{zap}", b"bar"),
            (b"", b""),
            (b"{", b"{"),
            (b"}", b"}"),
            (b"{}", b"{}"),
            (b"}{", b"}{"),
            (b"a}b{c", b"a}b{c"),
            (b"a}b{c}", b"c"),
            (b"{a", b"{a"),
            (b"x{y", b"x{y"),
            (b"{{}}", b"{"),
            (b"\xff{\x00}", b"\x00"),
        ];
        for (key, want) in cases {
            assert_eq!(hash_tag(key), *want, "{:?}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn slots_of_known_keys() {
        // Read from Redis 7.0.15's CLUSTER KEYSLOT (the integration test tests/cluster/slot_map.rs compares hundreds
        // more against a live server).
        let cases: &[(&[u8], u16)] = &[
            (b"", 0),
            (b"foo", 12182),
            (b"bar", 5061),
            (b"hello", 866),
            (b"somekey", 11058),
            (b"{foo}bar", 12182),
            (b"foo{}{bar}", key_slot_naive(b"foo{}{bar}")),
        ];
        for (key, want) in cases {
            assert_eq!(key_slot(key), *want, "{:?}", String::from_utf8_lossy(key));
        }
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
    }

    fn key_slot_naive(key: &[u8]) -> u16 {
        crc16_naive(key) % SLOT_COUNT
    }

    #[test]
    fn every_slot_is_below_the_count() {
        for i in 0..5_000u32 {
            assert!(key_slot(format!("k{i}").as_bytes()) < SLOT_COUNT);
        }
    }
}
