//! The memory store's bound on keys: never more than it, a subject not used since it was placed
//! forgotten first (the oldest such), and a subject that keeps calling (refused or not) never the one forgotten.
//! All on a manual clock: nothing here waits.

use ratelimit::clock::ManualClock;
use ratelimit::store::{MemoryStore, DEFAULT_MAX_KEYS};
use ratelimit::{Cause, Limit, LimitType, Limiter, Rule, Subject};
use std::sync::Arc;
use std::time::Duration;

const T0: u64 = 1_000_000_000_000;

fn user(s: &str) -> Subject<'static> {
    Subject::bytes(s.as_bytes().to_vec())
}

/// One call per subject per minute, on a store of at most `max_keys` keys.
fn one_a_minute(name: &str, max_keys: usize) -> (Limiter, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::with_clock(Arc::new(ManualClock::new(T0))).max_keys(max_keys));
    let limiter = Limiter::builder(name)
        .limit(Limit::new(LimitType::User, [Rule::new(Duration::from_secs(60), 1).expect("a valid rule")]))
        .store(store.clone())
        .build()
        .expect("a valid limiter");
    (limiter, store)
}

fn admitted(limiter: &Limiter, who: &str) -> bool {
    limiter.check(&[user(who)]).blocking().is_ok()
}

/// Below 2048 keys the store is one table: the oldest key not used since it was placed goes
/// first; a key used since goes to the back instead (a second chance).
#[test]
fn a_full_store_forgets_the_least_recently_used_subject() {
    let (limiter, store) = one_a_minute("bound::lru", 100);
    for i in 0..100 {
        assert!(admitted(&limiter, &format!("u{i}")));
    }
    assert_eq!(store.len(), 100);
    // u0 calls again (refused: its minute is not over): now u1 is the oldest not used since.
    assert!(!admitted(&limiter, "u0"));
    assert!(admitted(&limiter, "new"));
    assert_eq!(store.len(), 100, "the bound holds");
    assert!(admitted(&limiter, "u1"), "u1 was forgotten: it starts afresh");
    assert!(!admitted(&limiter, "u0"), "u0 called since: it keeps its count");
    for i in 3..100 {
        assert!(!admitted(&limiter, &format!("u{i}")), "u{i} was colder than nothing forgotten yet");
    }
}

/// A flood of ten times the bound in new subjects: the store never holds more than the bound,
/// and a subject refused all along stays refused, however many colder ones come and go.
#[test]
fn a_refused_subject_stays_refused_through_a_flood() {
    let (limiter, store) = one_a_minute("bound::flood", 1000);
    assert!(admitted(&limiter, "hammer"));
    for i in 0..10_000 {
        assert!(admitted(&limiter, &format!("flood-{i}")), "flood-{i} is new");
        if i % 100 == 0 {
            let e = limiter.check(&[user("hammer")]).blocking().unwrap_err();
            assert_eq!(e.cause(), Cause::Exceeded, "{e}");
            assert!(store.len() <= 1000, "{} keys held", store.len());
        }
    }
    assert_eq!(store.len(), 1000);
}

/// Sharded (a bound of 64 × 1024 keys and more): each shard forgets its own least recently
/// used, so a subject calling once per 500 new subjects (about 8 per shard) is never forgotten.
#[test]
fn a_sharded_store_keeps_the_subjects_that_keep_calling() {
    let (limiter, store) = one_a_minute("bound::sharded", 65_536);
    let hot: Vec<String> = (0..50).map(|i| format!("hot-{i}")).collect();
    for h in &hot {
        assert!(admitted(&limiter, h));
    }
    for i in 0..200_000 {
        let _ = admitted(&limiter, &format!("flood-{i}"));
        if i % 500 == 0 {
            for h in &hot {
                assert!(!admitted(&limiter, h), "{h} was forgotten at flood-{i}");
            }
        }
    }
    assert_eq!(store.len(), 65_536);
}

/// A penalty (`block`) is a key too, and a blocked subject that keeps calling keeps it.
#[test]
fn a_blocked_subject_stays_blocked_through_a_flood() {
    let store = Arc::new(MemoryStore::with_clock(Arc::new(ManualClock::new(T0))).max_keys(500));
    let limiter = Limiter::builder("bound::block")
        .limit(
            Limit::new(LimitType::User, [Rule::new(Duration::from_secs(60), 1).expect("a valid rule")])
                .block(Duration::from_secs(3600)),
        )
        .store(store.clone())
        .build()
        .expect("a valid limiter");
    assert!(admitted(&limiter, "attacker"));
    assert!(!admitted(&limiter, "attacker"), "refused: the block starts");
    for i in 0..5_000 {
        let _ = admitted(&limiter, &format!("flood-{i}"));
        if i % 50 == 0 {
            let e = limiter.check(&[user("attacker")]).blocking().unwrap_err();
            assert!(e.retry_after() > Duration::from_secs(3000), "still blocked at flood-{i}: {e}");
        }
    }
    assert!(store.len() <= 500);
}

/// `MemoryStore::new()` holds `DEFAULT_MAX_KEYS`: half as many again new subjects fill every
/// shard (each holds its share of the bound).
#[test]
fn the_default_bound_holds() {
    let store = Arc::new(MemoryStore::new());
    let limiter = Limiter::builder("bound::default")
        .limit(Limit::new(LimitType::User, [Rule::new(Duration::from_secs(3600), 1).expect("a valid rule")]))
        .store(store.clone())
        .build()
        .expect("a valid limiter");
    for i in 0..DEFAULT_MAX_KEYS * 3 / 2 {
        if let Err(e) = limiter.check(&[user(&i.to_string())]).blocking() {
            panic!("subject {i} is new: {e} ({:?})", e.cause());
        }
    }
    assert_eq!(store.len(), DEFAULT_MAX_KEYS);
}
