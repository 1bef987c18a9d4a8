// A renamed import cannot be recognised as a stacked #[rate_limiter] by its name. Below the
// outermost attribute it would make a second limiter: it is refused instead, and says why.
use ratelimit::rate_limiter as limit;
use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 10)], ip = "203.0.113.1")]
#[limit(type = User, rules = [(20s, 10)], user = "alice")]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

#[limit(type = Ip, rules = [(20s, 10)], ip = "203.0.113.1")]
#[limit(type = User, rules = [(20s, 10)], user = "alice")]
async fn both_renamed() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
