//! The concurrency slots a permit holds, freed when it ends or, failing that, when it is
//! dropped; and where a permit gives back.

use crate::limiter::keys::SubjectKeys;
use crate::limiter::snapshot::Snapshot;
use crate::limiter::Limiter;
use crate::model::member::Member;
use crate::rt::io;
use crate::store::{Answer, Call, Release, Store};
use std::sync::Arc;

/// The concurrency slots a permit holds: owned (a `Limiter` is a handle), so that dropping it
/// can free them from anywhere.
pub(super) struct Slots {
    pub(super) limiter: Limiter,
    pub(super) snapshot: Option<Arc<Snapshot>>,
    pub(super) keys: SubjectKeys,
    pub(super) at_us: u64,
    pub(super) member: Member,
    pub(super) pinned: bool,
    /// Taken in process memory while the store failed: freed there.
    pub(super) local: bool,
    /// Still to be freed by `Drop`.
    pub(super) held: bool,
}

/// Where a permit's units and slots are given back: the store that admitted it.
pub(super) fn release_store(limiter: &Limiter, local: bool) -> &dyn Store {
    if local {
        limiter.local_store()
    } else {
        &**limiter.store()
    }
}

impl Slots {
    /// The permit frees the slots itself: nothing left for `Drop`.
    pub(super) fn disarm(mut self) {
        self.held = false;
    }
}

/// A permit dropped without ending (the call panicked, or its future was dropped): the slots
/// are freed in the background. In memory that is done at once; for a remote store the release
/// runs on the library's I/O runtime, which works from async code and plain threads alike and
/// never blocks the dropping thread (the store's timeout bounds it; if it fails, the lease
/// frees the slots).
impl Drop for Slots {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let set = self.limiter.enforced(self.snapshot.as_deref());
        let indices: Vec<usize> = (0..set.limits.len()).filter(|&i| set.limits[i].is_concurrency()).collect();
        if self.keys.len() != set.limits.len() {
            return;
        }
        let subjects = self.keys.slices();
        let release = Release {
            call: Call {
                limits: &set.limits,
                subjects: &subjects,
                cost: 1,
                now_us: self.pinned.then_some(self.at_us),
                shadow: 0,
            },
            indices: &indices,
            at_us: self.at_us,
            member: self.member,
            actual: 1,
        };
        match release_store(&self.limiter, self.local).release(&release) {
            Answer::Ready(Err(e)) => tracing::warn!(error = %e, "ratelimit: could not free a concurrency slot"),
            Answer::Ready(Ok(())) => {}
            Answer::Remote(fut) => match io::handle() {
                Ok(handle) => {
                    handle.spawn(async move {
                        if let Err(e) = fut.await {
                            tracing::warn!(error = %e, "ratelimit: could not free a concurrency slot; its lease will");
                        }
                    });
                }
                Err(e) => tracing::warn!(error = %e, "ratelimit: could not free a concurrency slot; its lease will"),
            },
        }
    }
}
