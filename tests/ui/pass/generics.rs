//! Generic functions, `impl Trait` arguments, where clauses, lifetimes, const generics.
#![deny(warnings)]

use ratelimit::{rate_limiter, RateLimited};
use std::fmt::Display;

#[derive(Debug)]
enum AppError {
    Limited(RateLimited),
}

impl From<RateLimited> for AppError {
    fn from(e: RateLimited) -> Self {
        AppError::Limited(e)
    }
}

#[rate_limiter(type = Key, rules = [(20s, 10)], key = id)]
fn generic<T: Display, E>(id: T) -> Result<String, E>
where
    E: From<RateLimited>,
{
    Ok(id.to_string())
}

#[rate_limiter(type = Key, rules = [(20s, 10)], key = name.as_ref())]
async fn impl_trait(name: impl AsRef<str>, items: impl IntoIterator<Item = u8>) -> Result<usize, AppError> {
    Ok(items.into_iter().count())
}

#[rate_limiter(type = User, rules = [(20s, 10)], user = user)]
fn lifetimes<'a, 'b: 'a>(user: &'a str, other: &'b str) -> Result<&'a str, AppError> {
    Ok(if other.is_empty() { user } else { other })
}

#[rate_limiter(type = Global, rules = [(20s, 10)])]
fn const_generic<const N: usize>(data: [u8; N]) -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
    Ok(data.len())
}

// The one limiter is shared by every instantiation of a generic function.
#[rate_limiter(type = Global, rules = [(1m, 2)])]
fn shared<T: Default>() -> Result<T, RateLimited> {
    Ok(T::default())
}

fn main() {
    assert_eq!(generic::<_, AppError>(42).unwrap(), "42");
    assert_eq!(lifetimes("alice", "").unwrap(), "alice");
    assert_eq!(const_generic([1, 2, 3]).unwrap(), 3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(impl_trait("bob", vec![1, 2])).unwrap(), 2);
    assert_eq!(shared::<u8>().unwrap(), 0);
    assert_eq!(shared::<String>().unwrap(), "");
    assert!(shared::<u16>().is_err());
    if let Err(AppError::Limited(e)) = generic::<_, AppError>(0) {
        panic!("{e}");
    }
}
