//! Stacking: several `#[rate_limiter]` on one function make one limiter. The outermost
//! attribute runs first and takes its siblings off the function, so they never expand alone.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::{AttrStyle, Attribute, Error, Meta};

/// `#[rate_limiter(..)]`, `#[ratelimit::rate_limiter(..)]`, or any path ending in
/// `rate_limiter`.
fn is_rate_limiter(attr: &Attribute) -> bool {
    matches!(attr.style, AttrStyle::Outer) && attr.path().segments.last().is_some_and(|s| s.ident == "rate_limiter")
}

/// A sibling attribute: the tokens that stand for it in errors, and its arguments.
pub(crate) struct Sibling {
    pub site: TokenStream,
    pub args: syn::Result<TokenStream>,
}

/// Removes the sibling `#[rate_limiter]`s from `attrs`, in order (outermost first).
pub(crate) fn take_siblings(attrs: &mut Vec<Attribute>) -> Vec<Sibling> {
    let mut siblings = Vec::new();
    attrs.retain(|attr| {
        if !is_rate_limiter(attr) {
            return true;
        }
        let args = match &attr.meta {
            Meta::List(list) => Ok(list.tokens.clone()),
            Meta::Path(_) => Ok(TokenStream::new()),
            Meta::NameValue(nv) => Err(Error::new_spanned(
                nv,
                "write the options in parentheses: #[rate_limiter(type = Ip, rules = [(20s, 10)])]",
            )),
        };
        siblings.push(Sibling { site: attr.to_token_stream(), args });
        false
    });
    siblings
}
