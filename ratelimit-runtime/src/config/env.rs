//! The configuration from the environment: every variable the library reads, in one place.

use super::{Config, FailurePolicy};
use crate::error::{ConfigError, ParseError};
use crate::store::{SentinelSpec, TlsConfig};
use std::path::PathBuf;

/// One environment variable, or `None` when it is unset or blank (blank is unset, so that
/// `VAR=` in a compose file or a unit means the default).
pub(crate) type Var<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process's environment, blank values counting as unset.
pub(crate) fn process_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Variables that were renamed: the old name still works, with a warning, so that a deployment
/// that sets it keeps its behaviour after an upgrade.
const RENAMED: [(&str, &str); 2] = [
    ("RATELIMIT_REFUSAL_CACHE", "RATELIMIT_DENY_CACHE"),
    ("RATELIMIT_REFUSAL_CACHE_SIZE", "RATELIMIT_DENY_CACHE_SIZE"),
];

/// The value of `name`, or of its former name (with a warning) when only that one is set.
fn current_or_former(var: Var<'_>, name: &'static str) -> Option<(&'static str, String)> {
    if let Some(value) = var(name) {
        return Some((name, value));
    }
    let (_, former) = RENAMED.iter().find(|(new, _)| *new == name)?;
    let value = var(former)?;
    tracing::warn!(
        variable = former,
        renamed = name,
        "ratelimit: an environment variable was renamed; set the new name"
    );
    Some((former, value))
}

impl Config {
    /// From the environment: `REDIS_CLUSTER_URLS` (comma-separated), else `REDIS_URL`, else
    /// `REDIS_SENTINEL_URLS` (comma-separated) with `REDIS_SENTINEL_MASTER` (and the primary's
    /// `REDIS_PASSWORD`, `REDIS_USERNAME`), else memory; `RATELIMIT_ON_ERROR=allow|deny|local`.
    /// Naming more than one store is an error. `RATELIMIT_CONFIG=path.toml`: the overrides file.
    /// For `rediss://`, `REDIS_CA_CERT` (a private CA's PEM file) and `REDIS_CLIENT_CERT` with
    /// `REDIS_CLIENT_KEY` (mutual TLS). `RATELIMIT_REFUSAL_CACHE=on|off` (also `1|0`,
    /// `true|false`) and `RATELIMIT_REFUSAL_CACHE_SIZE=<entries>`, 1 or more (see
    /// [`refusal_cache`](Self::refusal_cache); their former names `RATELIMIT_DENY_CACHE` and
    /// `RATELIMIT_DENY_CACHE_SIZE` still work). `RATELIMIT_MEMORY_MAX_KEYS=<keys>`, 1 or more:
    /// the most keys an in-memory store holds (see [`memory_max_keys`](Self::memory_max_keys)).
    ///
    /// Values are read exactly as documented (lower case, no spaces, no aliases); any other
    /// value is an error naming the variable and the values it takes. A blank variable counts as
    /// unset.
    pub fn from_env() -> Result<Config, ConfigError> {
        from(&process_var)
    }
}

/// The configuration the variables `var` give.
pub(crate) fn from(var: Var<'_>) -> Result<Config, ConfigError> {
    let mut config = if let Some(spec) = sentinel(var)? {
        Config { store_var: Some("REDIS_SENTINEL_URLS"), ..Config::sentinel_spec(spec) }
    } else if let Some(urls) = var("REDIS_CLUSTER_URLS") {
        Config { store_var: Some("REDIS_CLUSTER_URLS"), ..Config::cluster(list(&urls)) }
    } else if let Some(url) = var("REDIS_URL") {
        Config { store_var: Some("REDIS_URL"), ..Config::redis(url) }
    } else {
        // Settings of a Redis with no Redis named: a mistake to say, not a value to ignore.
        for name in ["REDIS_CA_CERT", "REDIS_CLIENT_CERT", "REDIS_CLIENT_KEY"] {
            if var(name).is_some() {
                return Err(ConfigError::MissingVar { set: name, missing: "REDIS_URL" });
            }
        }
        Config::memory()
    };
    config.tls = tls(var)?;
    if let Some(policy) = var("RATELIMIT_ON_ERROR") {
        config.on_error = parsed("RATELIMIT_ON_ERROR", &policy, str::parse::<FailurePolicy>)?;
    }
    if let Some(path) = var("RATELIMIT_CONFIG") {
        config.overrides_file = Some(PathBuf::from(path));
    }
    if let Some(on) = runtime_overrides(var)? {
        config.runtime_overrides = on;
    }
    let (cache, size) = refusal_cache(var)?;
    config.refusal_cache = cache;
    if let Some(size) = size {
        config.refusal_cache_size = size;
    }
    if let Some(keys) = memory_max_keys(var)? {
        config.memory_max_keys = keys;
    }
    Ok(config)
}

/// `RATELIMIT_MEMORY_MAX_KEYS`.
pub(crate) fn memory_max_keys(var: Var<'_>) -> Result<Option<usize>, ConfigError> {
    let Some(value) = var("RATELIMIT_MEMORY_MAX_KEYS") else { return Ok(None) };
    parsed("RATELIMIT_MEMORY_MAX_KEYS", &value, |s| at_least_one(s, MEMORY_MAX_KEYS)).map(Some)
}

/// What a memory bound may be.
pub(crate) const MEMORY_MAX_KEYS: &str = "1 or more keys";

/// The switch of runtime overrides (see `Config::runtime_overrides`).
pub(crate) const RUNTIME_OVERRIDES: &str = "RATELIMIT_RUNTIME_OVERRIDES";

/// `RATELIMIT_RUNTIME_OVERRIDES`, unset: `None`.
pub(crate) fn runtime_overrides(var: Var<'_>) -> Result<Option<bool>, ConfigError> {
    var(RUNTIME_OVERRIDES).map(|on| parsed(RUNTIME_OVERRIDES, &on, switch)).transpose()
}

/// `RATELIMIT_REFUSAL_CACHE` and `RATELIMIT_REFUSAL_CACHE_SIZE` (or their former names).
pub(crate) fn refusal_cache(var: Var<'_>) -> Result<(Option<bool>, Option<usize>), ConfigError> {
    let on = match current_or_former(var, "RATELIMIT_REFUSAL_CACHE") {
        Some((name, value)) => Some(parsed(name, &value, switch)?),
        None => None,
    };
    let size = match current_or_former(var, "RATELIMIT_REFUSAL_CACHE_SIZE") {
        Some((name, value)) => Some(parsed(name, &value, cache_size)?),
        None => None,
    };
    Ok((on, size))
}

/// `value` of variable `name`, parsed by `parse`.
fn parsed<T>(name: &'static str, value: &str, parse: impl Fn(&str) -> Result<T, ParseError>) -> Result<T, ConfigError> {
    parse(value).map_err(|source| ConfigError::Var { var: name, value: value.to_owned(), source })
}

/// `on`/`off`, `1`/`0`, `true`/`false`, spelled exactly so: a value read some other way than
/// its writer meant must stop the process, not change what it does.
pub(crate) fn switch(s: &str) -> Result<bool, ParseError> {
    match s {
        "on" | "1" | "true" => Ok(true),
        "off" | "0" | "false" => Ok(false),
        _ => Err(ParseError::Unknown { what: "switch", value: s.to_owned(), expected: "on, off, 1, 0, true or false" }),
    }
}

/// A number of refusal cache entries: 1 or more (the switch turns the cache off).
fn cache_size(s: &str) -> Result<usize, ParseError> {
    at_least_one(s, REFUSAL_CACHE_SIZES)
}

/// A count of 1 or more, `expected` saying what it counts when it is not one.
fn at_least_one(s: &str, expected: &'static str) -> Result<usize, ParseError> {
    match s.parse::<usize>() {
        Ok(0) => Err(ParseError::OutOfRange { value: s.to_owned(), expected }),
        Ok(n) => Ok(n),
        Err(source) => Err(ParseError::Number { value: s.to_owned(), source }),
    }
}

/// What a refusal cache size may be.
pub(crate) const REFUSAL_CACHE_SIZES: &str =
    "1 or more entries (RATELIMIT_REFUSAL_CACHE=off or Config::refusal_cache(false) turns the cache off)";

/// A comma-separated list, blanks dropped.
fn list(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// `REDIS_SENTINEL_URLS` with `REDIS_SENTINEL_MASTER`, and `REDIS_PASSWORD` / `REDIS_USERNAME`
/// for the primary: `None` when Sentinel is not asked for; an error when it is half asked for,
/// or when more than one of `REDIS_URL`, `REDIS_CLUSTER_URLS` and Sentinel is set (no silent
/// pick).
fn sentinel(var: Var<'_>) -> Result<Option<SentinelSpec>, ConfigError> {
    let named: Vec<&'static str> = ["REDIS_URL", "REDIS_CLUSTER_URLS", "REDIS_SENTINEL_URLS"]
        .into_iter()
        .filter(|name| var(name).is_some())
        .collect();
    if named.len() > 1 {
        return Err(ConfigError::StoresConflict(named));
    }
    let (urls, master) = match (var("REDIS_SENTINEL_URLS"), var("REDIS_SENTINEL_MASTER")) {
        (None, None) => {
            // Only the Sentinel primary takes its credentials from variables: a password meant
            // for REDIS_URL would otherwise be dropped without a word.
            for name in ["REDIS_PASSWORD", "REDIS_USERNAME"] {
                if var(name).is_some() {
                    return Err(ConfigError::MissingVar { set: name, missing: "REDIS_SENTINEL_URLS" });
                }
            }
            return Ok(None);
        }
        (Some(urls), Some(master)) => (urls, master),
        (Some(_), None) => {
            return Err(ConfigError::MissingVar { set: "REDIS_SENTINEL_URLS", missing: "REDIS_SENTINEL_MASTER" })
        }
        (None, Some(_)) => {
            return Err(ConfigError::MissingVar { set: "REDIS_SENTINEL_MASTER", missing: "REDIS_SENTINEL_URLS" })
        }
    };
    let mut spec = SentinelSpec::new(list(&urls), master.trim());
    if let Some(password) = var("REDIS_PASSWORD") {
        spec = spec.primary_auth(var("REDIS_USERNAME"), password);
    }
    Ok(Some(spec))
}

/// `REDIS_CA_CERT`, and `REDIS_CLIENT_CERT` with `REDIS_CLIENT_KEY` (both or neither).
fn tls(var: Var<'_>) -> Result<TlsConfig, ConfigError> {
    let mut tls = TlsConfig::new();
    if let Some(ca) = var("REDIS_CA_CERT") {
        tls = tls.ca_cert(ca);
    }
    match (var("REDIS_CLIENT_CERT"), var("REDIS_CLIENT_KEY")) {
        (Some(cert), Some(key)) => tls = tls.client_cert(cert, key),
        (None, None) => {}
        (Some(_), None) => {
            return Err(ConfigError::MissingVar { set: "REDIS_CLIENT_CERT", missing: "REDIS_CLIENT_KEY" })
        }
        (None, Some(_)) => {
            return Err(ConfigError::MissingVar { set: "REDIS_CLIENT_KEY", missing: "REDIS_CLIENT_CERT" })
        }
    }
    Ok(tls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn store_variables_conflict_or_go_together() {
        assert!(sentinel(&env(&[("REDIS_URL", "redis://a")])).unwrap().is_none());
        let both = sentinel(&env(&[("REDIS_URL", "redis://a"), ("REDIS_SENTINEL_URLS", "redis://b")])).unwrap_err();
        assert!(both.to_string().contains("REDIS_URL and REDIS_SENTINEL_URLS are set together"), "{both}");
        assert!(sentinel(&env(&[("REDIS_URL", "redis://a"), ("REDIS_CLUSTER_URLS", "redis://b")])).is_err());
        let half = sentinel(&env(&[("REDIS_SENTINEL_URLS", "redis://b")])).unwrap_err();
        assert!(half.to_string().contains("without REDIS_SENTINEL_MASTER"), "{half}");
        let half = sentinel(&env(&[("REDIS_SENTINEL_MASTER", "m")])).unwrap_err();
        assert!(half.to_string().contains("without REDIS_SENTINEL_URLS"), "{half}");
        let spec = sentinel(&env(&[
            ("REDIS_SENTINEL_URLS", " redis://a:26379, redis://b:26379 ,"),
            ("REDIS_SENTINEL_MASTER", "mymaster"),
            ("REDIS_PASSWORD", "pw"),
        ]));
        let expected = SentinelSpec::new(["redis://a:26379", "redis://b:26379"], "mymaster").primary_auth(None, "pw");
        assert_eq!(spec.unwrap(), Some(expected));
        let half = tls(&env(&[("REDIS_CLIENT_CERT", "c.pem")])).unwrap_err();
        assert_eq!(half.to_string(), "REDIS_CLIENT_CERT is set without REDIS_CLIENT_KEY");
        // Settings of a store that is not there are refused, not ignored.
        let stray = from(&env(&[("REDIS_PASSWORD", "pw"), ("REDIS_URL", "redis://a")])).unwrap_err();
        assert!(stray.to_string().starts_with("REDIS_PASSWORD is set without REDIS_SENTINEL_URLS"), "{stray}");
        let stray = from(&env(&[("REDIS_CA_CERT", "ca.pem")])).unwrap_err();
        assert!(stray.to_string().starts_with("REDIS_CA_CERT is set without REDIS_URL"), "{stray}");
        // A store a variable names that cannot be built: the error names the variable.
        let bad = from(&env(&[("REDIS_URL", "http://a:6379/")])).unwrap().build_store().err().unwrap();
        assert!(bad.to_string().starts_with("REDIS_URL: "), "{bad}");
    }

    #[test]
    fn the_refusal_cache_variables_keep_their_former_names() {
        assert_eq!(refusal_cache(&env(&[])).unwrap(), (None, None));
        let new = env(&[("RATELIMIT_REFUSAL_CACHE", "off"), ("RATELIMIT_REFUSAL_CACHE_SIZE", "10")]);
        assert_eq!(refusal_cache(&new).unwrap(), (Some(false), Some(10)));
        let old = env(&[("RATELIMIT_DENY_CACHE", "1"), ("RATELIMIT_DENY_CACHE_SIZE", "20")]);
        assert_eq!(refusal_cache(&old).unwrap(), (Some(true), Some(20)));
        // The new name wins over the former one.
        let both = env(&[("RATELIMIT_REFUSAL_CACHE", "0"), ("RATELIMIT_DENY_CACHE", "1")]);
        assert_eq!(refusal_cache(&both).unwrap().0, Some(false));
        let bad = refusal_cache(&env(&[("RATELIMIT_DENY_CACHE", "maybe")])).unwrap_err();
        assert_eq!(
            bad.to_string(),
            "RATELIMIT_DENY_CACHE=\"maybe\": unknown switch \"maybe\": expected on, off, 1, 0, true or false"
        );
        // Strict: no other spelling, no case, no spaces.
        for value in ["yes", "no", "Off", " on", "ON"] {
            assert!(refusal_cache(&env(&[("RATELIMIT_REFUSAL_CACHE", value)])).is_err(), "{value:?}");
        }
        // A size the cache cannot hold is refused, saying how to turn it off.
        let zero = refusal_cache(&env(&[("RATELIMIT_REFUSAL_CACHE_SIZE", "0")])).unwrap_err();
        assert_eq!(
            zero.to_string(),
            "RATELIMIT_REFUSAL_CACHE_SIZE=\"0\": \"0\" is out of range: expected 1 or more entries \
             (RATELIMIT_REFUSAL_CACHE=off or Config::refusal_cache(false) turns the cache off)"
        );
        let bad = refusal_cache(&env(&[("RATELIMIT_REFUSAL_CACHE_SIZE", "lots")])).unwrap_err();
        assert!(bad.to_string().starts_with("RATELIMIT_REFUSAL_CACHE_SIZE=\"lots\": "), "{bad}");
        assert!(std::error::Error::source(&bad).is_some(), "the parse error is kept");
    }

    #[test]
    fn the_failure_policy_is_read() {
        let config = from(&env(&[("RATELIMIT_ON_ERROR", "deny")])).unwrap();
        assert_eq!(config.on_error, FailurePolicy::Deny);
        let bad = from(&env(&[("RATELIMIT_ON_ERROR", "sometimes")])).unwrap_err();
        assert_eq!(
            bad.to_string(),
            "RATELIMIT_ON_ERROR=\"sometimes\": unknown failure policy \"sometimes\": expected `allow`, `deny` or `local`"
        );
        // Strict: the aliases and other cases that were once read are refused.
        for value in ["closed", "open", "DENY", "Allow", " deny"] {
            assert!(from(&env(&[("RATELIMIT_ON_ERROR", value)])).is_err(), "{value:?}");
        }
    }
}
