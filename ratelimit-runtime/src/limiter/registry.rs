//! The attribute's limiters by name: `ratelimit::limiter("server::hello")`.

use crate::limiter::Limiter;
use crate::rt::lock::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

static REGISTRY: Mutex<Option<HashMap<Arc<str>, Limiter>>> = Mutex::new(None);

/// Records a limiter the attribute built. A name already taken keeps its first limiter: two
/// functions that share a `name` share their counts anyway (the name is part of the keys).
pub(crate) fn register(limiter: &Limiter) {
    let mut registry = lock(&REGISTRY);
    registry.get_or_insert_with(HashMap::new).entry(Arc::from(limiter.name())).or_insert_with(|| limiter.clone());
}

/// The limiter of a `#[rate_limiter]` function, by its name (`name = "…"`, else
/// `module::path::function`): to [`peek`](Limiter::peek) at or [`reset`](Limiter::reset) its
/// counts from other code.
///
/// A limiter is registered when it is built, on the first call of its function in this
/// process: before that, `None` (nothing was counted by this process yet, though other
/// processes on the same Redis may have counted; build a [`Limiter`] with the same name,
/// limits and prefix to reach their counts). Stacked attributes make one limiter; two
/// functions that share a `name` find the first one built.
///
/// ```
/// use ratelimit_runtime::limiter;
///
/// assert!(limiter("nobody::called::this").is_none());
/// ```
pub fn limiter(name: &str) -> Option<Limiter> {
    let registry = lock(&REGISTRY);
    registry.as_ref()?.get(name).cloned()
}

/// Every limiter the attribute built in this process so far (see [`limiter`]: one is built on
/// the first call of its function), sorted by name: what an admin page lists.
pub fn limiters() -> Vec<Limiter> {
    let registry = lock(&REGISTRY);
    let mut all: Vec<Limiter> = registry.as_ref().map_or_else(Vec::new, |r| r.values().cloned().collect());
    all.sort_by(|a, b| a.name().cmp(b.name()));
    all
}
