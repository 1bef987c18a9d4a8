//! `mode = shadow` decides and counts but never refuses; stacked limits may differ in mode.
#![deny(warnings)]

use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Key, rules = [(1m, 1)], key = "k", mode = shadow)]
fn watched() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Key, rules = [(1m, 2)], key = "a", mode = enforce)]
#[rate_limiter(type = Global, rules = [(1m, 1)], mode = shadow)]
async fn mixed() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {
    for _ in 0..3 {
        watched().unwrap();
    }
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        mixed().await.unwrap();
        mixed().await.unwrap();
        assert!(mixed().await.is_err(), "the enforced limit still refuses");
    });
}
