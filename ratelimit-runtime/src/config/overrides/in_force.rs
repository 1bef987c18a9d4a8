//! The overrides table in force: installed when the configuration is built, replaced on
//! reload, read by every limiter through its generation. It lives in the process's
//! configuration (`config::global`), beside the store it applies to.

use super::{LimitOverride, Overrides, Table};
use crate::error::OverridesError;
use crate::rt::lock::lock;
use arc_swap::ArcSwapOption;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

/// No table was ever considered: the global configuration was not built yet.
pub(crate) const UNSET: u64 = u64::MAX;

/// The most limiter names remembered as having decided: far more than a program has
/// functions; the bound is for programs that build limiters under names made at run time (a
/// name past it may be warned about as unknown, never more).
const MAX_SEEN: usize = 10_000;

/// How long limiters have to make themselves known (attribute limiters are built on their first
/// call) before names the file gives and no limiter used are warned about.
const UNKNOWN_GRACE: Duration = Duration::from_secs(60);

/// The table in force, where it was read from, and what the unknown-names warning needs.
pub(crate) struct InForce {
    /// The table's generation: 0 for none.
    generation: AtomicU64,
    next: AtomicU64,
    table: ArcSwapOption<Table>,
    path: Option<PathBuf>,
    /// The tiers given in code, kept in every table installed after them.
    code_tiers: Arc<[LimitOverride]>,
    /// Limiters that decided under some table, at most [`MAX_SEEN`].
    seen: Mutex<HashSet<String>>,
    /// Names of the file in force already warned about, so each is warned once.
    warned: Mutex<HashSet<String>>,
    /// When to warn about the unknown names of which generation: the next check, if any.
    pending_check: Mutex<Option<(Instant, u64)>>,
    check_due: Condvar,
    checker: Once,
}

impl InForce {
    /// The state of a configuration: the file (already parsed), where it lives, and the tiers
    /// given in code.
    pub(crate) fn new(
        path: Option<PathBuf>,
        overrides: Option<Overrides>,
        code_tiers: Vec<LimitOverride>,
    ) -> Arc<InForce> {
        let has_code_tiers = !code_tiers.is_empty();
        let in_force = Arc::new(InForce {
            generation: AtomicU64::new(0),
            next: AtomicU64::new(1),
            table: ArcSwapOption::const_empty(),
            path,
            code_tiers: code_tiers.into(),
            seen: Mutex::new(HashSet::new()),
            warned: Mutex::new(HashSet::new()),
            pending_check: Mutex::new(None),
            check_due: Condvar::new(),
            checker: Once::new(),
        });
        match overrides {
            Some(o) => {
                in_force.install(o);
            }
            // Tiers in code need a table, as a file's would.
            None if has_code_tiers => {
                in_force.install(Overrides::new());
            }
            None => {}
        }
        in_force
    }

    /// The file the table is read from, if any.
    pub(crate) fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }

    /// The generation of the table in force: 0 for none.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The table in force.
    pub(crate) fn table(&self) -> Option<Arc<Table>> {
        self.table.load_full()
    }

    /// Records that limiter `name` decides under the current table.
    pub(crate) fn seen(&self, name: &str) {
        let mut seen = lock(&self.seen);
        if seen.len() < MAX_SEEN && !seen.contains(name) {
            seen.insert(name.to_owned());
        }
    }

    fn install(self: &Arc<Self>, overrides: Overrides) -> u64 {
        let generation = self.next.fetch_add(1, Ordering::Relaxed);
        let code_tiers = self.code_tiers.clone();
        self.table.store(Some(Arc::new(Table { generation, overrides, code_tiers })));
        self.generation.store(generation, Ordering::Release);
        self.schedule_unknown_check(generation);
        generation
    }

    /// See [`crate::reload`].
    pub(crate) fn reload(self: &Arc<Self>) -> Result<u64, OverridesError> {
        let Some(path) = &self.path else {
            let e = OverridesError::NoFile;
            tracing::error!(error = %e, "ratelimit: cannot reload the configuration");
            return Err(e);
        };
        match Overrides::load(path) {
            Ok(o) => {
                let generation = self.install(o);
                tracing::info!(file = %path.display(), generation, "ratelimit: configuration reloaded");
                self.warn_unknown(generation);
                Ok(generation)
            }
            Err(e) => {
                tracing::error!(error = %e, "ratelimit: configuration not reloaded; the rules in force stay");
                Err(e)
            }
        }
    }

    /// See [`unknown_limiters`].
    pub(crate) fn unknown(&self) -> Vec<String> {
        let Some(table) = self.table() else { return Vec::new() };
        let seen = lock(&self.seen);
        let mut names: Vec<String> =
            table.overrides.limits.iter().map(|o| o.limiter.clone()).filter(|n| !seen.contains(n)).collect();
        names.sort();
        names.dedup();
        names
    }

    fn warn_unknown(&self, generation: u64) {
        let Some(table) = self.table().filter(|t| t.generation == generation) else { return };
        let unknown = self.unknown();
        let mut warned = lock(&self.warned);
        // Only names of the file in force are remembered, so reloads cannot grow the set.
        warned.retain(|name| table.overrides.limits.iter().any(|o| &o.limiter == name));
        for name in unknown {
            if warned.insert(name.clone()) {
                tracing::warn!(limiter = %name, "ratelimit: the configuration names a limiter that no function has used (a typo?)");
            }
        }
    }

    /// Warns about `generation`'s unknown names after [`UNKNOWN_GRACE`], unless another table
    /// is installed first (its own check replaces this one). One thread serves every reload.
    fn schedule_unknown_check(self: &Arc<Self>, generation: u64) {
        *lock(&self.pending_check) = Some((Instant::now() + UNKNOWN_GRACE, generation));
        self.check_due.notify_one();
        self.checker.call_once(|| {
            let in_force = Arc::clone(self);
            let _ = std::thread::Builder::new()
                .name("ratelimit-config".to_owned())
                .spawn(move || in_force.check_unknown_names());
        });
    }

    /// The checking thread: sleeps until the pending check is due, runs it, waits for the next.
    fn check_unknown_names(&self) {
        let mut pending = lock(&self.pending_check);
        loop {
            pending = match *pending {
                None => self.check_due.wait(pending).unwrap_or_else(PoisonError::into_inner),
                Some((due, generation)) => match due.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => {
                        self.check_due.wait_timeout(pending, left).map_or_else(|e| e.into_inner().0, |(guard, _)| guard)
                    }
                    _ => {
                        *pending = None;
                        drop(pending);
                        self.warn_unknown(generation);
                        lock(&self.pending_check)
                    }
                },
            };
        }
    }
}
