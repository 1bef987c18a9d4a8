use ratelimit::{rate_limiter, RateLimited};

struct Account;

#[rate_limiter(type = User, rules = [(20s, 10)], user = account)]
fn handler(account: Account) -> Result<(), RateLimited> {
    let _ = account;
    Ok(())
}

fn main() {}
