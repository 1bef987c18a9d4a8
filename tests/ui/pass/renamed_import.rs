//! The attribute under the paths the crate exports, and under a renamed import: alone, or as the
//! outermost of a stack (it takes the siblings written `rate_limiter`, before any name is
//! resolved: `rate_limiter` needs no import here), it makes one limiter.
#![deny(warnings)]

use ratelimit::rate_limiter as limit;
use ratelimit::{LimitType, RateLimited};

#[limit(type = Global, rules = [(1h, 1)])]
fn renamed() -> Result<(), RateLimited> {
    Ok(())
}

#[limit(type = User, rules = [(1h, 1)], user = "alice")]
#[rate_limiter(type = Ip, rules = [(1h, 2)], ip = "203.0.113.1")]
#[ratelimit::rate_limiter(type = Key, rules = [(1h, 3)], key = "k")]
#[::ratelimit::rate_limiter(type = Global, rules = [(1h, 4)])]
fn renamed_outermost() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    renamed().unwrap();
    assert!(renamed().is_err());
    renamed_outermost().unwrap();
    // One limiter: the user's rule refuses, and nothing else was counted twice.
    assert_eq!(renamed_outermost().unwrap_err().limit_type(), LimitType::User);
    let limiter = ratelimit::limiter(concat!(module_path!(), "::renamed_outermost")).unwrap();
    assert_eq!(limiter.name(), concat!(module_path!(), "::renamed_outermost"));
}
