//! The expansion neither sees nor shadows the function's names, uses only absolute paths, and
//! works from a re-export (`crate = "…"`).
#![deny(warnings)]
#![allow(non_upper_case_globals, dead_code)]

// Names the expansion might collide with.
mod core {}
mod ratelimit_shadow {}
struct Result;
static LIMITER: u8 = 7;

mod reexport {
    pub use ::ratelimit as rl;
}

#[::ratelimit::rate_limiter(type = Key, rules = [(20s, 10)], key = __ratelimit_subjects.len() + usize::from(LIMITER))]
fn locals(__ratelimit_subjects: Vec<u8>) -> ::std::result::Result<usize, ::ratelimit::RateLimited> {
    let __ratelimit_limiter = LIMITER;
    let __ratelimit_error = 1;
    let __ratelimit_value_0 = 2;
    Ok(__ratelimit_subjects.len() + usize::from(__ratelimit_limiter) + __ratelimit_error + __ratelimit_value_0)
}

#[reexport::rl::rate_limiter(type = Global, rules = [(20s, 10)], crate = "crate::reexport::rl")]
fn through_reexport() -> ::std::result::Result<(), reexport::rl::RateLimited> {
    Ok(())
}

mod no_prelude {
    #![no_implicit_prelude]

    #[::ratelimit::rate_limiter(type = Key, rules = [(20s, 10)], key = name, cost = 2u8)]
    pub fn f(name: &str) -> ::core::result::Result<u8, ::ratelimit::RateLimited> {
        ::core::result::Result::Ok(1)
    }

    #[::ratelimit::rate_limiter(type = Global, rules = [(20s, 10)])]
    pub async fn g() -> ::core::result::Result<u8, ::ratelimit::RateLimited> {
        ::core::result::Result::Ok(1)
    }
}

// A raw identifier as the function's name.
#[::ratelimit::rate_limiter(type = Global, rules = [(20s, 10)])]
fn r#match() -> ::std::result::Result<(), ::ratelimit::RateLimited> {
    Ok(())
}

// `unsafe` and `extern` functions are functions too.
#[::ratelimit::rate_limiter(type = Global, rules = [(20s, 10)])]
unsafe fn dangerous() -> ::std::result::Result<(), ::ratelimit::RateLimited> {
    Ok(())
}

fn main() {
    assert_eq!(locals(vec![1]).unwrap(), 1 + 7 + 1 + 2);
    through_reexport().unwrap();
    assert_eq!(no_prelude::f("x").unwrap(), 1);
    let _ = no_prelude::g();
    r#match().unwrap();
    unsafe { dangerous() }.unwrap();
}
