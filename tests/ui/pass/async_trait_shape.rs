//! What `#[async_trait]` turns a method into (written out by hand, as async-trait 0.1 expands
//! it): the check goes inside the boxed async block.
#![deny(warnings)]

use ratelimit::{rate_limiter, RateLimited};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;

trait Handler {
    fn handle<'life0, 'async_trait>(
        &'life0 self,
        n: u32,
    ) -> Pin<Box<dyn Future<Output = Result<u32, RateLimited>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait;
}

struct Api {
    ip: IpAddr,
}

impl Handler for Api {
    #[rate_limiter(type = Ip, rules = [(1m, 2)], ip = self.ip, cost = n)]
    fn handle<'life0, 'async_trait>(
        &'life0 self,
        n: u32,
    ) -> ::core::pin::Pin<
        Box<dyn ::core::future::Future<Output = Result<u32, RateLimited>> + ::core::marker::Send + 'async_trait>,
    >
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            if let ::core::option::Option::Some(__ret) = ::core::option::Option::None::<Result<u32, RateLimited>> {
                #[allow(unreachable_code)]
                return __ret;
            }
            let __self = self;
            let n = n;
            let __ret: Result<u32, RateLimited> = { Ok(n + u32::from(__self.ip.is_ipv4())) };
            #[allow(unreachable_code)]
            __ret
        })
    }
}

#[tokio::main]
async fn main() {
    let api = Api { ip: "203.0.113.9".parse().unwrap() };
    // Nothing is decided until the future runs.
    let pending = api.handle(1);
    assert_eq!(pending.await.unwrap(), 2);
    assert_eq!(api.handle(1).await.unwrap(), 2);
    assert!(api.handle(1).await.is_err());
}
