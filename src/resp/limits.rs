//! [`Limits`]: how much a peer may make the decoder accept.

/// Bounds the decoder enforces **before** allocating or waiting for more bytes, so that a hostile or broken server
/// cannot make a client allocate what it merely declares.
///
/// Every bound is checked when the header carrying it is read: a bulk header of `$4611686018427387904` is rejected
/// at once, not after 4 EiB have (never) arrived. The decoder itself allocates only in proportion to the bytes it has
/// actually received.
///
/// RESP3's streamed values declare no size, so their bounds are checked as their parts arrive: each chunk header of a
/// streamed string against what is left of `max_bulk_len`, each value of a streamed aggregate against
/// `max_aggregate_len`.
///
/// # Examples
///
/// ```
/// use muxlock::resp::Limits;
///
/// let tight = Limits::default().with_max_bulk_len(64 * 1024).with_max_depth(8);
/// assert_eq!(tight.max_bulk_len(), 64 * 1024);
/// assert_eq!(tight.max_depth(), 8);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    max_bulk_len: usize,
    max_aggregate_len: usize,
    max_depth: usize,
    max_line_len: usize,
}

impl Limits {
    /// The highest nesting depth [`with_max_depth`](Limits::with_max_depth) accepts.
    ///
    /// The decoder and the encoder never recurse, but [`Value`](super::Value)'s derived `Drop`, `Clone`, `Debug`
    /// and `PartialEq` do: one level costs a few hundred bytes of stack, so 1,024 levels stay far inside the 2 MiB
    /// stack of a spawned thread.
    pub const MAX_DEPTH: usize = 1024;

    /// The defaults: bulk strings up to 512 MiB, aggregates up to 2^31 − 1 elements, 128 levels of nesting, lines up
    /// to 64 KiB.
    pub const fn new() -> Limits {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_aggregate_len: i32::MAX as usize,
            max_depth: 128,
            max_line_len: 64 * 1024,
        }
    }

    /// The largest bulk payload (`$`, `!`, `=`) accepted, in bytes; for a streamed string (`$?`), the sum of its
    /// chunks.
    pub const fn max_bulk_len(&self) -> usize {
        self.max_bulk_len
    }

    /// Sets the largest bulk payload accepted (default 512 MiB).
    ///
    /// # Background
    ///
    /// Redis itself refuses bulk strings above `proto-max-bulk-len`, 512 MiB by default; a reply can therefore not
    /// legitimately carry a larger one unless the server was configured otherwise.
    #[must_use]
    pub const fn with_max_bulk_len(mut self, bytes: usize) -> Limits {
        self.max_bulk_len = bytes;
        self
    }

    /// The largest element count of an aggregate accepted (pairs for maps and attributes), declared or, for a
    /// streamed aggregate (`*?`, `~?`, `%?`), counted as its values arrive.
    pub const fn max_aggregate_len(&self) -> usize {
        self.max_aggregate_len
    }

    /// Sets the largest aggregate element count accepted (default 2^31 − 1).
    ///
    /// # Background
    ///
    /// Redis refuses multi-bulk requests longer than `INT_MAX` elements; the default mirrors that bound. The count
    /// is only a declaration: the decoder never reserves memory for elements it has not received.
    #[must_use]
    pub const fn with_max_aggregate_len(mut self, elements: usize) -> Limits {
        self.max_aggregate_len = elements;
        self
    }

    /// The deepest nesting of aggregates accepted: a top-level array holding a scalar has depth 1.
    pub const fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Sets the deepest nesting accepted (default 128), capped at [`Limits::MAX_DEPTH`].
    ///
    /// Attributes count as a level, like the aggregates they annotate.
    #[must_use]
    pub const fn with_max_depth(mut self, depth: usize) -> Limits {
        self.max_depth = if depth > Limits::MAX_DEPTH {
            Limits::MAX_DEPTH
        } else {
            depth
        };
        self
    }

    /// The longest line accepted (simple strings, simple errors, doubles, big numbers), in bytes without CRLF.
    pub const fn max_line_len(&self) -> usize {
        self.max_line_len
    }

    /// Sets the longest line accepted (default 64 KiB).
    ///
    /// # Background
    ///
    /// A line has no length prefix, so without a bound a peer that never sends CRLF would make the client buffer
    /// forever. Redis' replies on such lines are short (`+OK`, `-ERR ...`); 64 KiB is Redis' own limit on inline
    /// requests (`PROTO_INLINE_MAX_SIZE`). Integers and lengths have their own fixed bound (20 characters, as
    /// Redis' `string2ll`).
    #[must_use]
    pub const fn with_max_line_len(mut self, bytes: usize) -> Limits {
        self.max_line_len = bytes;
        self
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::new()
    }
}
