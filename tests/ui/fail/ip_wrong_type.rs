use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 10)], ip = port)]
fn handler(port: u16) -> Result<u16, RateLimited> {
    Ok(port)
}

fn main() {}
