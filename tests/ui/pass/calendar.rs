//! Windows in calendar months: alone (the algorithm is implied), beside spans under an explicit
//! `FixedWindow`, stacked with a sliding limit; each call passes three times a month.
use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Key, key = "monthly", rules = [(1mo, 3)])]
fn monthly() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Key, key = "quarterly", rules = [(1d, 3), (3mo, 100), (12mo, 1_000)], algorithm = FixedWindow)]
fn quarterly() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Key, key = "stacked", rules = [(1mo, 3)])]
#[rate_limiter(type = Key, key = "stacked", rules = [(10s, 5)])]
async fn stacked() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for _ in 0..3 {
        monthly().unwrap();
        quarterly().unwrap();
        rt.block_on(stacked()).unwrap();
    }
    assert!(monthly().is_err());
    assert!(quarterly().is_err());
}
