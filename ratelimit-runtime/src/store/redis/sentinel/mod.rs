//! Redis Sentinel: one primary, found by asking the sentinels, followed through failovers.
//!
//! The decision is the Redis store's (`backed.rs`); only the way to the server differs
//! (`primary.rs`). The primary's address comes from `SENTINEL get-master-addr-by-name`, asked
//! of each sentinel in turn (the one that answered first is asked first next time), and is
//! confirmed with `ROLE` before any decision goes there. The connection is dropped, and the
//! primary looked up again, when:
//! - a call finds it broken (connection refused, reset, closed) or the node answers `READONLY`
//!   (the old primary came back as a replica): the call retries once on the new primary, within
//!   its timeout;
//! - a watcher on the I/O runtime, asking a sentinel once a second, sees another address (a
//!   failover of a primary that is still reachable, or one that hangs instead of closing).
//!
//! While no primary can be reached (between the primary's death and the promotion) every call
//! fails within the store timeout and the failure policy applies; lookups are then made at most
//! every [`RETRY_PAUSE`](primary::RETRY_PAUSE), however many calls arrive. After a few such failures the circuit
//! breaker (`store/breaker.rs`) stops calling for a pause of at most [`MAX_PAUSE`], and the
//! watcher ends that pause as soon as a sentinel names another primary.

mod primary;
mod spec;

use super::backed::{OverRedis, RedisBacked};
use crate::error::StoreError;
use crate::metrics::StoreMetrics;
use crate::store::breaker::Breaker;
use crate::store::Store;
use primary::Sentinels;
pub use spec::SentinelSpec;
use std::sync::Arc;
use std::time::Duration;

/// The longest pause of the circuit breaker: a failover takes Sentinel a second or two (its
/// `down-after-milliseconds` plus the promotion), and must not be waited out for 30 s.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// A store on the primary that Redis Sentinel names, followed through failovers without a
/// restart.
pub struct SentinelStore {
    backed: RedisBacked<Arc<Sentinels>>,
}

impl SentinelStore {
    /// Asks the sentinels of `spec` for the primary, in the background: they need not be up yet.
    /// Every call gives up after `timeout`, and the failure policy applies.
    pub fn open(spec: &SentinelSpec, timeout: Duration) -> Result<SentinelStore, StoreError> {
        let description = spec.describe();
        let breaker = Breaker::new(description.clone(), StoreMetrics::new("sentinel"), MAX_PAUSE);
        let sentinels = Sentinels::open(spec, timeout, breaker.clone())?;
        Ok(SentinelStore { backed: RedisBacked::start(sentinels, None, None, description, timeout, breaker)? })
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.backed.timeout()
    }
}

impl OverRedis for SentinelStore {
    type Link = Arc<Sentinels>;

    fn backed(&self) -> &RedisBacked<Arc<Sentinels>> {
        &self.backed
    }
}

impl Store for SentinelStore {
    fn describe(&self) -> String {
        self.backed.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_specs_are_refused() {
        let t = Duration::from_millis(100);
        assert!(SentinelStore::open(&SentinelSpec::new(Vec::<String>::new(), "m"), t).is_err());
        assert!(SentinelStore::open(&SentinelSpec::new(["redis://127.0.0.1:26379"], " "), t).is_err());
        let e = SentinelStore::open(&SentinelSpec::new(["redis://:pw@127.0.0.1:notaport"], "m"), t).err();
        let shown = format!("{e:?}");
        assert!(shown.contains("invalid sentinel URL") && !shown.contains("pw@"), "{shown}");
    }
}
