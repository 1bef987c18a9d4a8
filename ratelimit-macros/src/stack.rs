//! Stacking: several `#[rate_limiter]` on one function make one limiter. The outermost
//! attribute runs first and takes its siblings off the function, so they never expand alone.
//!
//! A sibling is known by its path only, as the crate exports the attribute: `rate_limiter`,
//! `ratelimit::rate_limiter`, `::ratelimit::rate_limiter`. Any other attribute that happens to
//! end in `rate_limiter` belongs to someone else and is left alone. A renamed import
//! (`use ratelimit::rate_limiter as limit;`) cannot be recognised by name: when it is the
//! outermost, it still takes the siblings written `rate_limiter`; when it is not, it expands on
//! its own after the outer one, finds that one's check at the top of the body
//! (`Function::already_limited`), and refuses with an error that names the fix, rather than
//! make a second limiter whose refusals would be counted by the first.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::{AttrStyle, Attribute, Error, Meta};

/// `#[rate_limiter(..)]`, `#[ratelimit::rate_limiter(..)]` or `#[::ratelimit::rate_limiter(..)]`.
fn is_rate_limiter(attr: &Attribute) -> bool {
    let segments: Vec<String> = attr.path().segments.iter().map(|s| s.ident.to_string()).collect();
    let absolute = attr.path().leading_colon.is_some();
    matches!(attr.style, AttrStyle::Outer)
        && match segments.as_slice() {
            [name] => !absolute && name == "rate_limiter",
            [krate, name] => krate == "ratelimit" && name == "rate_limiter",
            _ => false,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(text: &str) -> Attribute {
        let mut attrs = syn::parse::Parser::parse_str(Attribute::parse_outer, text).unwrap();
        attrs.remove(0)
    }

    #[test]
    fn recognises_the_exported_paths_only() {
        for ours in ["#[rate_limiter(type = Ip)]", "#[ratelimit::rate_limiter]", "#[::ratelimit::rate_limiter(x)]"] {
            assert!(is_rate_limiter(&attr(ours)), "{ours}");
        }
        for theirs in [
            "#[limit(type = Ip)]",
            "#[other::rate_limiter]",
            "#[::rate_limiter]",
            "#[a::ratelimit::rate_limiter]",
            "#[ratelimit::rate_limiter::x]",
            "#[rate_limiter_v2]",
        ] {
            assert!(!is_rate_limiter(&attr(theirs)), "{theirs}");
        }
    }

    #[test]
    fn takes_the_siblings_and_leaves_the_rest() {
        let mut attrs = syn::parse::Parser::parse_str(
            Attribute::parse_outer,
            "#[inline] #[rate_limiter(a)] #[other::rate_limiter] #[ratelimit::rate_limiter = 1]",
        )
        .unwrap();
        let siblings = take_siblings(&mut attrs);
        assert_eq!(siblings.len(), 2);
        assert_eq!(siblings[0].args.as_ref().map(ToString::to_string).ok(), Some("a".to_owned()));
        assert!(siblings[1].args.is_err());
        assert_eq!(attrs.len(), 2);
    }
}
