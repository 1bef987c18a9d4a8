// Every problem of every stacked attribute and of the signature, in one compile; the
// function stays as written, so its callers see no further errors.
use ratelimit::rate_limiter;

#[rate_limiter(type = Ip, rules = [(0s, 10)], user = "alice")]
#[rate_limiter(type = Global, rules = [(20s, 100)], cost = 2)]
#[rate_limiter(type = Global, rules = [(1m, 100)], cost = 3, colour = "red")]
fn handler() -> u32 {
    1
}

fn main() {
    let _: u32 = handler();
}
