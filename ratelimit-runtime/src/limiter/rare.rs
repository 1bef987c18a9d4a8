//! [`Rare`]: a value that is almost always empty (an optional box or `Arc`), tested where it is
//! dropped and dropped out of line; and [`Empty`], what such a value is.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

/// A field that is almost always empty: a call's runtime overrides, the snapshot of an overrides
/// file, a refusal. The drop of a plain one was an out-of-line call even when empty, about a
/// dozen instructions on every decision for what is one test. (A type holding several of them
/// still gets drop glue too large to inline: the permit, dropped by every caller, tests one flag
/// for all its fields instead.)
pub(crate) struct Rare<T: Empty>(ManuallyDrop<T>);

/// A value with an empty state (its `Default`) that owns nothing: left undropped, nothing leaks.
pub(crate) trait Empty: Default {
    /// Whether this is a value that owns nothing (nothing to drop).
    fn holds_nothing(&self) -> bool;
}

impl<T> Empty for Option<T> {
    #[inline(always)]
    fn holds_nothing(&self) -> bool {
        self.is_none()
    }
}

impl<T: Empty> Rare<T> {
    #[inline]
    pub(crate) const fn new(value: T) -> Rare<T> {
        Rare(ManuallyDrop::new(value))
    }

    /// The value, the empty one left in its place.
    #[inline]
    pub(crate) fn take(&mut self) -> T {
        std::mem::take(&mut *self.0)
    }
}

impl<T: Empty> Deref for Rare<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Empty> DerefMut for Rare<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T: Empty> Drop for Rare<T> {
    #[inline(always)]
    fn drop(&mut self) {
        if !self.0.holds_nothing() {
            free(&mut self.0);
        }
    }
}

/// Drops what `value` holds, leaving it empty: what `ManuallyDrop` keeps is then nothing to
/// drop. Takes the place, not the value, so that the caller's drop is a test and a call, with
/// no move of the value inlined beside it.
#[cold]
#[inline(never)]
fn free<T: Empty>(value: &mut ManuallyDrop<T>) {
    drop(std::mem::take(&mut **value));
}

#[cfg(test)]
mod tests {
    use super::Rare;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static DROPPED: AtomicUsize = AtomicUsize::new(0);

    struct Counted;

    impl Drop for Counted {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn its_box_is_dropped_once_and_an_empty_one_not_at_all() {
        drop(Rare::<Option<Box<Counted>>>::new(None));
        assert_eq!(DROPPED.load(Ordering::Relaxed), 0);
        drop(Rare::new(Some(Box::new(Counted))));
        assert_eq!(DROPPED.load(Ordering::Relaxed), 1);
        let mut taken = Rare::new(Some(Box::new(Counted)));
        let inner = taken.take();
        assert!(taken.is_none());
        drop(taken);
        assert_eq!(DROPPED.load(Ordering::Relaxed), 1, "taken out: not dropped with the wrapper");
        drop(inner);
        assert_eq!(DROPPED.load(Ordering::Relaxed), 2);
    }
}
