//! The `#[rate_limiter]` attribute (placeholder until the attribute lands).
use proc_macro::TokenStream;

/// Rate-limits a function.
#[proc_macro_attribute]
pub fn rate_limiter(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
