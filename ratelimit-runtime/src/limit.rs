//! The compiled limit: one `#[rate_limiter]` attribute's type, algorithm and rules, with its key
//! template and script arguments built once. Stores read it; the limiter builds it.

use crate::algorithm::Algorithm;
use crate::key::{check_prefix, KeyTemplate, PrefixError};
use crate::limit_type::LimitType;
use crate::policy::Policy;
use crate::rule::{Rule, RuleError};
use crate::sync::lock;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// One limit of a limiter (one `#[rate_limiter]` attribute): a type, an algorithm and rules
/// that share one log per subject.
#[derive(Debug)]
pub(crate) struct Limit {
    pub(crate) limit_type: LimitType,
    pub(crate) algorithm: Algorithm,
    /// Capacity other than `count` (token/leaky bucket, GCRA).
    pub(crate) burst: Option<u64>,
    /// Sorted by window, longest first (the script trims by the first).
    pub(crate) rules: Vec<Rule>,
    template: KeyTemplate,
    /// Where this limit's policies start in the limiter's policy list.
    policy_offset: usize,
    /// The script's arguments for this limit: algorithm, rule count, (window µs, count)*.
    pub(crate) script_args: Vec<Vec<u8>>,
    /// Distinguishes this limit's logs in the in-memory store without building a Redis key
    /// (a copy of `_memory_registration`'s id, read on every call without a pointer chase).
    memory_id: u64,
    /// Holds the id while this limit lives.
    _memory_registration: Arc<MemoryId>,
}

impl Limit {
    /// How many units rule `r` can ever hold at once: the burst of a bucket, else its count.
    pub(crate) fn capacity(&self, r: usize) -> u64 {
        let count = self.rules.get(r).map_or(0, |rule| rule.count());
        match self.burst {
            Some(b) if self.algorithm.supports_burst() => b,
            _ => count,
        }
    }

    /// The first rule whose capacity is below `cost`: a call of that cost can never pass.
    pub(crate) fn rule_too_small(&self, cost: u64) -> Option<usize> {
        (0..self.rules.len()).find(|&r| self.capacity(r) < cost)
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

/// Why a limiter could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimiterError {
    /// A limit has no rules.
    NoRules,
    /// A rule is invalid.
    Rule(RuleError),
    /// Two rules of one limit have the same window.
    DuplicateWindow(Duration),
    /// The key prefix is invalid.
    Prefix(PrefixError),
    /// The limiter has no limit at all.
    NoLimits,
    /// `burst` was given for an algorithm without a capacity (only token bucket, leaky bucket
    /// and GCRA have one).
    BurstUnsupported(Algorithm),
    /// `burst` is zero or larger than [`MAX_COUNT`](crate::rule::MAX_COUNT).
    InvalidBurst(u64),
    /// A full bucket of this burst would take longer than
    /// [`MAX_WINDOW`](crate::rule::MAX_WINDOW) to drain at a rule's rate (`burst × window /
    /// count`): the burst is out of proportion with the rate.
    BurstTooSlow(u64),
    /// A tier ([`LimiterBuilder::tier`](crate::LimiterBuilder::tier)) has an empty name.
    EmptyTierName,
    /// One limit was given two tiers of this name.
    DuplicateTier(String),
}

impl fmt::Display for LimiterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimiterError::NoRules => f.write_str("a limit needs at least one rule"),
            LimiterError::Rule(e) => e.fmt(f),
            LimiterError::DuplicateWindow(w) => write!(f, "two rules of one limit have the same window ({w:?})"),
            LimiterError::Prefix(e) => e.fmt(f),
            LimiterError::NoLimits => f.write_str("a limiter needs at least one limit"),
            LimiterError::BurstUnsupported(a) => {
                write!(f, "`burst` applies to TokenBucket, LeakyBucket and Gcra, not {a:?}")
            }
            LimiterError::InvalidBurst(b) => write!(f, "`burst` must be between 1 and 1_000_000_000, not {b}"),
            LimiterError::BurstTooSlow(b) => write!(
                f,
                "a bucket of `burst = {b}` would take more than 366 days to drain at its rate (burst × window / count): \
                 lower the burst or raise the count"
            ),
            LimiterError::EmptyTierName => f.write_str("a tier needs a name, e.g. \"pro\""),
            LimiterError::DuplicateTier(t) => write!(f, "the tier {t:?} is given twice for one limit: keep one"),
        }
    }
}

impl std::error::Error for LimiterError {}

/// A limit as the builder collects it, before validation.
#[derive(Clone)]
pub(crate) struct LimitSpec {
    pub(crate) limit_type: LimitType,
    pub(crate) rules: Vec<Rule>,
    pub(crate) algorithm: Algorithm,
    pub(crate) prefix: String,
    pub(crate) burst: Option<u64>,
    /// Enforce, or shadow (`mode = shadow`); the overrides file may change it.
    pub(crate) mode: crate::mode::Mode,
}

impl Limit {
    /// Validates `spec` and builds the limit of limiter `name` whose policies start at
    /// `policy_offset` in the limiter's list.
    pub(crate) fn compile(name: &str, spec: LimitSpec, policy_offset: usize) -> Result<Limit, LimiterError> {
        check_prefix(&spec.prefix).map_err(LimiterError::Prefix)?;
        let mut rules = spec.rules;
        if rules.is_empty() {
            return Err(LimiterError::NoRules);
        }
        rules.sort_by(|a, b| b.window_ms().cmp(&a.window_ms()).then(a.count().cmp(&b.count())));
        if let Some(pair) = rules.windows(2).find(|p| p[0].window_ms() == p[1].window_ms()) {
            return Err(LimiterError::DuplicateWindow(pair[0].window()));
        }
        if let Some(burst) = spec.burst {
            if !spec.algorithm.supports_burst() {
                return Err(LimiterError::BurstUnsupported(spec.algorithm));
            }
            if burst == 0 || burst > crate::rule::MAX_COUNT {
                return Err(LimiterError::InvalidBurst(burst));
            }
            // Every span a bucket handles is at most the time a full bucket takes to drain: keep
            // it within the longest window, as every store's arithmetic assumes.
            let max_us = u128::from(crate::rule::MAX_WINDOW.as_micros() as u64);
            if rules.iter().any(|r| u128::from(burst) * u128::from(r.window_us()) > max_us * u128::from(r.count())) {
                return Err(LimiterError::BurstTooSlow(burst));
            }
        }
        let mut script_args = vec![
            spec.algorithm.code().as_bytes().to_vec(),
            rules.len().to_string().into_bytes(),
            spec.burst.unwrap_or(0).to_string().into_bytes(),
        ];
        for rule in &rules {
            script_args.push(rule.window_us().to_string().into_bytes());
            script_args.push(rule.count().to_string().into_bytes());
        }
        let template = KeyTemplate::new(&spec.prefix, name, spec.limit_type, spec.algorithm, spec.burst, &rules);
        let registration = memory_id(&template);
        Ok(Limit {
            limit_type: spec.limit_type,
            algorithm: spec.algorithm,
            burst: spec.burst,
            rules,
            policy_offset,
            script_args,
            memory_id: registration.id,
            _memory_registration: registration,
            template,
        })
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
    use crate::mode::Mode;

    fn spec(count: u64) -> LimitSpec {
        LimitSpec {
            limit_type: LimitType::Ip,
            rules: vec![Rule::new(Duration::from_secs(10), count).unwrap()],
            algorithm: Algorithm::SlidingWindow,
            prefix: "rl:".to_owned(),
            burst: None,
            mode: Mode::Enforce,
        }
    }

    /// How many registered identities belong to limiter `name`.
    fn registered(name: &str) -> usize {
        let ids = lock(&MEMORY_IDS);
        let is_of = |identity: &Vec<u8>| identity.windows(name.len()).any(|w| w == name.as_bytes());
        ids.as_ref().map_or(0, |ids| ids.keys().filter(|i| is_of(i)).count())
    }

    #[test]
    fn ids_are_shared_while_alive_and_forgotten_after() {
        let a = Limit::compile("memory_id::a", spec(5), 0).unwrap();
        let same = Limit::compile("memory_id::a", spec(5), 0).unwrap();
        let other = Limit::compile("memory_id::a", spec(6), 0).unwrap();
        assert_eq!(a.memory_id(), same.memory_id());
        assert_ne!(a.memory_id(), other.memory_id());
        let first = a.memory_id();
        drop((a, same));
        // A new limit with the identity of dropped ones gets a fresh id: nothing it could
        // meet in the store was counted for it.
        let again = Limit::compile("memory_id::a", spec(5), 0).unwrap();
        assert_ne!(again.memory_id(), first);
        // Reloads build and drop limits: the registry holds only live ones.
        let kept = Limit::compile("memory_id::reload", spec(1), 0).unwrap();
        for count in 2..=200 {
            drop(Limit::compile("memory_id::reload", spec(count), 0).unwrap());
        }
        assert_eq!(registered("memory_id::reload"), 1);
        drop(kept);
        assert_eq!(registered("memory_id::reload"), 0);
        drop((again, other));
    }
}
