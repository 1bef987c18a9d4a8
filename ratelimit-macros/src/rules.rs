//! `rules = [(20s, 10), (1m, 100)]`: literal windows with units and literal counts, checked and
//! converted to milliseconds at compile time.

use crate::errors::Errors;
use crate::ungroup::ungroup;
use syn::{Error, Expr, Lit, LitInt};

/// The longest window the runtime accepts: 366 days (`ratelimit::rule::MAX_WINDOW`).
const MAX_WINDOW_MS: u64 = 366 * 24 * 3600 * 1000;
/// The largest count the runtime accepts: 2^53 - 1 (`ratelimit::rule::MAX_COUNT`).
const MAX_COUNT: u64 = (1 << 53) - 1;
/// Units and their length in milliseconds.
const UNITS: &[(&str, u64)] = &[("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)];
const EXAMPLE: &str = "rules = [(20s, 10), (1m, 100)]";

/// One checked rule.
pub(crate) struct Rule {
    pub window_ms: u64,
    pub count: u64,
    /// The window as written, for spans and messages.
    pub window: LitInt,
}

/// Reads the value of `rules = …`, reporting every bad rule.
pub(crate) fn parse(value: &Expr) -> syn::Result<Vec<Rule>> {
    let Expr::Array(list) = ungroup(value) else {
        return Err(Error::new_spanned(
            value,
            format!("`rules` is a list of `(window, count)` literals: write `{EXAMPLE}`"),
        ));
    };
    if list.elems.is_empty() {
        return Err(Error::new_spanned(
            value,
            format!("`rules` is empty: give at least one `(window, count)`, e.g. `{EXAMPLE}`"),
        ));
    }
    let mut errors = Errors::default();
    let mut rules: Vec<Rule> = Vec::with_capacity(list.elems.len());
    for elem in &list.elems {
        let Some(rule) = errors.take(rule(elem)) else { continue };
        if let Some(first) = rules.iter().find(|r| r.window_ms == rule.window_ms) {
            errors.push(Error::new_spanned(
                &rule.window,
                format!(
                    "duplicate rule: `{}` is the same window as `{}` before it; keep one rule per window",
                    rule.window, first.window
                ),
            ));
            continue;
        }
        rules.push(rule);
    }
    errors.finish()?;
    Ok(rules)
}

fn rule(elem: &Expr) -> syn::Result<Rule> {
    let shape =
        || Error::new_spanned(elem, "a rule is `(window, count)`, e.g. `(20s, 10)` for 10 calls per 20 seconds");
    let Expr::Tuple(tuple) = ungroup(elem) else { return Err(shape()) };
    if tuple.elems.len() != 2 {
        return Err(shape());
    }
    let mut errors = Errors::default();
    let window = errors.take(window(&tuple.elems[0]));
    let count = errors.take(count(&tuple.elems[1], "count"));
    errors.finish()?;
    match (window, count) {
        (Some((window_ms, window)), Some(count)) => Ok(Rule { window_ms, count, window }),
        _ => Err(shape()),
    }
}

fn literal(expr: &Expr) -> Option<&Lit> {
    match ungroup(expr) {
        Expr::Lit(l) if l.attrs.is_empty() => Some(&l.lit),
        _ => None,
    }
}

fn window(expr: &Expr) -> syn::Result<(u64, LitInt)> {
    duration(expr, "window")
}

/// A duration literal with a unit (`20s`, `500ms`), from 1ms to 366 days: a rule's window, or
/// `wait = …`. `what` names it in messages.
pub(crate) fn duration(expr: &Expr, what: &str) -> syn::Result<(u64, LitInt)> {
    let units = "ms, s, m, h or d";
    let lit = match literal(expr) {
        Some(Lit::Int(lit)) => lit,
        Some(Lit::Float(_)) => {
            return Err(Error::new_spanned(
                expr,
                format!("the {what} must be a whole number: write e.g. `1500ms` for 1.5s"),
            ))
        }
        _ => {
            return Err(Error::new_spanned(
                expr,
                format!(
                    "the {what} must be an integer literal with a unit ({units}), e.g. `20s`; \
                     constants and expressions are not supported"
                ),
            ))
        }
    };
    let suffix = lit.suffix();
    if suffix.is_empty() {
        return Err(Error::new_spanned(lit, format!("the {what} needs a unit: write `{lit}s` or use {units}")));
    }
    let Some(&(_, unit_ms)) = UNITS.iter().find(|(u, _)| *u == suffix) else {
        return Err(Error::new_spanned(lit, format!("unknown unit `{suffix}` in `{lit}`: use {units}")));
    };
    let too_long =
        || Error::new_spanned(lit, format!("the {what} `{lit}` is longer than 366 days: use at most `366d`"));
    let amount: u64 = lit.base10_parse().map_err(|_| too_long())?;
    let ms = amount.checked_mul(unit_ms).ok_or_else(too_long)?;
    if ms == 0 {
        return Err(Error::new_spanned(lit, format!("the {what} must be at least 1ms")));
    }
    if ms > MAX_WINDOW_MS {
        return Err(too_long());
    }
    Ok((ms, lit.clone()))
}

/// A count (or a `burst`): a positive integer literal of at most 2^53 - 1.
pub(crate) fn count(expr: &Expr, what: &str) -> syn::Result<u64> {
    let Some(Lit::Int(lit)) = literal(expr) else {
        return Err(Error::new_spanned(
            expr,
            format!(
                "the {what} must be a positive integer literal, e.g. `10`; constants and expressions are not supported"
            ),
        ));
    };
    if !lit.suffix().is_empty() {
        return Err(Error::new_spanned(lit, format!("the {what} is a plain number: write `{}`", lit.base10_digits())));
    }
    let too_large = || Error::new_spanned(lit, format!("the {what} must be at most 2^53 - 1 ({MAX_COUNT})"));
    let count: u64 = lit.base10_parse().map_err(|_| too_large())?;
    if count == 0 {
        return Err(Error::new_spanned(lit, format!("the {what} must be at least 1 (0 would refuse every call)")));
    }
    if count > MAX_COUNT {
        return Err(too_large());
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Result<Vec<(u64, u64)>, String> {
        let expr: Expr = syn::parse_str(text).unwrap();
        parse(&expr).map(|r| r.iter().map(|r| (r.window_ms, r.count)).collect()).map_err(|e| e.to_string())
    }

    #[test]
    fn windows_convert_to_milliseconds() {
        assert_eq!(
            rules("[(500ms, 1), (20s, 10), (1m, 1_000), (2h, 5), (1d, 9_007_199_254_740_991)]"),
            Ok(vec![(500, 1), (20_000, 10), (60_000, 1000), (7_200_000, 5), (86_400_000, (1 << 53) - 1)])
        );
        assert_eq!(rules("[(366d, 1)]"), Ok(vec![(MAX_WINDOW_MS, 1)]));
        assert_eq!(rules("[(31_622_400_000ms, 1)]"), Ok(vec![(MAX_WINDOW_MS, 1)]));
    }

    #[test]
    fn bad_rules_are_refused() {
        for bad in [
            "[(367d, 1)]",
            "[(31_622_400_001ms, 1)]",
            "[(99999999999999999999999d, 1)]",
            "[(0ms, 1)]",
            "[(1s, 0)]",
            "[(1s, 9_007_199_254_740_992)]",
            "[(1s, -1)]",
            "[(1w, 1)]",
            "[(1, 1)]",
            "[(N, 1)]",
            "[(1s, N)]",
            "[(1s, 1), (1000ms, 2)]",
            "[]",
            "RULES",
        ] {
            assert!(rules(bad).is_err(), "{bad} should be refused");
        }
    }
}
