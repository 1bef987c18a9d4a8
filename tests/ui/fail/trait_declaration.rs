use ratelimit::{rate_limiter, RateLimited};

trait Service {
    #[rate_limiter(type = Global, rules = [(20s, 10)])]
    fn call(&self) -> Result<(), RateLimited>;
}

fn main() {}
