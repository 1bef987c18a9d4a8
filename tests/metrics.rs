//! Metrics, read back through a real Prometheus recorder and parsed from its text
//! format: decisions by outcome on memory and on a real Redis, store errors when Redis refuses
//! or dies, and never a subject (IP, user id) or a password in a label.
//!
//! One recorder per process (the `metrics` facade's global): every test of this binary shares
//! it, so each test uses limiters of its own names, and store-level figures are compared as
//! differences within the one test that uses that store.

#[path = "support/prometheus.rs"]
mod prometheus;
mod support;

use prometheus::{recorder, scrape, Scrape};
use ratelimit::{
    store::MemoryStore, store::RedisStore, store::StoreError, store::StoreHandle, Cause, FailurePolicy, Limit,
    LimitType, Limiter, Rule, Subject,
};
use std::sync::Arc;
use std::time::Duration;
use support::RedisServer;

const DECISIONS: &str = "ratelimit_decisions_total";
const ERRORS: &str = "ratelimit_store_errors_total";
const DURATION_COUNT: &str = "ratelimit_store_duration_seconds_count";

fn decisions(s: &Scrape, limiter: &str, outcome: &str) -> f64 {
    s.count(DECISIONS, &[("limiter", limiter), ("outcome", outcome)])
}

fn limiter(name: &str, limit_type: LimitType, count: u64, store: StoreHandle, on_error: FailurePolicy) -> Limiter {
    recorder();
    Limiter::builder(name)
        .limit(Limit::new(limit_type, [Rule::new(Duration::from_secs(60), count).expect("rule")]))
        .store(store)
        .on_error(on_error)
        .build()
        .expect("limiter")
}

/// No label of the scrape, nor any part of its text, holds one of `secrets`.
#[track_caller]
fn assert_nothing_leaks(secrets: &[&str]) {
    ratelimit::metrics::flush();
    let text = recorder().render();
    let s = Scrape::parse(&text).expect("parses");
    for (key, value) in s.label_values() {
        for secret in secrets {
            assert!(!value.contains(secret), "label {key}={value:?} holds {secret:?}");
        }
    }
    for secret in secrets {
        assert!(!text.contains(secret), "the scrape holds {secret:?}:\n{text}");
    }
}

#[test]
fn memory_decisions_are_counted_exactly() {
    let store: StoreHandle = Arc::new(MemoryStore::new());
    let ip = Subject::ip("198.51.100.77".parse().unwrap());
    let by_ip = limiter("metrics_test::memory_ip", LimitType::Ip, 5, store.clone(), FailurePolicy::Allow);
    let user = Subject::bytes(&b"alice-the-user"[..]);
    let by_user = limiter("metrics_test::memory_user", LimitType::User, 2, store, FailurePolicy::Allow);

    let before = scrape();
    let duration_before = before.count(DURATION_COUNT, &[("store", "memory")]);
    let results: Vec<bool> = (0..8).map(|_| by_ip.check(std::slice::from_ref(&ip)).blocking().is_ok()).collect();
    assert_eq!(results, [true, true, true, true, true, false, false, false]);
    for _ in 0..3 {
        let _ = by_user.check(std::slice::from_ref(&user)).blocking();
    }
    let missing = by_user.check(&[Subject::missing()]).blocking().expect_err("no user");
    assert_eq!(missing.cause(), Cause::SubjectMissing);
    // Enough calls on this thread for the 1-in-256 timing sample to fire at least 4 times.
    for _ in 0..1024 {
        let _ = by_ip.check(std::slice::from_ref(&ip)).blocking();
    }

    let s = scrape();
    assert_eq!(s.types.get(DECISIONS).map(String::as_str), Some("counter"));
    assert_eq!(decisions(&s, "metrics_test::memory_ip", "allowed"), 5.0);
    assert_eq!(decisions(&s, "metrics_test::memory_ip", "denied"), 3.0 + 1024.0);
    assert_eq!(decisions(&s, "metrics_test::memory_user", "allowed"), 2.0);
    assert_eq!(decisions(&s, "metrics_test::memory_user", "denied"), 1.0);
    assert_eq!(decisions(&s, "metrics_test::memory_user", "subject_missing"), 1.0);
    for outcome in ["failed_open", "failed_closed", "exempt", "shadow_denied"] {
        assert_eq!(decisions(&s, "metrics_test::memory_ip", outcome), 0.0, "{outcome}");
    }
    assert_eq!(s.sum(DECISIONS, &[("limiter", "metrics_test::memory_ip")]), 1032.0, "no other outcome");
    assert_eq!(s.count("ratelimit_local_denials_total", &[("limiter", "metrics_test::memory_ip")]), 0.0);
    let timed = s.count(DURATION_COUNT, &[("store", "memory")]) - duration_before;
    assert!(timed >= 4.0, "memory store calls timed: {timed}");
    assert_eq!(s.sum(ERRORS, &[("store", "memory")]), 0.0);
    assert_nothing_leaks(&["198.51.100.77", "alice-the-user"]);
}

#[tokio::test]
async fn redis_decisions_latency_and_errors() {
    let mut redis = RedisServer::start();
    let timeout = Duration::from_millis(500);
    let store: StoreHandle = Arc::new(RedisStore::open(&redis.url(), timeout).expect("store"));
    let open = limiter("metrics_test::redis_open", LimitType::Ip, 4, store.clone(), FailurePolicy::Allow);
    let closed = limiter("metrics_test::redis_closed", LimitType::Global, 100, store, FailurePolicy::Deny);
    let ip = [Subject::ip("203.0.113.99".parse().unwrap())];

    let s0 = scrape();
    let mut allowed = 0;
    for _ in 0..6 {
        allowed += usize::from(open.check(&ip).await.is_ok());
    }
    assert_eq!(allowed, 4);
    closed.check(&[Subject::global()]).await.expect("room");
    let s1 = scrape();
    assert_eq!(decisions(&s1, "metrics_test::redis_open", "allowed"), 4.0);
    assert_eq!(decisions(&s1, "metrics_test::redis_open", "denied"), 2.0);
    assert_eq!(decisions(&s1, "metrics_test::redis_closed", "allowed"), 1.0);
    let calls = s1.count(DURATION_COUNT, &[("store", "redis")]) - s0.count(DURATION_COUNT, &[("store", "redis")]);
    // The 6th call is answered by the local refusal cache (on by default for Redis): a denial
    // counted as such and as a local one, with no store call.
    assert_eq!(s1.count("ratelimit_local_denials_total", &[("limiter", "metrics_test::redis_open")]), 1.0);
    assert_eq!(calls, 6.0, "every Redis call is timed, and only those");
    assert_eq!(s1.sum(ERRORS, &[("store", "redis")]), s0.sum(ERRORS, &[("store", "redis")]), "no error yet");

    // A Redis that now wants a password: a store that connects without one is refused (NOAUTH),
    // one with a wrong password too; both count as `auth`, and the password shows nowhere.
    let mut admin = redis.client();
    redis::cmd("CONFIG").arg("SET").arg("requirepass").arg("s3cret-pw").exec(&mut admin).expect("requirepass");
    let no_pw: StoreHandle = Arc::new(RedisStore::open(&redis.url(), timeout).expect("store"));
    let wrong_url = format!("redis://:hunter2-pw@127.0.0.1:{}/", redis.port());
    let wrong_pw: StoreHandle = Arc::new(RedisStore::open(&wrong_url, timeout).expect("store"));
    let no_pw = limiter("metrics_test::redis_no_pw", LimitType::Global, 100, no_pw, FailurePolicy::Allow);
    let wrong_pw = limiter("metrics_test::redis_wrong_pw", LimitType::Global, 100, wrong_pw, FailurePolicy::Allow);
    let auth = |s: &Scrape| s.count(ERRORS, &[("store", "redis"), ("kind", "auth")]);
    let all = |s: &Scrape| s.sum(ERRORS, &[("store", "redis")]);
    for _ in 0..2 {
        let permit = wrong_pw.check(&[Subject::global()]).await.expect("fail open");
        assert!(permit.quota().is_none(), "let through unchecked");
    }
    let s2 = scrape();
    assert_eq!(decisions(&s2, "metrics_test::redis_wrong_pw", "failed_open"), 2.0);
    assert_eq!((auth(&s2) - auth(&s1), all(&s2) - all(&s1)), (2.0, 2.0), "a wrong password is an auth error");
    // Without AUTH, Redis answers a long command with "unauthenticated multibulk length" and
    // closes the connection (the next call may find it broken: a connection error).
    for _ in 0..2 {
        no_pw.check(&[Subject::global()]).await.expect("fail open");
    }
    let s2b = scrape();
    assert_eq!(decisions(&s2b, "metrics_test::redis_no_pw", "failed_open"), 2.0);
    assert!(auth(&s2b) - auth(&s2) >= 1.0, "no password: {:?}", s2b.matching(ERRORS, &[]).collect::<Vec<_>>());
    assert_eq!(all(&s2b) - all(&s2), 2.0);
    let s2 = s2b;
    assert_nothing_leaks(&["s3cret-pw", "hunter2-pw", "203.0.113.99"]);

    // A hung Redis (SIGSTOP): the call gives up at the timeout; the error is a `Timeout`, and
    // its metric's kind comes from that variant.
    redis::cmd("CONFIG").arg("SET").arg("requirepass").arg("").exec(&mut admin).expect("no password");
    closed.check(&[Subject::global()]).await.expect("room");
    redis.pause();
    let e = closed.check(&[Subject::global()]).await.expect_err("fail closed");
    redis.resume();
    let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<StoreError>());
    assert!(matches!(source, Some(StoreError::Timeout { .. })), "{source:?}");
    let s2c = scrape();
    let kind = |s: &Scrape, k: &str| s.count(ERRORS, &[("store", "redis"), ("kind", k)]);
    assert_eq!((kind(&s2c, "timeout") - kind(&s2, "timeout"), all(&s2c) - all(&s2)), (1.0, 1.0));
    let s2 = s2c;

    // The limiter's log replaced by a string: the script fails (`WRONGTYPE`), a `Script` error.
    let keys: Vec<Vec<u8>> =
        redis::cmd("KEYS").arg("*metrics_test::redis_closed*").query(&mut admin).expect("the limiter's keys");
    assert_eq!(keys.len(), 1, "one log");
    let saved: Vec<u8> = redis::cmd("DUMP").arg(&keys[0]).query(&mut admin).expect("dump");
    redis::cmd("SET").arg(&keys[0]).arg("not a log").exec(&mut admin).expect("set");
    let e = closed.check(&[Subject::global()]).await.expect_err("fail closed");
    redis::cmd("RESTORE").arg(&keys[0]).arg(0).arg(saved).arg("REPLACE").exec(&mut admin).expect("restore");
    let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<StoreError>());
    assert!(matches!(source, Some(StoreError::Script { .. })), "{source:?}");
    let s2d = scrape();
    assert_eq!((kind(&s2d, "script") - kind(&s2, "script"), all(&s2d) - all(&s2)), (1.0, 1.0));

    // Nothing listens on the port: a `Connection` error.
    let closed_port = format!("redis://127.0.0.1:{}/", support::free_port());
    let nowhere: StoreHandle = Arc::new(RedisStore::open(&closed_port, timeout).expect("store"));
    let nowhere = limiter("metrics_test::closed_port", LimitType::Global, 100, nowhere, FailurePolicy::Deny);
    let e = nowhere.check(&[Subject::global()]).await.expect_err("fail closed");
    let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<StoreError>());
    assert!(matches!(source, Some(StoreError::Connection { .. })), "{source:?}");
    let s2e = scrape();
    assert_eq!((kind(&s2e, "connection") - kind(&s2d, "connection"), all(&s2e) - all(&s2d)), (1.0, 1.0));
    let s2 = s2e;

    // Redis killed: the fail-open limiter lets calls through, the fail-closed one refuses them;
    // each failed call is one store error (connection refused, or the timeout), until the third
    // in a row opens the store's circuit breaker: the next calls get the policy without a store
    // call, so no error and no duration of theirs is counted.
    redis.kill();
    // Another IP: the first one's refusal stands in the local cache whatever the store does.
    let other_ip = [Subject::ip("203.0.113.100".parse().unwrap())];
    for _ in 0..3 {
        open.check(&other_ip).await.expect("fail open");
    }
    for _ in 0..2 {
        let e = closed.check(&[Subject::global()]).await.expect_err("fail closed");
        assert_eq!(e.cause(), Cause::StoreUnavailable);
    }
    let s3 = scrape();
    assert_eq!(decisions(&s3, "metrics_test::redis_open", "failed_open"), 3.0);
    assert_eq!(decisions(&s3, "metrics_test::redis_closed", "failed_closed"), 4.0, "hung, script, then two");
    assert_eq!(decisions(&s3, "metrics_test::redis_open", "allowed"), 4.0, "unchanged");
    let delta = |kind: &str| {
        s3.count(ERRORS, &[("store", "redis"), ("kind", kind)])
            - s2.count(ERRORS, &[("store", "redis"), ("kind", kind)])
    };
    assert_eq!(
        delta("connection") + delta("timeout"),
        3.0,
        "connection {} timeout {}",
        delta("connection"),
        delta("timeout")
    );
    assert_eq!(delta("auth") + delta("script") + delta("other"), 0.0);
    let timed = s3.count(DURATION_COUNT, &[("store", "redis")]) - s2.count(DURATION_COUNT, &[("store", "redis")]);
    assert_eq!(timed, 3.0, "failed calls are timed too; calls the open breaker answered are not");
    assert!(s3.count("ratelimit_store_circuit_open", &[("store", "redis")]) >= 1.0, "the breaker is open");
    assert_nothing_leaks(&["203.0.113.99"]);
}

#[test]
fn metric_names_and_label_sets() {
    let store: StoreHandle = Arc::new(MemoryStore::new());
    let l = limiter("metrics_test::names", LimitType::Global, 1, store, FailurePolicy::Allow);
    let _ = l.check(&[Subject::global()]).blocking();
    let s = scrape();
    // Every outcome series exists from the limiter's construction on, at 0 until it happens.
    for outcome in ["allowed", "denied", "shadow_denied", "exempt", "failed_open", "failed_closed", "subject_missing"] {
        assert!(s.value(DECISIONS, &[("limiter", "metrics_test::names"), ("outcome", outcome)]).is_some(), "{outcome}");
    }
    assert!(s.value("ratelimit_local_denials_total", &[("limiter", "metrics_test::names")]).is_some());
    assert!(s.value("ratelimit_override_decisions_total", &[("limiter", "metrics_test::names")]).is_some());
    // The memory store has no breaker: no gauge says it is closed.
    assert_eq!(s.value("ratelimit_store_circuit_open", &[("store", "memory")]), None);
    for sample in s.samples.iter().filter(|x| x.name.starts_with("ratelimit_")) {
        let keys: Vec<&str> = sample.labels.keys().map(String::as_str).collect();
        let allowed: &[&[&str]] = match sample.name.as_str() {
            DECISIONS => &[&["limiter", "outcome"]],
            "ratelimit_local_denials_total" | "ratelimit_override_decisions_total" => &[&["limiter"]],
            ERRORS => &[&["kind", "store"]],
            "ratelimit_store_circuit_open" => &[&["store"]],
            "ratelimit_memory_keys" | "ratelimit_memory_evictions_total" => &[&[]],
            n if n.starts_with("ratelimit_store_duration_seconds") => {
                &[&["store"], &["quantile", "store"], &["le", "store"]]
            }
            other => panic!("unexpected metric {other}"),
        };
        assert!(allowed.contains(&keys.as_slice()), "{} has labels {keys:?}", sample.name);
    }
}

/// A memory store's keys and the live ones it forgot to stay within its bound, read back from
/// the scrape. The gauge and the counter sum every memory store of the process (other tests'
/// stores hold a few keys and forget none).
#[test]
fn memory_keys_and_evictions() {
    let evicted_before = scrape().sum("ratelimit_memory_evictions_total", &[]);
    let clock = Arc::new(ratelimit::clock::ManualClock::new(1_000_000_000_000));
    let store = Arc::new(MemoryStore::with_clock(clock).max_keys(100));
    let l = limiter("metrics_test::memory", LimitType::User, 1, store.clone(), FailurePolicy::Allow);
    for i in 0..1000 {
        l.check(&[Subject::bytes(format!("u{i}").into_bytes())]).blocking().expect("a new subject");
    }
    // The gauge and the counter are brought up to date as the store sweeps, one shard per 256
    // decisions of a thread (this store has one shard).
    for _ in 0..256 {
        let _ = l.check(&[Subject::bytes(&b"u999"[..])]).blocking();
    }
    let s = scrape();
    assert_eq!(s.sum("ratelimit_memory_evictions_total", &[]) - evicted_before, 900.0);
    assert!(s.sum("ratelimit_memory_keys", &[]) >= 100.0);
    assert_eq!(store.len(), 100);
}

/// Decision counts are kept per thread: more threads than have a line of their own (up to 256,
/// four per core; the rest count straight into the recorder), then as many again after the
/// first ones exited (taking over their lines), all counted exactly.
#[test]
fn counts_of_many_threads_are_exact() {
    const THREADS: usize = 300;
    const CALLS: usize = 50;
    let store: StoreHandle = Arc::new(MemoryStore::new());
    let l = limiter("metrics_test::threads", LimitType::Global, 10_000, store, FailurePolicy::Allow);
    let wave = |l: &Limiter| {
        // Every thread alive at once, so that some find no free line.
        let barrier = std::sync::Barrier::new(THREADS);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    barrier.wait();
                    for _ in 0..CALLS {
                        let _ = l.check(&[Subject::global()]).blocking();
                    }
                });
            }
        });
    };
    wave(&l);
    let s = scrape();
    assert_eq!(decisions(&s, "metrics_test::threads", "allowed"), 10_000.0);
    assert_eq!(decisions(&s, "metrics_test::threads", "denied"), 5_000.0);
    wave(&l);
    let s = scrape();
    assert_eq!(decisions(&s, "metrics_test::threads", "allowed"), 10_000.0);
    assert_eq!(decisions(&s, "metrics_test::threads", "denied"), 20_000.0);
}

/// Without anyone calling `flush`, the counts reach the recorder within `FLUSH_EVERY`; a
/// dropped limiter hands over its counts at once.
#[test]
fn counts_reach_the_recorder_unasked_and_on_drop() {
    let store: StoreHandle = Arc::new(MemoryStore::new());
    let kept = limiter("metrics_test::unasked", LimitType::Global, 100, store.clone(), FailurePolicy::Allow);
    let dropped = limiter("metrics_test::dropped", LimitType::Global, 100, store, FailurePolicy::Allow);
    for _ in 0..7 {
        let _ = kept.check(&[Subject::global()]).blocking();
        let _ = dropped.check(&[Subject::global()]).blocking();
    }
    drop(dropped);
    let s = prometheus::scrape_unflushed();
    assert_eq!(decisions(&s, "metrics_test::dropped", "allowed"), 7.0, "flushed when dropped");
    // Generous: ten flush periods, on a busy machine.
    let within = ratelimit::metrics::FLUSH_EVERY * 10;
    support::poll_until(within, Duration::from_millis(50), "the recorder never counted 7", || {
        let seen = decisions(&prometheus::scrape_unflushed(), "metrics_test::unasked", "allowed");
        (seen == 7.0).then_some(())
    });
}

#[test]
fn prometheus_parser_reads_the_text_format() {
    let text = "# HELP x_total Things.\n# TYPE x_total counter\nx_total{a=\"1\",b=\"q\\\"uote\\\\ \\n\"} 3\n\
                x_total{a=\"2\"} 4 1700000000000\nh_bucket{le=\"+Inf\"} 7\nplain 1.5e-3\n";
    let s = prometheus::Scrape::parse(text).expect("parses");
    assert_eq!(s.types.get("x_total").map(String::as_str), Some("counter"));
    assert_eq!(s.value("x_total", &[("a", "1"), ("b", "q\"uote\\ \n")]), Some(3.0));
    assert_eq!(s.value("x_total", &[("a", "2")]), Some(4.0));
    assert_eq!(s.sum("x_total", &[]), 7.0);
    assert_eq!(s.value("h_bucket", &[("le", "+Inf")]), Some(7.0));
    assert_eq!(s.value("plain", &[]), Some(0.0015));
    assert_eq!(s.count("absent", &[]), 0.0);
    assert!(prometheus::Scrape::parse("x{a=\"1} 2").is_err());
    assert!(prometheus::Scrape::parse("x{a=1} 2").is_err());
    assert!(prometheus::Scrape::parse("x two").is_err());
}
