use ratelimit::rate_limiter;

#[rate_limiter(type = Global, rules = [(20s, 10)])]
fn handler() -> u32 {
    1
}

fn main() {}
