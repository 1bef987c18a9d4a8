//! A limiter's decision counts, kept per thread and handed to the recorder off the hot path.
//!
//! Why: a recorder's counter is one value shared by every thread, so each increment is a locked
//! read-modify-write, and the Prometheus exporter's is two (the value, and a generation it keeps
//! for idle expiry): about 10 ns, 7% of an in-memory decision. Here each thread owns one cache
//! line of counts per limiter and bumps it with a plain load and store. Nothing is lost: a
//! thread's counts stay in its line after it exits (the next thread to take its slot goes on
//! from them), and a flush adds what every line gained since the last flush to the recorder's
//! counters. Flushes run every [`FLUSH_EVERY`] on a background thread, on [`flush`], and when
//! the limiter is dropped, so a scrape lags the decisions by at most [`FLUSH_EVERY`], or not at
//! all when the scrape handler calls [`flush`] first.
//!
//! Threads past [`slots`] (more than four per core), and calls made while a thread's locals are
//! being torn down, count straight into the recorder's counters: exact, only slower.

use crate::rt::lock::lock;
use metrics::Counter;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// How often the background thread hands the counts to the recorder.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Counts per limiter: one per outcome, and the local denials.
pub(crate) const COUNTS: usize = 8;

/// One thread's counts of one limiter: exactly one cache line, so that two threads never write
/// the same line.
#[repr(align(64))]
#[derive(Default)]
struct Line([AtomicU64; COUNTS]);

/// Per-thread counts of one limiter, and the recorder's counters they are flushed to.
pub(crate) struct Tally {
    lines: Box<[Line]>,
    counters: [Counter; COUNTS],
    /// What the counters were last given, per count (the lock also keeps flushes apart).
    flushed: Mutex<[u64; COUNTS]>,
}

impl Tally {
    /// A tally over `counters`, flushed every [`FLUSH_EVERY`] from now on.
    pub(crate) fn new(counters: [Counter; COUNTS]) -> Arc<Tally> {
        let lines = (0..slots()).map(|_| Line::default()).collect();
        let tally = Arc::new(Tally { lines, counters, flushed: Mutex::new([0; COUNTS]) });
        live().lock_push(Arc::downgrade(&tally));
        tally
    }

    /// Counts one event of kind `i` (< [`COUNTS`]).
    #[inline]
    pub(crate) fn add(&self, i: usize) {
        match self.lines.get(slot()).and_then(|line| line.0.get(i)) {
            // Only this thread writes this line, so a load and a store lose nothing; the flusher
            // only reads it.
            Some(count) => count.store(count.load(Relaxed) + 1, Relaxed),
            None => self.cold_add(i),
        }
    }

    #[cold]
    #[inline(never)]
    fn cold_add(&self, i: usize) {
        if let Some(counter) = self.counters.get(i) {
            counter.increment(1);
        }
    }

    /// Gives the recorder's counters what the lines gained since the last flush.
    pub(crate) fn flush(&self) {
        let mut flushed = lock(&self.flushed);
        for (i, (counter, last)) in self.counters.iter().zip(flushed.iter_mut()).enumerate() {
            // Each line only grows, so the sum read now is at least the one read last time.
            let sum: u64 = self.lines.iter().map(|line| line.0[i].load(Relaxed)).sum();
            if sum > *last {
                counter.increment(sum - *last);
                *last = sum;
            }
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Hands every live limiter's counts to the recorder now. Call it before rendering a scrape to
/// see every decision made so far; without it, a decision is seen within [`FLUSH_EVERY`].
pub fn flush() {
    // No tally yet (no recorder, or no limiter built under one): nothing to hand over, and no
    // flusher thread to start.
    if let Some(live) = LIVE.get() {
        for tally in live.snapshot() {
            tally.flush();
        }
    }
}

/// The live tallies, for the flushes.
struct Live(Mutex<Vec<Weak<Tally>>>);

impl Live {
    fn lock_push(&self, tally: Weak<Tally>) {
        lock(&self.0).push(tally);
    }

    /// The tallies still alive (the dead ones are forgotten).
    fn snapshot(&self) -> Vec<Arc<Tally>> {
        let mut all = lock(&self.0);
        all.retain(|t| t.strong_count() > 0);
        all.iter().filter_map(Weak::upgrade).collect()
    }
}

/// The live tallies, once a tally was built.
static LIVE: OnceLock<Live> = OnceLock::new();

/// The live tallies; the first use starts the background flusher.
fn live() -> &'static Live {
    LIVE.get_or_init(|| {
        // If no thread can be started, flushes still happen on `flush` and on drop.
        let started = std::thread::Builder::new().name("ratelimit-metrics".into()).spawn(|| loop {
            std::thread::sleep(FLUSH_EVERY);
            flush();
        });
        if let Err(e) = started {
            tracing::warn!(error = %e, "ratelimit: no metrics flusher thread; counts reach the recorder on flush() only");
        }
        Live(Mutex::new(Vec::new()))
    })
}

/// How many threads get their own line: four per core, at least 8, at most 256.
fn slots() -> usize {
    static SLOTS: OnceLock<usize> = OnceLock::new();
    *SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        cores.saturating_mul(4).clamp(8, 256)
    })
}

/// The slot of the current thread, or `usize::MAX` when it has none.
#[inline(always)]
fn slot() -> usize {
    SLOT.try_with(|s| s.0).unwrap_or(usize::MAX)
}

thread_local! {
    static SLOT: Slot = Slot::claim();
}

/// A thread's claim on a slot, given back when the thread exits.
struct Slot(usize);

/// Slots given back by exited threads.
static FREE: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// Slots never claimed start here.
static NEXT: AtomicUsize = AtomicUsize::new(0);

impl Slot {
    fn claim() -> Slot {
        if let Some(s) = lock(&FREE).pop() {
            return Slot(s);
        }
        let s = NEXT.fetch_add(1, Relaxed);
        // Past the last slot, for good (NEXT only grows): this thread counts straight to the
        // recorder.
        Slot(if s < slots() { s } else { usize::MAX })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The lines keep this thread's counts; the lock orders its last writes before the next
        // owner's first.
        if self.0 != usize::MAX {
            lock(&FREE).push(self.0);
        }
    }
}
