//! One configuration file as envoyproxy/ratelimit writes it, plus this server's optional keys.
//! Checks that need only one value run while the file is read (`try_from`), so that the error
//! carries the line and column the YAML reader was at; unknown keys are errors, as in the
//! reference service.

use serde::Deserialize;
use std::time::Duration;

/// A file: one domain and its descriptors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// The domain Envoy's requests name.
    #[serde(default)]
    pub domain: String,
    /// The top-level descriptors.
    #[serde(default)]
    pub descriptors: Option<Vec<Descriptor>>,
}

/// A descriptor: an entry's key (and optionally value), its limit, and nested descriptors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawDescriptor")]
pub struct Descriptor {
    pub key: String,
    pub value: String,
    pub rate_limit: Option<RateLimit>,
    pub descriptors: Vec<Descriptor>,
    pub shadow_mode: bool,
    pub detailed_metric: bool,
    pub share_threshold: bool,
    /// Extensions: the algorithm (default: exact sliding window), the buckets' burst, more rules.
    pub algorithm: ratelimit::Algorithm,
    pub burst: Option<u64>,
    pub more_rules: Vec<RuleSpec>,
    /// Extension: count in this limiter's keys (an attribute's `name`), by this type.
    pub limiter: Option<String>,
    pub limit_type: ratelimit::LimitType,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a descriptor (a mapping with `key`)")]
struct RawDescriptor {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    rate_limit: Option<RateLimit>,
    #[serde(default)]
    descriptors: Option<Vec<Descriptor>>,
    #[serde(default)]
    shadow_mode: bool,
    // Read for compatibility; quota mode is not implemented (the descriptor limits as usual).
    #[serde(default)]
    quota_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    value_to_metric: bool,
    #[serde(default)]
    share_threshold: bool,
    #[serde(default)]
    metadata: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    algorithm: Option<String>,
    #[serde(default)]
    burst: Option<u64>,
    #[serde(default)]
    rate_limits: Option<Vec<RuleSpec>>,
    #[serde(default)]
    limiter: Option<String>,
    #[serde(default, rename = "type")]
    limit_type: Option<String>,
}

impl TryFrom<RawDescriptor> for Descriptor {
    type Error = String;

    fn try_from(raw: RawDescriptor) -> Result<Descriptor, String> {
        let _ = (raw.quota_mode, raw.value_to_metric, raw.metadata);
        let key = raw.key.unwrap_or_default();
        if key.is_empty() {
            return Err("descriptor has empty key".into());
        }
        let value = raw.value.unwrap_or_default();
        if raw.share_threshold && !value.contains('*') {
            return Err(format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{key}_{value}'"
            ));
        }
        let algorithm = match raw.algorithm.as_deref() {
            None => ratelimit::Algorithm::SlidingWindow,
            Some(name) => algorithm(name)?,
        };
        let limit_type = match raw.limit_type.as_deref() {
            None | Some("key") => ratelimit::LimitType::Key,
            Some("global") => ratelimit::LimitType::Global,
            Some("ip") => ratelimit::LimitType::Ip,
            Some("user") => ratelimit::LimitType::User,
            Some(other) => return Err(format!("unknown type '{other}' (global, ip, user or key)")),
        };
        if raw.limit_type.is_some() && raw.limiter.is_none() {
            return Err("'type' names the key layout of a `limiter`: give `limiter` too".into());
        }
        let more_rules = raw.rate_limits.unwrap_or_default();
        if raw.rate_limit.as_ref().is_some_and(|r| r.unlimited) && !more_rules.is_empty() {
            return Err("an unlimited descriptor has no `rate_limits`".into());
        }
        Ok(Descriptor {
            key,
            value,
            rate_limit: raw.rate_limit,
            descriptors: raw.descriptors.unwrap_or_default(),
            shadow_mode: raw.shadow_mode,
            detailed_metric: raw.detailed_metric,
            share_threshold: raw.share_threshold,
            algorithm,
            burst: raw.burst,
            more_rules,
            limiter: raw.limiter,
            limit_type,
        })
    }
}

/// Our six algorithms by their snake_case names.
fn algorithm(name: &str) -> Result<ratelimit::Algorithm, String> {
    use ratelimit::Algorithm::*;
    Ok(match name {
        "sliding_window" => SlidingWindow,
        "sliding_window_counter" => SlidingWindowCounter,
        "fixed_window" => FixedWindow,
        "token_bucket" => TokenBucket,
        "leaky_bucket" => LeakyBucket,
        "gcra" => Gcra,
        other => {
            return Err(format!(
                "unknown algorithm '{other}' (sliding_window, sliding_window_counter, fixed_window, token_bucket, \
                 leaky_bucket or gcra)"
            ))
        }
    })
}

/// A descriptor's `rate_limit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawRateLimit")]
pub struct RateLimit {
    /// The rule (absent when unlimited).
    pub rule: Option<RuleSpec>,
    pub unlimited: bool,
    pub name: String,
    pub replaces: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a rate limit (a mapping)")]
struct RawRateLimit {
    #[serde(default)]
    requests_per_unit: u32,
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    window: Option<String>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    replaces: Option<Vec<Replaces>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Replaces {
    #[serde(default)]
    name: String,
}

impl TryFrom<RawRateLimit> for RateLimit {
    type Error = String;

    fn try_from(raw: RawRateLimit) -> Result<RateLimit, String> {
        let name = raw.name.unwrap_or_default();
        let replaces: Vec<String> = raw.replaces.unwrap_or_default().into_iter().map(|r| r.name).collect();
        for r in &replaces {
            if r.is_empty() {
                return Err("should not have an empty replaces entry".into());
            }
            if *r == name {
                return Err("replaces should not contain name of same descriptor".into());
            }
        }
        let rule = if raw.unlimited {
            if raw.unit.as_deref().is_some_and(|u| unit(u).is_some()) || raw.window.is_some() {
                return Err("should not specify rate limit unit when unlimited".into());
            }
            None
        } else {
            let spec =
                RawRule { requests_per_unit: raw.requests_per_unit, unit: raw.unit, window: raw.window }.try_into()?;
            Some(spec)
        };
        Ok(RateLimit { rule, unlimited: raw.unlimited, name, replaces })
    }
}

/// One rule: a count per unit (the reference's units) or per any window (`window: 30s`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, try_from = "RawRule")]
pub struct RuleSpec {
    pub count: u32,
    pub window: Duration,
    /// The reference's unit, when the window is one (what `current_limit` reports).
    pub unit: Option<crate::proto::Unit>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    requests_per_unit: u32,
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    window: Option<String>,
}

impl TryFrom<RawRule> for RuleSpec {
    type Error = String;

    fn try_from(raw: RawRule) -> Result<RuleSpec, String> {
        let count = raw.requests_per_unit;
        match (raw.unit.as_deref(), raw.window.as_deref()) {
            (Some(_), Some(_)) => Err("give `unit` or `window`, not both".into()),
            (Some(u), None) => match unit(u) {
                Some((unit, secs)) => Ok(RuleSpec { count, window: Duration::from_secs(secs), unit: Some(unit) }),
                None => Err(format!("invalid rate limit unit '{u}'")),
            },
            (None, Some(w)) => Ok(RuleSpec { count, window: window(w)?, unit: None }),
            (None, None) => Err("invalid rate limit unit ''".into()),
        }
    }
}

/// The reference's units (any case) and their length in seconds (a month is 30 days, a year
/// 365, as the reference counts them).
pub fn unit(name: &str) -> Option<(crate::proto::Unit, u64)> {
    use crate::proto::Unit;
    Some(match name.to_ascii_uppercase().as_str() {
        "SECOND" => (Unit::Second, 1),
        "MINUTE" => (Unit::Minute, 60),
        "HOUR" => (Unit::Hour, 3600),
        "DAY" => (Unit::Day, 86_400),
        "WEEK" => (Unit::Week, 7 * 86_400),
        "MONTH" => (Unit::Month, 30 * 86_400),
        "YEAR" => (Unit::Year, 365 * 86_400),
        _ => return None,
    })
}

/// `500ms`, `30s`, `5m`, `2h`, `1d`: the attribute's window units.
fn window(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("invalid window '{text}' (e.g. 500ms, 30s, 5m, 2h, 1d)"))?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("invalid window '{text}' (e.g. 500ms, 30s, 5m, 2h, 1d)")),
    };
    match n.checked_mul(ms) {
        Some(0) | None => Err(format!("invalid window '{text}'")),
        Some(ms) => Ok(Duration::from_millis(ms)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_units() {
        assert_eq!(window("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(window("500ms"), Ok(Duration::from_millis(500)));
        assert!(window("0s").is_err() && window("5x").is_err() && window("s").is_err());
        assert_eq!(unit("Minute").map(|u| u.1), Some(60));
        assert!(unit("fortnight").is_none());
    }
}
