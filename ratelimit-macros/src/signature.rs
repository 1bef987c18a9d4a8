//! The function's signature: what `#[rate_limiter]` accepts (a `Result` return type, `async fn`,
//! `fn`, or a boxed future as `#[async_trait]` writes it) and how its body runs.

use crate::errors::Errors;
use crate::item::Function;
use quote::ToTokens;
use syn::{Error, GenericArgument, PathArguments, ReturnType, Type, TypeParamBound};

/// How the function's body runs, which decides where and how the check goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Body {
    /// A plain `fn`: the blocking check at the top of the body.
    Blocking,
    /// An `async fn`: the awaited check at the top of the body.
    Async,
    /// A `fn` returning `Pin<Box<dyn Future<Output = Result<..>>>>` whose body is
    /// `Box::pin(async move { … })` (what `#[async_trait]` makes): the awaited check at the top
    /// of the async block.
    BoxedAsync,
}

/// The function's shape: how its body runs, and its `Result` type (whose span the
/// `From<RateLimited>` conversion takes, so a missing impl is reported there).
pub(crate) struct Shape {
    pub body: Body,
    pub result: proc_macro2::TokenStream,
}

const NEEDS_RESULT: &str =
    "#[rate_limiter] needs the function to return Result<T, E> where E: From<ratelimit::RateLimited> \
     (a refused call returns Err(RateLimited.into()))";

/// Checks the function's signature and finds its shape.
pub(crate) fn signature(func: &Function) -> syn::Result<Shape> {
    let sig = &func.sig;
    let mut errors = Errors::default();
    if let Some(constness) = &sig.constness {
        errors.push(Error::new_spanned(
            constness,
            "#[rate_limiter] cannot limit a `const fn` (limits are decided at run time): remove `const`",
        ));
    }
    let shape = match &sig.output {
        ReturnType::Default => Err(Error::new_spanned(sig, format!("{NEEDS_RESULT}; this function returns `()`"))),
        ReturnType::Type(_, ty) => match (sig.asyncness.is_some(), future_output(ty)) {
            (false, Some(output)) => {
                if !func.is_boxed_async() {
                    Err(Error::new_spanned(
                        ty,
                        "#[rate_limiter] on a function that returns a boxed future needs its body to be \
                         `Box::pin(async move { … })` (as #[async_trait] writes it): write an `async fn` instead",
                    ))
                } else if is_result(output) {
                    Ok(Shape { body: Body::BoxedAsync, result: output.to_token_stream() })
                } else {
                    Err(Error::new_spanned(output, NEEDS_RESULT))
                }
            }
            _ if is_result(ty) => Ok(Shape {
                body: if sig.asyncness.is_some() { Body::Async } else { Body::Blocking },
                result: ty.to_token_stream(),
            }),
            _ => Err(Error::new_spanned(ty, NEEDS_RESULT)),
        },
    };
    let shape = errors.take(shape);
    errors.finish()?;
    shape.ok_or_else(|| Error::new_spanned(sig, NEEDS_RESULT))
}

fn strip(ty: &Type) -> &Type {
    match ty {
        Type::Group(g) => strip(&g.elem),
        Type::Paren(p) => strip(&p.elem),
        other => other,
    }
}

/// A path type whose last segment is `Result`: `Result<T, E>`, `io::Result<T>`,
/// `anyhow::Result<T>`.
fn is_result(ty: &Type) -> bool {
    match strip(ty) {
        Type::Path(p) => p.qself.is_none() && p.path.segments.last().is_some_and(|s| s.ident == "Result"),
        _ => false,
    }
}

/// `Name<T, ..>` → `T`.
fn first_type_arg<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(p) = strip(ty) else { return None };
    let segment = p.path.segments.last().filter(|s| s.ident == name)?;
    let PathArguments::AngleBracketed(args) = &segment.arguments else { return None };
    args.args.iter().find_map(|a| match a {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    })
}

/// `Pin<Box<dyn Future<Output = T> + ..>>` → `T`.
fn future_output(ty: &Type) -> Option<&Type> {
    let boxed = first_type_arg(ty, "Pin")?;
    let Type::TraitObject(object) = strip(first_type_arg(boxed, "Box")?) else { return None };
    object.bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(bound) = bound else { return None };
        let segment = bound.path.segments.last().filter(|s| s.ident == "Future")?;
        let PathArguments::AngleBracketed(args) = &segment.arguments else { return None };
        args.args.iter().find_map(|a| match a {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
            _ => None,
        })
    })
}
