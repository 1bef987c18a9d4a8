//! The limits in force for one limiter under one generation of the overrides file: which limits
//! are enforced, which only watched (shadow), which off, with the file's rules compiled in, and
//! the exemptions. Rebuilt lazily when the generation changes; a decision holds one snapshot
//! from start to end, so it never sees half a reload.
//!
//! A limiter with no override, no exemption, no `mode = shadow` and no tier takes none of this:
//! its hot path costs one atomic load ([`Plan::current`] answers `None`).
//!
//! Tiers: a snapshot holds, beside the limits for calls without a tier, one snapshot per tier
//! that the limiter (in code) or the table names, each compiled once here. A call in a tier
//! decides with that tier's snapshot, a call in a tier nobody named with the default one: the
//! tier only chooses which compiled limits decide, and an unknown name leaves nothing behind.

use crate::config::global::{global, overrides_generation};
use crate::config::overrides::in_force::UNSET;
use crate::config::overrides::Table;
use crate::context;
use crate::limiter::limit_set::LimitSet;
use crate::model::compiled::CompiledLimit;
use crate::model::limit::Limit;
use crate::model::limit_type::LimitType;
use crate::model::mode::Mode;
use crate::model::rule::Rule;
use crate::model::subject::Subject;
use arc_swap::ArcSwapOption;
use std::fmt;
use std::sync::Arc;

/// What a limiter keeps to build its snapshots: its limits as built, and the latest snapshot.
pub(crate) struct Plan {
    /// The limits as built, with their tiers given in code ([`Limit::tier`]).
    specs: Vec<Limit>,
    /// Some limit is not enforced by the attribute itself (`mode = shadow`), or has tiers: the
    /// limits as built are not all there is.
    moded: bool,
    /// Decides with the global store (whose configuration brings the overrides file).
    global_store: bool,
    cell: ArcSwapOption<Snapshot>,
}

impl Plan {
    pub(crate) fn new(specs: Vec<Limit>, global_store: bool) -> Plan {
        let moded = specs.iter().any(|s| s.mode != Mode::Enforce || !s.tiers.is_empty());
        Plan { specs, moded, global_store, cell: ArcSwapOption::const_empty() }
    }

    /// The snapshot to decide with, or `None` when the limits as built are in force unchanged.
    #[inline]
    pub(crate) fn current(&self, name: &str) -> Option<Arc<Snapshot>> {
        let generation = overrides_generation();
        if self.unchanged_at(generation) {
            return None;
        }
        self.slow(name, generation)
    }

    /// Whether the limits as built are in force unchanged, known without a snapshot: no
    /// overrides file, no tier, no shadow limit. (`false` does not mean they changed: the
    /// file may leave this limiter alone; [`current`](Self::current) then answers `None`.)
    #[inline(always)]
    pub(crate) fn unchanged(&self) -> bool {
        self.unchanged_at(overrides_generation())
    }

    #[inline(always)]
    fn unchanged_at(&self, generation: u64) -> bool {
        // Before any global configuration, a limiter with its own store has no overrides.
        (generation == 0 || (generation == UNSET && !self.global_store)) && !self.moded
    }

    #[cold]
    fn slow(&self, name: &str, mut generation: u64) -> Option<Arc<Snapshot>> {
        if generation == UNSET {
            if self.global_store {
                // The global configuration (and its overrides file) is built on first use.
                let _ = global();
            }
            generation = match overrides_generation() {
                UNSET => 0,
                g => g,
            };
            if generation == 0 && !self.moded {
                return None;
            }
        }
        if let Some(s) = &*self.cell.load() {
            if s.generation == generation {
                return (!s.passthrough).then(|| Arc::clone(s));
            }
        }
        let table = if generation == 0 { None } else { global().overrides.table() };
        let built = Arc::new(self.build(name, table));
        self.cell.store(Some(Arc::clone(&built)));
        (!built.passthrough).then_some(built)
    }

    fn build(&self, name: &str, table: Option<Arc<Table>>) -> Snapshot {
        let file = table.as_deref().map(|t| &t.overrides);
        if file.is_some() {
            global().overrides.seen(name);
        }
        let mut touched = false;
        // The limits for calls without a tier (and for tiers without rules of their own).
        let mut defaults = Vec::with_capacity(self.specs.len());
        for base in &self.specs {
            let mut spec = base.clone();
            if let Some(o) = file.and_then(|f| f.find(name, spec.limit_type)) {
                touched = true;
                // A concurrency limit has no rules to replace.
                if let Some(rules) = o.rules.as_ref().filter(|_| spec.concurrency.is_none()) {
                    spec.rules = rules.clone();
                }
                if let Some(mode) = o.mode {
                    spec.mode = mode;
                }
                if o.block.is_some() && spec.concurrency.is_none() {
                    spec.block = o.block;
                }
                if o.sync.is_some() && spec.concurrency.is_none() {
                    spec.sync = o.sync;
                }
            }
            defaults.push(spec);
        }
        if let Some(f) = file {
            for o in f.limits().iter().filter(|o| o.limiter == name) {
                if !self.specs.iter().any(|s| s.limit_type == o.limit_type) {
                    tracing::warn!(
                        limiter = name,
                        r#type = %o.limit_type,
                        "ratelimit: the configuration overrides a limit this limiter does not have"
                    );
                }
            }
        }
        let exempt = table.clone().filter(|t| t.overrides.has_exemptions());
        let generation = table.as_ref().map_or(0, |t| t.generation);
        let mut names: Vec<&str> = self.specs.iter().flat_map(|s| &s.tiers).map(|(tier, _)| tier.as_str()).collect();
        if let Some(t) = table.as_deref() {
            names.extend(t.tier_names(name));
        }
        names.sort_unstable();
        names.dedup();
        touched |= !names.is_empty();
        // Every limit that counts, in any tier, once: what a reset clears.
        let mut counted: Vec<(usize, Limit)> = Vec::new();
        let mut count = |specs: &[Limit]| {
            for (i, spec) in specs.iter().enumerate().filter(|(_, s)| s.mode != Mode::Off) {
                if !counted.iter().any(|(j, c)| *j == i && same_rules(&c.rules, &spec.rules)) {
                    counted.push((i, spec.clone()));
                }
            }
        };
        count(&defaults);
        let mut tiers = Vec::with_capacity(names.len());
        for tier in names {
            let specs: Vec<Limit> = defaults
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let mut spec = d.clone();
                    // A concurrency limit has no rules for a tier to replace.
                    if let Some(rules) =
                        self.tier_rules(table.as_deref(), name, i, tier).filter(|_| spec.concurrency.is_none())
                    {
                        spec.rules = rules;
                    }
                    spec
                })
                .collect();
            count(&specs);
            let part = self.part(name, specs, generation, exempt.clone(), Box::new([]));
            tiers.push((Box::<str>::from(tier), Arc::new(part)));
        }
        let mut snapshot = self.part(name, defaults, generation, exempt, tiers.into());
        snapshot.counted = self.compile(name, counted);
        snapshot.passthrough = !touched && !self.moded && snapshot.exempt.is_none();
        snapshot
    }

    /// The rules of `tier` for limit `i`: the table's entry (file, then code), else the
    /// limiter's own; `None` where the tier has none (the default rules apply). An entry without
    /// rules gives the tier the default rules.
    fn tier_rules(&self, table: Option<&Table>, name: &str, i: usize, tier: &str) -> Option<Vec<Rule>> {
        let limit_type = self.specs.get(i)?.limit_type;
        if let Some(entry) = table.and_then(|t| t.tier(name, limit_type, tier)) {
            return entry.rules.clone();
        }
        let spec = self.specs.get(i)?;
        spec.tiers.iter().find(|(name, _)| name == tier).map(|(_, rules)| rules.clone())
    }

    /// The snapshot of these limits (one per limit of the limiter, in order, each with the rules
    /// and mode in force): split into enforced and shadow, compiled.
    fn part(
        &self,
        name: &str,
        specs: Vec<Limit>,
        generation: u64,
        exempt: Option<Arc<Table>>,
        tiers: Box<[(Box<str>, Arc<Snapshot>)]>,
    ) -> Snapshot {
        let mut enforced = Vec::new();
        let mut shadow = Vec::new();
        for (i, spec) in specs.into_iter().enumerate() {
            match spec.mode {
                Mode::Enforce => enforced.push((i, spec)),
                // A watched concurrency limit would hold slots that nothing frees: not decided.
                Mode::Shadow if spec.concurrency.is_some() => {}
                Mode::Shadow => shadow.push((i, spec)),
                Mode::Off => {}
            }
        }
        let (enforced, shadow) = (self.compile(name, enforced), self.compile(name, shadow));
        Snapshot {
            generation,
            passthrough: false,
            types: self.specs.iter().map(|s| s.limit_type).collect(),
            joined: LimitSet::joined(&enforced, &shadow),
            enforced,
            shadow,
            tiers,
            counted: LimitSet::new(Vec::new(), None, Arc::from(Vec::new())),
            exempt,
        }
    }

    /// Compiles one part; a limit whose overridden rules do not compile keeps the attribute's.
    fn compile(&self, name: &str, specs: Vec<(usize, Limit)>) -> LimitSet {
        let (mut limits, mut index) = (Vec::with_capacity(specs.len()), Vec::with_capacity(specs.len()));
        let mut policies = Vec::new();
        for (i, spec) in specs {
            let mode = spec.mode;
            let limit = CompiledLimit::compile(name, spec, policies.len()).or_else(|e| {
                tracing::error!(limiter = name, error = %e, "ratelimit: the configured rules do not apply; keeping the attribute's");
                CompiledLimit::compile(name, Limit { mode, ..self.specs[i].clone() }, policies.len())
            });
            if let Ok(limit) = limit {
                policies.extend(limit.policies());
                limits.push(limit);
                index.push(i);
            }
        }
        LimitSet::new(limits, Some(index.into()), policies.into())
    }
}

/// The limits of one limiter in force under one generation of the overrides file.
pub(crate) struct Snapshot {
    generation: u64,
    /// Nothing differs from the limits as built.
    passthrough: bool,
    /// The type of each of the limiter's limits, as built.
    types: Vec<LimitType>,
    /// The limits that decide (and may refuse).
    pub(crate) enforced: LimitSet,
    /// The limits that only watch: decided and counted, never refusing.
    pub(crate) shadow: LimitSet,
    /// Both, enforced first, when a call decides them in one store call (see
    /// [`LimitSet::joined`]).
    pub(crate) joined: Option<LimitSet>,
    /// The snapshot of each tier named in code or in the table, by name (sorted).
    tiers: Box<[(Box<str>, Arc<Snapshot>)]>,
    /// Every enforced or shadow limit of every tier, once (empty in a tier's snapshot): what a
    /// reset clears, in one store call.
    pub(crate) counted: LimitSet,
    /// The table, when it exempts anyone.
    exempt: Option<Arc<Table>>,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("generation", &self.generation)
            .field("policies", &self.enforced.policies)
            .field("shadow", &self.shadow.policies)
            .finish()
    }
}

impl Snapshot {
    /// The snapshot of the calls in `tier`: the tier's, when code or the table names it.
    /// Looks only: an unknown name costs a search and is never remembered.
    #[inline]
    pub(crate) fn tier(&self, tier: &str) -> Option<&Arc<Snapshot>> {
        let i = self.tiers.binary_search_by(|(name, _)| (**name).cmp(tier)).ok()?;
        self.tiers.get(i).map(|(_, s)| s)
    }

    /// Every tier's snapshot.
    pub(crate) fn tiers(&self) -> impl Iterator<Item = &Arc<Snapshot>> {
        self.tiers.iter().map(|(_, s)| s)
    }

    /// Whether the call is exempt: its context's IP or user, or one of its IP or user subjects,
    /// is exempted by the overrides file.
    pub(crate) fn is_exempt(&self, subjects: &[Subject<'_>]) -> bool {
        let Some(table) = &self.exempt else { return false };
        let o = &table.overrides;
        if let Some(ctx) = context::current() {
            if ctx.ip().is_some_and(|ip| o.is_exempt_ip(ip))
                || ctx.user().is_some_and(|u| o.is_exempt_user(u.as_bytes()))
            {
                return true;
            }
        }
        self.types.iter().zip(subjects).any(|(t, s)| match t {
            LimitType::Ip => s.key_bytes().is_some_and(|k| o.is_exempt_ip_subject(k)),
            LimitType::User => s.as_bytes().is_some_and(|b| o.is_exempt_user(&b)),
            _ => false,
        })
    }
}

/// Whether two rule lists are the same rules (in any order): the same limit's keys.
fn same_rules(a: &[Rule], b: &[Rule]) -> bool {
    a.len() == b.len() && a.iter().all(|r| b.contains(r))
}
