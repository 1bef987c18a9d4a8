use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Global, rules = [(5mo, 3)])]
fn five() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, rules = [(24mo, 3)])]
fn two_years() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, rules = [(99999999999999999999mo, 3)])]
fn too_large() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, rules = [(0mo, 3)])]
fn zero() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, rules = [(1mo, 3), (1mo, 4)])]
fn twice() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
