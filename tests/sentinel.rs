//! The Sentinel store on a real primary, replica and sentinel: decisions follow a failover (the
//! primary killed during traffic, or demoted by `SENTINEL FAILOVER`) without a restart.

mod support;

use ratelimit::{
    store::SentinelSpec, store::SentinelStore, store::StoreHandle, Cause, FailurePolicy, Limit, LimitType, Limiter,
    Rule, Subject,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::sentinel::{cli, SentinelSet, MASTER};

fn store(set: &SentinelSet, timeout: Duration) -> StoreHandle {
    Arc::new(SentinelStore::open(&SentinelSpec::new([set.sentinel_url()], MASTER), timeout).unwrap())
}

fn limiter(name: &str, count: u64, policy: FailurePolicy, store: &StoreHandle) -> Limiter {
    Limiter::builder(name)
        .limit(Limit::new(LimitType::Key, [Rule::from_millis(600_000, count).unwrap()]))
        .on_error(policy)
        .store(store.clone())
        .build()
        .unwrap()
}

/// The members of the sliding window's ZSET of `limiter` for the subject `hot`, on `port`.
fn recorded(port: u16, limiter: &str) -> u64 {
    let keys = cli(port, &["KEYS", &format!("*{limiter}*")]).unwrap_or_default();
    let key = keys.lines().next().unwrap_or_else(|| panic!("no key of {limiter} on port {port}"));
    cli(port, &["ZCARD", key]).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

/// Decides until one is made by the store (not failed open), within `limit`.
async fn until_decided(limiter: &Limiter, subject: &[Subject<'_>], limit: Duration) {
    support::poll_until_async(limit, Duration::from_millis(20), "no decision by the store", || async {
        limiter.check(subject).await.expect("fail open").quota().map(|_| ())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_resume_on_the_promoted_replica_after_the_primary_dies() {
    let mut set = SentinelSet::start();
    let timeout = Duration::from_millis(250);
    let store = store(&set, timeout);
    assert!(store.describe().contains("sentinel") && store.describe().contains(MASTER), "{}", store.describe());
    let open = limiter("sn::open", 1_000_000, FailurePolicy::Allow, &store);
    let closed = limiter("sn::closed", 1_000_000, FailurePolicy::Deny, &store);
    let exact = limiter("sn::exact", 30, FailurePolicy::Deny, &store);
    let hot = [Subject::bytes(&b"hot"[..])];

    until_decided(&open, &hot, Duration::from_secs(10)).await;
    for _ in 0..10 {
        assert!(exact.check(&hot).await.is_ok());
    }
    let old = set.first_primary();
    assert_eq!(set.primary_port(), Some(old));
    assert_eq!(recorded(old, "sn::exact"), 10);
    set.sync_replica(old);

    set.kill(old);
    let killed = Instant::now();
    // Traffic through the failover: fail-open calls proceed, fail-closed calls are refused as
    // store-unavailable. (How long a call takes meanwhile is the benchmark harness's to
    // measure; the slowest is printed.)
    let mut slowest = Duration::ZERO;
    let mut refused = 0;
    let mut promoted_at = None;
    let resumed_at = loop {
        let t = Instant::now();
        let permit = open.check(&hot).await.expect("fail open lets the call through");
        match closed.check(&hot).await {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.cause(), Cause::StoreUnavailable, "{e}");
                refused += 1;
            }
        }
        slowest = slowest.max(t.elapsed());
        if promoted_at.is_none() && set.primary_port().is_some_and(|p| p != old) {
            promoted_at = Some(Instant::now());
        }
        if permit.quota().is_some() {
            break Instant::now();
        }
        assert!(killed.elapsed() < Duration::from_secs(30), "decisions did not resume within 30s of the kill");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(refused > 0, "the fail-closed limiter never saw the store down");
    let new = set.wait_for_new_primary(old, Duration::from_secs(30));
    assert_eq!(new, set.first_replica());
    let promoted_at = promoted_at.unwrap_or(resumed_at);
    let lag = resumed_at.saturating_duration_since(promoted_at);
    assert!(lag < Duration::from_secs(5), "decisions resumed {lag:?} after the promotion");
    eprintln!(
        "sentinel failover: decisions resumed {:?} after the kill, {lag:?} after the sentinel named the new primary; \
         slowest call {slowest:?}; {refused} fail-closed refusals",
        resumed_at - killed
    );

    // Counting continues on the new primary: the 10 recorded before the kill are there, and
    // the limit of 30 admits exactly 20 more.
    assert_eq!(recorded(new, "sn::exact"), 10);
    let mut admitted = 0;
    for _ in 0..25 {
        admitted += usize::from(exact.check(&hot).await.is_ok());
    }
    assert_eq!(admitted, 20);
    assert_eq!(recorded(new, "sn::exact"), 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_primary_is_left_when_the_sentinel_names_another() {
    // A stopped primary closes nothing: calls time out until the store's check of the sentinel
    // sees the promotion.
    let mut set = SentinelSet::start();
    let timeout = Duration::from_millis(250);
    let store = store(&set, timeout);
    let open = limiter("sn::hung", 1_000_000, FailurePolicy::Allow, &store);
    let hot = [Subject::bytes(&b"hot"[..])];
    until_decided(&open, &hot, Duration::from_secs(10)).await;
    let old = set.first_primary();
    set.sync_replica(old);
    set.pause(old);
    let paused = Instant::now();
    let mut slowest = Duration::ZERO;
    loop {
        let t = Instant::now();
        let decided = open.check(&hot).await.expect("fail open").quota().is_some();
        slowest = slowest.max(t.elapsed());
        if decided && paused.elapsed() > timeout {
            break;
        }
        assert!(paused.elapsed() < Duration::from_secs(30), "decisions did not resume within 30s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let new = set.wait_for_new_primary(old, Duration::from_secs(1));
    assert_eq!(new, set.first_replica());
    assert!(recorded(new, "sn::hung") >= 2);
    eprintln!("hung primary: decisions resumed {:?} after SIGSTOP; slowest call {slowest:?}", paused.elapsed());
    set.kill(old);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_is_left_for_the_new_one() {
    // `SENTINEL FAILOVER` keeps the old primary alive and turns it into a replica (the sentinel
    // also closes its clients' connections, `CLIENT KILL TYPE normal`): no call must fail once
    // it is demoted, the store moving to the new primary within the call.
    let set = SentinelSet::start();
    let store = store(&set, Duration::from_secs(2));
    let counted = limiter("sn::manual", 1_000_000, FailurePolicy::Deny, &store);
    let hot = [Subject::bytes(&b"hot"[..])];
    let deadline = Instant::now() + Duration::from_secs(10);
    while counted.check(&hot).await.is_err() {
        assert!(Instant::now() < deadline, "no decision before the failover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let old = set.first_primary();
    set.sync_replica(old);
    // The sentinel refuses (NOGOODSLAVE) until it has talked to the replica itself.
    let deadline = Instant::now() + Duration::from_secs(30);
    while cli(set.sentinel_port(), &["SENTINEL", "FAILOVER", MASTER]).is_none_or(|r| r.trim() != "OK") {
        assert!(Instant::now() < deadline, "the sentinel would not fail over");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Traffic through the switch, until the old primary is a replica and a call has succeeded
    // after that.
    let started = Instant::now();
    let (mut demoted_at, mut failures, mut calls) = (None, 0, 0);
    loop {
        calls += 1;
        let outcome = counted.check(&hot).await;
        if let Err(e) = &outcome {
            assert_eq!(e.cause(), Cause::StoreUnavailable, "{e}");
        }
        if demoted_at.is_some() {
            if outcome.is_ok() {
                break;
            }
            failures += 1;
        } else if cli(old, &["ROLE"]).is_some_and(|r| r.starts_with("slave")) {
            demoted_at = Some(Instant::now());
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no recovery within 30s of SENTINEL FAILOVER");
        if let Some(t) = demoted_at {
            assert!(t.elapsed() < Duration::from_secs(5), "still failing {:?} after the demotion", t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let new = set.wait_for_new_primary(old, Duration::from_secs(5));
    eprintln!("manual failover: {calls} calls, {failures} failed after the demotion");
    assert_eq!(failures, 0, "calls failed after the demotion");
    // And every later call is decided on the new primary.
    for _ in 0..20 {
        assert!(counted.check(&hot).await.is_ok());
    }
    let on_new = recorded(new, "sn::manual");
    assert!(on_new >= 21, "{on_new} entries on the new primary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_of_the_sentinel_and_the_data_nodes() {
    let (data_pw, sentinel_pw) = ("data-Secret-71", "sentinel-Secret-93");
    let set = SentinelSet::start_with(Some(data_pw), Some(sentinel_pw));
    let hot = [Subject::bytes(&b"hot"[..])];
    let timeout = Duration::from_millis(500);
    let open = |spec: SentinelSpec| -> StoreHandle { Arc::new(SentinelStore::open(&spec, timeout).unwrap()) };

    // Both passwords right: decisions are made.
    let good = open(SentinelSpec::new([set.sentinel_url()], MASTER).primary_auth(None, data_pw));
    assert!(!good.describe().contains("Secret"), "{}", good.describe());
    let counted = limiter("sn::auth", 100, FailurePolicy::Allow, &good);
    until_decided(&counted, &hot, Duration::from_secs(10)).await;
    assert_eq!(
        set.node_cli(set.first_primary(), &["ZCARD", "rate_limit:{sn::auth|key|hot}:sw:10mx100"])
            .map(|n| n.trim().to_owned()),
        Some("1".to_owned())
    );

    // A missing password is the store's own words in the error, and no password is shown.
    let refusal = |store: StoreHandle| async move {
        let limiter = limiter("sn::auth_missing", 100, FailurePolicy::Deny, &store);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let e = limiter.check(&[Subject::bytes(&b"hot"[..])]).await.expect_err("no password, no decision");
            let source = std::error::Error::source(&e).map(ToString::to_string).unwrap_or_default();
            // The first calls may see the background lookup still running.
            if !source.contains("did not answer") || Instant::now() > deadline {
                return source;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let no_data_pw = refusal(open(SentinelSpec::new([set.sentinel_url()], MASTER))).await;
    assert!(no_data_pw.contains("NOAUTH") || no_data_pw.contains("Authentication"), "{no_data_pw}");
    let no_sentinel_pw = format!("redis://127.0.0.1:{}", set.sentinel_port());
    let no_sentinel_pw = refusal(open(SentinelSpec::new([no_sentinel_pw], MASTER).primary_auth(None, data_pw))).await;
    assert!(no_sentinel_pw.contains("NOAUTH") || no_sentinel_pw.contains("Authentication"), "{no_sentinel_pw}");
    eprintln!("without the primary's password: {no_data_pw}\nwithout the sentinel's: {no_sentinel_pw}");
    for shown in [&no_data_pw, &no_sentinel_pw] {
        assert!(!shown.contains("Secret"), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peek_and_reset_reach_the_primary() {
    let set = SentinelSet::start();
    let store = store(&set, Duration::from_secs(2));
    let exact = limiter("sn::admin", 5, FailurePolicy::Deny, &store);
    let hot = [Subject::bytes(&b"hot"[..])];
    until_decided(&exact, &hot, Duration::from_secs(10)).await;
    for _ in 0..4 {
        assert!(exact.check(&hot).await.is_ok());
    }
    assert!(exact.check(&hot).await.is_err(), "the budget of 5 is spent");
    let status = exact.peek(&hot).await.expect("peek through the sentinel");
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].remaining, 0);
    exact.reset(&hot).await.expect("reset through the sentinel");
    assert_eq!(exact.peek(&hot).await.expect("peek").first().map(|s| s.remaining), Some(5));
    assert!(exact.check(&hot).await.is_ok(), "a reset gives the whole budget back");
}

/// Concurrent calls through the sentinel are coalesced on the primary as on one Redis: 64 tasks
/// of 20 calls on one key with a budget of 500 a day (sliding window), and on a Gcra key (a unit
/// every 172.8 s: none comes back during the test, however slow the machine), admit exactly 500
/// each, every remaining value once, in fewer script runs than half the calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_are_coalesced_on_the_primary() {
    let set = SentinelSet::start();
    let store = store(&set, Duration::from_secs(5));
    let warm = limiter("sn::warm", 1_000_000, FailurePolicy::Deny, &store);
    until_decided(&warm, &[Subject::bytes(&b"hot"[..])], Duration::from_secs(10)).await;
    let primary = set.primary_port().expect("a primary");
    for algorithm in [ratelimit::Algorithm::SlidingWindow, ratelimit::Algorithm::Gcra] {
        let limiter = Arc::new(
            Limiter::builder(format!("sn::batch::{algorithm:?}"))
                .limit(
                    Limit::new(LimitType::Global, [Rule::from_millis(86_400_000, 500).unwrap()])
                        .algorithm(algorithm)
                        .prefix("rl:"),
                )
                .on_error(FailurePolicy::Deny)
                .refusal_cache(false)
                .store(store.clone())
                .build()
                .unwrap(),
        );
        support::reset_stats(&mut support::connect(primary));
        let remaining = support::remaining_of_concurrent_calls(&limiter, None).await;
        assert_eq!(remaining, (0..500).collect::<Vec<u64>>(), "{algorithm:?}");
        let runs = support::command_calls(&mut support::connect(primary), "evalsha") as usize;
        let calls = support::TASKS * support::CALLS;
        assert!(runs * 2 < calls, "{algorithm:?}: {runs} script runs for {calls} calls");
    }
}

/// The local refusal cache is on for the Sentinel store, as for any remote store: one client
/// refused 400 times (a limit of 1 per minute) costs the primary a handful of script runs, not
/// one per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_answered_locally_without_the_primary() {
    let set = SentinelSet::start();
    let store = store(&set, Duration::from_secs(2));
    let warm = limiter("sn::refusals_warm", 1_000_000, FailurePolicy::Deny, &store);
    let once = limiter("sn::refusals", 1, FailurePolicy::Deny, &store);
    let client = [Subject::bytes(&b"client"[..])];
    until_decided(&warm, &client, Duration::from_secs(10)).await;
    let primary = set.primary_port().expect("a primary");
    support::reset_stats(&mut support::connect(primary));
    assert!(once.check(&client).await.is_ok(), "the first call has room");
    for _ in 0..400 {
        let refused = once.check(&client).await.expect_err("one call per minute");
        assert_eq!(refused.cause(), Cause::Exceeded, "{refused}");
        assert!(refused.retry_after() > Duration::from_secs(50), "{:?}", refused.retry_after());
    }
    let runs = support::command_calls(&mut support::connect(primary), "evalsha");
    eprintln!("1 admitted and 400 refused calls through the sentinel: {runs} script runs on the primary");
    assert!(runs <= 3, "{runs} script runs for 1 admitted and 400 refused calls");
}
