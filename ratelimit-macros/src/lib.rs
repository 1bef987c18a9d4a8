//! The `#[rate_limiter]` attribute of the [`ratelimit`](https://docs.rs/ratelimit) crate. Use it
//! through `ratelimit::rate_limiter`; the generated code calls `ratelimit::__private`.

mod errors;
mod expand;
mod parse;
mod rules;
mod stack;
mod validate;

use proc_macro::TokenStream;

/// Rate-limits a function.
#[proc_macro_attribute]
pub fn rate_limiter(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::rate_limiter(args.into(), item.into()).into()
}
