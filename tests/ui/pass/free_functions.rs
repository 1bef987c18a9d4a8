//! Plain and async free functions, every type, every option.
#![deny(warnings)]

use ratelimit::{rate_limiter, RateLimited};
use std::net::IpAddr;

#[rate_limiter(type = Global, rules = [(500ms, 1_000), (20s, 10), (1m, 100), (2h, 1000), (1d, 10_000)])]
fn global() -> Result<u32, RateLimited> {
    Ok(1)
}

#[rate_limiter(type = Default, rules = [(1s, 5)])]
async fn default_alias() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Ip, rules = [(20s, 10)], ip = addr)]
async fn by_ip(addr: IpAddr) -> Result<IpAddr, RateLimited> {
    Ok(addr)
}

#[rate_limiter(type = Ip, rules = [(20s, 10)])]
fn ip_from_context() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = User, rules = [(20s, 10)], user = user_id)]
fn by_user(user_id: u64) -> Result<u64, RateLimited> {
    Ok(user_id)
}

#[rate_limiter(type = User, rules = [(20s, 10)])]
async fn user_from_context() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(
    type = Key,
    rules = [(20s, 10)],
    key = format!("{tenant}:{route}"),
    prefix = "app:",
    name = "free_functions::by_key",
    algorithm = SlidingWindow,
    cost = units,
    on_error = deny,
    crate = "::ratelimit",
)]
async fn by_key(tenant: &str, route: String, units: u32) -> Result<String, RateLimited> {
    Ok(format!("{tenant}{route}{units}"))
}

#[tokio::main]
async fn main() {
    assert_eq!(global().unwrap(), 1);
    default_alias().await.unwrap();
    by_ip("203.0.113.7".parse().unwrap()).await.unwrap();
    assert!(ip_from_context().is_err());
    assert_eq!(by_user(7).unwrap(), 7);
    assert!(user_from_context().await.is_err());
    assert_eq!(by_key("t", "/r".to_owned(), 2).await.unwrap(), "t/r2");
}
