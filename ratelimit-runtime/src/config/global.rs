//! The process's configuration, set once: by [`init`], else from the environment on the first
//! call that needs it. Limiters built without a store of their own decide in its store, with
//! its failure policy.

use super::overrides::in_force::{InForce, UNSET};
use super::{env, Config, FailurePolicy, Overrides, DEFAULT_REFUSAL_CACHE_SIZE};
use crate::error::{ConfigError, OverridesError, StoreError};
use crate::store::{memory_of, MemoryStore, StoreHandle, Unavailable, DEFAULT_MAX_KEYS};
use std::sync::{Arc, OnceLock};

pub(crate) struct Global {
    pub(crate) store: StoreHandle,
    /// `store`, when it is the memory store.
    pub(crate) memory: Option<Arc<MemoryStore>>,
    /// The overrides table in force (the file's, and the tiers given in code).
    pub(crate) overrides: Arc<InForce>,
    pub(crate) on_error: FailurePolicy,
    pub(crate) refusal_cache: Option<bool>,
    pub(crate) refusal_cache_size: usize,
    pub(crate) memory_max_keys: usize,
    pub(crate) runtime_overrides: bool,
}

/// A value only where one cannot be passed: the attribute's limiters are `static`s, built on
/// their first call, and find their store here.
static GLOBAL: OnceLock<Global> = OnceLock::new();

/// Sets the global configuration. Call it once, before the first rate-limited call; a second
/// call, or one after the configuration was taken from the environment, is an error.
pub fn init(config: Config) -> Result<(), ConfigError> {
    config.check()?;
    let overrides = match &config.overrides_file {
        Some(path) => Some(Overrides::load(path)?),
        None => None,
    };
    let store = config.build_store()?;
    if GLOBAL.get().is_some() {
        return Err(ConfigError::AlreadyInitialised);
    }
    GLOBAL
        .set(Global {
            memory: memory_of(&store),
            store,
            overrides: InForce::new(config.overrides_file, overrides, config.tiers),
            on_error: config.on_error,
            refusal_cache: config.refusal_cache,
            refusal_cache_size: config.refusal_cache_size,
            memory_max_keys: config.memory_max_keys,
            runtime_overrides: config.runtime_overrides,
        })
        .map_err(|_| ConfigError::AlreadyInitialised)
}

/// Re-reads the overrides file (`RATELIMIT_CONFIG` or [`Config::overrides_file`]) and puts it
/// in force: limiters pick the new rules up on their next call, and a decision already under
/// way finishes under the rules it started with. A file that does not parse is logged and
/// returned, and the rules in force stay. Returns the new table's generation.
pub fn reload() -> Result<u64, OverridesError> {
    // The global configuration names the file: build it if no call did yet.
    global().overrides.reload()
}

/// A description of the global store, for startup logs: `memory`, `redis://…`.
pub fn describe_store() -> String {
    global().store.describe()
}

pub(crate) fn global() -> &'static Global {
    GLOBAL.get_or_init(|| {
        let config = Config::from_env();
        let on_error = config.as_ref().map_or(FailurePolicy::Allow, |c| c.on_error);
        let file = config.as_ref().ok().and_then(|c| c.overrides_file.clone());
        let overrides = file.as_ref().and_then(|path| {
            Overrides::load(path)
                .map_err(|e| tracing::error!(error = %e, "ratelimit: the configuration file is ignored (call `init` to stop at startup instead)"))
                .ok()
        });
        let overrides = InForce::new(file, overrides, Vec::new());
        let refusal_cache = config.as_ref().map_or(None, |c| c.refusal_cache);
        let refusal_cache_size = config.as_ref().map_or(DEFAULT_REFUSAL_CACHE_SIZE, |c| c.refusal_cache_size);
        let memory_max_keys = config.as_ref().map_or(DEFAULT_MAX_KEYS, |c| c.memory_max_keys);
        let runtime_overrides = config.as_ref().is_ok_and(|c| c.runtime_overrides);
        let store = config.and_then(|c| c.build_store()).unwrap_or_else(|e| {
            tracing::error!(error = %e, "ratelimit: cannot configure the store from the environment");
            let unusable = StoreError::Misconfigured { context: String::new(), source: Some(Arc::new(e)) };
            Arc::new(Unavailable::new(unusable))
        });
        Global { memory: memory_of(&store), store, overrides, on_error, refusal_cache, refusal_cache_size, memory_max_keys, runtime_overrides }
    })
}

/// The limiter names the file in force gives that no limiter has used since the process
/// started (a typo, or a limiter not called yet: attribute limiters are built on first call).
/// They are also logged, once each, 60 s after the file is loaded and at every reload.
pub fn unknown_limiters() -> Vec<String> {
    GLOBAL.get().map_or_else(Vec::new, |g| g.overrides.unknown())
}

/// The generation of the overrides table in force: 0 for none, [`UNSET`] before the global
/// configuration is built (read on every decision: one load, and nothing built).
#[inline]
pub(crate) fn overrides_generation() -> u64 {
    GLOBAL.get().map_or(UNSET, |g| g.overrides.generation())
}

/// Whether the global configuration is set (by [`init`] or from the environment): from then on
/// it never changes.
#[inline]
pub(crate) fn is_set() -> bool {
    GLOBAL.get().is_some()
}

/// The refusal cache's switch (`None`: by store) and size: from the global configuration once
/// there is one, else from the environment, without configuring the global store (a limiter
/// with a store of its own must not make one).
pub(crate) fn refusal_cache_settings() -> (Option<bool>, usize) {
    if let Some(g) = GLOBAL.get() {
        return (g.refusal_cache, g.refusal_cache_size);
    }
    static ENV: OnceLock<(Option<bool>, usize)> = OnceLock::new();
    *ENV.get_or_init(|| match env::refusal_cache(&env::process_var) {
        Ok((on, size)) => (on, size.unwrap_or(DEFAULT_REFUSAL_CACHE_SIZE)),
        // Said when the global configuration is read; meanwhile, the defaults.
        Err(_) => (None, DEFAULT_REFUSAL_CACHE_SIZE),
    })
}

/// The bound of an in-memory store a limiter makes for itself (the local fallback): from the
/// global configuration once there is one, else from the environment, without configuring the
/// global store (as `refusal_cache_settings`).
pub(crate) fn memory_max_keys() -> usize {
    if let Some(g) = GLOBAL.get() {
        return g.memory_max_keys;
    }
    static ENV: OnceLock<usize> = OnceLock::new();
    // A bad value is said when the global configuration is read; meanwhile, the default.
    *ENV.get_or_init(|| env::memory_max_keys(&env::process_var).ok().flatten().unwrap_or(DEFAULT_MAX_KEYS))
}

/// Whether limiters without a setting of their own decide with runtime overrides: from the
/// global configuration once there is one, else from the environment (without configuring the
/// global store, as [`refusal_cache_settings`]).
#[inline]
pub(crate) fn runtime_overrides() -> bool {
    if let Some(g) = GLOBAL.get() {
        return g.runtime_overrides;
    }
    static ENV: OnceLock<bool> = OnceLock::new();
    // A malformed value is said when the global configuration is read; meanwhile, off.
    *ENV.get_or_init(|| env::runtime_overrides(&env::process_var).ok().flatten().unwrap_or(false))
}
