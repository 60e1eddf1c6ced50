//! [`RedisQuorum`]: Redlock written by hand on redis-rs, the best a user could do with the common library: one
//! [`MultiplexedConnection`] per node, every request sent to all nodes at once, and an answer as soon as the
//! majority has decided.
//!
//! - **Acquire**: `SET resource value NX PX ttl` to every node concurrently ([`FuturesUnordered`]); it returns at the
//!   third `OK` of 5, after checking that the lease is still valid (`ttl − elapsed − drift`, as the Redlock page
//!   says). Once a majority of `OK`s is impossible it stops waiting, releases on every node (a partial acquisition
//!   must not stay behind) and fails.
//! - **Release**: the Redlock page's compare-and-delete script by `EVALSHA` to every node concurrently, returning at
//!   the third node that deleted the key. The script is loaded once per connection when connecting; a `NOSCRIPT`
//!   reply (the node restarted or was flushed) loads it again on that node and retries, as `redis::Script` does.
//! - **Value**: 20 random bytes per acquisition from a ChaCha8 stream per handle, seeded by the OS.
//!
//! With [`RedisQuorum::waiting_for_all`] it waits instead for every node's reply before it decides (the
//! simplest correct client, `join_all` over the nodes).
//!
//! The replies of the nodes not awaited are left to redis-rs, which drops them when they arrive. Clone a client with
//! [`RedisQuorum::handle`]: the connections are shared (redis-rs pipelines the handles' requests on them), the
//! random stream is not.

use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use redis::{Cmd, ErrorKind, RedisResult, Script, ServerErrorKind};

/// Delete the key only if it still holds our value (the release script of the Redlock page).
const RELEASE: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end"#;

/// The random bytes of a lock value.
pub type LockValue = [u8; 20];

/// A Redlock client on redis-rs multiplexed connections, one per node.
pub struct RedisQuorum {
    conns: Vec<MultiplexedConnection>,
    release: Script,
    ttl: Duration,
    rng: ChaCha8Rng,
    /// Whether a round waits for every node's reply (else it decides at the majority).
    wait_all: bool,
}

impl RedisQuorum {
    /// Connects to every node of `urls` (`redis://host:port`), one after another, and loads the release script on
    /// each; locks will last `ttl`. Must run inside a tokio runtime: each connection's driver task is spawned on it.
    ///
    /// # Errors
    ///
    /// redis-rs' error for the first node that cannot be reached.
    pub async fn connect(urls: &[String], ttl: Duration) -> RedisResult<RedisQuorum> {
        let release = Script::new(RELEASE);
        let mut conns = Vec::with_capacity(urls.len());
        for url in urls {
            let mut conn = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            release.load_async(&mut conn).await?;
            conns.push(conn);
        }
        Ok(RedisQuorum {
            conns,
            release,
            ttl,
            rng: seeded(),
            wait_all: false,
        })
    }

    /// Another handle on the same connections, with its own random stream (a `Clone` would repeat the values).
    pub fn handle(&self) -> RedisQuorum {
        RedisQuorum {
            conns: self.conns.clone(),
            release: self.release.clone(),
            ttl: self.ttl,
            rng: seeded(),
            wait_all: self.wait_all,
        }
    }

    /// This client, deciding each round only once every node answered.
    pub fn waiting_for_all(mut self) -> RedisQuorum {
        self.wait_all = true;
        self
    }

    /// The majority: `N/2 + 1`.
    fn quorum(&self) -> usize {
        self.conns.len() / 2 + 1
    }

    /// Acquires `resource` for the client's TTL: the lock's value, to give to [`release`](RedisQuorum::release).
    ///
    /// # Errors
    ///
    /// Why no valid majority was reached (the first node's error, or how many said no); the nodes that said yes
    /// have been released by then.
    pub async fn acquire(&mut self, resource: &[u8]) -> Result<LockValue, String> {
        let mut value = LockValue::default();
        self.rng.fill_bytes(&mut value);
        let start = Instant::now();
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let mut set = redis::cmd("SET");
        set.arg(resource)
            .arg(&value[..])
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms);
        let (n, quorum) = (self.conns.len(), self.quorum());
        let (mut yes, mut no) = (0, 0);
        let mut first_error = None;
        {
            let mut replies: FuturesUnordered<_> = self
                .conns
                .iter_mut()
                .map(|conn| set.query_async::<redis::Value>(conn))
                .collect();
            while let Some(reply) = replies.next().await {
                match reply {
                    Ok(redis::Value::Okay) => yes += 1,
                    Ok(other) => {
                        no += 1;
                        first_error.get_or_insert_with(|| format!("SET NX answered {other:?}"));
                    }
                    Err(e) => {
                        no += 1;
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
                if !self.wait_all && (yes >= quorum || no > n - quorum) {
                    break;
                }
            }
        }
        // The Redlock page's validity: the lease minus the time taken and the clock drift (1 % + 2 ms).
        let drift = self.ttl / 100 + Duration::from_millis(2);
        if yes >= quorum && start.elapsed() + drift < self.ttl {
            return Ok(value);
        }
        // Best effort: the call fails whether or not the undo reaches a majority.
        let _ = self.release(resource, &value).await;
        Err(match first_error {
            Some(e) => format!("redis-rs/quorum: {yes} of {n} nodes locked, first error: {e}"),
            None => format!("redis-rs/quorum: {yes} of {n} nodes locked, too late for the lease"),
        })
    }

    /// Releases `resource` if it still holds `value`, on every node at once; returns once a majority deleted it.
    ///
    /// # Errors
    ///
    /// Once a majority of deletions is impossible: how many nodes deleted the key, and the first error.
    pub async fn release(&mut self, resource: &[u8], value: &LockValue) -> Result<(), String> {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(self.release.get_hash())
            .arg(1)
            .arg(resource)
            .arg(&value[..]);
        let (n, quorum) = (self.conns.len(), self.quorum());
        let (mut deleted, mut not) = (0, 0);
        let mut first_error = None;
        let script = &self.release;
        let mut replies: FuturesUnordered<_> = self
            .conns
            .iter_mut()
            .map(|conn| evalsha(&eval, script, conn))
            .collect();
        while let Some(reply) = replies.next().await {
            match reply {
                Ok(1) => deleted += 1,
                Ok(other) => {
                    not += 1;
                    first_error.get_or_insert_with(|| format!("the script returned {other}"));
                }
                Err(e) => {
                    not += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
            if self.wait_all {
                continue;
            }
            if deleted >= quorum {
                return Ok(());
            }
            if not > n - quorum {
                break;
            }
        }
        if deleted >= quorum {
            return Ok(());
        }
        Err(format!(
            "redis-rs/quorum: released on {deleted} of {n} nodes, first error: {}",
            first_error.as_deref().unwrap_or("none")
        ))
    }
}

/// `EVALSHA` on one node, loading the script and trying again once if the node does not know it.
async fn evalsha(
    eval: &Cmd,
    script: &Script,
    conn: &mut MultiplexedConnection,
) -> RedisResult<i64> {
    match eval.query_async(conn).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            eval.query_async(conn).await
        }
        reply => reply,
    }
}

/// A ChaCha8 stream with a seed from the OS.
fn seeded() -> ChaCha8Rng {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("a seed from the OS");
    ChaCha8Rng::from_seed(seed)
}
