//! Locks that outlive a panic.
//!
//! The state behind this crate's mutexes (counters, names, registries) stays consistent between
//! statements, so a panic elsewhere while holding a lock leaves nothing half-written: the next
//! caller takes the lock anyway rather than turn one panic into a panic on every later call.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, whether or not a holder panicked.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads `l`, whether or not a writer panicked.
pub(crate) fn read<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Writes `l`, whether or not a holder panicked.
pub(crate) fn write<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}
