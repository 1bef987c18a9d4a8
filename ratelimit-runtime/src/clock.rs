//! Time for the in-memory store. (Redis decisions take time from the Redis server.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of time in microseconds. Only differences matter, and they must never go backwards.
pub trait Clock: Send + Sync + 'static {
    /// Now, in microseconds since some fixed origin.
    fn now_us(&self) -> u64;
}

/// Wall-clock time at process start, advanced by the monotonic clock: it never steps back when
/// the system clock is adjusted.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        static ORIGIN: OnceLock<(Instant, u64)> = OnceLock::new();
        let (start, wall) = ORIGIN.get_or_init(|| {
            let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
            (Instant::now(), u64::try_from(wall.as_micros()).unwrap_or(u64::MAX / 2))
        });
        wall.saturating_add(u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX / 2))
    }
}

/// A clock that moves only when told to: deterministic tests of the in-memory store.
#[derive(Debug)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock reading `start_us`.
    pub fn new(start_us: u64) -> ManualClock {
        ManualClock(AtomicU64::new(start_us))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let us = u64::try_from(by.as_micros()).unwrap_or(u64::MAX / 2);
        self.0.fetch_add(us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
