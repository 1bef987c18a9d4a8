use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Global, rules = [(20s, 10)])]
fn handler() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), RateLimited>>>> {
    let fut = async { Ok(()) };
    Box::pin(fut)
}

fn main() {}
