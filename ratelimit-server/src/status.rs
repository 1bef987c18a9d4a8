//! Each descriptor's status in the response. One store round trip answers for the tightest rule
//! of a decision (the one with the least left, or the one that refused), so that descriptor's
//! `limit_remaining` and `duration_until_reset` are exact. Every other counted descriptor of the
//! decision reports the tightest remaining capped by its own limit (never more than it has
//! left, so the least `limit_remaining` of a response, which Envoy's `x-ratelimit-*` headers
//! show, is exact) and the end of its window (exact for a fixed window and for an admitted
//! sliding-window call, whose units leave last; an upper bound for the buckets).

use crate::config::matcher::Matched;
use crate::config::yaml;
use crate::config::LimitSpec;
use crate::proto::{self, Code, DescriptorStatus, RateLimitResponse};
use ratelimit::status::Headroom;
use ratelimit::{Algorithm, RateLimited, Rule};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The status before deciding: no limit, unlimited, refused by `requests_per_unit: 0`, or a
/// limit about to be decided (its whole count: nothing known to be used yet).
pub fn initial(matched: Option<&Matched>) -> DescriptorStatus {
    let Some(m) = matched else {
        return DescriptorStatus { code: Code::Ok as i32, ..Default::default() };
    };
    let spec = &m.spec;
    if spec.rules.is_none() {
        return DescriptorStatus { code: Code::Ok as i32, limit_remaining: u32::MAX, ..Default::default() };
    }
    let over = spec.refuse_all && !spec.shadow;
    DescriptorStatus {
        code: if over { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(current_limit(spec)),
        limit_remaining: if spec.refuse_all { 0 } else { spec.shown.0 },
        duration_until_reset: None,
    }
}

/// Fills the statuses of `members` after their decision allowed the request.
pub fn allowed(
    statuses: &mut [DescriptorStatus],
    members: &[usize],
    specs: &[Option<&LimitSpec>],
    q: Option<Headroom>,
) {
    let Some(q) = q else { return };
    let named = members.iter().copied().find(|&i| specs[i].is_some_and(|s| !s.shadow && holds(s, q.policy)));
    for &i in members {
        let Some(spec) = specs[i] else { continue };
        if spec.shadow {
            continue;
        }
        let st = &mut statuses[i];
        if Some(i) == named {
            st.current_limit = Some(limit_of(spec, q.policy.rule));
            st.limit_remaining = clamp(q.remaining);
            st.duration_until_reset = Some(q.reset.into());
        } else {
            st.limit_remaining = clamp(q.remaining).min(spec.shown.0);
            st.duration_until_reset = Some(window_end(spec).into());
        }
    }
}

/// Fills the statuses of `members` after their decision refused the request: the refusing
/// descriptor is `OVER_LIMIT`; the others keep their limits (nothing was counted in them).
pub fn refused(statuses: &mut [DescriptorStatus], members: &[usize], specs: &[Option<&LimitSpec>], r: &RateLimited) {
    let by_policy = r.policy().and_then(|p| members.iter().copied().find(|&i| specs[i].is_some_and(|s| holds(s, p))));
    let named = by_policy.or_else(|| members.iter().copied().find(|&i| specs[i].is_some_and(|s| !s.shadow)));
    let Some(i) = named else { return };
    let Some(spec) = specs[i] else { return };
    let st = &mut statuses[i];
    st.code = Code::OverLimit as i32;
    if let Some(rule) = r.rule() {
        st.current_limit = Some(limit_of(spec, rule));
    }
    st.limit_remaining = 0;
    st.duration_until_reset = Some(r.retry_after().into());
}

fn holds(spec: &LimitSpec, p: ratelimit::status::Policy) -> bool {
    spec.limit_type == p.limit_type && spec.rules.as_ref().is_some_and(|rules| rules.contains(&p.rule))
}

/// `current_limit` for one rule of `spec` (a descriptor may have several).
fn limit_of(spec: &LimitSpec, rule: Rule) -> proto::RateLimit {
    let shown = current_limit(spec);
    if u64::from(shown.requests_per_unit) == rule.count() && spec.rules.as_ref().and_then(|r| r.first()) == Some(&rule)
    {
        return shown;
    }
    let secs = rule.window().as_secs();
    let unit = ["second", "minute", "hour", "day", "week", "month", "year"]
        .iter()
        .filter_map(|u| yaml::unit(u))
        .find(|(_, s)| *s == secs && rule.window().subsec_nanos() == 0)
        .map_or(proto::Unit::Unknown, |(u, _)| u);
    let name = if spec.name.is_empty() { format!("{:?}", rule.window()) } else { spec.name.clone() };
    proto::RateLimit { name, requests_per_unit: clamp(rule.count()), unit: unit as i32 }
}

/// When the window of `spec`'s first rule ends: the aligned window's end for a fixed window
/// (on this host's clock), the whole window otherwise.
fn window_end(spec: &LimitSpec) -> Duration {
    let Some(rule) = spec.rules.as_ref().and_then(|r| r.first()) else { return Duration::ZERO };
    let w = rule.window_ms().max(1);
    if spec.algorithm != Algorithm::FixedWindow {
        return rule.window();
    }
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let into = u64::try_from(now_ms % u128::from(w)).unwrap_or(0);
    Duration::from_millis(w - into)
}

fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Header fields as Envoy's `HeaderValue`s.
pub fn header_values(headers: &http::HeaderMap) -> Vec<proto::HeaderValue> {
    headers
        .iter()
        .filter_map(|(k, v)| {
            v.to_str().ok().map(|v| proto::HeaderValue { key: k.as_str().to_owned(), value: v.to_owned() })
        })
        .collect()
}

/// Counts the request and each configured descriptor's outcome. Labels are the configuration's
/// own paths (`domain.key_value.key`), never a request's values.
pub fn count(matched: &[Option<&Matched>], response: &RateLimitResponse) {
    if response.overall_code == Code::OverLimit as i32 {
        metrics::counter!("ratelimit_server_requests_total", "code" => "over_limit").increment(1);
    } else {
        metrics::counter!("ratelimit_server_requests_total", "code" => "ok").increment(1);
    }
    for (m, st) in matched.iter().zip(&response.statuses) {
        if let Some(m) = m {
            m.spec.counters[usize::from(st.code == Code::OverLimit as i32)].increment(1);
        }
    }
}

/// The `current_limit` of `spec`.
pub fn current_limit(spec: &LimitSpec) -> proto::RateLimit {
    let (count, unit, name) = &spec.shown;
    proto::RateLimit { name: name.clone(), requests_per_unit: *count, unit: *unit as i32 }
}
