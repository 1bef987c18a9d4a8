//! [`Settle`]: a permit settled to the units its call really took (a refund: to 0), and the
//! store call that does it, freeing the permit's concurrency slots with it.

use super::slots::{release_store, Slots};
use super::Permit;
use crate::error::StoreError;
use crate::limiter::answer::StoreFuture;
use crate::store::{Answer, Call, Release};
use std::future::IntoFuture;

impl Permit<'_> {
    /// The store call that settles the units to `actual` (`None`: keeps them) and frees the
    /// slots.
    fn give_back(&mut self, actual: Option<u64>) -> Answer<()> {
        if !self.decided {
            return Answer::Ready(Ok(()));
        }
        let d = self.admitted.decision();
        let slots = self.slots.take().map(|s| Slots::disarm(*s));
        let set = self.set();
        let settles = actual.is_some_and(|a| a != self.cost);
        let indices: Vec<usize> = (0..set.limits.len())
            .filter(|&i| if set.limits[i].is_concurrency() { slots.is_some() } else { settles })
            .collect();
        if indices.is_empty() || self.keys.len() != set.limits.len() {
            return Answer::Ready(Ok(()));
        }
        let subjects = self.keys.slices();
        let actual = actual.unwrap_or(self.cost);
        if settles {
            set.forget_keys(self.limiter.store(), &subjects);
            // The response's `RateLimit` field tells what is left after settling: never below 0.
            if let (Some(ctx), Some(mut quota)) = (crate::context::current(), set.quota(&d)) {
                let capacity = set.limits.get(d.limit).map_or(0, |l| l.capacity(d.rule));
                quota.remaining = quota.remaining.saturating_add(self.cost).saturating_sub(actual).min(capacity);
                ctx.record_quota(quota);
            }
        }
        let release = Release {
            call: Call {
                limits: &set.limits,
                subjects: &subjects,
                cost: self.cost,
                now_us: self.pinned.then_some(d.at_us),
                shadow: 0,
            },
            indices: &indices,
            at_us: d.at_us,
            member: d.member,
            actual,
        };
        release_store(self.limiter, self.local).release(&release)
    }
}

/// A permit settled ([`Permit::settle`], [`Permit::refund`]), its concurrency slots freed with
/// it: `.await` it, or run it with [`blocking`](Self::blocking).
#[must_use = "a settle changes nothing until it is awaited or run with `.blocking()`"]
pub struct Settle<'a> {
    pub(super) permit: Permit<'a>,
    /// The units the call comes to (`None`: its cost, and only the slots are freed: the call
    /// ended).
    pub(super) actual: Option<u64>,
}

impl Settle<'_> {
    /// Settles, blocking the thread.
    pub fn blocking(mut self) -> Result<(), StoreError> {
        self.permit.give_back(self.actual).finish_blocking()
    }
}

impl IntoFuture for Settle<'_> {
    type Output = Result<(), StoreError>;
    type IntoFuture = StoreFuture<()>;

    fn into_future(mut self) -> StoreFuture<()> {
        StoreFuture::of(self.permit.give_back(self.actual))
    }
}
