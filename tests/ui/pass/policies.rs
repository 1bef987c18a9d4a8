//! `refund`, `block`, `concurrency` and `lease`: the body keeps its `return`s and `?`s, its
//! borrowed return types, and methods keep `self`.
use ratelimit::{rate_limiter, RateLimited};

#[derive(Debug)]
struct AppError;

impl From<RateLimited> for AppError {
    fn from(_: RateLimited) -> Self {
        AppError
    }
}

fn check(ok: bool) -> Result<(), AppError> {
    if ok {
        Ok(())
    } else {
        Err(AppError)
    }
}

#[rate_limiter(type = Key, key = "a", rules = [(60s, 5)], refund = on_ok, block = 2m)]
async fn login(password: String) -> Result<&'static str, AppError> {
    check(password == "letmein")?;
    if password.is_empty() {
        return Err(AppError);
    }
    Ok("welcome")
}

#[rate_limiter(type = Key, key = "b", rules = [(60s, 5)], refund = on_err)]
fn first_word(text: &str) -> Result<&str, AppError> {
    text.split(' ').next().ok_or(AppError)
}

struct Reports {
    done: u32,
}

impl Reports {
    #[rate_limiter(type = Key, key = self.done, concurrency = 2, lease = 30s)]
    #[rate_limiter(type = Global, rules = [(1s, 100)])]
    async fn run(&mut self) -> Result<u32, AppError> {
        self.done += 1;
        Ok(self.done)
    }

    #[rate_limiter(type = Global, concurrency = 1)]
    fn build(value: u32) -> Result<Self, AppError> {
        Ok(Reports { done: value })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(login("letmein".to_owned()).await.unwrap(), "welcome");
    assert!(login("guess".to_owned()).await.is_err());
    assert_eq!(first_word("hello world").unwrap(), "hello");
    let mut reports = Reports::build(1).unwrap();
    assert_eq!(reports.run().await.unwrap(), 2);
}
