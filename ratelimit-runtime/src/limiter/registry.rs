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
/// counts, or override a subject's rules, from other code.
///
/// Every annotated function of the program is known from the start of the process, called or
/// not: its limiter is built on the first call of its function or of this lookup, whichever
/// comes first, and the two share it. A name no annotated function has is `None` (build a
/// [`Limiter`] with the same name, limits and prefix to reach counts made elsewhere). Stacked
/// attributes make one limiter; two functions that share a `name` share the first one built.
///
/// ```
/// use ratelimit_runtime::limiter;
///
/// assert!(limiter("nobody::declared::this").is_none());
/// ```
pub fn limiter(name: &str) -> Option<Limiter> {
    if let Some(built) = lock(&REGISTRY).as_ref().and_then(|r| r.get(name).cloned()) {
        return Some(built);
    }
    // Not built yet: the declared static of that name builds (and registers) it. One that
    // could not be built stays unknown here (its calls get its refusal).
    crate::__private::declared().filter(|lazy| lazy.name() == name).find_map(|lazy| lazy.get().ok().cloned())
}

/// Every limiter the attribute declared in this program, built now where its function was not
/// called yet (see [`limiter`]), sorted by name: what an admin page lists.
pub fn limiters() -> Vec<Limiter> {
    for lazy in crate::__private::declared() {
        // Building registers it; one that cannot be built is left out.
        let _ = lazy.get();
    }
    let registry = lock(&REGISTRY);
    let mut all: Vec<Limiter> = registry.as_ref().map_or_else(Vec::new, |r| r.values().cloned().collect());
    all.sort_by(|a, b| a.name().cmp(b.name()));
    all
}
