//! Global configuration, set once: explicit [`init`], else from the environment on first use.

use crate::error::StoreError;
pub(crate) mod overrides;

use crate::rt::lock::lock;
use crate::store::redis::sentinel::{SentinelSpec, SentinelStore};
use crate::store::redis::tls::TlsConfig;
use crate::store::{memory::MemoryStore, redis::RedisStore, StoreHandle, Unavailable};
pub use overrides::{unknown_limiters, LimitOverride, Overrides, OverridesError};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The default time a store call may take before the failure policy applies.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

/// How many refusals the local refusal cache keeps at most, unless configured otherwise.
pub(crate) const DEFAULT_DENY_CACHE_SIZE: usize = 100_000;

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
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "allow" | "open" => Ok(FailurePolicy::Allow),
            "deny" | "closed" => Ok(FailurePolicy::Deny),
            "local" => Ok(FailurePolicy::Local),
            other => Err(format!("unknown failure policy {other:?}: expected `allow`, `deny` or `local`")),
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
    deny_cache: Option<bool>,
    deny_cache_size: usize,
    /// Tiers given in code, by limiter name ([`Config::tier`]).
    tiers: Vec<LimitOverride>,
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
            deny_cache: None,
            deny_cache_size: DEFAULT_DENY_CACHE_SIZE,
            tiers: Vec::new(),
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

    /// From the environment: `REDIS_CLUSTER_URLS` (comma-separated), else `REDIS_URL`, else
    /// `REDIS_SENTINEL_URLS` (comma-separated) with `REDIS_SENTINEL_MASTER` (and the primary's
    /// `REDIS_PASSWORD`, `REDIS_USERNAME`), else memory; `RATELIMIT_ON_ERROR=allow|deny|local`. Naming
    /// more than one store is an error. `RATELIMIT_CONFIG=path.toml`: the overrides file. For
    /// `rediss://`, `REDIS_CA_CERT` (a private CA's PEM file) and `REDIS_CLIENT_CERT` with
    /// `REDIS_CLIENT_KEY` (mutual TLS).
    /// `RATELIMIT_DENY_CACHE=0|1` and `RATELIMIT_DENY_CACHE_SIZE=<entries>` (see
    /// [`deny_cache`](Self::deny_cache)).
    pub fn from_env() -> Result<Config, ConfigError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut config = if let Some(spec) = crate::store::redis::sentinel::spec_from_env(&var).map_err(ConfigError)? {
            Config::sentinel_spec(spec)
        } else if let Some(urls) = var("REDIS_CLUSTER_URLS") {
            Config::cluster(urls.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned))
        } else if let Some(url) = var("REDIS_URL") {
            Config::redis(url)
        } else {
            Config::memory()
        };
        config.tls = TlsConfig::from_env().map_err(ConfigError)?;
        if let Some(policy) = var("RATELIMIT_ON_ERROR") {
            config.on_error = policy.parse().map_err(ConfigError)?;
        }
        if let Some(path) = var("RATELIMIT_CONFIG") {
            config.overrides_file = Some(PathBuf::from(path));
        }
        if let Some(on) = var("RATELIMIT_DENY_CACHE") {
            config.deny_cache = Some(parse_switch(&on).ok_or_else(|| {
                ConfigError(format!("RATELIMIT_DENY_CACHE={on:?}: expected 0, 1, true, false, on or off"))
            })?);
        }
        if let Some(size) = var("RATELIMIT_DENY_CACHE_SIZE") {
            config.deny_cache_size = size.trim().parse().map_err(|_| {
                ConfigError(format!("RATELIMIT_DENY_CACHE_SIZE={size:?}: expected a number of entries"))
            })?;
        }
        Ok(config)
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
    /// [`LimiterBuilder::tier`](crate::LimiterBuilder::tier). [`init`] refuses an empty tier
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
        limit_type: crate::model::limit_type::LimitType,
        tier: impl Into<String>,
        rules: impl IntoIterator<Item = crate::model::rule::Rule>,
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
    fn check_tiers(&self) -> Result<(), ConfigError> {
        for (i, t) in self.tiers.iter().enumerate() {
            let name = t.tier.as_deref().unwrap_or("");
            let at = format!("Config::tier({:?}, {}, {name:?}, …)", t.limiter, t.limit_type);
            if name.trim().is_empty() || t.limiter.trim().is_empty() {
                return Err(ConfigError(format!("{at}: the limiter and the tier need names")));
            }
            let rules = t.rules.as_deref().unwrap_or(&[]);
            if rules.is_empty() {
                return Err(ConfigError(format!("{at}: a tier needs at least one rule")));
            }
            if rules.iter().enumerate().any(|(j, r)| rules[..j].iter().any(|q| q.window_ms() == r.window_ms())) {
                return Err(ConfigError(format!("{at}: two rules with the same window")));
            }
            if self.tiers[..i]
                .iter()
                .any(|o| o.limiter == t.limiter && o.limit_type == t.limit_type && o.tier == t.tier)
            {
                return Err(ConfigError(format!("{at}: this tier is given twice")));
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
    /// without a store call, until its retry-after has passed. On by default for Redis and
    /// Redis Cluster, off for memory (where a decision costs no round trip). A limiter's own
    /// [`LimiterBuilder::deny_cache`](crate::LimiterBuilder::deny_cache) overrides it.
    pub fn deny_cache(mut self, on: bool) -> Config {
        self.deny_cache = Some(on);
        self
    }

    /// How many refusals the cache keeps at most (least recently used go first; default
    /// 100 000). Taken when the cache is first used.
    pub fn deny_cache_size(mut self, entries: usize) -> Config {
        self.deny_cache_size = entries;
        self
    }

    /// Builds the store this configuration names.
    pub fn build_store(&self) -> Result<StoreHandle, ConfigError> {
        Ok(match &self.backend {
            Backend::Memory => Arc::new(MemoryStore::new()),
            Backend::Redis(url) => Arc::new(
                RedisStore::open_with_tls(url, self.timeout, &self.tls).map_err(|e| ConfigError(e.to_string()))?,
            ),
            #[cfg(feature = "cluster")]
            Backend::Cluster(urls) => Arc::new(
                crate::store::redis::cluster::ClusterStore::open_with_tls(urls, self.timeout, &self.tls)
                    .map_err(|e| ConfigError(e.to_string()))?,
            ),
            #[cfg(not(feature = "cluster"))]
            Backend::Cluster(urls) => {
                return Err(ConfigError(format!(
                    "Redis Cluster ({}) needs the `cluster` feature of ratelimit (on by default)",
                    urls.iter().map(|u| crate::store::redis::redact(u)).collect::<Vec<_>>().join(",")
                )))
            }
            Backend::Sentinel(spec) => {
                Arc::new(SentinelStore::open(spec, self.timeout).map_err(|e| ConfigError(e.to_string()))?)
            }
            Backend::Store(s) => s.0.clone(),
        })
    }
}

/// A configuration could not be applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ConfigError {}

pub(crate) struct Global {
    pub(crate) store: StoreHandle,
    pub(crate) on_error: FailurePolicy,
    pub(crate) deny_cache: Option<bool>,
    pub(crate) deny_cache_size: usize,
}

static GLOBAL: OnceLock<Global> = OnceLock::new();

/// Sets the global configuration. Call it once, before the first rate-limited call; a second
/// call, or one after the configuration was taken from the environment, is an error.
pub fn init(config: Config) -> Result<(), ConfigError> {
    config.check_tiers()?;
    let overrides = match &config.overrides_file {
        Some(path) => Some(Overrides::load(path).map_err(|e| ConfigError(e.to_string()))?),
        None => None,
    };
    let store = config.build_store()?;
    GLOBAL
        .set(Global {
            store,
            on_error: config.on_error,
            deny_cache: config.deny_cache,
            deny_cache_size: config.deny_cache_size,
        })
        .map_err(|_| ConfigError("ratelimit is already initialised".to_owned()))?;
    overrides::configure(config.overrides_file, overrides, config.tiers);
    Ok(())
}

/// Re-reads the overrides file (`RATELIMIT_CONFIG` or [`Config::overrides_file`]) and puts it
/// in force: limiters pick the new rules up on their next call, and a decision already under
/// way finishes under the rules it started with. A file that does not parse is logged and
/// returned, and the rules in force stay. Returns the new table's generation.
pub fn reload() -> Result<u64, crate::config::overrides::OverridesError> {
    // The global configuration names the file: build it if no call did yet.
    let _ = global();
    overrides::reload_file()
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
        overrides::configure(file, overrides, Vec::new());
        let deny_cache = config.as_ref().map_or(None, |c| c.deny_cache);
        let deny_cache_size = config.as_ref().map_or(DEFAULT_DENY_CACHE_SIZE, |c| c.deny_cache_size);
        let store = config.and_then(|c| c.build_store()).unwrap_or_else(|e| {
            tracing::error!(error = %e, "ratelimit: cannot configure the store from the environment");
            Arc::new(Unavailable::new(StoreError::misconfigured(e.0)))
        });
        Global { store, on_error, deny_cache, deny_cache_size }
    })
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
pub(crate) fn deny_cache_settings() -> (Option<bool>, usize) {
    if let Some(g) = GLOBAL.get() {
        return (g.deny_cache, g.deny_cache_size);
    }
    static ENV: OnceLock<(Option<bool>, usize)> = OnceLock::new();
    *ENV.get_or_init(|| {
        let var = |name: &str| std::env::var(name).ok();
        let on = var("RATELIMIT_DENY_CACHE").and_then(|v| parse_switch(&v));
        let size = var("RATELIMIT_DENY_CACHE_SIZE").and_then(|v| v.trim().parse().ok());
        (on, size.unwrap_or(DEFAULT_DENY_CACHE_SIZE))
    })
}

/// `0`/`1`, `true`/`false`, `on`/`off`.
fn parse_switch(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

/// Logs a failed store call under the fail-open policy, at most once per 10 s with the number of
/// calls since: an outage must not turn into one log line per request.
pub(crate) fn warn_store_failure(limiter: &str, error: &StoreError) {
    static THROTTLE: Throttle = Throttle::new(Duration::from_secs(10));
    if let Some(suppressed) = THROTTLE.admit(Instant::now()) {
        tracing::warn!(limiter, error = %error, suppressed, "rate-limit store failed; letting calls through (fail open)");
    }
}

/// As [`warn_store_failure`], under the `local` policy.
pub(crate) fn warn_local_decisions(limiter: &str, error: &StoreError) {
    static THROTTLE: Throttle = Throttle::new(Duration::from_secs(10));
    if let Some(suppressed) = THROTTLE.admit(Instant::now()) {
        tracing::warn!(limiter, error = %error, suppressed, "rate-limit store failed; deciding in process memory (on_error = local)");
    }
}

/// Lets one event through per period, counting the ones it holds back.
pub(crate) struct Throttle {
    period: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    pub(crate) const fn new(period: Duration) -> Throttle {
        Throttle { period, state: Mutex::new((None, 0)) }
    }

    /// `Some(events held back since the last one let through)` if this one may pass.
    pub(crate) fn admit(&self, now: Instant) -> Option<u64> {
        let mut state = lock(&self.state);
        let (last, held) = &mut *state;
        if last.is_some_and(|t| now.saturating_duration_since(t) < self.period) {
            *held += 1;
            return None;
        }
        *last = Some(now);
        Some(std::mem::take(held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_logs_once_per_period() {
        let throttle = Throttle::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(throttle.admit(t0), Some(0));
        let passed = (1..=1000).filter(|i| throttle.admit(t0 + Duration::from_millis(*i)).is_some()).count();
        assert_eq!(passed, 0, "1000 failures within the period log nothing more");
        assert_eq!(throttle.admit(t0 + Duration::from_secs(10)), Some(1000), "then one line counts them");
        assert_eq!(throttle.admit(t0 + Duration::from_secs(11)), None);
    }

    #[test]
    fn deny_cache_switch_parses() {
        assert_eq!(parse_switch("0"), Some(false));
        assert_eq!(parse_switch(" Off "), Some(false));
        assert_eq!(parse_switch("1"), Some(true));
        assert_eq!(parse_switch("true"), Some(true));
        assert_eq!(parse_switch("maybe"), None);
        let c = Config::redis("redis://127.0.0.1/").deny_cache(false).deny_cache_size(10);
        assert_eq!((c.deny_cache, c.deny_cache_size), (Some(false), 10));
        assert_eq!(Config::memory().deny_cache, None, "by default: by store");
    }

    #[test]
    fn failure_policy_parses() {
        assert_eq!("deny".parse(), Ok(FailurePolicy::Deny));
        assert_eq!(" Allow ".parse(), Ok(FailurePolicy::Allow));
        assert_eq!("local".parse(), Ok(FailurePolicy::Local));
        assert!("sometimes".parse::<FailurePolicy>().is_err());
    }
}
