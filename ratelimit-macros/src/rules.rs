//! `rules = [(20s, 10), (1m, 100)]`: literal windows with units and literal counts, read and
//! converted to milliseconds at compile time (or, with the unit `mo`, kept as calendar months).
//!
//! Only what a literal says is checked here (its shape, its unit, that it is not zero). How long
//! a window or how large a count may be is the runtime's to say: the expansion checks the values
//! against the runtime's bounds by const evaluation (see `bounds`), so the two cannot disagree.

use crate::errors::Errors;
use crate::ungroup::ungroup;
use syn::{Error, Expr, Ident, Lit, LitInt};

/// Units and their length in milliseconds.
const UNITS: &[(&str, u64)] = &[("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)];
const EXAMPLE: &str = "rules = [(20s, 10), (1m, 100)]";

/// A month at its shortest (February of a common year), in ms.
const SHORTEST_MONTH_MS: u64 = 28 * 86_400_000;

/// One rule as read.
pub(crate) struct Rule {
    /// The window in ms (`u64::MAX` when the literal does not even fit: the bound check then
    /// reports it as too long); for a window in calendar months, the shortest it can be.
    pub window_ms: u64,
    /// A window in calendar months (`1mo`): how many (`u64::MAX` when the literal does not
    /// fit); 0 for a span of time.
    pub months: u64,
    pub count: u64,
    /// The window as written, for spans and messages.
    pub window: LitInt,
    /// The count as written, for spans.
    pub count_lit: LitInt,
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
        if let Some(first) = rules.iter().find(|r| r.same_window(&rule)) {
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
        (Some((window_ms, months, window)), Some((count, count_lit))) => {
            Ok(Rule { window_ms, months, count, window, count_lit })
        }
        _ => Err(shape()),
    }
}

impl Rule {
    /// Whether two rules have the same window (one rule per window).
    pub(crate) fn same_window(&self, other: &Rule) -> bool {
        (self.window_ms, self.months) == (other.window_ms, other.months)
    }
}

/// Rules in calendar months count in fixed windows aligned to month starts: the attribute's
/// algorithm is `FixedWindow`, given or implied. Implied only when every rule is in months, so
/// that no rule in seconds silently stops sliding.
pub(crate) fn calendar(rules: &[Rule], algorithm: Option<&Ident>) -> syn::Result<()> {
    let Some(monthly) = rules.iter().find(|r| r.months > 0) else { return Ok(()) };
    let mut e = match algorithm {
        Some(given) if given != "FixedWindow" => Error::new_spanned(
            given,
            format!(
                "rules in calendar months count in fixed windows that start on the 1st (UTC): use \
                 `algorithm = FixedWindow` (or remove `algorithm`), not {given}"
            ),
        ),
        Some(_) => return Ok(()),
        None => {
            let Some(span) = rules.iter().find(|r| r.months == 0) else { return Ok(()) };
            Error::new_spanned(
                &span.window,
                format!(
                    "`{}` beside `{}` in one attribute: calendar months count in fixed windows, and so would \
                     this rule; write `algorithm = FixedWindow` to say so, or put the monthly rule in a \
                     #[rate_limiter] of its own, stacked on this function",
                    span.window, monthly.window
                ),
            )
        }
    };
    e.combine(Error::new_spanned(&monthly.window, "the window in calendar months"));
    Err(e)
}

fn literal(expr: &Expr) -> Option<&Lit> {
    match ungroup(expr) {
        Expr::Lit(l) if l.attrs.is_empty() => Some(&l.lit),
        _ => None,
    }
}

/// A rule's window: a duration, or calendar months (`1mo`): (ms, months, literal).
fn window(expr: &Expr) -> syn::Result<(u64, u64, LitInt)> {
    if let Some(Lit::Int(lit)) = literal(expr) {
        if lit.suffix() == "mo" {
            let months = lit.base10_parse::<u64>().unwrap_or(u64::MAX);
            if months == 0 {
                return Err(Error::new_spanned(lit, "the window must be at least 1 month (`1mo`)"));
            }
            return Ok((months.saturating_mul(SHORTEST_MONTH_MS), months, lit.clone()));
        }
    }
    duration(expr, "window").map(|(ms, lit)| (ms, 0, lit))
}

/// A duration literal with a unit (`20s`, `500ms`), at least 1ms: a rule's window, or
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
    if suffix == "mo" {
        return Err(Error::new_spanned(
            lit,
            format!("`mo` (calendar months) is a rule's window only; the {what} is a duration: use {units}"),
        ));
    }
    let Some(&(_, unit_ms)) = UNITS.iter().find(|(u, _)| *u == suffix) else {
        let months = if what == "window" { " (or mo: calendar months)" } else { "" };
        return Err(Error::new_spanned(lit, format!("unknown unit `{suffix}` in `{lit}`: use {units}{months}")));
    };
    let ms = lit.base10_parse::<u64>().map_or(u64::MAX, |amount| amount.saturating_mul(unit_ms));
    if ms == 0 {
        return Err(Error::new_spanned(lit, format!("the {what} must be at least 1ms")));
    }
    Ok((ms, lit.clone()))
}

/// A count (or a `burst`): a positive integer literal without suffix (`u64::MAX` when it does
/// not even fit: the bound check then reports it as too large).
pub(crate) fn count(expr: &Expr, what: &str) -> syn::Result<(u64, LitInt)> {
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
    let count = lit.base10_parse::<u64>().unwrap_or(u64::MAX);
    if count == 0 {
        return Err(Error::new_spanned(lit, format!("the {what} must be at least 1 (0 would refuse every call)")));
    }
    Ok((count, lit.clone()))
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
        assert_eq!(rules("[(366d, 1)]"), Ok(vec![(31_622_400_000, 1)]));
        assert_eq!(rules("[(31_622_400_000ms, 1)]"), Ok(vec![(31_622_400_000, 1)]));
    }

    #[test]
    fn calendar_months_are_windows() {
        let expr: Expr = syn::parse_str("[(1mo, 3), (3mo, 9), (1d, 1)]").unwrap();
        let read: Vec<(u64, u64)> = parse(&expr).unwrap().iter().map(|r| (r.months, r.count)).collect();
        assert_eq!(read, [(1, 3), (3, 9), (0, 1)]);
        assert!(rules("[(0mo, 1)]").is_err());
        assert!(rules("[(1mo, 1), (1mo, 2)]").unwrap_err().contains("duplicate rule"));
        // Four weeks and a month are different windows.
        assert!(rules("[(28d, 1), (1mo, 2)]").is_ok());
        let wait: Expr = syn::parse_str("1mo").unwrap();
        let refused = duration(&wait, "wait").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(refused.contains("a rule's window only"), "{refused}");
    }

    #[test]
    fn literals_too_large_for_u64_saturate() {
        // The bound check (const evaluation against the runtime's bounds) reports them.
        assert_eq!(rules("[(99999999999999999999999d, 1)]"), Ok(vec![(u64::MAX, 1)]));
        assert_eq!(rules("[(213503982335d, 1)]"), Ok(vec![(u64::MAX, 1)]));
        assert_eq!(rules("[(1s, 99999999999999999999999)]"), Ok(vec![(1000, u64::MAX)]));
    }

    #[test]
    fn bad_rules_are_refused() {
        for bad in [
            "[(0ms, 1)]",
            "[(1s, 0)]",
            "[(1s, -1)]",
            "[(1s, 1u64)]",
            "[(1.5s, 1)]",
            "[(1w, 1)]",
            "[(1, 1)]",
            "[(N, 1)]",
            "[(1s, N)]",
            "[(1s, 1), (1000ms, 2)]",
            "[(1s, 1, 2)]",
            "[]",
            "RULES",
        ] {
            assert!(rules(bad).is_err(), "{bad} should be refused");
        }
    }
}
