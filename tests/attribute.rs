//! What `#[rate_limiter]` does at run time, on the in-memory store. Every test names its own
//! limiter (`name = "…"`) so parallel tests never share a window. (The same behaviour against a
//! real Redis: `tests/attribute_redis.rs`.)

mod support;

use ratelimit::clock::ManualClock;
use ratelimit::context::{self, RequestContext};
use ratelimit::store::MemoryStore;
use ratelimit::{rate_limiter, Cause, Config, LimitType, RateLimited};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use support::{addr, denied_by};

/// Counts in memory, on a clock that moves only when a test moves it, whatever the environment
/// says (`REDIS_URL`, …): every test calls this before its first rate-limited call. The clock
/// starts on a minute's boundary and moves less than a minute in all, so the minute-long windows
/// of the other tests never turn over.
fn memory() -> &'static ManualClock {
    static CLOCK: OnceLock<Arc<ManualClock>> = OnceLock::new();
    CLOCK.get_or_init(|| {
        let clock = Arc::new(ManualClock::new(1_767_225_600_000_000)); // 2026-01-01, in µs
        ratelimit::init(Config::store(Arc::new(MemoryStore::with_clock(clock.clone()))))
            .expect("no limited call ran before the store was installed");
        clock
    })
}

#[rate_limiter(type = Ip, rules = [(1m, 2)], ip = client, name = "attribute::tightest")]
#[rate_limiter(type = Global, rules = [(1m, 3)])]
fn tightest(client: IpAddr) -> Result<(), RateLimited> {
    Ok(())
}

#[test]
fn stacked_limits_admit_per_the_tightest_rule() {
    memory();
    let (a, b, c) = (addr("198.51.100.1"), addr("198.51.100.2"), addr("198.51.100.3"));
    tightest(a).unwrap();
    tightest(a).unwrap();
    let e = denied_by(tightest(a), LimitType::Ip);
    assert_eq!(e.limiter(), "attribute::tightest");
    assert_eq!(e.rule().map(|r| (r.window(), r.count())), Some((Duration::from_secs(60), 2)));
    assert_eq!(e.policies().len(), 2, "one limiter holds the rules of both attributes");
    // a's refused call took nothing from the Global budget: one unit is left for b.
    tightest(b).unwrap();
    let e = denied_by(tightest(c), LimitType::Global);
    assert_eq!(e.rule().map(|r| r.count()), Some(3));
    assert!(e.retry_after() > Duration::ZERO && e.retry_after() <= Duration::from_secs(60));
}

#[rate_limiter(type = Ip, rules = [(1m, 2)], ip = client, name = "attribute::nothing_recorded")]
#[rate_limiter(type = Global, rules = [(300ms, 1)])]
fn nothing_recorded(client: IpAddr) -> Result<(), RateLimited> {
    Ok(())
}

#[test]
fn a_refused_call_is_recorded_in_no_rule() {
    let clock = memory();
    let a = addr("198.51.100.10");
    nothing_recorded(a).unwrap();
    for _ in 0..3 {
        // Refused by Global; had they counted in a's Ip rule, a would be out of budget below.
        denied_by(nothing_recorded(a), LimitType::Global);
    }
    clock.advance(Duration::from_millis(350));
    nothing_recorded(a).unwrap();
    clock.advance(Duration::from_millis(350));
    denied_by(nothing_recorded(a), LimitType::Ip);
}

static BODY_RUNS: AtomicU32 = AtomicU32::new(0);

#[rate_limiter(type = Global, rules = [(1m, 1)], name = "attribute::body")]
fn counted_body() -> Result<(), RateLimited> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[test]
fn a_refused_call_does_not_run_the_body() {
    memory();
    counted_body().unwrap();
    assert!(counted_body().is_err());
    assert!(counted_body().is_err());
    assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 1);
}

#[rate_limiter(type = Key, rules = [(1m, 3)], key = "one", name = "attribute::shared")]
fn shared_sync() -> Result<&'static str, RateLimited> {
    Ok("sync")
}

#[rate_limiter(type = Key, rules = [(1m, 3)], key = "one", name = "attribute::shared")]
async fn shared_async() -> Result<&'static str, RateLimited> {
    Ok("async")
}

#[tokio::test]
async fn sync_and_async_functions_with_one_name_share_a_window() {
    memory();
    assert_eq!(shared_sync().unwrap(), "sync");
    assert_eq!(shared_async().await.unwrap(), "async");
    assert_eq!(shared_sync().unwrap(), "sync");
    denied_by(shared_async().await, LimitType::Key);
    denied_by(shared_sync(), LimitType::Key);
}

struct Connection {
    ip: IpAddr,
    served: u32,
}

impl Connection {
    #[rate_limiter(type = Ip, rules = [(1m, 2)], ip = self.ip, name = "attribute::method")]
    fn serve(&mut self) -> Result<u32, RateLimited> {
        self.served += 1;
        Ok(self.served)
    }

    #[rate_limiter(type = Ip, rules = [(1m, 1)], ip = self.ip, name = "attribute::async_method")]
    async fn serve_async(&self) -> Result<IpAddr, RateLimited> {
        Ok(self.ip)
    }
}

#[tokio::test]
async fn methods_count_per_self_ip() {
    memory();
    let mut first = Connection { ip: addr("198.51.100.20"), served: 0 };
    let mut second = Connection { ip: addr("198.51.100.21"), served: 0 };
    assert_eq!(first.serve().unwrap(), 1);
    assert_eq!(first.serve().unwrap(), 2);
    denied_by(first.serve(), LimitType::Ip);
    assert_eq!(first.served, 2);
    assert_eq!(second.serve().unwrap(), 1);

    assert_eq!(first.serve_async().await.unwrap(), first.ip);
    denied_by(first.serve_async().await, LimitType::Ip);
    // IPv6 clients count per /64.
    let v6 = Connection { ip: addr("2001:db8:1:2::1"), served: 0 };
    let same_64 = Connection { ip: addr("2001:db8:1:2:ffff::9"), served: 0 };
    v6.serve_async().await.unwrap();
    denied_by(same_64.serve_async().await, LimitType::Ip);
}

#[rate_limiter(type = Key, rules = [(1m, 10)], key = account, cost = units, name = "attribute::cost")]
fn spend(account: &str, units: u32) -> Result<u32, RateLimited> {
    Ok(units)
}

#[test]
fn cost_consumes_that_many_units() {
    memory();
    assert_eq!(spend("acme", 4).unwrap(), 4);
    assert_eq!(spend("acme", 4).unwrap(), 4);
    denied_by(spend("acme", 3), LimitType::Key);
    assert_eq!(spend("acme", 2).unwrap(), 2);
    denied_by(spend("acme", 1), LimitType::Key);
    // Another key has its own budget; a call costing more than the whole rule never passes.
    let e = spend("globex", 11).expect_err("11 units never fit a rule of 10");
    assert_eq!(e.cause(), Cause::CostTooHigh, "{e}");
    assert_eq!(e.retry_after(), Duration::ZERO, "{e}");
    assert_eq!(spend("globex", 10).unwrap(), 10);
}

#[rate_limiter(type = Ip, rules = [(1m, 5)], name = "attribute::ip_from_context")]
fn ip_from_context() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = User, rules = [(1m, 5)], name = "attribute::user_from_context")]
async fn user_from_context() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Ip, rules = [(1m, 5)], ip = client, name = "attribute::ip_none")]
fn ip_none(client: Option<IpAddr>) -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = User, rules = [(1m, 5)], user = user, name = "attribute::user_none")]
fn user_none(user: Option<String>) -> Result<(), RateLimited> {
    Ok(())
}

#[track_caller]
fn missing<T: std::fmt::Debug>(result: Result<T, RateLimited>) {
    let e = result.expect_err("a call without its identity should be refused");
    assert_eq!(e.cause(), Cause::SubjectMissing, "{e}");
}

#[tokio::test]
async fn a_missing_identity_refuses_the_call() {
    memory();
    missing(ip_from_context());
    missing(user_from_context().await);
    missing(ip_none(None));
    missing(user_none(None));
    // A context without the identity is no better.
    missing(context::sync_scope(RequestContext::new(), ip_from_context));
    missing(context::scope(RequestContext::new().with_ip(addr("198.51.100.30")), user_from_context()).await);
    // With it, the calls go through.
    ip_none(Some(addr("198.51.100.31"))).unwrap();
    user_none(Some("alice".to_owned())).unwrap();
}

#[rate_limiter(type = Ip, rules = [(1m, 2)], name = "attribute::scoped_ip")]
fn scoped_ip() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = User, rules = [(1m, 1)], name = "attribute::scoped_user")]
#[rate_limiter(type = Ip, rules = [(1m, 10)])]
async fn scoped_user() -> Result<(), RateLimited> {
    Ok(())
}

#[tokio::test]
async fn the_request_context_supplies_ip_and_user() {
    memory();
    let a = || RequestContext::new().with_ip(addr("198.51.100.40"));
    let b = || RequestContext::new().with_ip(addr("198.51.100.41"));
    context::sync_scope(a(), || {
        scoped_ip().unwrap();
        scoped_ip().unwrap();
        denied_by(scoped_ip(), LimitType::Ip);
    });
    context::sync_scope(b(), || scoped_ip().unwrap());

    context::scope(a().with_user("alice"), async {
        scoped_user().await.unwrap();
        denied_by(scoped_user().await, LimitType::User);
    })
    .await;
    // The user id may also be set during the request, as an extractor does.
    context::scope(a(), async {
        assert!(context::set_user("bob"));
        scoped_user().await.unwrap();
    })
    .await;
}

#[derive(Debug)]
enum AppError {
    Limited(RateLimited),
}

impl From<RateLimited> for AppError {
    fn from(e: RateLimited) -> Self {
        AppError::Limited(e)
    }
}

struct Tenant(u32);

impl std::fmt::Display for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tenant-{}", self.0)
    }
}

#[rate_limiter(type = Key, rules = [(1m, 1)], key = format!("{tenant}:{route}"), name = "attribute::temporary")]
fn by_route(tenant: &Tenant, route: &str) -> Result<(), AppError> {
    Ok(())
}

#[rate_limiter(type = Key, rules = [(1m, 1)], key = tenant, name = "attribute::display")]
fn by_tenant(tenant: Tenant) -> Result<u32, AppError> {
    Ok(tenant.0)
}

#[test]
fn keys_from_temporaries_and_display_values_and_error_conversion() {
    memory();
    by_route(&Tenant(1), "/a").unwrap();
    by_route(&Tenant(1), "/b").unwrap();
    by_route(&Tenant(2), "/a").unwrap();
    let AppError::Limited(e) = by_route(&Tenant(1), "/a").unwrap_err();
    assert_eq!(e.limit_type(), LimitType::Key);

    assert_eq!(by_tenant(Tenant(7)).unwrap(), 7);
    assert!(by_tenant(Tenant(7)).is_err());
    assert_eq!(by_tenant(Tenant(8)).unwrap(), 8);
}

#[rate_limiter(type = Global, rules = [(1m, 1)])]
fn default_name() -> Result<(), RateLimited> {
    Ok(())
}

#[test]
fn the_default_name_is_the_module_path_and_function() {
    memory();
    default_name().unwrap();
    let e = denied_by(default_name(), LimitType::Global);
    assert_eq!(e.limiter(), "attribute::default_name");
    assert!(
        e.to_string().starts_with("rate limited by attribute::default_name (global, 1 per 1m); retry after "),
        "{e}"
    );
}
