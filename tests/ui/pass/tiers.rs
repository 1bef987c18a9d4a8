//! `tier = <expr>`: any text (or an `Option` of it) in the function's scope chooses the tier.
#![deny(warnings)]

use ratelimit::{rate_limiter, Config, LimitType, RateLimited, Rule};
use std::time::Duration;

#[rate_limiter(type = Key, rules = [(1m, 1)], key = "k", name = "ui::by_str", tier = plan)]
fn by_str(plan: &str) -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Key, rules = [(1m, 1)], key = "k", name = "ui::by_option", tier = plan.as_deref())]
async fn by_option(plan: Option<String>) -> Result<(), RateLimited> {
    Ok(())
}

struct Account {
    plan: String,
}

impl Account {
    #[rate_limiter(type = Global, rules = [(1m, 1)], name = "ui::by_field", tier = self.plan, wait = 1ms)]
    fn by_field(&self) -> Result<(), RateLimited> {
        Ok(())
    }
}

#[rate_limiter(type = Key, rules = [(1m, 1)], key = "a", tier = format!("{}", "pro"))]
#[rate_limiter(type = Global, rules = [(1m, 2)], tier = format!("{}", "pro"))]
async fn stacked() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    let per_minute = |n| Rule::new(Duration::from_secs(60), n).unwrap();
    let config = Config::memory()
        .tier("ui::by_str", LimitType::Key, "pro", [per_minute(3)])
        .tier("ui::by_option", LimitType::Key, "pro", [per_minute(2)])
        .tier("ui::by_field", LimitType::Global, "pro", [per_minute(2)]);
    ratelimit::init(config).unwrap();

    assert_eq!((0..5).filter(|_| by_str("pro").is_ok()).count(), 3);
    assert_eq!((0..5).filter(|_| by_str("free").is_ok()).count(), 1);
    let account = Account { plan: "pro".to_owned() };
    assert_eq!((0..5).filter(|_| account.by_field().is_ok()).count(), 2);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        let mut admitted = 0;
        for _ in 0..5 {
            admitted += usize::from(by_option(Some("pro".to_owned())).await.is_ok());
        }
        assert_eq!(admitted, 2);
        assert!(by_option(None).await.is_ok(), "no tier: the attribute's rules, counted apart");
        assert!(by_option(None).await.is_err());
        stacked().await.unwrap();
    });
}
