//! Syntax: the attribute's `key = value` list, then each value read into a typed [`Attr`].
//!
//! Nothing here knows about other options or other attributes; `validate` does the cross
//! checks. Every problem is collected, so one compile reports all of them.

use crate::errors::Errors;
use crate::rules::{self, Rule};
use crate::ungroup::ungroup;
use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Error, Expr, Ident, Lit, LitStr, Token};

/// One `key = value` as written. `value` is any expression: every option's value (`Ip`,
/// `"str"`, `[(20s, 10)]`, `self.ip`) is one, so the list always parses and each value is judged
/// on its own.
pub(crate) struct RawOption {
    pub key: Ident,
    pub value: Expr,
}

impl Parse for RawOption {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key = if input.peek(Token![type]) {
            let token: Token![type] = input.parse()?;
            Ident::new("type", token.span)
        } else if input.peek(Token![crate]) {
            let token: Token![crate] = input.parse()?;
            Ident::new("crate", token.span)
        } else {
            Ident::parse_any(input)
                .map_err(|e| Error::new(e.span(), "expected an option such as `type = Ip` or `rules = [(20s, 10)]`"))?
        };
        if !input.peek(Token![=]) {
            return Err(Error::new_spanned(&key, format!("expected `=` after `{key}`: write `{key} = …`")));
        }
        input.parse::<Token![=]>()?;
        let value = input.parse()?;
        Ok(RawOption { key, value })
    }
}

/// Splits the attribute's tokens into options.
pub(crate) fn options(tokens: TokenStream) -> syn::Result<Vec<RawOption>> {
    let list = Punctuated::<RawOption, Token![,]>::parse_terminated.parse2(tokens)?;
    Ok(list.into_iter().collect())
}

/// What a limit is counted per.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Global,
    Ip,
    User,
    Key,
}

impl Kind {
    /// The variant of the runtime's `LimitType`.
    pub(crate) fn variant(self) -> &'static str {
        match self {
            Kind::Global => "Global",
            Kind::Ip => "Ip",
            Kind::User => "User",
            Kind::Key => "Key",
        }
    }

    /// The option that names this type's subject (`ip`, `user`, `key`).
    pub(crate) fn subject_option(self) -> Option<&'static str> {
        match self {
            Kind::Global => None,
            Kind::Ip => Some("ip"),
            Kind::User => Some("user"),
            Kind::Key => Some("key"),
        }
    }
}

/// `on_error = allow|deny|local`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnError {
    Allow,
    Deny,
    Local,
}

/// `mode = enforce|shadow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Enforce,
    Shadow,
}

/// `refund = on_ok|on_err`: when the body's result gives the call's units back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refund {
    /// Only failures count (a login that succeeded gives its attempt back).
    OnOk,
    /// Failures cost nothing.
    OnErr,
}

/// The algorithms the runtime knows (`algorithm = …`).
pub(crate) const ALGORITHMS: &[&str] =
    &["SlidingWindow", "SlidingWindowCounter", "FixedWindow", "TokenBucket", "LeakyBucket", "Gcra"];

/// The algorithms with a capacity other than the count (`burst = …`).
pub(crate) const BURST_ALGORITHMS: &[&str] = &["TokenBucket", "LeakyBucket", "Gcra"];

/// The options, in the order the messages list them.
const OPTIONS: &[&str] = &[
    "type",
    "rules",
    "prefix",
    "name",
    "ip",
    "user",
    "key",
    "algorithm",
    "burst",
    "cost",
    "on_error",
    "wait",
    "mode",
    "tier",
    "refund",
    "settle",
    "block",
    "concurrency",
    "lease",
    "sync",
    "crate",
];

/// A value together with the option key it was given under (for spans).
pub(crate) struct Given<T> {
    pub key: Ident,
    pub value: T,
}

/// One `#[rate_limiter(...)]`, each option typed but not yet checked against the others.
#[derive(Default)]
pub(crate) struct Attr {
    /// Tokens that stand for the whole attribute, for "missing …" errors.
    pub site: TokenStream,
    pub kind: Option<Given<(Kind, Expr)>>,
    pub rules: Option<Given<Vec<Rule>>>,
    pub prefix: Option<Given<LitStr>>,
    pub name: Option<Given<LitStr>>,
    pub ip: Option<Given<Expr>>,
    pub user: Option<Given<Expr>>,
    pub key: Option<Given<Expr>>,
    pub algorithm: Option<Given<Ident>>,
    pub burst: Option<Given<(u64, syn::LitInt)>>,
    pub cost: Option<Given<Expr>>,
    pub on_error: Option<Given<(OnError, Expr)>>,
    /// `wait = <duration>`, in ms.
    pub wait: Option<Given<(u64, syn::LitInt)>>,
    pub mode: Option<Given<Mode>>,
    /// `tier = <expr>`: the caller's tier, evaluated per call.
    pub tier: Option<Given<Expr>>,
    pub refund: Option<Given<(Refund, Expr)>>,
    /// `settle = <expr>`: the units the call took, from the body's `&Result<T, E>`.
    pub settle: Option<Given<Expr>>,
    /// `block = <duration>`, in ms.
    pub block: Option<Given<(u64, syn::LitInt)>>,
    /// `concurrency = N`.
    pub concurrency: Option<Given<(u64, syn::LitInt)>>,
    /// `lease = <duration>`, in ms.
    pub lease: Option<Given<(u64, syn::LitInt)>>,
    /// `sync = <duration>`, in ms: sync mode (a hot key decided from local reserves).
    pub sync: Option<Given<(u64, syn::LitInt)>>,
    pub krate: Option<Given<(syn::Path, LitStr)>>,
    /// Options given with a value that was refused (already reported).
    pub invalid: Vec<String>,
}

impl Attr {
    /// Reads one attribute's tokens. `site` stands for the attribute in errors. Bad values are
    /// reported to `errors` and left out (their keys recorded in `invalid`), so that the rest
    /// of the attribute can still be checked; `None` when the tokens are not a list of options.
    pub(crate) fn parse(site: TokenStream, tokens: TokenStream, errors: &mut Errors) -> Option<Attr> {
        let options = errors.take(options(tokens))?;
        let mut attr = Attr { site, ..Attr::default() };
        for RawOption { key, value } in options {
            if let Err(e) = attr.set(key, value) {
                errors.push(e);
            }
        }
        Some(attr)
    }

    /// Whether the option was given with a value that was refused (and reported).
    pub(crate) fn was_refused(&self, option: &str) -> bool {
        self.invalid.iter().any(|k| k == option)
    }

    fn set(&mut self, key: Ident, value: Expr) -> syn::Result<()> {
        let name = key.to_string();
        let result = self.set_typed(key, value);
        if result.is_err() {
            self.invalid.push(name);
        }
        result
    }

    fn set_typed(&mut self, key: Ident, value: Expr) -> syn::Result<()> {
        let name = key.to_string();
        match name.as_str() {
            "type" => store(&mut self.kind, key, kind(&value).map(|k| (k, value))),
            "rules" => store(&mut self.rules, key, rules::parse(&value)),
            "prefix" => store(&mut self.prefix, key, prefix(&value)),
            "name" => store(&mut self.name, key, limiter_name(&value)),
            "ip" => store(&mut self.ip, key, Ok(value)),
            "user" => store(&mut self.user, key, Ok(value)),
            "key" => store(&mut self.key, key, Ok(value)),
            "algorithm" => store(&mut self.algorithm, key, algorithm(&value)),
            "burst" => store(&mut self.burst, key, rules::count(&value, "burst")),
            "cost" => store(&mut self.cost, key, Ok(value)),
            "on_error" => store(&mut self.on_error, key, on_error(&value).map(|p| (p, value))),
            "wait" => store(&mut self.wait, key, rules::duration(&value, "wait")),
            "mode" => store(&mut self.mode, key, mode(&value)),
            "tier" => store(&mut self.tier, key, Ok(value)),
            "refund" => store(&mut self.refund, key, refund(&value).map(|r| (r, value))),
            "settle" => store(&mut self.settle, key, Ok(value)),
            "block" => store(&mut self.block, key, rules::duration(&value, "block")),
            "concurrency" => store(&mut self.concurrency, key, rules::count(&value, "concurrency")),
            "lease" => store(&mut self.lease, key, rules::duration(&value, "lease")),
            "sync" => store(&mut self.sync, key, rules::duration(&value, "sync")),
            "crate" => store(&mut self.krate, key, krate(&value)),
            _ => Err(Error::new_spanned(
                &key,
                format!("unknown option `{name}`: expected one of {}", OPTIONS.join(", ")),
            )),
        }
    }
}

/// Records an option, refusing a second one; a bad value is reported after the duplicate
/// check so that both show.
fn store<T>(slot: &mut Option<Given<T>>, key: Ident, value: syn::Result<T>) -> syn::Result<()> {
    if let Some(first) = slot {
        let mut e = Error::new_spanned(&key, format!("`{key}` is given twice: keep one"));
        e.combine(Error::new_spanned(&first.key, format!("`{key}` is first given here")));
        return Err(e);
    }
    *slot = Some(Given { key, value: value? });
    Ok(())
}

/// A single identifier (`Ip`), or `None` for any other expression.
fn single_ident(expr: &Expr) -> Option<&Ident> {
    match ungroup(expr) {
        Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => p.path.get_ident(),
        _ => None,
    }
}

/// The last identifier of a path (`Algorithm::SlidingWindow` → `SlidingWindow`).
fn last_ident(expr: &Expr) -> Option<&Ident> {
    match ungroup(expr) {
        Expr::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| &s.ident),
        _ => None,
    }
}

fn kind(value: &Expr) -> syn::Result<Kind> {
    const EXPECTED: &str = "expected `Global`, `Ip`, `User` or `Key` (`Default` is an alias of `Global`)";
    let Some(ident) = last_ident(value) else {
        return Err(Error::new_spanned(value, format!("`type` is a name: {EXPECTED}")));
    };
    let text = ident.to_string();
    Ok(match text.as_str() {
        "Global" | "Default" => Kind::Global,
        "Ip" => Kind::Ip,
        "User" => Kind::User,
        "Key" => Kind::Key,
        _ => {
            let hint = ["Global", "Default", "Ip", "User", "Key"]
                .iter()
                .find(|k| k.eq_ignore_ascii_case(&text))
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            return Err(Error::new_spanned(value, format!("unknown type `{text}`{hint}: {EXPECTED}")));
        }
    })
}

fn string(value: &Expr, option: &str, example: &str) -> syn::Result<LitStr> {
    match ungroup(value) {
        Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) => Ok(s.clone()),
        _ => Err(Error::new_spanned(value, format!("`{option}` takes a string literal: write `{option} = {example}`"))),
    }
}

fn prefix(value: &Expr) -> syn::Result<LitStr> {
    const MAX_PREFIX_LEN: usize = 64;
    let lit = string(value, "prefix", "\"rate_limit:\"")?;
    let text = lit.value();
    if text.contains(['{', '}']) {
        return Err(Error::new_spanned(
            &lit,
            "the key prefix may not contain `{` or `}` (they would move the Redis Cluster hash tag): remove them",
        ));
    }
    if text.len() > MAX_PREFIX_LEN {
        return Err(Error::new_spanned(
            &lit,
            format!("the key prefix is {} bytes long: use at most {MAX_PREFIX_LEN}", text.len()),
        ));
    }
    Ok(lit)
}

fn limiter_name(value: &Expr) -> syn::Result<LitStr> {
    let lit = string(value, "name", "\"my_app::update\"")?;
    if lit.value().is_empty() {
        return Err(Error::new_spanned(&lit, "`name` may not be empty: remove it to use `module::path::function`"));
    }
    Ok(lit)
}

fn algorithm(value: &Expr) -> syn::Result<Ident> {
    let known = ALGORITHMS.join(", ");
    let Some(ident) = last_ident(value) else {
        return Err(Error::new_spanned(value, format!("`algorithm` is a name: one of {known}")));
    };
    if !ALGORITHMS.iter().any(|a| ident == a) {
        return Err(Error::new_spanned(value, format!("unknown algorithm `{ident}`: known algorithms: {known}")));
    }
    Ok(ident.clone())
}

fn on_error(value: &Expr) -> syn::Result<OnError> {
    match single_ident(value).map(Ident::to_string).as_deref() {
        Some("allow") => Ok(OnError::Allow),
        Some("deny") => Ok(OnError::Deny),
        Some("local") => Ok(OnError::Local),
        _ => Err(Error::new_spanned(
            value,
            "`on_error` is `allow` (let calls through when the store fails), `deny` (refuse them) or \
             `local` (decide them in process memory until the store answers again)",
        )),
    }
}

fn refund(value: &Expr) -> syn::Result<Refund> {
    const EXPECTED: &str = "`refund` is `on_ok` (give the call's units back when the function returns Ok: only \
                            failures count, e.g. login attempts) or `on_err` (give them back on Err: failures cost nothing)";
    match single_ident(value).map(Ident::to_string).as_deref() {
        Some("on_ok") => Ok(Refund::OnOk),
        Some("on_err") => Ok(Refund::OnErr),
        _ => Err(Error::new_spanned(value, EXPECTED)),
    }
}

fn mode(value: &Expr) -> syn::Result<Mode> {
    const EXPECTED: &str = "`mode` is `enforce` (the default: refuse calls over the rules) or `shadow` \
                            (decide and count, but never refuse)";
    match single_ident(value).map(Ident::to_string).as_deref() {
        Some("enforce") => Ok(Mode::Enforce),
        Some("shadow") => Ok(Mode::Shadow),
        Some("off") => Err(Error::new_spanned(
            value,
            format!("{EXPECTED}; `off` is for the overrides file (RATELIMIT_CONFIG): here, remove the attribute"),
        )),
        Some(other) if other.eq_ignore_ascii_case("shadow") || other.eq_ignore_ascii_case("enforce") => {
            Err(Error::new_spanned(value, format!("{EXPECTED} (did you mean `{}`?)", other.to_ascii_lowercase())))
        }
        _ => match ungroup(value) {
            Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) => {
                Err(Error::new_spanned(value, format!("{EXPECTED}: write it without quotes, `mode = {}`", s.value())))
            }
            _ => Err(Error::new_spanned(value, EXPECTED)),
        },
    }
}

fn krate(value: &Expr) -> syn::Result<(syn::Path, LitStr)> {
    let lit = string(value, "crate", "\"::ratelimit\"")?;
    let path = lit.parse_with(syn::Path::parse_mod_style).map_err(|_| {
        Error::new_spanned(
            &lit,
            "`crate` is the path the `ratelimit` crate is reachable at, e.g. \"::my_app::ratelimit\"",
        )
    })?;
    Ok((path, lit))
}

/// Tokens with the given span, to stand for an attribute whose own tokens are not at hand.
pub(crate) fn site(span: Span) -> TokenStream {
    Ident::new("rate_limiter", span).into_token_stream()
}
