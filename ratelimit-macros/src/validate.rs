//! Checks that need more than one option or more than one attribute, and the checked model the
//! expansion works from (the function itself is checked in `signature.rs`).

use crate::errors::Errors;
use crate::parse::{Attr, Given, Kind, Mode, OnError, Refund, ALGORITHMS, BURST_ALGORITHMS};
use crate::rules::{self, Rule};
use crate::settle::{settle_beside_concurrency, settles};
use quote::ToTokens;
use syn::{Error, Expr, Ident, LitStr};

/// One limit (one attribute), checked.
pub(crate) struct Limit {
    pub kind: Kind,
    pub rules: Vec<Rule>,
    pub algorithm: Option<Ident>,
    pub burst: Option<u64>,
    pub prefix: Option<LitStr>,
    /// `mode = …` (per attribute: one stacked limit may be shadowed while another enforces).
    pub mode: Option<Mode>,
    /// The `ip`/`user`/`key` expression, if any.
    pub subject: Option<Expr>,
    /// `block = …` in ms: the penalty after a refusal as exceeded.
    pub block: Option<u64>,
    /// `concurrency = N`: a concurrency limit (then `rules` is empty).
    pub concurrency: Option<u64>,
    /// `lease = …` in ms (concurrency limits).
    pub lease: Option<u64>,
    /// `sync = …` in ms: decided from local reserves, filled from the store in batches.
    pub sync: Option<u64>,
}

/// Everything the expansion needs: the limits of all stacked attributes, outermost first, and
/// the options that apply to the whole limiter.
pub(crate) struct Plan {
    pub limits: Vec<Limit>,
    pub name: Option<LitStr>,
    pub on_error: Option<OnError>,
    pub krate: Option<syn::Path>,
    pub cost: Option<Expr>,
    /// `wait = …` in ms: wait for room up to this long instead of refusing.
    pub wait: Option<u64>,
    /// `tier = …`: the caller's tier, which chooses the rules in force.
    pub tier: Option<Expr>,
    /// `refund = …`: when the body's result gives the call's units back.
    pub refund: Option<Refund>,
    /// `settle = …`: the units the call took, from the body's result (with `cost`, the estimate).
    pub settle: Option<Expr>,
}

impl Plan {
    /// Whether the call must be ended after the body: its units may be given back, or it holds
    /// concurrency slots.
    pub(crate) fn ends_calls(&self) -> bool {
        self.refund.is_some() || self.settle.is_some() || self.limits.iter().any(|l| l.concurrency.is_some())
    }
}

/// Checks one attribute's options against each other. `None` when its `type` or `rules` was
/// refused when read (and reported then).
fn limit(attr: &mut Attr) -> syn::Result<Option<Limit>> {
    let mut errors = Errors::default();
    if attr.kind.is_none() && !attr.was_refused("type") {
        errors.push(Error::new_spanned(
            &attr.site,
            "missing `type`: add `type = Global`, `type = Ip`, `type = User` or `type = Key`",
        ));
    }
    let concurrency = attr.concurrency.is_some() || attr.was_refused("concurrency");
    if attr.rules.is_none() && !attr.was_refused("rules") && !concurrency {
        errors.push(Error::new_spanned(
            &attr.site,
            "missing `rules`: add e.g. `rules = [(20s, 10)]` (at most 10 calls in any 20 seconds), or \
             `concurrency = N` (at most N calls at a time)",
        ));
    }
    if let Some(n) = &attr.concurrency {
        let conflicts: [(&str, Option<&Ident>, &str); 6] = [
            (
                "rules",
                attr.rules.as_ref().map(|g| &g.key),
                "counts calls per window; put `concurrency` in a #[rate_limiter] of its own, stacked on this \
                 function (both are decided in one step)",
            ),
            ("algorithm", attr.algorithm.as_ref().map(|g| &g.key), "is how rules count; a concurrency limit has none"),
            ("burst", attr.burst.as_ref().map(|g| &g.key), "is a bucket's capacity; a concurrency limit has none"),
            (
                "block",
                attr.block.as_ref().map(|g| &g.key),
                "starts when rules refuse a call; a concurrency limit has none (stack one with `rules`)",
            ),
            (
                "sync",
                attr.sync.as_ref().map(|g| &g.key),
                "hands out units of rules from a local reserve; slots are taken in the store call by call: remove it",
            ),
            (
                "mode = shadow",
                attr.mode.as_ref().filter(|g| g.value == Mode::Shadow).map(|g| &g.key),
                "cannot watch a concurrency limit (its slots would never be freed): remove it",
            ),
        ];
        for (option, key, why) in conflicts {
            if let Some(key) = key {
                let mut e = Error::new_spanned(key, format!("`{option}` {why}"));
                e.combine(Error::new_spanned(&n.key, "`concurrency` is given here"));
                errors.push(e);
            }
        }
    }
    if let (Some(lease), false) = (&attr.lease, concurrency) {
        errors.push(Error::new_spanned(
            &lease.key,
            "`lease` is how long a concurrency slot is held at most: it needs `concurrency = N`; remove it",
        ));
    }
    if let (Some(sync), Some(block)) = (&attr.sync, &attr.block) {
        let mut e = Error::new_spanned(
            &sync.key,
            "`sync` hands out units from a local reserve, and `block` is decided in the store call by call: \
             remove one of them",
        );
        e.combine(Error::new_spanned(&block.key, "`block` is given here"));
        errors.push(e);
    }
    if let (Some(sync), Some(rules)) = (&attr.sync, &attr.rules) {
        if let Some(shortest) = rules.value.iter().min_by_key(|r| r.window_ms) {
            if sync.value.0 > shortest.window_ms {
                let mut e = Error::new_spanned(
                    &sync.value.1,
                    "`sync` must not be longer than the shortest window: a reserve would outlive the window \
                     its units count in",
                );
                e.combine(Error::new_spanned(&shortest.window, "the shortest window"));
                errors.push(e);
            }
        }
    }
    if let Some(rules) = &attr.rules {
        if let Err(e) = rules::calendar(&rules.value, attr.algorithm.as_ref().map(|g| &g.value)) {
            errors.push(e);
        }
    }
    let kind = attr.kind.as_ref().map(|k| k.value.0);
    let mut subject = None;
    for (option, given) in [("ip", attr.ip.take()), ("user", attr.user.take()), ("key", attr.key.take())] {
        let Some(given) = given else { continue };
        match kind {
            Some(kind) if kind.subject_option() == Some(option) => subject = Some(given.value),
            Some(kind) => errors.push(Error::new_spanned(
                &given.key,
                format!(
                    "`{option} = …` only applies to `type = {}`, and this limit is `type = {}`: {}",
                    variant_of(option),
                    kind.variant(),
                    match kind.subject_option() {
                        Some(own) => format!("use `{own} = …` instead, or change the type"),
                        None => "remove it, or change the type".to_owned(),
                    }
                ),
            )),
            None => {}
        }
    }
    if let Some(Given { value: (Kind::Key, expr), .. }) = &attr.kind {
        if subject.is_none() && !attr.was_refused("key") {
            errors.push(Error::new_spanned(
                expr,
                "`type = Key` needs `key = <expr>`, the value to count per (e.g. `key = format!(\"{tenant}:{route}\")`)",
            ));
        }
    }
    if let (Some(burst), false) = (&attr.burst, attr.was_refused("algorithm")) {
        let algorithm = attr.algorithm.as_ref().map_or_else(|| ALGORITHMS[0].to_owned(), |a| a.value.to_string());
        if !BURST_ALGORITHMS.contains(&algorithm.as_str()) {
            errors.push(Error::new_spanned(
                &burst.key,
                format!(
                    "`burst` sets a bucket's capacity, and {algorithm} has none: use `algorithm = {}` or remove `burst`",
                    BURST_ALGORITHMS.join("`, `algorithm = ")
                ),
            ));
        }
    }
    errors.finish()?;
    let rules = match (attr.rules.take(), &attr.concurrency) {
        (Some(rules), _) => Some(rules.value),
        (None, Some(_)) => Some(Vec::new()),
        (None, None) => None,
    };
    match (attr.kind.take(), rules) {
        // A refused `type` or `rules` was reported when it was read.
        (Some(kind), Some(rules)) => Ok(Some(Limit {
            kind: kind.value.0,
            rules,
            algorithm: attr.algorithm.take().map(|g| g.value),
            burst: attr.burst.take().map(|g| g.value.0),
            prefix: attr.prefix.take().map(|g| g.value),
            mode: attr.mode.take().map(|g| g.value),
            subject,
            block: attr.block.take().map(|g| g.value.0),
            concurrency: attr.concurrency.take().map(|g| g.value.0),
            lease: attr.lease.take().map(|g| g.value.0),
            sync: attr.sync.take().map(|g| g.value.0),
        })),
        _ => Ok(None),
    }
}

fn variant_of(option: &str) -> &'static str {
    match option {
        "ip" => "Ip",
        "user" => "User",
        _ => "Key",
    }
}

/// Merges the stacked attributes (outermost first) into one plan.
pub(crate) fn plan(attrs: Vec<Attr>) -> syn::Result<Plan> {
    let mut errors = Errors::default();
    let mut plan = Plan {
        limits: Vec::new(),
        name: None,
        on_error: None,
        krate: None,
        cost: None,
        wait: None,
        tier: None,
        refund: None,
        settle: None,
    };
    // The first attribute that gave each limiter-wide option, to compare the others with.
    let mut name: Option<Given<LitStr>> = None;
    let mut on_error: Option<Given<(OnError, Expr)>> = None;
    let mut krate: Option<Given<(syn::Path, LitStr)>> = None;
    let mut cost: Option<Given<Expr>> = None;
    let mut wait: Option<Given<(u64, syn::LitInt)>> = None;
    let mut tier: Option<Given<Expr>> = None;
    let mut refund: Option<Given<(Refund, Expr)>> = None;
    let mut settle: Option<Given<Expr>> = None;
    for mut attr in attrs {
        settle_beside_concurrency(&attr, &mut errors);
        agree(&mut settle, attr.settle.take(), same_tokens, &mut errors);
        agree(&mut refund, attr.refund.take(), |a, b| a.0 == b.0, &mut errors);
        agree(&mut name, attr.name.take(), |a, b| a.value() == b.value(), &mut errors);
        agree(&mut on_error, attr.on_error.take(), |a, b| a.0 == b.0, &mut errors);
        agree(&mut krate, attr.krate.take(), |a, b| same_tokens(&a.0, &b.0), &mut errors);
        agree(&mut cost, attr.cost.take(), same_tokens, &mut errors);
        agree(&mut wait, attr.wait.take(), |a, b| a.0 == b.0, &mut errors);
        agree(&mut tier, attr.tier.take(), same_tokens, &mut errors);
        if let Some(Some(limit)) = errors.take(limit(&mut attr)) {
            if let Err(e) = repeats(&plan.limits, &limit) {
                errors.push(e);
            }
            plan.limits.push(limit);
        }
    }
    settles(settle.as_ref(), cost.as_ref(), refund.as_ref(), &mut errors);
    errors.finish()?;
    plan.name = name.map(|g| g.value);
    plan.on_error = on_error.map(|g| g.value.0);
    plan.krate = krate.map(|g| g.value.0);
    plan.cost = cost.map(|g| g.value);
    plan.wait = wait.map(|g| g.value.0);
    plan.tier = tier.map(|g| g.value);
    plan.refund = refund.map(|g| g.value.0);
    plan.settle = settle.map(|g| g.value);
    Ok(plan)
}

fn same_tokens<T: ToTokens>(a: &T, b: &T) -> bool {
    a.to_token_stream().to_string() == b.to_token_stream().to_string()
}

/// Stacked attributes may each give a limiter-wide option, but must then agree.
fn agree<T>(first: &mut Option<Given<T>>, next: Option<Given<T>>, same: impl Fn(&T, &T) -> bool, errors: &mut Errors) {
    let Some(next) = next else { return };
    match first {
        None => *first = Some(next),
        Some(first) if same(&first.value, &next.value) => {}
        Some(first) => {
            let key = &next.key;
            let mut e = Error::new_spanned(
                key,
                format!(
                    "`{key}` conflicts with the `{key}` of another #[rate_limiter] on this function: \
                     stacked attributes make one limiter, so give `{key}` once"
                ),
            );
            e.combine(Error::new_spanned(&first.key, format!("the other `{key}` is here")));
            errors.push(e);
        }
    }
}

/// Two stacked limits that count the same subject the same way over the same window would
/// count every call twice.
fn repeats(earlier: &[Limit], limit: &Limit) -> syn::Result<()> {
    let prefix = |l: &Limit| l.prefix.as_ref().map(LitStr::value);
    let algorithm = |l: &Limit| l.algorithm.as_ref().map(Ident::to_string);
    let subject = |l: &Limit| l.subject.as_ref().map(|e| e.to_token_stream().to_string());
    let mut errors = Errors::default();
    for other in earlier {
        if other.kind != limit.kind
            || prefix(other) != prefix(limit)
            || algorithm(other) != algorithm(limit)
            || other.burst != limit.burst
            || subject(other) != subject(limit)
        {
            continue;
        }
        for rule in &limit.rules {
            if let Some(first) = other.rules.iter().find(|r| r.same_window(rule)) {
                errors.push(Error::new_spanned(
                    &rule.window,
                    format!(
                        "duplicate rule: window `{}` is already limited as `{}` by another #[rate_limiter] \
                         of the same type and subject; keep one rule per window",
                        rule.window, first.window
                    ),
                ));
            }
        }
    }
    errors.finish()
}
