use ratelimit::{rate_limiter, RateLimited};

struct Reply {
    tokens: u64,
}

#[derive(Debug)]
enum AppError {
    Limited,
}

impl From<RateLimited> for AppError {
    fn from(_: RateLimited) -> Self {
        AppError::Limited
    }
}

fn tokens_of(r: &Result<Reply, AppError>) -> u64 {
    r.as_ref().map_or(0, |r| r.tokens)
}

/// An estimate of 100 units, settled to the tokens the reply took (a failure: none).
#[rate_limiter(type = Global, rules = [(60s, 1000)], cost = 100, settle = |r| r.as_ref().map_or(0, |r| r.tokens))]
async fn complete(tokens: u64) -> Result<Reply, AppError> {
    Ok(Reply { tokens })
}

/// A function path, on a blocking function, stacked with a concurrency limit (one round trip
/// settles the units and frees the slot).
#[rate_limiter(type = Key, key = "export", rules = [(60s, 1000)], cost = 10, settle = tokens_of)]
#[rate_limiter(type = Global, concurrency = 2)]
fn export(tokens: u64) -> Result<Reply, AppError> {
    Ok(Reply { tokens })
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // 100 units, settled to 1500: 500 past the limit.
    assert_eq!(complete(1500).await.unwrap().tokens, 1500);
    assert!(matches!(complete(0).await, Err(AppError::Limited)));
    for _ in 0..5 {
        assert_eq!(export(0).unwrap().tokens, 0);
    }
    // Settled to 0, 5 calls cost nothing: 995 more units fit, and then not 10.
    assert_eq!(export(995).unwrap().tokens, 995);
    assert!(matches!(export(0), Err(AppError::Limited)));
}
