//! The annotated function: the attributes, visibility and signature parsed, the body kept as
//! tokens.
//!
//! The attribute only puts statements in front of the body, so it never needs the body's syntax
//! tree. Not building it saves parsing every statement of every annotated function on every
//! compile, and keeps the attribute working while the body does not parse yet (an editor expands
//! attributes as the user types, and completion inside the body depends on it); rustc reports the
//! body's own syntax errors where they are.

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use quote::{ToTokens, TokenStreamExt};
use syn::parse::{Parse, ParseStream};
use syn::{braced, token, Attribute, Signature, Token, Visibility};

pub(crate) struct Function {
    /// The outer attributes (the stacked `#[rate_limiter]`s among them until `stack` takes them).
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub sig: Signature,
    /// `#![...]` at the top of the body: they must stay first, before the check.
    inner_attrs: Vec<Attribute>,
    brace: token::Brace,
    body: TokenStream,
}

impl Parse for Function {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig = input.parse()?;
        let content;
        let brace = braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let body = content.parse()?;
        Ok(Function { attrs, vis, sig, inner_attrs, brace, body })
    }
}

impl Function {
    /// Whether the body is exactly `Box::pin(async move { … })`, the shape `#[async_trait]`
    /// gives a method, whose check must run inside the future.
    pub(crate) fn is_boxed_async(&self) -> bool {
        async_block(&self.body).is_some()
    }

    /// Whether the body already starts with the check of a `#[rate_limiter]` that expanded
    /// first: a stacked attribute this one could not recognise by its name.
    pub(crate) fn already_limited(&self) -> bool {
        starts_with_check(&self.body) || async_block(&self.body).is_some_and(|block| starts_with_check(&block.stream()))
    }

    /// The function with `prelude` in front of its statements.
    pub(crate) fn prepend(self, prelude: TokenStream) -> TokenStream {
        self.wrap(|body| prepended(prelude, body))
    }

    /// The function with its statements replaced by `wrap(statements)` (which may put them in
    /// a closure or an async block after the check).
    pub(crate) fn wrap(mut self, wrap: impl FnOnce(TokenStream) -> TokenStream) -> TokenStream {
        let body = std::mem::take(&mut self.body);
        self.body = wrap(body);
        self.into_token_stream()
    }

    /// The function with `prelude` in front of the statements of its body's async block; `None`
    /// unless [`is_boxed_async`](Self::is_boxed_async).
    pub(crate) fn prepend_in_async_block(self, prelude: TokenStream) -> Option<TokenStream> {
        self.wrap_in_async_block(|body| prepended(prelude, body))
    }

    /// The function with the statements of its body's async block replaced by
    /// `wrap(statements)`; `None` unless [`is_boxed_async`](Self::is_boxed_async).
    pub(crate) fn wrap_in_async_block(mut self, wrap: impl FnOnce(TokenStream) -> TokenStream) -> Option<TokenStream> {
        self.body = boxed_async(&self.body, wrap)?;
        Some(self.into_token_stream())
    }
}

impl ToTokens for Function {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        tokens.append_all(&self.attrs);
        self.vis.to_tokens(tokens);
        self.sig.to_tokens(tokens);
        self.brace.surround(tokens, |tokens| {
            tokens.append_all(&self.inner_attrs);
            tokens.extend(self.body.clone());
        });
    }
}

fn prepended(prelude: TokenStream, body: TokenStream) -> TokenStream {
    let mut out = prelude;
    out.extend(body);
    out
}

/// The name the check binds to its limiter; a body whose first block binds it with `let` was
/// already limited by an expansion of the attribute.
pub(crate) const MARKER: &str = "__ratelimit_limiter";

/// The name a check that keeps its permit binds it to (`let __ratelimit_permit = { check };`).
pub(crate) const PERMIT: &str = "__ratelimit_permit";

fn starts_with_check(body: &TokenStream) -> bool {
    let mut tokens = body.clone().into_iter();
    let first = match tokens.next() {
        Some(TokenTree::Ident(i)) if i == "let" => {
            // `let __ratelimit_permit = { … }`
            match (tokens.next(), tokens.next(), tokens.next()) {
                (Some(TokenTree::Ident(name)), Some(TokenTree::Punct(eq)), block)
                    if name == PERMIT && eq.as_char() == '=' =>
                {
                    block
                }
                _ => None,
            }
        }
        other => other,
    };
    let Some(TokenTree::Group(block)) = first else { return false };
    let tokens: Vec<TokenTree> = block.stream().into_iter().collect();
    block.delimiter() == Delimiter::Brace
        && tokens.windows(2).any(|pair| {
            matches!(&pair[0], TokenTree::Ident(i) if i == "let")
                && matches!(&pair[1], TokenTree::Ident(i) if i == MARKER)
        })
}

/// `{ … }` of a body that is exactly `<path ending in Box::pin>(async [move] { … })`.
fn async_block(body: &TokenStream) -> Option<Group> {
    let tokens: Vec<TokenTree> = body.clone().into_iter().collect();
    let (TokenTree::Group(call), path) = tokens.split_last()? else { return None };
    let is_path =
        path.iter().all(|t| matches!(t, TokenTree::Ident(_)) || matches!(t, TokenTree::Punct(p) if p.as_char() == ':'));
    let names: Vec<String> = path.iter().map(ToString::to_string).collect();
    if call.delimiter() != Delimiter::Parenthesis
        || !is_path
        || !names.ends_with(&["Box", ":", ":", "pin"].map(String::from))
    {
        return None;
    }
    let args: Vec<TokenTree> = call.stream().into_iter().collect();
    let block = match args.as_slice() {
        [TokenTree::Ident(a), TokenTree::Group(block)] if a == "async" => block,
        [TokenTree::Ident(a), TokenTree::Ident(m), TokenTree::Group(block)] if a == "async" && m == "move" => block,
        _ => return None,
    };
    (block.delimiter() == Delimiter::Brace).then(|| block.clone())
}

/// The body `Box::pin(async move { wrap(…) })`, tokens and spans as written otherwise.
fn boxed_async(body: &TokenStream, wrap: impl FnOnce(TokenStream) -> TokenStream) -> Option<TokenStream> {
    let block = async_block(body)?;
    let mut tokens: Vec<TokenTree> = body.clone().into_iter().collect();
    let Some(TokenTree::Group(call)) = tokens.pop() else { return None };
    let mut wrap = Some(wrap);
    let args = call.stream().into_iter().map(|t| match t {
        TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => {
            let stream = wrap.take().map_or_else(|| block.stream(), |wrap| wrap(block.stream()));
            let mut inner = Group::new(Delimiter::Brace, stream);
            inner.set_span(g.span());
            TokenTree::Group(inner)
        }
        other => other,
    });
    let mut new_call = Group::new(Delimiter::Parenthesis, args.collect());
    new_call.set_span(call.span());
    tokens.push(TokenTree::Group(new_call));
    Some(tokens.into_iter().collect())
}

/// Why an item that is not a function with a body cannot take the attribute.
pub(crate) fn not_a_function(item: TokenStream) -> &'static str {
    // A signature followed by `;`: a trait method's declaration, or a foreign function.
    let declaration = |input: ParseStream| -> syn::Result<()> {
        input.call(Attribute::parse_outer)?;
        input.parse::<Visibility>()?;
        input.parse::<Signature>()?;
        input.parse::<Token![;]>()?;
        Ok(())
    };
    match syn::parse::Parser::parse2(declaration, item) {
        Ok(()) => {
            "#[rate_limiter] needs a function with a body: put it on the function that implements the \
             method, not on a declaration"
        }
        Err(_) => "#[rate_limiter] applies to functions only (`fn` or `async fn` returning Result<T, E>)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn function(tokens: TokenStream) -> Function {
        syn::parse2(tokens).unwrap()
    }

    #[test]
    fn the_body_is_not_parsed() {
        // Not Rust: the attribute still reads the function, and rustc reports the body.
        let f = function(quote!(#[inline] pub async fn f(x: u8) -> Result<(), E> { let = ; }));
        assert_eq!(f.sig.ident, "f");
        assert_eq!(
            f.prepend(quote!(check();)).to_string(),
            quote!(#[inline] pub async fn f(x: u8) -> Result<(), E> { check(); let = ; }).to_string()
        );
    }

    #[test]
    fn inner_attributes_stay_first() {
        let f = function(quote!(
            fn f() {
                #![allow(unused)]
                body()
            }
        ));
        assert_eq!(
            f.prepend(quote!(check();)).to_string(),
            quote!(
                fn f() {
                    #![allow(unused)]
                    check();
                    body()
                }
            )
            .to_string()
        );
    }

    #[test]
    fn finds_the_async_block_of_a_boxed_body() {
        for body in [quote!(Box::pin(async move { body() })), quote!(::std::boxed::Box::pin(async { body() }))] {
            let f = function(quote!(fn f() -> P { #body }));
            assert!(f.is_boxed_async(), "{body}");
            let out = f.prepend_in_async_block(quote!(check();)).unwrap().to_string();
            assert!(
                out.contains(
                    &quote!({
                        check();
                        body()
                    })
                    .to_string()
                ),
                "{out}"
            );
        }
        for body in [
            quote!(let fut = async { body() }; Box::pin(fut)),
            quote!(Box::pin(fut)),
            quote!(Box::new(async move { body() })),
            quote!(Box::pin(async move { body() }); x),
            quote!(x + Box::pin(async move { body() })),
        ] {
            assert!(!function(quote!(fn f() -> P { #body })).is_boxed_async(), "{body}");
        }
    }

    #[test]
    fn sees_an_earlier_expansion() {
        let check = quote!({
            let __ratelimit_limiter = 1;
        });
        assert!(function(quote!(fn f() { #check body() })).already_limited());
        assert!(function(quote!(fn f() -> P { Box::pin(async move { #check body() }) })).already_limited());
        assert!(!function(quote!(
            fn f() {
                {
                    let other = 1;
                }
                body()
            }
        ))
        .already_limited());
    }

    #[test]
    fn tells_declarations_from_other_items() {
        assert!(not_a_function(quote!(
            fn call(&self) -> Result<(), E>;
        ))
        .contains("with a body"));
        assert!(not_a_function(quote!(
            struct Handler;
        ))
        .contains("functions only"));
    }
}
