//! The memory store's runtime overrides: the store is its processes' one truth, so a limiter
//! reads the override in force from it directly (no check rides on a decision). Each ends at its
//! TTL on the store's clock; the table is bounded.

use crate::error::StoreError;
use crate::model::overriding::index_value;
use crate::rt::lock::lock;
use crate::store::{IndexEntries, OverrideWrite};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The most overrides one memory store holds (set by hand, a few at a time: a bound that only
/// a runaway script reaches).
const MAX_OVERRIDES: usize = 100_000;

/// One override in force.
struct Entry {
    index: Vec<u8>,
    field: Vec<u8>,
    rules: Arc<[u8]>,
    /// When it ends, µs on the store's clock (0: when cleared).
    until_us: u64,
}

impl Entry {
    fn ended(&self, now_us: u64) -> bool {
        self.until_us != 0 && self.until_us <= now_us
    }
}

/// The overrides by key.
#[derive(Default)]
pub(crate) struct Overrides(Mutex<HashMap<Vec<u8>, Entry>>);

impl Overrides {
    /// The override of `key` in force at `now_us`.
    pub(crate) fn get(&self, key: &[u8], now_us: u64) -> Option<Arc<[u8]>> {
        let table = lock(&self.0);
        table.get(key).filter(|e| !e.ended(now_us)).map(|e| e.rules.clone())
    }

    pub(crate) fn write(&self, write: &OverrideWrite<'_>, now_us: u64) -> Result<(), StoreError> {
        let mut table = lock(&self.0);
        let Some(rules) = write.rules else {
            table.remove(write.key);
            return Ok(());
        };
        if table.len() >= MAX_OVERRIDES && !table.contains_key(write.key) {
            table.retain(|_, e| !e.ended(now_us));
            if table.len() >= MAX_OVERRIDES {
                return Err(StoreError::other(format!(
                    "the memory store holds at most {MAX_OVERRIDES} runtime overrides"
                )));
            }
        }
        let until_us = if write.ttl_ms == 0 { 0 } else { now_us.saturating_add(write.ttl_ms.saturating_mul(1000)) };
        let entry =
            Entry { index: write.index.to_vec(), field: write.field.to_vec(), rules: Arc::from(rules), until_us };
        table.insert(write.key.to_vec(), entry);
        Ok(())
    }

    /// The index of one limiter, as Redis keeps it (ends in ms); ended overrides are dropped.
    pub(crate) fn list(&self, index: &[u8], now_us: u64) -> IndexEntries {
        let mut table = lock(&self.0);
        table.retain(|_, e| !e.ended(now_us));
        let entries = table
            .values()
            .filter(|e| e.index == index)
            .map(|e| (e.field.clone(), index_value(e.until_us.div_ceil(1000), &e.rules)))
            .collect();
        IndexEntries { entries, now_ms: now_us / 1000 }
    }
}
