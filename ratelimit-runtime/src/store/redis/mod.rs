//! The Redis-backed stores. One store (`backed.rs`) decides, peeks, gives back and resets over
//! a [`Link`](link::Link) to its server: one Redis server (here), or the primary that Redis
//! Sentinel names (`sentinel/`). A Redis Cluster (`cluster/`) decides slot by slot. All of
//! them send the same scripts (`script.rs`, `lua/`) and commands (`commands.rs`).

pub(crate) mod backed;
pub(crate) mod batch;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod commands;
pub(crate) mod direct;
pub(crate) mod error;
pub(crate) mod lanes;
pub(crate) mod link;
pub(crate) mod overrides;
pub(crate) mod probe;
pub(crate) mod script;
pub(crate) mod sentinel;
pub(crate) mod tls;

use crate::error::StoreError;
use crate::metrics::StoreMetrics;
use crate::rt::io;
use crate::store::breaker::{Breaker, MAX_PAUSE};
use crate::store::Store;
use backed::{OverRedis, RedisBacked};
use error::redis_error;
use lanes::MakeLink;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::sync::Arc;
use std::time::Duration;
use tls::TlsConfig;

pub(crate) use commands::redact;

/// A store on one Redis server (or a primary behind a proxy), through a connection that
/// reconnects by itself.
pub struct RedisStore {
    backed: RedisBacked<ConnectionManager>,
}

impl RedisStore {
    /// Connects lazily to `url` (`redis://host:port/db`, `rediss://` for TLS verified against
    /// the platform's roots): Redis need not be up yet. Every call gives up after `timeout`,
    /// and the failure policy applies. A probe connects in the background and logs the outcome.
    pub fn open(url: &str, timeout: Duration) -> Result<RedisStore, StoreError> {
        RedisStore::open_with_tls(url, timeout, &TlsConfig::default())
    }

    /// As [`open`](Self::open), with a private CA and/or a client certificate for `rediss://`.
    pub fn open_with_tls(url: &str, timeout: Duration, tls: &TlsConfig) -> Result<RedisStore, StoreError> {
        let redacted = redact(url);
        let client = tls::client(url, tls, &redacted)?;
        let config = ConnectionManagerConfig::new()
            // The per-call timeout is ours (`io::timeout`): the client's own would use the timer
            // of whichever runtime polls the call.
            .set_response_timeout(None)
            .set_connection_timeout(Some(timeout))
            // Reconnection is driven by calls: a couple of quick tries each, never a long queue.
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100));
        // The shared connection is created inside the I/O runtime, so that it and its
        // reconnections live there; each calling runtime's, on that runtime (lanes.rs).
        let conn = {
            let _guard = io::handle()?.enter();
            ConnectionManager::new_lazy_with_config(client.clone(), config.clone()).map_err(redis_error)?
        };
        // Lone calls on a connection of their own, where the connection can be plain (direct/).
        let direct = direct::DirectConfig::of(client.get_connection_info());
        let make: MakeLink<ConnectionManager> = Arc::new(move || {
            ConnectionManager::new_lazy_with_config(client.clone(), config.clone()).map_err(redis_error)
        });
        let description = format!("redis ({redacted})");
        let breaker = Breaker::new(description.clone(), StoreMetrics::new("redis"), MAX_PAUSE);
        Ok(RedisStore { backed: RedisBacked::start(conn, Some(make), direct, description, timeout, breaker)? })
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.backed.timeout()
    }
}

impl OverRedis for RedisStore {
    type Link = ConnectionManager;

    fn backed(&self) -> &RedisBacked<ConnectionManager> {
        &self.backed
    }
}

impl Store for RedisStore {
    fn describe(&self) -> String {
        self.backed.describe()
    }
}
