//! [`Config`]: every setting of a [`LockManager`](super::LockManager), with documented defaults.

use std::time::Duration;

use crate::net::TlsConfig;
use crate::redlock::error::{Error, Result};
use crate::redlock::quorum::drift;

/// Settings of a [`LockManager`](super::LockManager). Every duration is a `Duration`. Start from
/// [`Config::default`] (or [`Config::new`]) and change what you need with the `with_*` setters; each setter says
/// its default. Settings added later get a default of their own, so code that builds a `Config` this way keeps
/// compiling.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use muxlock::Config;
///
/// let config = Config::default().with_retry_count(3).with_round_timeout(Duration::from_millis(20));
/// assert_eq!(config.retry_count(), 3);
/// assert_eq!(config.drift_factor(), 0.01);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub(crate) ttl: Duration,
    pub(crate) retry_count: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) round_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_extensions: u32,
    pub(crate) max_in_flight: usize,
    pub(crate) hung_timeout: Duration,
    pub(crate) spin: Duration,
    pub(crate) fold_releases: bool,
    pub(crate) restart_guard: bool,
    pub(crate) restart_window: Duration,
    pub(crate) clock_check: bool,
    pub(crate) clock_tolerance: Duration,
    pub(crate) tls: TlsConfig,
}

/// A getter and a `with_*` setter per setting; the setter carries the documentation.
macro_rules! settings {
    ($($(#[$doc:meta])* $name:ident, $with:ident: $ty:ty;)*) => {
        impl Config {
            $(
                #[doc = concat!("The value of [`", stringify!($with), "`](Config::", stringify!($with), ").")]
                pub fn $name(&self) -> $ty {
                    self.$name
                }

                $(#[$doc])*
                #[must_use]
                pub fn $with(mut self, $name: $ty) -> Config {
                    self.$name = $name;
                    self
                }
            )*
        }
    };
}

settings! {
    /// Sets the lease of a [request](super::Request) that sets no [`ttl`](super::Request::ttl) of its own
    /// (default 10 s).
    ttl, with_ttl: Duration;
    /// Sets the further attempts of a request that [retries](super::Request::retry) (the default) after the
    /// first fails (default 10). [`once`](super::Request::once) makes one attempt whatever this says.
    retry_count, with_retry_count: u32;
    /// Sets the pause between two attempts (default 200 ms), to which a random jitter is added.
    retry_delay, with_retry_delay: Duration;
    /// Sets the jitter: each pause is `retry_delay` plus or minus a uniformly random amount up to this (default
    /// 100 ms), so that clients that failed together do not retry together (the spec's "random delay to
    /// desynchronize").
    retry_jitter, with_retry_jitter: Duration;
    /// Sets the clock-drift allowance as a fraction of the TTL (default 0.01): the lease is considered valid for
    /// `ttl − elapsed − (ttl × drift_factor + 2 ms)`, as in the spec. Must be in `[0, 0.5)`.
    drift_factor, with_drift_factor: f64;
    /// Sets how long one round waits for replies (default 50 ms, the upper end of the spec's "5–50 ms" for a 10 s
    /// lease). An acquisition also never waits past its lease's validity. A hung node costs at most this, and only
    /// when the majority needs its vote.
    ///
    /// A node that is **still answering** at the deadline (bytes came from it within the last `round_timeout`:
    /// under overload, its replies come behind thousands of this client's other requests) is waited for by a plain
    /// acquisition or release, up to 40 round timeouts in all (2 s at the default) and, for an acquisition, never
    /// past a third of the TTL (so that a guard still has room for its first renewal), rather than counted as timed out while it answers. A down or hung node is not: it costs one
    /// round timeout, or two if it falls silent during the round. Renewals, extensions and the other kinds'
    /// rounds keep the plain deadline (their length is part of other checks, such as a guard's warning before
    /// its lease ends).
    round_timeout, with_round_timeout: Duration;
    /// Sets how long a connection attempt may take before the node counts as down (default 1 s). For a
    /// `rediss://` node the TLS handshake counts too: it must end within this of the dial, or of the moment
    /// this client saw the TCP connect complete and started the handshake, whichever is later (a manager left
    /// idle after `build` starts its handshakes with its first call).
    connect_timeout, with_connect_timeout: Duration;
    /// Sets how many times one lock may be extended with [`extend`](super::LockManager::extend) (default 1,000).
    /// The spec asks for a bound so that a holder cannot keep a resource forever by mistake.
    max_extensions, with_max_extensions: u32;
    /// Sets how many commands a node may have without replies (default 32,768; an acquisition or extension is
    /// three with the [clock check](Config::with_clock_check) on: its command between two `TIME`s). Past it, an acquisition does not
    /// send to that node (its vote fails as overloaded) while the requests on the wire are kept; releases use a
    /// reserve of as many again, then wait for room. A slow node is never dropped for being slow. The default lets
    /// 10,000 tasks or threads share one manager, each with an acquisition on every node, without a refusal (a
    /// command in flight costs its bytes and a slot: about 4 MB per node at the bound).
    max_in_flight, with_max_in_flight: usize;
    /// Sets how long a node may have requests without replies and send nothing at all before its connection is
    /// dropped as hung, failing those requests (default 5 s). Catches hosts that vanished without closing their
    /// connections; a node that answers, however slowly, is kept.
    hung_timeout, with_hung_timeout: Duration;
    /// Sets how long a caller waiting for replies polls without blocking before it sleeps (default zero). On
    /// machines whose idle CPUs halt, a few tens of microseconds of spinning save a wake-up when the nodes answer
    /// that fast (same host or rack), at the cost of a busy CPU while it spins; see
    /// `benchmarks/results/2026-11-22-throughput-shared-manager.md` ("Busy polling") for when it pays.
    spin, with_spin: Duration;
    /// Turns folded releases on or off (default **off**: folding cuts the servers' script calls per release, but
    /// their CPU time per lock cycle measured higher with it than without; see
    /// `benchmarks/results/2026-11-27-folded-releases.md`).
    /// On, a plain release (`unlock`, `unlock_value`, a plain guard's release or drop; never a fenced, set or owned
    /// lock's, nor `unlock_batch`) asked for while another plain release of this manager is in flight waits for that
    /// round, then goes out with the releases waiting then (up to [`max_in_flight`](Config::with_max_in_flight) of
    /// them) as one compare-and-delete script per node for all of them (one native command per key pipelined in one
    /// write on a node that has `DELIFEQ`/`DELEX`). Under load the servers run one script call per fold instead of
    /// one per release; a lone caller goes out at once either way.
    ///
    /// Each caller's verdict is counted from its own key's replies only, and a key another caller's release
    /// cannot read (another type, outside the user's ACL) costs only that caller's release. What differs from a
    /// lone release:
    /// - **Latency**: up to one round more (the one in flight) before its own. A caller whose turn does not come
    ///   (the round before it belongs to a future that is not being polled: its executor's thread is blocked or
    ///   busy) leaves the queue after one [`round_timeout`](Config::with_round_timeout), or its fold after three,
    ///   and releases alone.
    /// - **A fold is run by one of its callers.** If that caller is a task whose future is dropped while its round
    ///   is out (a `timeout` around `unlock_async`), the others get the verdict of the replies read so far:
    ///   usually [`Error::Quorum`](crate::Error::Quorum), unconfirmed, although the nodes go on to delete their
    ///   keys. Never a success that did not happen.
    ///
    /// Off, every release goes out at once in a round of its own (lower release latency among a few callers,
    /// more server time per release among many). [`Stats::releases`](super::Stats::releases) counts what folded.
    fold_releases, with_fold_releases: bool;
    /// Turns the restart-aware quorum on or off (default on): a node that restarted less than the restart window
    /// ago keeps answering, but its "yes" votes do not count, because it may have lost the locks it granted before
    /// (the spec's *delayed restart*, done by the client). muxlock learns of a restart from `INFO server`, read on
    /// every new connection: a changed `run_id`, or an `uptime_in_seconds` below the window.
    ///
    /// What it assumes, and what it cannot see:
    /// - Redis reports its uptime in whole seconds, as the difference of two truncated wall-clock times, so
    ///   "up 1 s" may mean a few milliseconds: a reading of `u` is taken as `u − 1` seconds, dated when the reply
    ///   was read (later than when it was true). The node is trusted once that much plus the time since reaches
    ///   the window.
    /// - A node whose wall clock steps *forward* soon after it started reports a larger uptime than it has, and
    ///   the guard cannot tell. Nor can it see a restart hidden behind a proxy that keeps the client's connection
    ///   open. Where safety matters, prefer nodes that persist every write (`appendfsync always`).
    /// - The window must cover the longest lease *any* client of these nodes uses: see
    ///   [`with_restart_window`](Config::with_restart_window).
    ///
    /// Nodes that prove they forget nothing are trusted at once: a node that reports `appendonly yes`,
    /// `appendfsync always` and `no-appendfsync-on-rewrite no` (`CONFIG GET *append*`, read on every new
    /// connection) and whose persistence marker ([`PERSIST_MARKER_KEY`](super::PERSIST_MARKER_KEY), written once
    /// with `SET NX`) is older than the window has lost neither a write nor its files since any live lock was
    /// granted. If this manager saw the node's previous process, that one must have reported the same; a node
    /// that refuses `CONFIG` or the marker gets the window. An extension or renewal counts a node the window
    /// trusts or one up since before the lock was acquired (by value: the window alone), and widens the window
    /// like acquisitions.
    ///
    /// The price, for other nodes: a node that has just started (a fresh deployment, a test) does not count for the
    /// first window either, so locks need a majority of nodes that have been up that long (the error says which
    /// nodes and for how much longer). Turn the guard off only when a lost lock is acceptable. The module
    /// `src/redlock/engine/restart.rs` says which way each figure may err, why trusting persistent nodes is safe, and
    /// what that assumes (persistence configured at start, not turned on at run time).
    restart_guard, with_restart_guard: bool;
    /// Sets the least restart window (default zero). The window is the larger of this and the longest TTL this
    /// manager has used (acquired or extended to), plus the drift allowance: set it to the longest TTL that *any*
    /// client of these nodes acquires or extends to.
    restart_window, with_restart_window: Duration;
    /// Turns the clock check on or off (default on): a node's grant or extension counts only if its wall clock
    /// agrees with this client's, within the [tolerance](Config::with_clock_tolerance). Redis and Valkey expire
    /// keys by the wall clock, so a node whose clock steps forward (or runs fast) ends the leases it holds early,
    /// and a majority of such nodes would hand a lock to a second holder while the first still counts its lease
    /// live; the drift allowance covers clocks that tick at slightly different rates, not steps.
    ///
    /// Each request that sets or extends a lease goes between two `TIME`s (two more short replies in the same
    /// packet). With `T` the tolerance, `s` this client's wall clock when the round started and `r` when the reply
    /// was read, a node's vote counts only if its clock read `≥ s − T` before the request and `≤ r + T` after it,
    /// and every lease's validity is `2T` shorter. The argument, and what it cannot see, are in
    /// `src/redlock/engine/clock.rs`: it assumes the clients' own wall clocks are right (NTP) and that a node's
    /// clock is not set back between two grants (one that jumped forward and was set back meanwhile reads right
    /// at both). On cluster members the check does not run yet.
    ///
    /// Turn it off only if the nodes' clocks cannot be kept within the tolerance of the clients' (a node in a VM
    /// whose clock is seconds off): the error names each node whose clock is off, and by how much.
    clock_check, with_clock_check: bool;
    /// Sets how far a node's wall clock may be from this client's (default 25 ms); every lease's validity is
    /// shortened by twice this. Clients of the same nodes must use the same tolerance (or the largest one's):
    /// the argument covers a node whose clock was off by `T` one way at one client's grant and by `T` the other
    /// way at another's.
    clock_tolerance, with_clock_tolerance: Duration;
}

impl Config {
    /// The value of [`with_tls`](Config::with_tls).
    pub fn tls(&self) -> &TlsConfig {
        &self.tls
    }

    /// Sets how `rediss://` nodes are verified and which client certificate they get (default
    /// [`TlsConfig::default`]: the platform's root certificates, no client certificate). `redis://` nodes ignore
    /// it. The files are read when the manager is built: one that cannot be read, or holds nothing usable, is an
    /// [`Error::Config`] then.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::{Config, LockManager, TlsConfig};
    ///
    /// let tls = TlsConfig::new()
    ///     .with_ca_file("/etc/redis/tls/ca.crt")
    ///     .with_client_cert("/etc/muxlock/client.crt", "/etc/muxlock/client.key");
    /// let locks = LockManager::builder()
    ///     .nodes(["rediss://10.0.0.1:6379", "rediss://10.0.0.2:6379", "rediss://10.0.0.3:6379"])
    ///     .config(Config::default().with_tls(tls))
    ///     .build()?;
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    #[must_use]
    pub fn with_tls(mut self, tls: TlsConfig) -> Config {
        self.tls = tls;
        self
    }

    /// The longest lease accepted: one year. Longer ones are almost surely a unit mistake (seconds given as
    /// milliseconds), and a lock client should not pin a resource that long.
    pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

    /// The defaults, as [`Config::default`].
    pub fn new() -> Config {
        Config::default()
    }

    /// Checks every setting.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the first invalid setting.
    pub fn validate(&self) -> Result<()> {
        if !(self.drift_factor.is_finite() && (0.0..0.5).contains(&self.drift_factor)) {
            return Err(Error::config(format!(
                "drift_factor must be in [0, 0.5), not {}",
                self.drift_factor
            )));
        }
        if self.round_timeout.is_zero() {
            return Err(Error::config("round_timeout must be more than zero"));
        }
        if self.connect_timeout.is_zero() {
            return Err(Error::config("connect_timeout must be more than zero"));
        }
        // Longer is a unit mistake, and bounding them keeps every sum of durations far from overflowing.
        for (name, d) in [
            ("round_timeout", self.round_timeout),
            ("connect_timeout", self.connect_timeout),
            ("hung_timeout", self.hung_timeout),
            ("retry_delay", self.retry_delay),
            ("retry_jitter", self.retry_jitter),
            ("clock_tolerance", self.clock_tolerance),
        ] {
            if d > Config::MAX_TTL {
                return Err(Error::config(format!(
                    "{name} {d:?} is longer than the maximum, {:?}",
                    Config::MAX_TTL
                )));
            }
        }
        if self.max_in_flight == 0 {
            return Err(Error::config("max_in_flight must be at least 1"));
        }
        if self.clock_check && self.max_in_flight < 3 {
            return Err(Error::config(
                "max_in_flight must be at least 3 with the clock check on: an acquisition or extension is its \
                 command between the check's two TIMEs",
            ));
        }
        if self.hung_timeout.is_zero() {
            return Err(Error::config("hung_timeout must be more than zero"));
        }
        if self.restart_window > Config::MAX_TTL {
            return Err(Error::config(format!(
                "restart_window {:?} is longer than the maximum TTL, {:?}",
                self.restart_window,
                Config::MAX_TTL
            )));
        }
        self.check_ttl(self.ttl).map(|_| ())
    }

    /// Checks a lease and returns it in whole milliseconds (rounded up: Redis' `PX` counts milliseconds).
    /// What a lease of `ttl` loses to clocks: the spec's drift allowance, and twice the clock tolerance when the
    /// clock check is on (`engine/clock.rs`).
    pub(crate) fn allowance(&self, ttl: Duration) -> Duration {
        let steps = match self.clock_check {
            true => self.clock_tolerance.saturating_mul(2),
            false => Duration::ZERO,
        };
        drift(ttl, self.drift_factor).saturating_add(steps)
    }

    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<u64> {
        if ttl.is_zero() {
            return Err(Error::config("ttl must be more than zero"));
        }
        if ttl > Config::MAX_TTL {
            return Err(Error::config(format!(
                "ttl {ttl:?} is longer than the maximum, {:?}",
                Config::MAX_TTL
            )));
        }
        let allowance = self.allowance(ttl);
        if ttl <= allowance {
            return Err(Error::config(format!(
                "ttl {ttl:?} leaves no validity after the clock allowance of {allowance:?} (drift, and twice the \
                 clock tolerance)"
            )));
        }
        let ms = ttl.as_millis();
        Ok(u64::try_from(ms + u128::from(ttl.subsec_nanos() % 1_000_000 != 0)).unwrap_or(u64::MAX))
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            ttl: Duration::from_secs(10),
            retry_count: 10,
            retry_delay: Duration::from_millis(200),
            retry_jitter: Duration::from_millis(100),
            drift_factor: 0.01,
            round_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            max_extensions: 1000,
            max_in_flight: 32_768,
            hung_timeout: Duration::from_secs(5),
            spin: Duration::ZERO,
            fold_releases: false,
            restart_guard: true,
            restart_window: Duration::ZERO,
            clock_check: true,
            clock_tolerance: Duration::from_millis(25),
            tls: TlsConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_settings_are_named() {
        assert_eq!(Config::default().validate(), Ok(()));
        let bad = |c: Config, want: &str| {
            let msg = c.validate().unwrap_err().to_string();
            assert!(msg.contains(want), "{msg}");
        };
        bad(
            Config::default().with_drift_factor(f64::NAN),
            "drift_factor",
        );
        bad(Config::default().with_drift_factor(0.5), "drift_factor");
        bad(
            Config::default().with_round_timeout(Duration::ZERO),
            "round_timeout",
        );
        bad(
            Config::default().with_connect_timeout(Duration::ZERO),
            "connect_timeout",
        );
        bad(Config::default().with_max_in_flight(0), "max_in_flight");
        bad(
            Config::default().with_hung_timeout(Duration::ZERO),
            "hung_timeout",
        );
        bad(
            Config::default().with_ttl(Duration::ZERO),
            "ttl must be more than zero",
        );
        bad(
            Config::default().with_ttl(Duration::from_millis(2)),
            "no validity",
        );
        bad(
            Config::default().with_ttl(Config::MAX_TTL * 2),
            "longer than the maximum",
        );
        bad(
            Config::default().with_restart_window(Duration::MAX),
            "restart_window",
        );
        // Durations so long that `hold` would overflow `Duration` adding them: refused by `validate`.
        for (c, name) in [
            (
                Config::default().with_round_timeout(Duration::MAX),
                "round_timeout",
            ),
            (
                Config::default().with_connect_timeout(Duration::MAX),
                "connect_timeout",
            ),
            (
                Config::default().with_hung_timeout(Duration::MAX),
                "hung_timeout",
            ),
            (
                Config::default().with_retry_delay(Duration::MAX),
                "retry_delay",
            ),
            (
                Config::default().with_retry_jitter(Duration::MAX),
                "retry_jitter",
            ),
        ] {
            bad(c, name);
        }
        assert_eq!(
            Config::default()
                .with_round_timeout(Config::MAX_TTL)
                .with_connect_timeout(Config::MAX_TTL)
                .validate(),
            Ok(())
        );
    }

    #[test]
    fn ttl_rounds_up_to_whole_milliseconds() {
        let c = Config::default();
        assert_eq!(c.check_ttl(Duration::from_millis(30_000)), Ok(30_000));
        assert_eq!(c.check_ttl(Duration::from_micros(30_000_001)), Ok(30_001));
    }
}
