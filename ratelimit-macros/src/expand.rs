//! The expansion: a `static` limiter built once per function, and per call the subjects, the
//! cost and one check. Everything else lives in the runtime (`ratelimit::__private`).

use crate::errors::Errors;
use crate::item::{self, Function};
use crate::parse::{self, Attr, Kind, Mode, OnError, Refund};
use crate::signature::{self, Body, Shape};
use crate::validate::{self, Limit, Plan};
use crate::{bounds, stack};
use proc_macro2::{Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Error, Expr};

/// The attribute's entry point. On any error, the errors are emitted next to the function as it
/// was written (minus the stacked attributes, which were reported here), so a mistake in the
/// attribute gives that one error and not a cascade from the function's callers.
pub(crate) fn rate_limiter(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut func: Function = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(_) => {
            let error = Error::new(Span::call_site(), item::not_a_function(item.clone())).to_compile_error();
            return quote!(#error #item);
        }
    };
    if func.already_limited() {
        let error = Error::new(Span::call_site(), RENAMED).to_compile_error();
        return quote!(#error #func);
    }
    let siblings = stack::take_siblings(&mut func.attrs);
    let (checked, bounds) = check(args, siblings, &func);
    match checked {
        Ok((plan, shape)) => expand(func, &plan, &shape, bounds),
        Err(e) => {
            // The bound checks still run, so that a count out of bounds shows with the rest.
            let errors = e.to_compile_error();
            let func = func.prepend(bounds);
            quote!(#errors #func)
        }
    }
}

const RENAMED: &str = "this function already has a #[rate_limiter] under another name: stacked attributes \
                       are decided together only when each is written `rate_limiter` or \
                       `ratelimit::rate_limiter`; import the attribute under its own name \
                       (not `use ratelimit::rate_limiter as …`)";

/// Reads and checks every attribute and the signature, collecting every error; also returns the
/// bound checks of the literals that could be read, whatever else failed.
fn check(
    args: TokenStream,
    siblings: Vec<stack::Sibling>,
    func: &Function,
) -> (syn::Result<(Plan, Shape)>, TokenStream) {
    let mut errors = Errors::default();
    let mut attrs: Vec<Attr> = Vec::with_capacity(1 + siblings.len());
    attrs.extend(Attr::parse(parse::site(Span::call_site()), args, &mut errors));
    for sibling in siblings {
        if let Some(args) = errors.take(sibling.args) {
            attrs.extend(Attr::parse(sibling.site, args, &mut errors));
        }
    }
    let krate = attrs.iter().find_map(|a| a.krate.as_ref()).map(|k| &k.value.0);
    let bounds = bounds::checks(&private_path(krate), &attrs);
    let shape = errors.take(signature::signature(func));
    let plan = errors.take(validate::plan(attrs));
    let checked = errors.finish().and_then(|()| match (plan, shape) {
        (Some(plan), Some(shape)) => Ok((plan, shape)),
        _ => Err(Error::new(Span::call_site(), "invalid #[rate_limiter]")),
    });
    (checked, bounds)
}

/// `<crate>::__private`, the runtime items generated code calls.
fn private_path(krate: Option<&syn::Path>) -> TokenStream {
    let krate = crate_path(krate);
    quote!(#krate::__private)
}

/// The `ratelimit` crate: the limiter is built with its public API (`Limiter`, `Limit`, `Rule`…),
/// as a user would build it by hand.
fn crate_path(krate: Option<&syn::Path>) -> TokenStream {
    match krate {
        Some(path) => quote!(#path),
        None => quote!(::ratelimit),
    }
}

fn expand(func: Function, plan: &Plan, shape: &Shape, bounds: TokenStream) -> TokenStream {
    if plan.ends_calls() {
        let prelude = prelude(&func, plan, shape, bounds, true);
        let ended = |body: TokenStream| ended(prelude, body, plan, shape);
        return match shape.body {
            Body::Async | Body::Blocking => func.wrap(ended),
            Body::BoxedAsync => {
                let sig = func.sig.clone();
                func.wrap_in_async_block(ended).unwrap_or_else(|| {
                    // Unreachable: `signature` found the async block.
                    Error::new_spanned(sig, "internal error: #[rate_limiter] lost the async block").to_compile_error()
                })
            }
        };
    }
    let prelude = prelude(&func, plan, shape, bounds, false);
    match shape.body {
        Body::Async | Body::Blocking => func.prepend(prelude),
        Body::BoxedAsync => {
            let sig = func.sig.clone();
            func.prepend_in_async_block(prelude).unwrap_or_else(|| {
                // Unreachable: `signature` found the async block.
                Error::new_spanned(sig, "internal error: #[rate_limiter] lost the async block").to_compile_error()
            })
        }
    }
}

/// The statements of a function whose call must end after its body (`refund`, concurrency
/// slots): the check keeps its permit, the body runs in a closure (or an async block) so that
/// its `return`s and `?`s give its result, and the permit ends with that result (refunded or
/// not, its slots freed). A panic or a dropped future drops the permit, which frees the slots.
/// The body's type is pinned to the function's result type, so that `?` inside converts as it
/// would in the function.
fn ended(prelude: TokenStream, body: TokenStream, plan: &Plan, shape: &Shape) -> TokenStream {
    let p = private_path(plan.krate.as_ref());
    let permit = syn::Ident::new(item::PERMIT, Span::mixed_site());
    let result = &shape.result;
    let refund = match plan.refund {
        Some(Refund::OnOk) => quote!(#p::RefundWhen::OnOk),
        Some(Refund::OnErr) => quote!(#p::RefundWhen::OnErr),
        None => quote!(#p::RefundWhen::Never),
    };
    // `settle = …`: applied to the body's result where the user wrote it (so that a closure's
    // parameter needs no annotation, and a wrong type is reported there).
    let (result_of, units) = (
        syn::Ident::new("__ratelimit_result", Span::mixed_site()),
        syn::Ident::new("__ratelimit_units", Span::mixed_site()),
    );
    let end = |body: TokenStream, run: TokenStream| match &plan.settle {
        Some(expr) => {
            let apply = quote_spanned!(expr.span()=> #p::settle_units::<#result, _>(#expr, &#result_of));
            quote! {
                let #result_of = #body;
                let #units = #apply;
                #p::settle(#permit, #result_of, #units) #run
            }
        }
        None => quote!(#p::end(#permit, #body, #refund) #run),
    };
    let end = match shape.body {
        Body::Blocking => end(quote!(#p::body::<#result, _>(move || { #body })), quote!(.blocking())),
        Body::Async | Body::BoxedAsync => {
            end(quote!(#p::body_async::<#result, _>(async move { #body }).await), quote!(.await))
        }
    };
    quote! {
        #prelude
        #end
    }
}

/// The block that decides the call, placed before the function's own statements. It is a block
/// so that the subjects (which may borrow parameters) are dropped before the body runs. It binds
/// [`item::MARKER`], by which a later expansion sees it. The bound checks are items, and go
/// first: items after statements are a lint of their own. With `keep`, the block's value is the
/// permit, bound to [`item::PERMIT`].
fn prelude(func: &Function, plan: &Plan, shape: &Shape, bounds: TokenStream, keep: bool) -> TokenStream {
    let p = private_path(plan.krate.as_ref());
    let hygienic = |name: &str| syn::Ident::new(name, Span::mixed_site());
    let limiter = hygienic(item::MARKER);
    let subjects = hygienic("__ratelimit_subjects");
    let error = hygienic("__ratelimit_error");

    let build = build_limiter(&p, func, plan);
    let (bindings, subject_exprs) = subjects_of(&p, plan);
    // The call, described once with the request API's options, then awaited or blocked on.
    let cost = plan.cost.as_ref().map(|expr| quote_spanned!(expr.span()=> .cost(#p::cost(&(#expr)))));
    // The tier, like the subjects, is evaluated in the function's scope and bound by reference.
    let (tier_binding, tier) = match &plan.tier {
        Some(expr) => {
            // Located at the expression, so that a type error points at what the user wrote.
            let value = syn::Ident::new("__ratelimit_tier", Span::mixed_site().located_at(expr.span()));
            (bind(&value, expr), Some(quote_spanned!(expr.span()=> .tier(#p::tier(#value)))))
        }
        None => (TokenStream::new(), None),
    };
    let wait = plan.wait.map(Literal::u64_suffixed).map(|ms| quote!(.wait(::core::time::Duration::from_millis(#ms))));
    let run = match shape.body {
        Body::Blocking => quote!(.blocking()),
        Body::Async | Body::BoxedAsync => quote!(.await),
    };
    // Hygienic: the user's own `cost` and `tier` expressions are evaluated in these arms.
    let (built, refused) = (hygienic("__ratelimit_built"), hygienic("__ratelimit_refused"));
    let check = quote! {
        match #limiter.get() {
            ::core::result::Result::Ok(#built) => #built.check(&#subjects) #cost #tier #wait #run,
            ::core::result::Result::Err(#refused) => ::core::result::Result::Err(#refused),
        }
    };
    // `?` converts with `From` into the function's error type; when that type has no
    // `From<RateLimited>`, rustc says so and points at the return type.
    let question = quote_spanned!(shape.result.span()=> ?);
    let head = quote! {
        #bounds
        let #limiter: &'static #p::LazyLimiter = {
            static LIMITER: #p::LazyLimiter = #build;
            // Known from the start of the process, before the first call (the registry).
            #p::inventory::submit! { #p::Declared(&LIMITER) }
            &LIMITER
        };
        #(#bindings)*
        #tier_binding
        let #subjects = [#(#subject_exprs),*];
    };
    if keep {
        let permit = hygienic(item::PERMIT);
        return quote! {
            let #permit = {
                #head
                match #check {
                    ::core::result::Result::Ok(permit) => permit,
                    ::core::result::Result::Err(#error) => {
                        match ::core::result::Result::<::core::convert::Infallible, _>::Err(#error)#question {}
                    }
                }
            };
        };
    }
    quote! {
        {
            #head
            if let ::core::result::Result::Err(#error) = #check {
                ::core::result::Result::<::core::convert::Infallible, _>::Err(#error)#question;
            }
        }
    }
}

/// The limiter, built on first use: every stacked limit, and the limiter-wide options.
fn build_limiter(p: &TokenStream, func: &Function, plan: &Plan) -> TokenStream {
    let k = crate_path(plan.krate.as_ref());
    let function = func.sig.ident.unraw().to_string();
    let name = match &plan.name {
        Some(lit) => quote!(::core::option::Option::Some(#lit)),
        None => quote!(::core::option::Option::None),
    };
    let limits = plan.limits.iter().map(|limit| add_limit(&k, limit));
    let on_error = plan.on_error.map(|policy| {
        let variant = match policy {
            OnError::Allow => quote!(Allow),
            OnError::Deny => quote!(Deny),
            OnError::Local => quote!(Local),
        };
        quote!(.on_error(#k::FailurePolicy::#variant))
    });
    let name_arg = syn::Ident::new("__ratelimit_name", Span::mixed_site());
    quote! {
        #p::LazyLimiter::new(
            || #p::name(::core::module_path!(), #function, #name),
            |#name_arg| #k::Limiter::builder(#name_arg)
                #(#limits)*
                #on_error
                .build(),
        )
    }
}

/// One attribute's limit, as a `Limit` with its options; `k` is the `ratelimit` crate's path.
fn add_limit(k: &TokenStream, limit: &Limit) -> TokenStream {
    let kind = syn::Ident::new(limit.kind.variant(), Span::call_site());
    let algorithm = limit.algorithm.as_ref().map(|a| quote!(.algorithm(#k::Algorithm::#a)));
    let prefix = limit.prefix.as_ref().map(|lit| quote!(.prefix(#lit)));
    let burst = limit.burst.map(|b| {
        let b = Literal::u64_suffixed(b);
        quote!(.burst(#b))
    });
    let mode = match limit.mode {
        Some(Mode::Shadow) => Some(quote!(.mode(#k::Mode::Shadow))),
        Some(Mode::Enforce) | None => None,
    };
    let millis = |ms: u64| {
        let ms = Literal::u64_suffixed(ms);
        quote!(::core::time::Duration::from_millis(#ms))
    };
    if let Some(n) = limit.concurrency {
        let n = Literal::u64_suffixed(n);
        let lease = limit.lease.map(|ms| {
            let lease = millis(ms);
            quote!(.lease(#lease))
        });
        return quote! {
            .limit(#k::Limit::concurrency(#k::LimitType::#kind, #n) #prefix #lease #mode)
        };
    }
    // Every literal was checked against the rules' bounds at compile time (`bounds`): the `?`
    // is for the compiler, which cannot know it.
    let rules = limit.rules.iter().map(|r| {
        let count = Literal::u64_suffixed(r.count);
        if r.months > 0 {
            // Checked to be a divisor of 12 (`bounds`): it fits.
            let months = Literal::u32_suffixed(u32::try_from(r.months).unwrap_or(u32::MAX));
            return quote!(#k::Rule::calendar_months(#months, #count)?);
        }
        let window = Literal::u64_suffixed(r.window_ms);
        quote!(#k::Rule::from_millis(#window, #count)?)
    });
    let block = limit.block.map(|ms| {
        let block = millis(ms);
        quote!(.block(#block))
    });
    let sync = limit.sync.map(|ms| {
        let sync = millis(ms);
        quote!(.sync(#sync))
    });
    quote! {
        .limit(#k::Limit::new(#k::LimitType::#kind, [#(#rules),*]) #algorithm #prefix #burst #mode #block #sync)
    }
}

/// Per limit, the expression of its subject, and the `let`s those expressions need first: each
/// `ip`/`user`/`key` expression is bound by reference, so that temporaries it creates
/// (`key = format!(..)`) live as long as the subject that borrows them.
fn subjects_of(p: &TokenStream, plan: &Plan) -> (Vec<TokenStream>, Vec<TokenStream>) {
    let mut bindings = Vec::new();
    let mut subjects = Vec::new();
    for (i, limit) in plan.limits.iter().enumerate() {
        // Hygienic, but located at the expression: type errors point at what the user wrote.
        let span = limit.subject.as_ref().map_or(Span::mixed_site(), |e| Span::mixed_site().located_at(e.span()));
        let value = format_ident!("__ratelimit_value_{}", i, span = span);
        subjects.push(match (limit.kind, &limit.subject) {
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
    (bindings, subjects)
}

fn bind(name: &syn::Ident, expr: &Expr) -> TokenStream {
    quote_spanned!(expr.span()=> let #name = &(#expr);)
}
