use ratelimit::{rate_limiter, RateLimited};

#[rate_limiter(type = Ip, rules = [(20s, 10)], prefix = "a_prefix_that_is_much_longer_than_the_sixty_four_bytes_a_key_prefix_may_use:")]
fn handler() -> Result<(), RateLimited> {
    Ok(())
}

fn main() {}
