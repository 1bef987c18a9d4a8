// One past each bound of the runtime (MAX_WINDOW = 366 days = 31_622_400_000ms, MAX_COUNT =
// 1_000_000_000), and literals too large for any integer: each error at its literal, at once.
use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(31_622_400_001ms, 10), (1s, 99_999_999_999_999_999_999)])]
#[rate_limiter(type = Global, rules = [(99_999_999_999_999_999_999d, 10)])]
#[rate_limiter(type = User, rules = [(1m, 10)], algorithm = Gcra, burst = 1_000_000_001, wait = 367d)]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
