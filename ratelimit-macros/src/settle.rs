//! The checks of `settle = …`, which corrects a call's estimate (`cost`) once its body ran.

use crate::errors::Errors;
use crate::parse::{Attr, Given, Refund};
use syn::{Error, Expr};

/// `settle` corrects an estimate: it needs `cost`, and says on its own what the call costs
/// after the body (a refund is settling to 0).
pub(crate) fn settles(
    settle: Option<&Given<Expr>>,
    cost: Option<&Given<Expr>>,
    refund: Option<&Given<(Refund, Expr)>>,
    errors: &mut Errors,
) {
    let Some(settle) = settle else { return };
    if cost.is_none() {
        errors.push(Error::new_spanned(
            &settle.key,
            "`settle` needs `cost = <estimate>`: the units taken before the body runs, which `settle` then \
             corrects to what the call took (e.g. `cost = 100, settle = |r| …`)",
        ));
    }
    if let Some(refund) = refund {
        let mut e = Error::new_spanned(
            &settle.key,
            "`settle` and `refund` both say what the call costs once the body ran; a refund is settling to \
             0: give only `settle` (e.g. `settle = |r| if r.is_ok() { 0 } else { N }`)",
        );
        e.combine(Error::new_spanned(&refund.key, "`refund` is given here"));
        errors.push(e);
    }
}

/// A concurrency limit counts calls in flight, not units: nothing for `settle` to correct in
/// its attribute.
pub(crate) fn settle_beside_concurrency(attr: &Attr, errors: &mut Errors) {
    if let (Some(s), Some(n)) = (&attr.settle, &attr.concurrency) {
        let mut e = Error::new_spanned(
            &s.key,
            "`settle` corrects the units that rules counted; a concurrency limit counts calls in flight, \
             not units: put `settle` (with `cost`) on a stacked #[rate_limiter] with `rules`",
        );
        e.combine(Error::new_spanned(&n.key, "`concurrency` is given here"));
        errors.push(e);
    }
}
