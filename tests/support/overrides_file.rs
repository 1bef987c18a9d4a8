//! The process's overrides file for library tests: memory as the global store, one file in a
//! temp dir, rewritten and reloaded under a lock (the overrides table is per process, so tests
//! that change it take turns).

use ratelimit::Config;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

pub struct Shared {
    pub dir: PathBuf,
    pub file: PathBuf,
    lock: Mutex<()>,
}

/// The process's file, configured once: `init` adds what the test binary needs to
/// `Config::memory()` with the file (the first call's `init` wins).
pub fn shared(name: &str, init: impl FnOnce(Config) -> Config) -> &'static Shared {
    shared_from(name, Config::memory, init)
}

/// As [`shared`], on the configuration `base` makes (e.g. `Config::store` of a memory store on
/// a manual clock) instead of `Config::memory()`.
pub fn shared_from(name: &str, base: impl FnOnce() -> Config, init: impl FnOnce(Config) -> Config) -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ratelimit-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("limits.toml");
        std::fs::write(&file, "").expect("write the file");
        ratelimit::init(init(base().overrides_file(&file))).expect("init");
        Shared { dir, file, lock: Mutex::new(()) }
    })
}

impl Shared {
    /// Puts `text` in force (under the lock the caller holds).
    pub fn apply(&self, text: &str) {
        std::fs::write(&self.file, text).expect("write the file");
        ratelimit::reload().unwrap_or_else(|e| panic!("reload: {e}"));
    }

    /// The turn of a test that changes the file.
    pub fn locked(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }
}
