//! Inherent and trait-impl methods with every receiver, the subject read from `self`.
#![deny(warnings)]

use ratelimit::{rate_limiter, RateLimited};
use std::net::IpAddr;

struct Client {
    ip: IpAddr,
    user: String,
    calls: u32,
}

impl Client {
    #[rate_limiter(type = Ip, rules = [(20s, 10)], ip = self.ip)]
    fn by_ref(&self) -> Result<IpAddr, RateLimited> {
        Ok(self.ip)
    }

    // The subject borrows `self` only for the check: the body may then mutate it.
    #[rate_limiter(type = User, rules = [(20s, 10)], user = self.user)]
    async fn by_mut(&mut self) -> Result<u32, RateLimited> {
        self.calls += 1;
        self.user.push('!');
        Ok(self.calls)
    }

    // ...or move out of it.
    #[rate_limiter(type = User, rules = [(20s, 10)], user = &self.user)]
    fn by_value(self) -> Result<String, RateLimited> {
        Ok(self.user)
    }

    #[rate_limiter(type = Global, rules = [(20s, 10)])]
    fn associated() -> Result<(), RateLimited> {
        Ok(())
    }

    #[rate_limiter(type = Key, rules = [(20s, 10)], key = self.calls)]
    fn boxed(self: Box<Self>) -> Result<u32, RateLimited> {
        Ok(self.calls)
    }
}

trait Service {
    fn call(&self, n: u32) -> Result<u32, RateLimited>;
    async fn call_async(&self, n: u32) -> Result<u32, RateLimited>;

    // A default body is a body too.
    #[rate_limiter(type = Global, rules = [(20s, 10)])]
    fn provided(&self) -> Result<(), RateLimited> {
        Ok(())
    }
}

impl Service for Client {
    #[rate_limiter(type = Ip, rules = [(20s, 10)], ip = self.ip, cost = n)]
    fn call(&self, n: u32) -> Result<u32, RateLimited> {
        Ok(n)
    }

    #[rate_limiter(type = Ip, rules = [(20s, 10)], ip = self.ip, cost = n)]
    async fn call_async(&self, n: u32) -> Result<u32, RateLimited> {
        Ok(n)
    }
}

#[tokio::main]
async fn main() {
    let mut client = Client { ip: "203.0.113.7".parse().unwrap(), user: "alice".to_owned(), calls: 0 };
    client.by_ref().unwrap();
    assert_eq!(client.by_mut().await.unwrap(), 1);
    assert_eq!(client.call(2).unwrap(), 2);
    assert_eq!(client.call_async(3).await.unwrap(), 3);
    client.provided().unwrap();
    Client::associated().unwrap();
    assert_eq!(client.by_value().unwrap(), "alice!");
    let boxed = Box::new(Client { ip: "203.0.113.8".parse().unwrap(), user: String::new(), calls: 4 });
    assert_eq!(boxed.boxed().unwrap(), 4);
}
