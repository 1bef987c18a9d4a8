//! Time for the in-memory store. (Redis decisions take time from the Redis server.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
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

/// The system clock as the in-memory store reads it on every decision: wall time at first use,
/// advanced by the CPU's time-stamp counter (calibrated against the monotonic clock, as governor
/// does) where the kernel itself times by that counter, so it is invariant and synchronised
/// across cores; else [`SystemClock`]. A reading costs a few ns instead of a `clock_gettime`.
/// Only the in-memory store uses it: its decisions and its refusal cache read one clock.
pub(crate) fn fast_clock() -> Arc<dyn Clock> {
    static COUNTER: OnceLock<Option<Arc<CounterClock>>> = OnceLock::new();
    match COUNTER.get_or_init(CounterClock::new) {
        Some(c) => c.clone(),
        None => Arc::new(SystemClock),
    }
}

/// See [`fast_clock`].
struct CounterClock {
    clock: quanta::Clock,
    origin: u64,
    wall_us: u64,
}

impl CounterClock {
    fn new() -> Option<Arc<CounterClock>> {
        // Linux picks `tsc` only once it found the counter invariant and synchronised.
        let source = std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource");
        if source.ok()?.trim() != "tsc" {
            return None;
        }
        let clock = quanta::Clock::new();
        let wall_us = SystemClock.now_us();
        Some(Arc::new(CounterClock { origin: clock.raw(), clock, wall_us }))
    }
}

impl Clock for CounterClock {
    #[inline]
    fn now_us(&self) -> u64 {
        // `delta_as_nanos` answers 0 rather than step back before the origin.
        self.wall_us.saturating_add(self.clock.delta_as_nanos(self.origin, self.clock.raw()) / 1000)
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
