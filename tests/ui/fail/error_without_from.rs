use ratelimit::rate_limiter;

#[derive(Debug)]
struct MyError;

#[rate_limiter(type = Global, rules = [(20s, 10)])]
fn handler() -> Result<(), MyError> {
    Ok(())
}

fn main() {}
