//! The settings in force, as one line an operator reads at startup.

use super::global::global;
use super::FailurePolicy;
use crate::store::INTERNAL;
use std::fmt;
use std::path::PathBuf;

/// What the global configuration put in force: the store (its URL without password), the failure
/// policy, the refusal cache, the overrides file and the memory bound. Displays as one line,
/// `store: memory; on_error: allow; refusal cache: off; overrides file: none; memory bound: 250000 keys`,
/// for a startup log (it holds no secret).
///
/// ```
/// let line = ratelimit_runtime::config::settings().to_string();
/// assert!(line.starts_with("store: memory; on_error: allow; refusal cache: off"), "{line}");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settings {
    /// The store, as [`describe_store`](super::describe_store) gives it.
    pub store: String,
    /// What a call gets when the store cannot decide.
    pub on_error: FailurePolicy,
    /// The refusal cache's size when it is on for limiters that do not set it themselves.
    pub refusal_cache: Option<usize>,
    /// The overrides file, if one is configured.
    pub overrides_file: Option<PathBuf>,
    /// The most keys an in-memory store holds, when counts live in process memory (the memory
    /// store, or `on_error = local` during an outage); `None` when they do not.
    pub memory_bound: Option<usize>,
    /// Whether limiters without a setting of their own decide with runtime overrides.
    pub runtime_overrides: bool,
}

/// The settings of the global configuration (building it from the environment if no call did).
pub fn settings() -> Settings {
    let g = global();
    let remote = g.store.is_remote(INTERNAL);
    let cache_on = g.refusal_cache.unwrap_or(remote);
    Settings {
        store: g.store.describe(),
        on_error: g.on_error,
        refusal_cache: cache_on.then_some(g.refusal_cache_size),
        overrides_file: g.overrides.path().map(PathBuf::from),
        memory_bound: (!remote || g.on_error == FailurePolicy::Local).then_some(g.memory_max_keys),
        runtime_overrides: g.runtime_overrides,
    }
}

impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on_error = match self.on_error {
            FailurePolicy::Allow => "allow",
            FailurePolicy::Deny => "deny",
            FailurePolicy::Local => "local",
        };
        write!(f, "store: {}; on_error: {on_error}; refusal cache: ", self.store)?;
        match self.refusal_cache {
            Some(size) => write!(f, "on, {size} entries")?,
            None => f.write_str("off")?,
        }
        match &self.overrides_file {
            Some(path) => write!(f, "; overrides file: {}", path.display())?,
            None => f.write_str("; overrides file: none")?,
        }
        if let Some(keys) = self.memory_bound {
            write!(f, "; memory bound: {keys} keys")?;
        }
        if self.runtime_overrides {
            f.write_str("; runtime overrides: on")?;
        }
        Ok(())
    }
}
