//! docs/tiers.md's first example, as written there.

use ratelimit::{rate_limiter, Config, LimitType, RateLimited, Rule};
use std::time::Duration;

/// 5 searches per 10 s per user; the caller's plan is the tier.
#[rate_limiter(type = User, rules = [(10s, 5)], user = user, tier = plan, name = "app::search")]
fn search(user: &str, plan: Option<&str>, query: &str) -> Result<String, RateLimited> {
    Ok(format!("results for {query}"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The pro plan: 50 per 10 s. The configuration file may change it without a deploy.
    let pro = Rule::new(Duration::from_secs(10), 50)?;
    ratelimit::init(Config::memory().tier("app::search", LimitType::User, "pro", [pro]))?;

    let searches = |user: &str, plan: Option<&str>| (0..60).filter(|_| search(user, plan, "rust").is_ok()).count();
    assert_eq!(searches("alice", None), 5, "no plan: the attribute's rules");
    assert_eq!(searches("bob", Some("pro")), 50, "pro: 50 per 10 s");
    assert_eq!(searches("carol", Some("platinum")), 5, "a plan nobody configured: the attribute's rules");
    Ok(())
}
