use ratelimit::rate_limiter;

#[rate_limiter(type = Ip, rules = [(60s, 5)], refund = on_ok)]
fn login() -> bool {
    true
}

fn main() {}
