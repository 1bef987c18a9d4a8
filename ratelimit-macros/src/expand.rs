//! The expansion: a `static` limiter built once per function, and per call the subjects, the
//! cost and one check. Everything else lives in the runtime (`ratelimit::__private`).

use crate::errors::Errors;
use crate::parse::{self, Attr, Kind, Mode, OnError};
use crate::stack;
use crate::validate::{self, Body, Plan, Shape};
use proc_macro2::{Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Error, Expr, Item, ItemFn, Stmt};

/// The default key prefix (spec: "rate_limit:", as in the Java original).
const DEFAULT_PREFIX: &str = "rate_limit:";

/// The attribute's entry point. On any error, the errors are emitted next to the function as it
/// was written (minus the stacked attributes, which were reported here), so a mistake in the
/// attribute gives that one error and not a cascade from the function's callers.
pub(crate) fn rate_limiter(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(_) => return not_a_function(item),
    };
    let siblings = stack::take_siblings(&mut func.attrs);
    match check(args, siblings, &func) {
        Ok((plan, shape)) => expand(func, &plan, &shape),
        Err(e) => {
            let errors = e.to_compile_error();
            quote!(#errors #func)
        }
    }
}

fn check(args: TokenStream, siblings: Vec<stack::Sibling>, func: &ItemFn) -> syn::Result<(Plan, Shape)> {
    let mut errors = Errors::default();
    let mut attrs: Vec<Attr> = Vec::with_capacity(1 + siblings.len());
    attrs.extend(Attr::parse(parse::site(Span::call_site()), args, &mut errors));
    for sibling in siblings {
        if let Some(args) = errors.take(sibling.args) {
            attrs.extend(Attr::parse(sibling.site, args, &mut errors));
        }
    }
    let shape = errors.take(validate::signature(func));
    let plan = errors.take(validate::plan(attrs));
    errors.finish()?;
    match (plan, shape) {
        (Some(plan), Some(shape)) => Ok((plan, shape)),
        _ => Err(Error::new(Span::call_site(), "invalid #[rate_limiter]")),
    }
}

/// Items other than functions get an error at the attribute, and are left as they were.
fn not_a_function(item: TokenStream) -> TokenStream {
    let message = match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Verbatim(_)) | Err(_) => {
            "#[rate_limiter] needs a function with a body: put it on the function that implements the \
             method, not on a declaration"
        }
        Ok(_) => "#[rate_limiter] applies to functions only (`fn` or `async fn` returning Result<T, E>)",
    };
    let error = Error::new(Span::call_site(), message).to_compile_error();
    quote!(#error #item)
}

fn expand(mut func: ItemFn, plan: &Plan, shape: &Shape) -> TokenStream {
    let prelude = prelude(&func, plan, shape);
    let stmt = Stmt::Expr(Expr::Verbatim(prelude), None);
    let block = match shape.body {
        Body::BoxedAsync => validate::boxed_async_mut(&mut func.block),
        Body::Async | Body::Blocking => Some(&mut *func.block),
    };
    match block {
        Some(block) => block.stmts.insert(0, stmt),
        // Unreachable: `signature` found the async block.
        None => {
            let error = Error::new_spanned(&func.sig, "internal error: #[rate_limiter] lost the async block")
                .to_compile_error();
            return quote!(#error #func);
        }
    }
    func.into_token_stream()
}

/// The block that decides the call, placed before the function's own statements. It is a block
/// so that the subjects (which may borrow parameters) are dropped before the body runs.
fn prelude(func: &ItemFn, plan: &Plan, shape: &Shape) -> TokenStream {
    let krate = match &plan.krate {
        Some(path) => path.to_token_stream(),
        None => quote!(::ratelimit),
    };
    let p = quote!(#krate::__private);
    let hygienic = |name: &str| syn::Ident::new(name, Span::mixed_site());
    let limiter = hygienic("__ratelimit_limiter");
    let subjects = hygienic("__ratelimit_subjects");
    let error = hygienic("__ratelimit_error");

    let function = func.sig.ident.unraw().to_string();
    let name = match &plan.name {
        Some(lit) => quote!(::core::option::Option::Some(#lit)),
        None => quote!(::core::option::Option::None),
    };
    let limits = plan.limits.iter().map(|limit| {
        let kind = syn::Ident::new(limit.kind.variant(), Span::call_site());
        let rules = limit.rules.iter().map(|r| {
            let (window, count) = (Literal::u64_suffixed(r.window_ms), Literal::u64_suffixed(r.count));
            quote!((#window, #count))
        });
        let algorithm = match &limit.algorithm {
            Some(a) => a.clone(),
            None => syn::Ident::new(parse::ALGORITHMS[0], Span::call_site()),
        };
        let prefix = match &limit.prefix {
            Some(lit) => lit.to_token_stream(),
            None => Literal::string(DEFAULT_PREFIX).into_token_stream(),
        };
        let burst = limit.burst.map(|b| {
            let b = Literal::u64_suffixed(b);
            quote!(.burst(#b))
        });
        let mode = match limit.mode {
            Some(Mode::Shadow) => Some(quote!(.mode(#p::Mode::Shadow))),
            Some(Mode::Enforce) | None => None,
        };
        quote! {
            .limit_ms(#p::LimitType::#kind, &[#(#rules),*], #p::Algorithm::#algorithm, #prefix)
            #burst
            #mode
        }
    });
    let on_error = plan.on_error.map(|policy| {
        let variant = match policy {
            OnError::Allow => quote!(Allow),
            OnError::Deny => quote!(Deny),
        };
        quote!(.on_error(#p::FailurePolicy::#variant))
    });

    // Each subject expression is bound by reference first, so that temporaries it creates
    // (`key = format!(..)`) live as long as the subject that borrows them.
    let mut bindings = Vec::new();
    let mut subject_exprs = Vec::new();
    for (i, limit) in plan.limits.iter().enumerate() {
        // Hygienic, but located at the expression: type errors point at what the user wrote.
        let span = limit.subject.as_ref().map_or(Span::mixed_site(), |e| Span::mixed_site().located_at(e.span()));
        let value = format_ident!("__ratelimit_value_{}", i, span = span);
        subject_exprs.push(match (limit.kind, &limit.subject) {
            (Kind::Global, _) => quote!(#p::global()),
            (Kind::Ip, None) => quote!(#p::ip_from_context()),
            (Kind::User, None) => quote!(#p::user_from_context()),
            (Kind::Ip, Some(expr)) => {
                bindings.push(bind(&value, expr));
                quote_spanned!(expr.span()=> #p::ip(#value))
            }
            (Kind::User | Kind::Key, Some(expr)) => {
                bindings.push(bind(&value, expr));
                quote_spanned! {expr.span()=> {
                    #[allow(unused_imports)]
                    use #p::{ViaDisplay as _, ViaSubjectValue as _};
                    (&#p::SubjectOf(#value)).__ratelimit_subject()
                }}
            }
            // Refused by `validate`: a Key limit always has its expression.
            (Kind::Key, None) => quote!(::core::compile_error!("`type = Key` needs `key = <expr>`")),
        });
    }
    let cost = match &plan.cost {
        Some(expr) => quote_spanned!(expr.span()=> #p::cost(&(#expr))),
        None => quote!(1u64),
    };
    let check = match (shape.body, plan.wait.map(Literal::u64_suffixed)) {
        (Body::Blocking, None) => quote!(#p::check_blocking(#limiter, &#subjects, #cost)),
        (Body::Async | Body::BoxedAsync, None) => quote!(#p::check(#limiter, &#subjects, #cost).await),
        (Body::Blocking, Some(ms)) => quote!(#p::until_ready_blocking(#limiter, &#subjects, #cost, #ms)),
        (Body::Async | Body::BoxedAsync, Some(ms)) => {
            quote!(#p::until_ready(#limiter, &#subjects, #cost, #ms).await)
        }
    };
    // `?` converts with `From` into the function's error type; when that type has no
    // `From<RateLimited>`, rustc says so and points at the return type.
    let question = quote_spanned!(shape.result.span()=> ?);

    quote! {
        {
            let #limiter: &'static #p::StaticLimiter = {
                static LIMITER: #p::StaticLimiter = #p::StaticLimiter::new(|| {
                    #p::registered(#p::Limiter::builder(#p::name(::core::module_path!(), #function, #name))
                        #(#limits)*
                        #on_error
                        .build())
                });
                &LIMITER
            };
            #(#bindings)*
            let #subjects = [#(#subject_exprs),*];
            if let ::core::result::Result::Err(#error) = #check {
                ::core::result::Result::<::core::convert::Infallible, _>::Err(#error)#question;
            }
        }
    }
}

fn bind(name: &syn::Ident, expr: &Expr) -> TokenStream {
    quote_spanned!(expr.span()=> let #name = &(#expr);)
}
