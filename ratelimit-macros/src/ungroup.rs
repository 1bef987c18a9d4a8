//! Shared by every parser: expressions as written, seen through the invisible groups that
//! `macro_rules!` wraps around forwarded fragments.

use syn::Expr;

/// Looks through the invisible groups `macro_rules!` wraps around forwarded fragments.
pub(crate) fn ungroup(expr: &Expr) -> &Expr {
    match expr {
        Expr::Group(g) => ungroup(&g.expr),
        other => other,
    }
}
