//! The configuration from the environment: every variable the library reads, in one place.

use super::{Config, FailurePolicy};
use crate::error::{ConfigError, ParseError};
use crate::store::{SentinelSpec, TlsConfig};
use std::path::PathBuf;

/// One environment variable, or `None` when it is unset or blank.
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
    /// `REDIS_CLIENT_KEY` (mutual TLS). `RATELIMIT_REFUSAL_CACHE=0|1` and
    /// `RATELIMIT_REFUSAL_CACHE_SIZE=<entries>` (see [`refusal_cache`](Self::refusal_cache);
    /// their former names `RATELIMIT_DENY_CACHE` and `RATELIMIT_DENY_CACHE_SIZE` still work).
    pub fn from_env() -> Result<Config, ConfigError> {
        from(&process_var)
    }
}

/// The configuration the variables `var` give.
pub(crate) fn from(var: Var<'_>) -> Result<Config, ConfigError> {
    let mut config = if let Some(spec) = sentinel(var)? {
        Config::sentinel_spec(spec)
    } else if let Some(urls) = var("REDIS_CLUSTER_URLS") {
        Config::cluster(list(&urls))
    } else if let Some(url) = var("REDIS_URL") {
        Config::redis(url)
    } else {
        Config::memory()
    };
    config.tls = tls(var)?;
    if let Some(policy) = var("RATELIMIT_ON_ERROR") {
        config.on_error = parsed("RATELIMIT_ON_ERROR", &policy, str::parse::<FailurePolicy>)?;
    }
    if let Some(path) = var("RATELIMIT_CONFIG") {
        config.overrides_file = Some(PathBuf::from(path));
    }
    let (cache, size) = refusal_cache(var)?;
    config.refusal_cache = cache;
    if let Some(size) = size {
        config.refusal_cache_size = size;
    }
    Ok(config)
}

/// `RATELIMIT_REFUSAL_CACHE` and `RATELIMIT_REFUSAL_CACHE_SIZE` (or their former names).
pub(crate) fn refusal_cache(var: Var<'_>) -> Result<(Option<bool>, Option<usize>), ConfigError> {
    let on = match current_or_former(var, "RATELIMIT_REFUSAL_CACHE") {
        Some((name, value)) => Some(parsed(name, &value, switch)?),
        None => None,
    };
    let size = match current_or_former(var, "RATELIMIT_REFUSAL_CACHE_SIZE") {
        Some((name, value)) => Some(parsed(name, &value, |v| {
            v.trim().parse::<usize>().map_err(|source| ParseError::Number { value: v.to_owned(), source })
        })?),
        None => None,
    };
    Ok((on, size))
}

/// `value` of variable `name`, parsed by `parse`.
fn parsed<T>(name: &'static str, value: &str, parse: impl Fn(&str) -> Result<T, ParseError>) -> Result<T, ConfigError> {
    parse(value).map_err(|source| ConfigError::Var { var: name, value: value.to_owned(), source })
}

/// `0`/`1`, `true`/`false`, `on`/`off`, `yes`/`no`.
pub(crate) fn switch(s: &str) -> Result<bool, ParseError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(ParseError::Unknown { what: "switch", value: s.to_owned(), expected: "0, 1, true, false, on or off" }),
    }
}

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
        (None, None) => return Ok(None),
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

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
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
    }

    #[test]
    fn the_refusal_cache_variables_keep_their_former_names() {
        assert_eq!(refusal_cache(&env(&[])).unwrap(), (None, None));
        let new = env(&[("RATELIMIT_REFUSAL_CACHE", " Off "), ("RATELIMIT_REFUSAL_CACHE_SIZE", "10")]);
        assert_eq!(refusal_cache(&new).unwrap(), (Some(false), Some(10)));
        let old = env(&[("RATELIMIT_DENY_CACHE", "1"), ("RATELIMIT_DENY_CACHE_SIZE", "20")]);
        assert_eq!(refusal_cache(&old).unwrap(), (Some(true), Some(20)));
        // The new name wins over the former one.
        let both = env(&[("RATELIMIT_REFUSAL_CACHE", "0"), ("RATELIMIT_DENY_CACHE", "1")]);
        assert_eq!(refusal_cache(&both).unwrap().0, Some(false));
        let bad = refusal_cache(&env(&[("RATELIMIT_DENY_CACHE", "maybe")])).unwrap_err();
        assert_eq!(
            bad.to_string(),
            "RATELIMIT_DENY_CACHE=\"maybe\": unknown switch \"maybe\": expected 0, 1, true, false, on or off"
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
        assert!(bad.to_string().contains("unknown failure policy \"sometimes\""), "{bad}");
    }
}
