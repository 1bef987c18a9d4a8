use ratelimit::rate_limiter;

#[rate_limiter(type = Global, rules = [(20s, 10)])]
async fn handler() {}

fn main() {}
