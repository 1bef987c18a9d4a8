//! What a store does for runtime overrides (`model::overriding`): the writes and listings it is
//! asked for, the check a decision carries, and what a remote store's process has learnt of the
//! overrides in force ([`Known`]).
//!
//! Like `operations.rs`, its items are `pub` inside a private module: they appear in the
//! methods of `Operations`, and only this crate can make them.

use crate::rt::lock::lock;
use hashlink::LruCache;
use std::sync::{Arc, Mutex};

/// How many subjects' overrides a remote store's process remembers (least recently used first
/// out). A subject forgotten costs one more round trip when it next calls with an override:
/// the script then says which one is in force.
const KNOWN_OVERRIDES: usize = 10_000;

/// A write of one subject's override ([`Operations::write_override`](super::Operations)): set
/// (with its rules and optional TTL) or cleared, with its entry in the limiter's index.
pub struct OverrideWrite<'a> {
    /// The override's key (in the subject's hash tag).
    pub(crate) key: &'a [u8],
    /// The limiter's index and the subject's field in it.
    pub(crate) index: &'a [u8],
    pub(crate) field: &'a [u8],
    /// The rules as the key holds them (`model::overriding::encode_rules`); `None`: clear.
    pub(crate) rules: Option<&'a [u8]>,
    /// The TTL in ms (0: until cleared).
    pub(crate) ttl_ms: u64,
}

/// What a decision checks of one limit's override, in the same script run: that the override
/// at `key` holds `expected` (`None`: that there is none). An empty `key`: nothing to check
/// (a concurrency limit, a missing subject).
pub struct OverrideCheck {
    pub(crate) key: Vec<u8>,
    pub(crate) expected: Option<Arc<[u8]>>,
}

/// A limiter's index of overrides as read ([`Operations::list_overrides`](super::Operations)):
/// each field and value, and the store's time (ms since the epoch) to judge their ends by.
pub struct IndexEntries {
    pub(crate) entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) now_ms: u64,
}

/// The overrides a remote store's process met, by key: what it decides with until a script
/// says otherwise. Absent: none.
pub(crate) struct Known(Mutex<LruCache<Vec<u8>, Arc<[u8]>>>);

impl Known {
    pub(crate) fn new() -> Known {
        Known(Mutex::new(LruCache::new(KNOWN_OVERRIDES)))
    }

    /// The override of `key` this process decides with.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Arc<[u8]>> {
        lock(&self.0).get(key).cloned()
    }

    /// What the store said (or this process wrote): `key` holds `value` (empty: none).
    pub(crate) fn learn(&self, key: &[u8], value: &[u8]) {
        let mut known = lock(&self.0);
        if value.is_empty() {
            known.remove(key);
        } else {
            known.insert(key.to_vec(), Arc::from(value));
        }
    }
}
