//! Configuration: [`Config`] (the store, the failure policy, the refusal cache, tiers in code,
//! the overrides file), read from code or the environment (`env`), and set once for the process
//! (`global`: explicit [`init`], else from the environment on first use). The overrides file and
//! the table in force live in `overrides`.

pub(crate) mod env;
pub(crate) mod global;
pub(crate) mod overrides;
mod settings;

use crate::error::{ConfigError, ParseError, TierProblem};
use crate::model::limit_type::LimitType;
use crate::model::rule::Rule;
use crate::store::{MemoryStore, RedisStore, SentinelSpec, SentinelStore, StoreHandle, TlsConfig, DEFAULT_MAX_KEYS};
pub use global::{describe_store, init, reload, unknown_limiters};
pub use overrides::{parse_duration, parse_rule, LimitOverride, Overrides};
pub use settings::{settings, Settings};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The default time a store call may take before the failure policy applies.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

/// How many refusals the local refusal cache keeps at most, unless configured otherwise.
pub(crate) const DEFAULT_REFUSAL_CACHE_SIZE: usize = 100_000;

/// What a call does when the store cannot decide (down, hung, timed out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Let the call through and log a warning (the default: an outage of the limiter should not
    /// become an outage of the service).
    #[default]
    Allow,
    /// Refuse the call with a `RateLimited` whose cause is `StoreUnavailable` (`Misconfigured` when
    /// the store cannot work as configured, e.g. a malformed URL).
    Deny,
    /// Decide the call in this process's memory, with the same rules, until the store answers
    /// again. Each process counts alone: N processes admit up to N times the limit while the
    /// store is down, and what they admitted is not copied to the store when it returns.
    Local,
}

impl FromStr for FailurePolicy {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        // Exactly the names the docs give: a value meant otherwise must not be read as one.
        match s {
            "allow" => Ok(FailurePolicy::Allow),
            "deny" => Ok(FailurePolicy::Deny),
            "local" => Ok(FailurePolicy::Local),
            other => Err(ParseError::Unknown {
                what: "failure policy",
                value: other.to_owned(),
                expected: "`allow`, `deny` or `local`",
            }),
        }
    }
}

#[derive(Clone)]
enum Backend {
    Memory,
    Redis(String),
    Cluster(Vec<String>),
    Sentinel(SentinelSpec),
    Store(StoreHandleDebug),
}

/// Without passwords: a `Config` may be printed.
impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::store::redis::redact;
        match self {
            Backend::Memory => f.write_str("Memory"),
            Backend::Redis(url) => f.debug_tuple("Redis").field(&redact(url)).finish(),
            Backend::Cluster(urls) => {
                f.debug_tuple("Cluster").field(&urls.iter().map(|u| redact(u)).collect::<Vec<_>>()).finish()
            }
            Backend::Sentinel(spec) => f.debug_tuple("Sentinel").field(spec).finish(),
            Backend::Store(s) => f.debug_tuple("Store").field(s).finish(),
        }
    }
}

#[derive(Clone)]
struct StoreHandleDebug(StoreHandle);
impl fmt::Debug for StoreHandleDebug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.describe())
    }
}

/// The global configuration.
///
/// ```no_run
/// use ratelimit_runtime::{Config, FailurePolicy};
/// use std::time::Duration;
/// ratelimit_runtime::init(
///     Config::redis("redis://127.0.0.1:6379/")
///         .on_error(FailurePolicy::Deny)
///         .timeout(Duration::from_millis(100)),
/// )
/// .unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    backend: Backend,
    on_error: FailurePolicy,
    timeout: Duration,
    /// The overrides file, `RATELIMIT_CONFIG`.
    overrides_file: Option<PathBuf>,
    tls: TlsConfig,
    /// The local refusal cache: `None` follows the store (on for remote stores).
    refusal_cache: Option<bool>,
    refusal_cache_size: usize,
    /// The most keys an in-memory store holds (the store, and the local fallback's).
    memory_max_keys: usize,
    /// Whether limiters decide with runtime overrides (`RATELIMIT_RUNTIME_OVERRIDES`).
    runtime_overrides: bool,
    /// Tiers given in code, by limiter name ([`Config::tier`]).
    tiers: Vec<LimitOverride>,
    /// The environment variable that named the store, so that its errors can say which.
    store_var: Option<&'static str>,
}

impl Config {
    /// Counts in process memory (the default without `REDIS_URL`).
    pub fn memory() -> Config {
        Config {
            backend: Backend::Memory,
            on_error: FailurePolicy::Allow,
            timeout: DEFAULT_TIMEOUT,
            overrides_file: None,
            tls: TlsConfig::default(),
            refusal_cache: None,
            refusal_cache_size: DEFAULT_REFUSAL_CACHE_SIZE,
            memory_max_keys: DEFAULT_MAX_KEYS,
            runtime_overrides: false,
            tiers: Vec::new(),
            store_var: None,
        }
    }

    /// Counts in one Redis server, shared by every process that uses it.
    pub fn redis(url: impl Into<String>) -> Config {
        Config { backend: Backend::Redis(url.into()), ..Config::memory() }
    }

    /// Counts in a Redis Cluster reached through these seed nodes.
    pub fn cluster(urls: impl IntoIterator<Item = impl Into<String>>) -> Config {
        Config { backend: Backend::Cluster(urls.into_iter().map(Into::into).collect()), ..Config::memory() }
    }

    /// Counts in the primary that these Redis Sentinels monitor as `master`, followed through
    /// failovers. Each URL is `redis://[:password@]host:port` (the password being the
    /// sentinel's own; a `/db` selects the data nodes' database). For a primary that requires a
    /// password, see [`Config::sentinel_spec`].
    pub fn sentinel(urls: impl IntoIterator<Item = impl Into<String>>, master: impl Into<String>) -> Config {
        Config::sentinel_spec(SentinelSpec::new(urls, master))
    }

    /// Counts in a Sentinel-managed primary, with its credentials:
    /// `Config::sentinel_spec(SentinelSpec::new(urls, "mymaster").primary_auth(None, password))`.
    pub fn sentinel_spec(spec: SentinelSpec) -> Config {
        Config { backend: Backend::Sentinel(spec), ..Config::memory() }
    }

    /// Counts in this store.
    pub fn store(store: StoreHandle) -> Config {
        Config { backend: Backend::Store(StoreHandleDebug(store)), ..Config::memory() }
    }

    /// The failure policy (default [`FailurePolicy::Allow`]).
    pub fn on_error(mut self, policy: FailurePolicy) -> Config {
        self.on_error = policy;
        self
    }

    /// How long one store call may take (default 250 ms).
    pub fn timeout(mut self, timeout: Duration) -> Config {
        self.timeout = timeout;
        self
    }

    /// Reads limits from this file: rules, modes and exemptions that replace the
    /// attributes' own, re-read by [`reload`]. [`init`] fails when it does not
    /// parse.
    pub fn overrides_file(mut self, path: impl Into<PathBuf>) -> Config {
        self.overrides_file = Some(path.into());
        self
    }

    /// Gives tier `tier` of a limiter's limit its own rules, for limiters built by the
    /// attribute (`#[rate_limiter(..., tier = plan)]`): calls in that tier are decided by these
    /// rules, other tiers and calls without one by the limit's own. `limiter` is the limiter's
    /// name (`name = "…"`, or `module::path::function`), `limit_type` which of its stacked
    /// limits. An overrides file's `[[limit]]` with `tier = "…"` for the same tier wins; a
    /// limiter built by hand takes its tiers from
    /// [`Limit::tier`](crate::Limit::tier). [`init`] refuses an empty tier
    /// name or an empty rule list.
    ///
    /// ```no_run
    /// use ratelimit_runtime::{Config, LimitType, Rule};
    /// use std::time::Duration;
    /// ratelimit_runtime::init(Config::memory().tier(
    ///     "server::search",
    ///     LimitType::User,
    ///     "pro",
    ///     [Rule::new(Duration::from_secs(10), 50).unwrap()],
    /// ))
    /// .unwrap();
    /// ```
    pub fn tier(
        mut self,
        limiter: impl Into<String>,
        limit_type: LimitType,
        tier: impl Into<String>,
        rules: impl IntoIterator<Item = Rule>,
    ) -> Config {
        self.tiers.push(LimitOverride {
            limiter: limiter.into(),
            limit_type,
            rules: Some(rules.into_iter().collect()),
            mode: None,
            tier: Some(tier.into()),
            block: None,
            sync: None,
        });
        self
    }

    /// Why a tier given with [`tier`](Self::tier) cannot apply.
    /// The values given in code that [`init`](crate::init) cannot apply.
    fn check(&self) -> Result<(), ConfigError> {
        if self.refusal_cache_size == 0 {
            return Err(ConfigError::Setting {
                setting: "Config::refusal_cache_size",
                value: "0".to_owned(),
                source: ParseError::OutOfRange { value: "0".to_owned(), expected: env::REFUSAL_CACHE_SIZES },
            });
        }
        if self.memory_max_keys == 0 {
            return Err(ConfigError::Setting {
                setting: "Config::memory_max_keys",
                value: "0".to_owned(),
                source: ParseError::OutOfRange { value: "0".to_owned(), expected: env::MEMORY_MAX_KEYS },
            });
        }
        self.check_tiers()
    }

    fn check_tiers(&self) -> Result<(), ConfigError> {
        for (i, t) in self.tiers.iter().enumerate() {
            let name = t.tier.as_deref().unwrap_or("");
            let refused = |problem| ConfigError::Tier {
                limiter: t.limiter.clone(),
                limit_type: t.limit_type.as_str(),
                tier: name.to_owned(),
                problem,
            };
            if name.trim().is_empty() || t.limiter.trim().is_empty() {
                return Err(refused(TierProblem::Unnamed));
            }
            let rules = t.rules.as_deref().unwrap_or(&[]);
            if rules.is_empty() {
                return Err(refused(TierProblem::NoRules));
            }
            if rules.iter().enumerate().any(|(j, r)| rules[..j].iter().any(|q| q.window_order() == r.window_order())) {
                return Err(refused(TierProblem::DuplicateWindow));
            }
            if self.tiers[..i]
                .iter()
                .any(|o| o.limiter == t.limiter && o.limit_type == t.limit_type && o.tier == t.tier)
            {
                return Err(refused(TierProblem::Twice));
            }
        }
        Ok(())
    }

    /// For `rediss://`: also trust the CA certificate(s) in this PEM file, besides the
    /// platform's roots (`REDIS_CA_CERT`).
    pub fn ca_cert(mut self, pem: impl Into<std::path::PathBuf>) -> Config {
        self.tls = self.tls.ca_cert(pem);
        self
    }

    /// For `rediss://`: present this client certificate and key (PEM files) for mutual TLS
    /// (`REDIS_CLIENT_CERT`, `REDIS_CLIENT_KEY`).
    pub fn client_cert(
        mut self,
        cert_pem: impl Into<std::path::PathBuf>,
        key_pem: impl Into<std::path::PathBuf>,
    ) -> Config {
        self.tls = self.tls.client_cert(cert_pem, key_pem);
        self
    }

    /// The local refusal cache: a refused subject is refused again in this process,
    /// without a store call, until its retry-after has passed. On by default for the remote
    /// stores (Redis, Sentinel, Redis Cluster), off for memory (where a decision costs no round
    /// trip). A limiter's own [`LimiterBuilder::refusal_cache`](crate::LimiterBuilder::refusal_cache)
    /// overrides it. `RATELIMIT_REFUSAL_CACHE=on|off`.
    pub fn refusal_cache(mut self, on: bool) -> Config {
        self.refusal_cache = Some(on);
        self
    }

    /// Makes every limiter without a setting of its own
    /// ([`LimiterBuilder::runtime_overrides`](crate::LimiterBuilder::runtime_overrides)) decide
    /// each call with its subjects' runtime overrides
    /// ([`Limiter::set_override`](crate::Limiter::set_override)); off by default (environment:
    /// `RATELIMIT_RUNTIME_OVERRIDES=on`). Every process sharing the store should say the same.
    pub fn runtime_overrides(mut self, on: bool) -> Config {
        self.runtime_overrides = on;
        self
    }

    /// How many refusals the cache keeps at most (least recently used go first; default
    /// 100 000), 1 or more: [`init`] refuses 0 (turn the cache off with
    /// [`refusal_cache(false)`](Self::refusal_cache)). Taken when the cache is first used.
    /// `RATELIMIT_REFUSAL_CACHE_SIZE`.
    pub fn refusal_cache_size(mut self, entries: usize) -> Config {
        self.refusal_cache_size = entries;
        self
    }

    /// The most keys (a subject under one limit) an in-memory store holds, 1 or more: the
    /// memory store, and the local fallback of `on_error = local`, each. A full store forgets
    /// a subject not used lately to make room for a new one (a second chance: see
    /// [`MemoryStore`]). Default
    /// [`DEFAULT_MAX_KEYS`] (250 000, about 60 MB when full);
    /// [`init`] refuses 0. `RATELIMIT_MEMORY_MAX_KEYS`.
    pub fn memory_max_keys(mut self, keys: usize) -> Config {
        self.memory_max_keys = keys;
        self
    }

    /// Builds the store this configuration names.
    pub fn build_store(&self) -> Result<StoreHandle, ConfigError> {
        self.build_backend().map_err(|e| match (self.store_var, e) {
            (Some(var), ConfigError::Store(source)) => ConfigError::StoreVar { var, source },
            (_, e) => e,
        })
    }

    fn build_backend(&self) -> Result<StoreHandle, ConfigError> {
        Ok(match &self.backend {
            Backend::Memory => Arc::new(MemoryStore::new().max_keys(self.memory_max_keys)),
            Backend::Redis(url) => Arc::new(RedisStore::open_with_tls(url, self.timeout, &self.tls)?),
            #[cfg(feature = "cluster")]
            Backend::Cluster(urls) => {
                Arc::new(crate::store::ClusterStore::open_with_tls(urls, self.timeout, &self.tls)?)
            }
            #[cfg(not(feature = "cluster"))]
            Backend::Cluster(urls) => {
                return Err(ConfigError::Store(crate::error::StoreError::misconfigured(format!(
                    "Redis Cluster ({}) needs the `cluster` feature of ratelimit (on by default)",
                    urls.iter().map(|u| crate::store::redis::redact(u)).collect::<Vec<_>>().join(",")
                ))))
            }
            Backend::Sentinel(spec) => Arc::new(SentinelStore::open(spec, self.timeout)?),
            Backend::Store(s) => s.0.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_cache_follows_the_store_unless_set() {
        let c = Config::redis("redis://127.0.0.1/").refusal_cache(false).refusal_cache_size(10);
        assert_eq!((c.refusal_cache, c.refusal_cache_size), (Some(false), 10));
        assert_eq!(Config::memory().refusal_cache, None, "by default: by store");
    }

    #[test]
    fn failure_policy_parses() {
        assert_eq!("deny".parse(), Ok(FailurePolicy::Deny));
        assert_eq!("allow".parse(), Ok(FailurePolicy::Allow));
        assert!(" Allow ".parse::<FailurePolicy>().is_err());
        assert_eq!("local".parse(), Ok(FailurePolicy::Local));
        assert!("sometimes".parse::<FailurePolicy>().is_err());
    }
}
