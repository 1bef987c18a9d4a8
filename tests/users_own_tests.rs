//! How an application tests its own rate-limited functions: the memory store on a
//! `ManualClock` that the test moves forward, so a "wait 15 minutes" takes no time and every
//! retry-after is exact. Copy this file's `clock()` helper into your tests; docs/testing.md
//! explains it.

use ratelimit::clock::ManualClock;
use ratelimit::context::{self, RequestContext};
use ratelimit::store::MemoryStore;
use ratelimit::{rate_limiter, Cause, Config, RateLimited};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{Mutex, MutexGuard};

// --- The code under test: in your crate, these are your own functions. ---

/// At most 5 failed logins per account per 15 minutes.
#[rate_limiter(type = Key, key = account, rules = [(15m, 5)])]
async fn record_failed_login(account: &str) -> Result<(), RateLimited> {
    Ok(())
}

/// A handler limited per client IP (the IP comes from the request context, as behind the HTTP
/// layer).
#[rate_limiter(type = Ip, rules = [(10s, 3), (1m, 5)])]
fn search(query: &str) -> Result<String, RateLimited> {
    Ok(format!("results for {query}"))
}

// --- Test support. ---

/// The process's clock, installed with the memory store on first use, before any limited call.
/// `ratelimit::init` can run once per process and every limiter reads the one global store, so
/// the tests of one binary share this clock: the returned guard keeps the tests that move it from
/// running at the same time (cargo runs tests on parallel threads). An async mutex: a test holds
/// its turn across its `.await`s.
async fn clock() -> (MutexGuard<'static, ()>, &'static ManualClock) {
    static CLOCK: OnceLock<Arc<ManualClock>> = OnceLock::new();
    static TURN: Mutex<()> = Mutex::const_new(());
    let clock = CLOCK.get_or_init(|| {
        // Any start works; a realistic one (2026-01-01) keeps logged times readable.
        let clock = Arc::new(ManualClock::new(1_767_225_600_000_000));
        let store = Arc::new(MemoryStore::with_clock(clock.clone()));
        ratelimit::init(Config::store(store)).expect("no limited call ran before the clock was installed");
        clock
    });
    (TURN.lock().await, clock)
}

#[tokio::test]
async fn a_locked_account_opens_again_after_fifteen_minutes() {
    let (_turn, clock) = clock().await;
    for _ in 0..5 {
        record_failed_login("ada@example.com").await.expect("5 failures are counted");
    }
    let refused = record_failed_login("ada@example.com").await.unwrap_err();
    assert_eq!(refused.cause(), Cause::Exceeded);
    // Exact: the oldest failure leaves the window 15 minutes after it was counted.
    assert_eq!(refused.retry_after(), Duration::from_secs(15 * 60));
    // Other accounts are counted apart.
    record_failed_login("bob@example.com").await.expect("another account");

    clock.advance(Duration::from_secs(15 * 60 - 1));
    assert!(record_failed_login("ada@example.com").await.is_err(), "one second early");
    clock.advance(Duration::from_secs(1));
    record_failed_login("ada@example.com").await.expect("open again after 15 minutes");
}

#[tokio::test]
async fn both_rules_of_a_handler() {
    let (_turn, clock) = clock().await;
    // The HTTP layer installs this for each request; a test installs it by hand.
    let client = RequestContext::new().with_ip("203.0.113.7".parse().unwrap());
    context::sync_scope(client, || {
        for _ in 0..3 {
            search("rust").expect("3 per 10 s");
        }
        let refused = search("rust").unwrap_err();
        assert_eq!(refused.retry_after(), Duration::from_secs(10));
        assert_eq!(refused.rule().unwrap().to_string(), "3 per 10s");

        clock.advance(Duration::from_secs(10));
        search("rust").expect("the 10 s window moved on");
        search("rust").expect("the 5th call of the minute");
        // The minute's rule refuses the 6th; its oldest call leaves 50 s from now.
        let refused = search("rust").unwrap_err();
        assert_eq!(refused.rule().unwrap().to_string(), "5 per 1m");
        assert_eq!(refused.retry_after(), Duration::from_secs(50));
    });
    // Without a request context there is no IP to count: refused, never counted on a shared key.
    assert_eq!(search("rust").unwrap_err().cause(), Cause::SubjectMissing);
}
