//! How long a window and how large a count may be: the runtime decides (`Rule::from_millis`,
//! `MAX_COUNT`), and a proc-macro crate can neither export constants to it nor import them from
//! it. So the expansion carries one `const` item per literal that asks the runtime's `const fn`s
//! at compile time; a value out of bounds fails that item's evaluation with the runtime's
//! message, at the span of the literal. One definition of the bounds, and the error still points
//! at what the user wrote.

use crate::parse::Attr;
use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::LitInt;

/// The bound checks of every literal of `attrs`; `p` is the path of `ratelimit::__private`.
pub(crate) fn checks(p: &TokenStream, attrs: &[Attr]) -> TokenStream {
    let mut checks = TokenStream::new();
    for attr in attrs {
        for rule in attr.rules.iter().flat_map(|r| &r.value) {
            checks.extend(match rule.months {
                0 => check(p, "window_problem", "window", rule.window_ms, &rule.window),
                months => check(p, "months_problem", "window", months, &rule.window),
            });
            checks.extend(check(p, "count_problem", "count", rule.count, &rule.count_lit));
        }
        if let Some(burst) = &attr.burst {
            checks.extend(check(p, "count_problem", "burst", burst.value.0, &burst.value.1));
        }
        if let Some(wait) = &attr.wait {
            checks.extend(check(p, "window_problem", "wait", wait.value.0, &wait.value.1));
        }
        if let Some(block) = &attr.block {
            checks.extend(check(p, "window_problem", "block", block.value.0, &block.value.1));
        }
        if let Some(sync) = &attr.sync {
            checks.extend(check(p, "window_problem", "sync", sync.value.0, &sync.value.1));
        }
        if let Some(lease) = &attr.lease {
            checks.extend(check(p, "window_problem", "lease", lease.value.0, &lease.value.1));
        }
        if let Some(n) = &attr.concurrency {
            checks.extend(check(p, "concurrency_problem", "concurrency", n.value.0, &n.value.1));
        }
    }
    checks
}

/// `const _: () = …;` that fails to evaluate, at `lit`, when `value` is out of bounds.
fn check(p: &TokenStream, problem: &str, what: &str, value: u64, lit: &LitInt) -> TokenStream {
    let problem = syn::Ident::new(problem, lit.span());
    let value = proc_macro2::Literal::u64_suffixed(value);
    quote_spanned! {lit.span()=>
        const _: () = if let ::core::option::Option::Some(problem) = #p::#problem(#what, #value) {
            ::core::panic!("{}", problem.as_str())
        };
    }
}
