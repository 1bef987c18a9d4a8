//! The values of the attribute's expressions: subjects (`user = …`, `key = …`, `ip = …`),
//! `cost = …` and `tier = …`, each with a compile error that says what to write when the
//! expression's type does not fit.

use crate::model::subject::{IpValue, Subject, SubjectValue};
use std::fmt::Display;

/// Wraps the value of a `user = …` / `key = …` expression. The method
/// `__ratelimit_subject` prefers [`SubjectValue`] and falls back to `Display`
/// (autoref specialisation: call it as `(&SubjectOf(&value)).__ratelimit_subject()` with
/// both `ViaSubjectValue` and `ViaDisplay` in scope).
pub struct SubjectOf<'a, T: ?Sized>(pub &'a T);

/// See [`SubjectOf`].
pub trait ViaSubjectValue<'a> {
    /// The subject.
    fn __ratelimit_subject(&self) -> Subject<'a>;
}

impl<'a, T: ?Sized + SubjectValue> ViaSubjectValue<'a> for SubjectOf<'a, T> {
    fn __ratelimit_subject(&self) -> Subject<'a> {
        let value: &'a T = self.0;
        value.to_subject()
    }
}

/// See [`SubjectOf`].
pub trait ViaDisplay {
    /// The subject.
    fn __ratelimit_subject(&self) -> Subject<'static>;
}

impl<T: ?Sized + Display> ViaDisplay for &SubjectOf<'_, T> {
    fn __ratelimit_subject(&self) -> Subject<'static> {
        Subject::bytes(self.0.to_string().into_bytes())
    }
}

/// The subject of an `ip = …` expression: anything [`IpValue`](crate::model::subject::IpValue).
#[inline]
pub fn ip<T: IpValue + ?Sized>(value: &T) -> Subject<'_> {
    value.to_ip_subject()
}

/// A value usable as `cost = …`: unsigned and signed integers (negative means 0).
#[diagnostic::on_unimplemented(
    message = "`cost = …` takes an integer (the units this call consumes), not `{Self}`",
    label = "expected an integer such as `1`, `n` or `items.len()`"
)]
pub trait Cost {
    /// The cost in units.
    fn units(self) -> u64;
}

macro_rules! cost_unsigned {
    ($($t:ty),*) => {$(
        impl Cost for $t {
            fn units(self) -> u64 { u64::try_from(self).unwrap_or(u64::MAX) }
        }
    )*};
}
macro_rules! cost_signed {
    ($($t:ty),*) => {$(
        impl Cost for $t {
            fn units(self) -> u64 { u64::try_from(self).unwrap_or(if self < 0 { 0 } else { u64::MAX }) }
        }
    )*};
}
cost_unsigned!(u8, u16, u32, u64, u128, usize);
cost_signed!(i8, i16, i32, i64, i128, isize);

impl<T: Cost + Copy> Cost for &T {
    fn units(self) -> u64 {
        (*self).units()
    }
}

/// The units of a `cost = …` expression.
#[inline]
pub fn cost(value: impl Cost) -> u64 {
    value.units()
}

/// A value usable as `tier = …`: text naming the caller's tier, or an `Option` of it (`None`:
/// no tier, the limits' own rules).
#[diagnostic::on_unimplemented(
    message = "`tier = …` takes the caller's tier as text (`&str`, `String`, or an `Option` of one), not `{Self}`",
    label = "expected a tier name such as `\"pro\"`, `user.plan` or `plan.as_deref()`"
)]
pub trait Tier {
    /// The tier's name, if any.
    fn tier_name(&self) -> Option<&str>;
}

impl Tier for str {
    fn tier_name(&self) -> Option<&str> {
        Some(self)
    }
}

impl Tier for String {
    fn tier_name(&self) -> Option<&str> {
        Some(self)
    }
}

impl Tier for std::borrow::Cow<'_, str> {
    fn tier_name(&self) -> Option<&str> {
        Some(self)
    }
}

impl Tier for Box<str> {
    fn tier_name(&self) -> Option<&str> {
        Some(self)
    }
}

impl Tier for std::sync::Arc<str> {
    fn tier_name(&self) -> Option<&str> {
        Some(self)
    }
}

impl<T: Tier + ?Sized> Tier for &T {
    fn tier_name(&self) -> Option<&str> {
        (**self).tier_name()
    }
}

impl<T: Tier> Tier for Option<T> {
    fn tier_name(&self) -> Option<&str> {
        self.as_ref().and_then(Tier::tier_name)
    }
}

/// The tier of a `tier = …` expression.
#[inline]
pub fn tier<T: Tier + ?Sized>(value: &T) -> Option<&str> {
    value.tier_name()
}
