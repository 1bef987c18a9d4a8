//! Time for the in-memory store. (Redis decisions take time from the Redis server.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of time in microseconds since the Unix epoch (fixed windows start at multiples of
/// their length since it, windows of calendar months at month starts in UTC). It must never go
/// backwards.
pub trait Clock: Send + Sync + 'static {
    /// Now, in microseconds since the Unix epoch.
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
    match counter_clock() {
        Some(c) => Arc::new(*c),
        None => Arc::new(SystemClock),
    }
}

/// The counter behind [`fast_clock`], when the kernel trusts it: a memory store on the
/// system clock reads it directly (no call through `dyn Clock`).
pub(crate) fn counter_clock() -> Option<&'static CounterClock> {
    static COUNTER: OnceLock<Option<CounterClock>> = OnceLock::new();
    COUNTER.get_or_init(CounterClock::new).as_ref()
}

/// See [`fast_clock`].
#[derive(Clone, Copy)]
pub(crate) struct CounterClock {
    clock: &'static quanta::Clock,
    origin: u64,
    wall_us: u64,
    /// µs per counter tick, times 2^64 (a tick is well under a µs): a reading is one
    /// multiplication whose high word is the µs, rather than quanta's scaling to ns and a
    /// division by 1000.
    us_per_tick: u64,
}

impl CounterClock {
    fn new() -> Option<CounterClock> {
        // Linux picks `tsc` only once it found the counter invariant and synchronised.
        let source = std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource");
        if source.ok()?.trim() != "tsc" {
            return None;
        }
        static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
        let clock = CLOCK.get_or_init(quanta::Clock::new);
        // quanta's calibration, read off 2^40 ticks (minutes at any real rate): ns for them,
        // so µs per tick times 2^64 is ns · 2^24 / 1000.
        const TICKS_LOG2: u32 = 40;
        let ns = clock.delta_as_nanos(0, 1 << TICKS_LOG2);
        let us_per_tick = u64::try_from((u128::from(ns) << (64 - TICKS_LOG2)) / 1000).ok().filter(|&m| m > 0)?;
        let wall_us = SystemClock.now_us();
        Some(CounterClock { origin: clock.raw(), clock, wall_us, us_per_tick })
    }

    #[inline]
    pub(crate) fn read_us(&self) -> u64 {
        // Never before the origin (a counter read on another core a hair behind counts as 0).
        let ticks = self.clock.raw().saturating_sub(self.origin);
        let us = (u128::from(ticks) * u128::from(self.us_per_tick)) >> 64;
        self.wall_us.saturating_add(us as u64)
    }
}

impl Clock for CounterClock {
    #[inline]
    fn now_us(&self) -> u64 {
        self.read_us()
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
