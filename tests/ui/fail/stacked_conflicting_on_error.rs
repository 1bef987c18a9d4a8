use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 10)], on_error = deny)]
#[rate_limiter(type = Global, rules = [(20s, 100)], on_error = allow)]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
