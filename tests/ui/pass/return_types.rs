//! Every `Result` spelling: aliases ending in `Result`, other error types with
//! `From<RateLimited>`, `?` in the body.
#![deny(warnings)]

use ratelimit::{rate_limiter, RateLimited};

mod app {
    #[derive(Debug)]
    pub struct Error(pub String);
    impl From<ratelimit::RateLimited> for Error {
        fn from(e: ratelimit::RateLimited) -> Self {
            Error(e.to_string())
        }
    }
    pub type Result<T> = std::result::Result<T, Error>;
}

#[rate_limiter(type = Global, rules = [(20s, 10)])]
fn alias() -> app::Result<u8> {
    Ok(1)
}

#[rate_limiter(type = Global, rules = [(20s, 10)])]
fn full_path() -> ::core::result::Result<u8, app::Error> {
    Ok(2)
}

#[rate_limiter(type = Global, rules = [(20s, 10)])]
fn boxed_error() -> Result<u8, Box<dyn std::error::Error>> {
    let n: u8 = "3".parse()?;
    Ok(n)
}

#[rate_limiter(type = Global, rules = [(20s, 10)])]
fn unit_ok() -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Global, rules = [(20s, 10)])]
fn diverging() -> Result<std::convert::Infallible, RateLimited> {
    loop {
        std::thread::yield_now();
    }
}

fn main() {
    assert_eq!(alias().unwrap(), 1);
    assert_eq!(full_path().unwrap(), 2);
    assert_eq!(boxed_error().unwrap(), 3);
    unit_ok().unwrap();
    let _never_called = diverging;
}
