use ratelimit::{rate_limiter, RateLimited};

// Without `algorithm = FixedWindow`, the 10s rule would silently stop sliding.
#[rate_limiter(type = User, user = "u", rules = [(10s, 5), (1mo, 3)])]
fn mixed() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
