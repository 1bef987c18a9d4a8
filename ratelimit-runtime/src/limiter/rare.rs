//! [`Rare`]: an optional box that most values leave empty, tested where the value is dropped
//! and freed out of line.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

/// An `Option<Box<T>>` that is almost always `None` (a permit's concurrency slots, a call's
/// runtime overrides). The drop of a plain one was an out-of-line call even when empty, about a
/// dozen instructions on every decision for what is one test.
pub(crate) struct Rare<T>(ManuallyDrop<Option<Box<T>>>);

impl<T> Rare<T> {
    #[inline]
    pub(crate) const fn new(value: Option<Box<T>>) -> Rare<T> {
        Rare(ManuallyDrop::new(value))
    }
}

impl<T> Deref for Rare<T> {
    type Target = Option<Box<T>>;

    #[inline]
    fn deref(&self) -> &Option<Box<T>> {
        &self.0
    }
}

impl<T> DerefMut for Rare<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Option<Box<T>> {
        &mut self.0
    }
}

impl<T> Drop for Rare<T> {
    #[inline]
    fn drop(&mut self) {
        // Taken, so what `ManuallyDrop` keeps is `None`: nothing is left undropped.
        if self.0.is_some() {
            free(self.0.take());
        }
    }
}

#[cold]
#[inline(never)]
fn free<T>(boxed: Option<Box<T>>) {
    drop(boxed);
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
        drop(Rare::<Counted>::new(None));
        assert_eq!(DROPPED.load(Ordering::Relaxed), 0);
        drop(Rare::new(Some(Box::new(Counted))));
        assert_eq!(DROPPED.load(Ordering::Relaxed), 1);
        let mut taken = Rare::new(Some(Box::new(Counted)));
        let inner = taken.take();
        drop(taken);
        assert_eq!(DROPPED.load(Ordering::Relaxed), 1, "taken out: not dropped with the wrapper");
        drop(inner);
        assert_eq!(DROPPED.load(Ordering::Relaxed), 2);
    }
}
