use ratelimit::rate_limiter;

#[rate_limiter(type = Global, rules = [(20s, 10)])]
fn handler() -> Option<u32> {
    Some(1)
}

fn main() {}
