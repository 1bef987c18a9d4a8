use ratelimit::{rate_limiter, RateLimited};

// One hot global limit, synced (`sync`), stacked with an exact per-IP one.
#[rate_limiter(type = Global, rules = [(1s, 100_000)], sync = 50ms)]
#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 100)])]
async fn search(ip: std::net::IpAddr) -> Result<(), RateLimited> {
    let _ = ip;
    Ok(())
}

#[rate_limiter(type = Global, rules = [(10s, 1000)], sync = 10s)]
fn blocking() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    blocking().unwrap();
    let _ = search;
}
