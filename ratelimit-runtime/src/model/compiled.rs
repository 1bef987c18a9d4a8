//! The compiled limit: one limit's type, algorithm and rules, validated, with its key template
//! and script arguments built once. Stores read it; the limiter builds it from a [`Limit`].

use crate::algorithm::Algorithm;
use crate::error::BuildError;
use crate::model::key::{check_prefix, override_index_key, KeyTemplate};
use crate::model::limit::{Limit, DEFAULT_LEASE};
use crate::model::limit_type::LimitType;
use crate::model::policy::Policy;
use crate::model::rule::Rule;
use crate::rt::lock::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// One limit of a limiter (one `#[rate_limiter]` attribute): a type, an algorithm and rules
/// that share one log per subject.
#[derive(Clone, Debug)]
pub(crate) struct CompiledLimit {
    pub(crate) limit_type: LimitType,
    pub(crate) algorithm: Algorithm,
    /// Capacity other than `count` (token/leaky bucket, GCRA).
    pub(crate) burst: Option<u64>,
    /// Sorted by window, longest first (the script trims by the first).
    pub(crate) rules: Vec<Rule>,
    /// Under a runtime override: the rules of the limit it overrides, whose keys it keeps (a
    /// bucket's state stored without a rule of its own was kept under them). `None` otherwise.
    pub(crate) overrides: Option<Arc<[Rule]>>,
    template: KeyTemplate,
    /// Where this limit's policies start in the limiter's policy list.
    policy_offset: usize,
    /// The penalty: a refusal as exceeded blocks the subject this long (µs; 0: none).
    pub(crate) block_us: u64,
    /// A concurrency limit: at most this many calls in flight (0: a rate limit). Such a limit
    /// has no rules.
    pub(crate) concurrency: u64,
    /// How long a concurrency slot is held at most (µs): the slots of a process that died free
    /// themselves after it.
    pub(crate) lease_us: u64,
    /// Sync mode (`sync = …`): each process hands out units from a local reserve it fills
    /// from the store in batches and keeps at most this long (µs; 0: every call asks the store).
    pub(crate) sync_us: u64,
    /// The arguments every limit gives the general script first: block µs, concurrency, lease µs.
    pub(crate) block_slot_args: [Vec<u8>; 3],
    /// The script's arguments for this limit: algorithm, rule count, (window µs, count)*, a
    /// window in calendar months written as minus its months.
    pub(crate) script_args: Vec<Vec<u8>>,
    /// Distinguishes this limit's logs in the in-memory store without building a Redis key
    /// (a copy of `_memory_registration`'s id, read on every call without a pointer chase).
    memory_id: u64,
    /// Holds the id while this limit lives.
    _memory_registration: Arc<MemoryId>,
    /// The smallest capacity of any rule (`u64::MAX` without rules): a cost up to it fits every
    /// rule, so the usual call checks one number rather than each rule.
    min_capacity: u64,
    /// The key of the limiter's index of runtime overrides (see `model::overriding`).
    pub(crate) override_index: Arc<[u8]>,
}

impl CompiledLimit {
    /// How many units rule `r` can ever hold at once: the burst of a bucket, else its count.
    #[inline]
    pub(crate) fn capacity(&self, r: usize) -> u64 {
        let count = self.rules.get(r).map_or(0, |rule| rule.count());
        match self.burst {
            Some(b) if self.algorithm.supports_burst() => b,
            _ => count,
        }
    }

    /// The first rule whose capacity is below `cost`: a call of that cost can never pass.
    #[inline]
    pub(crate) fn rule_too_small(&self, cost: u64) -> Option<usize> {
        if cost <= self.min_capacity {
            return None;
        }
        (0..self.rules.len()).find(|&r| self.capacity(r) < cost)
    }

    /// The smallest capacity of any rule (see `min_capacity`).
    #[inline]
    pub(crate) fn min_capacity(&self) -> u64 {
        self.min_capacity
    }

    /// Whether this limit needs more than its rules (a penalty, or in-flight slots): such calls
    /// are decided by the general script, and in memory by the general path.
    #[inline]
    pub(crate) fn has_block_or_slots(&self) -> bool {
        self.block_us > 0 || self.concurrency > 0
    }

    /// The most units one process's reserve of this `sync` limit holds: what the tightest rule
    /// earns in one interval (at least 1, at most its capacity). It bounds the error: admissions
    /// exceed the exact algorithm's by at most this many units per process.
    pub(crate) fn sync_cap(&self) -> u64 {
        let earned = |rule: &Rule| {
            let units = u128::from(rule.count()) * u128::from(self.sync_us) / u128::from(rule.window_us().max(1));
            u64::try_from(units).unwrap_or(u64::MAX)
        };
        let caps = self.rules.iter().enumerate().map(|(r, rule)| earned(rule).min(self.capacity(r)).max(1));
        caps.min().unwrap_or(1)
    }

    /// Whether this is a concurrency limit (slots, no rules).
    #[inline]
    pub(crate) fn is_concurrency(&self) -> bool {
        self.concurrency > 0
    }

    pub(crate) fn longest_us(&self) -> u64 {
        self.rules.first().map_or(0, |r| r.window_us())
    }

    pub(crate) fn redis_key(&self, subject: &[u8]) -> Vec<u8> {
        self.template.key(subject)
    }

    /// Writes [`redis_key`](Self::redis_key) to `out`.
    pub(crate) fn write_redis_key(&self, subject: &[u8], out: &mut impl std::io::Write) -> std::io::Result<()> {
        self.template.write_key(subject, out)
    }

    /// The length of a key without its subject.
    pub(crate) fn redis_key_len(&self) -> usize {
        self.template.fixed_len()
    }

    /// The id that starts this limit's in-memory keys (see `write_memory_key`).
    pub(crate) fn memory_id(&self) -> u64 {
        self.memory_id
    }

    /// Appends this limit's in-memory key for `subject`: its id, then the subject's bytes.
    pub(crate) fn write_memory_key(&self, subject: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&self.memory_id.to_le_bytes());
        out.extend_from_slice(subject);
    }
}

/// The in-memory store's short name for a limit's key template: limits with the same identity
/// (prefix, name, type, algorithm, rules), like the same Redis keys, share their state.
///
/// Ids are handed out while some limit of that identity lives, and never reused: the registry
/// holds only live identities (a reload's replaced limits leave it when dropped), and a new id
/// cannot meet state left in the store under an old one.
#[derive(Debug)]
struct MemoryId {
    id: u64,
    identity: Vec<u8>,
}

static MEMORY_IDS: Mutex<Option<HashMap<Vec<u8>, Weak<MemoryId>>>> = Mutex::new(None);

fn memory_id(template: &KeyTemplate) -> Arc<MemoryId> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let identity = template.identity();
    let mut ids = lock(&MEMORY_IDS);
    let ids = ids.get_or_insert_with(HashMap::new);
    if let Some(live) = ids.get(&identity).and_then(Weak::upgrade) {
        return live;
    }
    let id = Arc::new(MemoryId { id: NEXT.fetch_add(1, Ordering::Relaxed), identity: identity.clone() });
    ids.insert(identity, Arc::downgrade(&id));
    id
}

impl Drop for MemoryId {
    fn drop(&mut self) {
        let mut ids = lock(&MEMORY_IDS);
        let Some(ids) = ids.as_mut() else { return };
        // Another limit of this identity may have registered a new id since this one's last
        // owner let go: only a dead entry is removed.
        if ids.get(&self.identity).is_some_and(|w| w.strong_count() == 0) {
            ids.remove(&self.identity);
        }
    }
}

/// The script's arguments for a limit: algorithm, rule count, burst, (window µs, count)*.
fn script_args(algorithm: Algorithm, burst: Option<u64>, rules: &[Rule]) -> Vec<Vec<u8>> {
    let mut args = vec![
        algorithm.code().as_bytes().to_vec(),
        rules.len().to_string().into_bytes(),
        burst.unwrap_or(0).to_string().into_bytes(),
    ];
    for rule in rules {
        // A calendar window goes as minus its months (no span is negative): the script finds
        // its bounds from the time it decides at.
        let window = match rule.months() {
            Some(months) => format!("-{months}"),
            None => rule.window_us().to_string(),
        };
        args.push(window.into_bytes());
        args.push(rule.count().to_string().into_bytes());
    }
    args
}

/// `d` in µs, if it is a valid window (1ms to 366 days).
fn window_us(d: Duration) -> Option<u64> {
    Rule::new(d, 1).ok().map(|r| r.window_us())
}

impl CompiledLimit {
    /// Validates `spec` and builds the limit of limiter `name` whose policies start at
    /// `policy_offset` in the limiter's list.
    pub(crate) fn compile(name: &str, spec: Limit, policy_offset: usize) -> Result<CompiledLimit, BuildError> {
        check_prefix(&spec.prefix).map_err(BuildError::Prefix)?;
        let block_us = match spec.block {
            Some(d) => window_us(d).ok_or(BuildError::InvalidBlock(d))?,
            None => 0,
        };
        if spec.lease.is_some() && spec.concurrency.is_none() {
            return Err(BuildError::LeaseWithoutConcurrency);
        }
        if spec.sync.is_some() && (spec.block.is_some() || spec.concurrency.is_some()) {
            return Err(BuildError::SyncWithBlockOrConcurrency);
        }
        if let Some(n) = spec.concurrency {
            return CompiledLimit::compile_concurrency(name, spec, n, policy_offset);
        }
        let mut rules = spec.rules;
        if rules.is_empty() {
            return Err(BuildError::NoRules);
        }
        rules.sort_by(|a, b| b.window_order().cmp(&a.window_order()).then(a.count().cmp(&b.count())));
        if let Some(pair) = rules.windows(2).find(|p| p[0].window_order() == p[1].window_order()) {
            return Err(BuildError::DuplicateWindow(pair[0].window()));
        }
        if spec.algorithm != Algorithm::FixedWindow && rules.iter().any(|r| r.months().is_some()) {
            return Err(BuildError::CalendarNeedsFixedWindow(spec.algorithm));
        }
        if let Some(burst) = spec.burst {
            if !spec.algorithm.supports_burst() {
                return Err(BuildError::BurstUnsupported(spec.algorithm));
            }
            if burst == 0 || burst > crate::model::rule::MAX_COUNT {
                return Err(BuildError::InvalidBurst(burst));
            }
            // Every span a bucket handles is at most the time a full bucket takes to drain: keep
            // it within the longest window, as every store's arithmetic assumes.
            let max_us = u128::from(crate::model::rule::MAX_WINDOW.as_micros() as u64);
            if rules.iter().any(|r| u128::from(burst) * u128::from(r.window_us()) > max_us * u128::from(r.count())) {
                return Err(BuildError::BurstTooSlow(burst));
            }
        }
        let script_args = script_args(spec.algorithm, spec.burst, &rules);
        let sync_us = match spec.sync {
            None => 0,
            Some(d) => {
                let shortest = rules.last().map_or(0, |r| r.window_us());
                window_us(d).filter(|&us| us <= shortest).ok_or(BuildError::InvalidSync(d))?
            }
        };
        let template = KeyTemplate::new(&spec.prefix, name, spec.limit_type, spec.algorithm, spec.burst, &rules);
        let registration = memory_id(&template);
        let mut limit = CompiledLimit {
            limit_type: spec.limit_type,
            algorithm: spec.algorithm,
            burst: spec.burst,
            rules,
            overrides: None,
            policy_offset,
            block_us,
            concurrency: 0,
            lease_us: 0,
            sync_us,
            block_slot_args: [block_us.to_string().into_bytes(), b"0".to_vec(), b"0".to_vec()],
            script_args,
            memory_id: registration.id,
            _memory_registration: registration,
            template,
            min_capacity: u64::MAX,
            override_index: override_index_key(&spec.prefix, name).into(),
        };
        limit.min_capacity = (0..limit.rules.len()).map(|r| limit.capacity(r)).min().unwrap_or(u64::MAX);
        Ok(limit)
    }

    /// A concurrency limit: no rules, `n` slots held at most `lease` each.
    fn compile_concurrency(name: &str, spec: Limit, n: u64, policy_offset: usize) -> Result<CompiledLimit, BuildError> {
        if spec.block.is_some() {
            return Err(BuildError::BlockWithoutRules);
        }
        if !spec.rules.is_empty() {
            return Err(BuildError::ConcurrencyWithRules);
        }
        if n == 0 || n > crate::model::rule::MAX_COUNT {
            return Err(BuildError::InvalidConcurrency(n));
        }
        let lease = spec.lease.unwrap_or(DEFAULT_LEASE);
        let lease_us = window_us(lease).ok_or(BuildError::InvalidLease(lease))?;
        let template = KeyTemplate::concurrency(&spec.prefix, name, spec.limit_type, n, lease);
        let registration = memory_id(&template);
        Ok(CompiledLimit {
            limit_type: spec.limit_type,
            algorithm: spec.algorithm,
            burst: None,
            rules: Vec::new(),
            overrides: None,
            policy_offset,
            block_us: 0,
            concurrency: n,
            lease_us,
            sync_us: 0,
            block_slot_args: [b"0".to_vec(), n.to_string().into_bytes(), lease_us.to_string().into_bytes()],
            script_args: vec![b"cc".to_vec(), b"0".to_vec(), b"0".to_vec()],
            memory_id: registration.id,
            _memory_registration: registration,
            template,
            min_capacity: u64::MAX,
            override_index: override_index_key(&spec.prefix, name).into(),
        })
    }

    /// The key of `subject`'s runtime override of this limit (shared by the limits of one type
    /// of the limiter: the override is the subject's, whatever the rules).
    pub(crate) fn override_key(&self, subject: &[u8]) -> Vec<u8> {
        self.template.override_key(subject)
    }

    /// This limit as a call under a runtime override decides it, its policies starting at
    /// `policy_offset`: with `rules` (valid, longest window first) in place of its own, when
    /// given. The same keys and algorithm, so the subject's counts carry over; the capacity is
    /// each rule's count.
    pub(crate) fn overridden(&self, rules: Option<&[Rule]>, policy_offset: usize) -> CompiledLimit {
        let Some(rules) = rules.filter(|_| !self.is_concurrency()) else {
            return CompiledLimit { policy_offset, ..self.clone() };
        };
        let mut limit = CompiledLimit {
            burst: None,
            rules: rules.to_vec(),
            overrides: Some(self.overrides.clone().unwrap_or_else(|| self.rules.clone().into())),
            policy_offset,
            script_args: script_args(self.algorithm, None, rules),
            ..self.clone()
        };
        limit.min_capacity = (0..limit.rules.len()).map(|r| limit.capacity(r)).min().unwrap_or(u64::MAX);
        limit
    }

    /// This limit's rules as policies, in rule order.
    pub(crate) fn policies(&self) -> impl Iterator<Item = Policy> + '_ {
        self.rules.iter().map(|&rule| Policy { limit_type: self.limit_type, rule })
    }

    /// Where this limit's policies start in its limiter's list.
    pub(crate) fn policy_offset(&self) -> usize {
        self.policy_offset
    }
}

#[cfg(test)]
mod memory_id_tests {
    use super::*;

    fn spec(count: u64) -> Limit {
        Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(10), count).unwrap()]).prefix("rl:")
    }

    /// How many registered identities belong to limiter `name`.
    fn registered(name: &str) -> usize {
        let ids = lock(&MEMORY_IDS);
        let is_of = |identity: &Vec<u8>| identity.windows(name.len()).any(|w| w == name.as_bytes());
        ids.as_ref().map_or(0, |ids| ids.keys().filter(|i| is_of(i)).count())
    }

    #[test]
    fn ids_are_shared_while_alive_and_forgotten_after() {
        let a = CompiledLimit::compile("memory_id::a", spec(5), 0).unwrap();
        let same = CompiledLimit::compile("memory_id::a", spec(5), 0).unwrap();
        let other = CompiledLimit::compile("memory_id::a", spec(6), 0).unwrap();
        assert_eq!(a.memory_id(), same.memory_id());
        assert_ne!(a.memory_id(), other.memory_id());
        let first = a.memory_id();
        drop((a, same));
        // A new limit with the identity of dropped ones gets a fresh id: nothing it could
        // meet in the store was counted for it.
        let again = CompiledLimit::compile("memory_id::a", spec(5), 0).unwrap();
        assert_ne!(again.memory_id(), first);
        // Reloads build and drop limits: the registry holds only live ones.
        let kept = CompiledLimit::compile("memory_id::reload", spec(1), 0).unwrap();
        for count in 2..=200 {
            drop(CompiledLimit::compile("memory_id::reload", spec(count), 0).unwrap());
        }
        assert_eq!(registered("memory_id::reload"), 1);
        drop(kept);
        assert_eq!(registered("memory_id::reload"), 0);
        drop((again, other));
    }
}
