//! A yardstick, not a limiter: the least an exact one-rule GCRA decision costs when it is built
//! from the crates the memory store is built from (foldhash, parking_lot shards of a hashbrown
//! table, the clock's raw ticks), with the library's exact integer step, but none of its layers.
//!
//! What it keeps of the library: a seeded hash of the limit's id and the subject's bytes, one
//! shard lock, the key compared whole, the state stored inline in the table (no node behind a
//! pointer), the bucket step in units of 1/count µs with 64-bit divisions where they fit, the
//! second-chance bit written only when it changes, and a permit that keeps what a refund needs
//! (the subject's bytes, the time, the headroom). What it leaves out: the request builder, tiers,
//! overrides, the refusal cache, metrics, eviction (never reached here: 1000 subjects), other
//! algorithms, and the decision's hand-offs from store to permit.
//!
//! It is measured like the library's cases (`memory::measure`, `BENCH_CASE=7`), so the distance
//! between the two is what the library's layers and data cost, and what a redesign can win.

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;
use parking_lot::Mutex;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;

/// A key inline: the limit's id (8 bytes) and up to 22 bytes of subject.
const KEY: usize = 30;

struct Entry {
    hash: u64,
    len: u8,
    used: bool,
    key: [u8; KEY],
    /// The instant the bucket is empty, `e + f / count` µs.
    e: u64,
    f: u64,
    expires: u64,
}

pub struct Floor {
    shards: Vec<CachePadded<Mutex<HashTable<Entry>>>>,
    mask: usize,
    hasher: foldhash::fast::RandomState,
    clock: quanta::Clock,
    origin: u64,
    /// µs per tick as a 64.64 fixed-point fraction, and the epoch µs at `origin`.
    us_per_tick: u64,
    base_us: u64,
    limit_id: u64,
    window_us: u64,
    count: u64,
}

/// A subject as `Subject::ip` keeps it: a tag and the address's bytes, inline.
#[derive(Clone, Copy)]
pub struct Ip {
    len: u8,
    bytes: [u8; 17],
}

impl Ip {
    #[inline]
    pub fn of(ip: IpAddr) -> Ip {
        let mut bytes = [0; 17];
        match ip {
            IpAddr::V4(v4) => {
                bytes[0] = 4;
                bytes[1..5].copy_from_slice(&v4.octets());
                Ip { len: 5, bytes }
            }
            IpAddr::V6(v6) => {
                bytes[0] = 6;
                bytes[1..].copy_from_slice(&v6.octets());
                Ip { len: 17, bytes }
            }
        }
    }
}

/// What an admitted call keeps: enough to read its quota and to give its units back.
pub struct Permit<'a> {
    pub floor: &'a Floor,
    pub cost: u64,
    pub remaining: u64,
    pub reset_us: u64,
    pub at_us: u64,
    pub subject: Ip,
}

pub struct Refused {
    pub retry_after_us: u64,
}

struct Step {
    allowed: bool,
    left: u64,
    wait: u64,
    e: u64,
    f: u64,
    ttl: u64,
}

#[inline(always)]
fn div_rem(a: u128, b: u128) -> (u128, u128) {
    match (u64::try_from(a), u64::try_from(b)) {
        (Ok(a), Ok(b)) if b != 0 => (u128::from(a / b), u128::from(a % b)),
        _ => (a / b, a % b),
    }
}

#[inline(always)]
fn div_ceil(a: u128, b: u128) -> u128 {
    let (q, r) = div_rem(a, b);
    q + u128::from(r != 0)
}

/// The library's bucket step (capacity = count), as arithmetic alone.
#[inline(always)]
fn bucket(now: u64, cost: u64, w: u64, count: u64, stored: Option<(u64, u64)>) -> Step {
    let (w, n) = (u128::from(w), u128::from(count));
    let now_n = u128::from(now) * n;
    let empty_n = stored.map_or(0, |(e, f)| u128::from(e) * n + u128::from(f));
    let after = empty_n.saturating_sub(now_n) + u128::from(cost) * w;
    let (q, r) = div_rem(after, n);
    let until_empty = (q + u128::from(r != 0)) as u64;
    let (e, f) = ((u128::from(now) + q) as u64, r as u64);
    let full = n * w;
    if after <= full {
        let left = count - div_ceil(after, w) as u64;
        return Step { allowed: true, left, wait: until_empty, e, f, ttl: until_empty };
    }
    Step { allowed: false, left: 0, wait: div_ceil(after - full, n) as u64, e, f, ttl: until_empty }
}

impl Floor {
    /// One rule of `count` calls per `window_us`.
    pub fn new(window_us: u64, count: u64) -> Floor {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        // Calibrated once, as the library's clock is: raw ticks over a short sleep.
        let (t0, c0) = (std::time::Instant::now(), clock.raw());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (us, ticks) = (t0.elapsed().as_micros(), clock.raw().saturating_sub(c0).max(1));
        let us_per_tick = u64::try_from((us << 64) / u128::from(ticks)).unwrap_or(u64::MAX);
        let base_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let shards = (0..64).map(|_| CachePadded::new(Mutex::new(HashTable::new()))).collect();
        Floor {
            shards,
            mask: 63,
            hasher: foldhash::fast::RandomState::default(),
            clock,
            origin,
            us_per_tick,
            base_us,
            limit_id: 7,
            window_us,
            count,
        }
    }

    #[inline(always)]
    fn now_us(&self) -> u64 {
        let ticks = self.clock.raw().saturating_sub(self.origin);
        self.base_us + ((u128::from(ticks) * u128::from(self.us_per_tick)) >> 64) as u64
    }

    /// Decides a call of `cost` for `ip`.
    #[inline(never)]
    pub fn check(&self, ip: &[Ip], cost: u64) -> Result<Permit<'_>, Box<Refused>> {
        let [subject] = ip else { return Err(Box::new(Refused { retry_after_us: 0 })) };
        let (step, now) = self.decide(&subject.bytes[..usize::from(subject.len)], cost);
        if step.allowed {
            Ok(Permit { floor: self, cost, remaining: step.left, reset_us: step.wait, at_us: now, subject: *subject })
        } else {
            Err(Box::new(Refused { retry_after_us: step.wait }))
        }
    }

    #[inline(never)]
    fn decide(&self, subject: &[u8], cost: u64) -> (Step, u64) {
        let mut h = self.hasher.build_hasher();
        h.write_u64(self.limit_id);
        h.write(subject);
        let hash = h.finish();
        let mut key = [0u8; KEY];
        let len = 8 + subject.len().min(KEY - 8);
        key[..8].copy_from_slice(&self.limit_id.to_le_bytes());
        key[8..len].copy_from_slice(&subject[..len - 8]);
        let now = self.now_us();
        let mut shard = self.shards[(hash >> 32) as usize & self.mask].lock();
        let len = len as u8;
        match shard.find_mut(hash, |e| e.hash == hash && e.len == len && e.key == key) {
            Some(entry) => {
                if !entry.used {
                    entry.used = true;
                }
                let stored = (entry.expires > now).then_some((entry.e, entry.f));
                let s = bucket(now, cost, self.window_us, self.count, stored);
                if s.allowed {
                    (entry.e, entry.f, entry.expires) = (s.e, s.f, now + s.ttl);
                }
                (s, now)
            }
            None => {
                let s = bucket(now, cost, self.window_us, self.count, None);
                if s.allowed {
                    let entry = Entry { hash, len, used: false, key, e: s.e, f: s.f, expires: now + s.ttl };
                    shard.insert_unique(hash, entry, |e| e.hash);
                }
                (s, now)
            }
        }
    }
}
