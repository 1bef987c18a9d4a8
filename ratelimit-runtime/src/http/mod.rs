//! HTTP rendering of limits (feature `http`, which `axum`, `actix` and `tonic` turn on): the
//! status, the IETF `RateLimit` / `RateLimit-Policy` fields (draft-ietf-httpapi-ratelimit-headers-11),
//! `Retry-After` and the JSON body of a refusal, written once here for every integration; and
//! `impl IntoResponse for RateLimited` (feature `axum`).
//!
//! ```text
//! RateLimit-Policy: "ip-20s";q=10;w=20, "ip-50s";q=100;w=50
//! RateLimit: "ip-20s";r=0;t=4
//! ```

#[cfg(feature = "actix")]
pub(crate) mod actix;
#[cfg(feature = "tonic")]
mod grpc;

use crate::algorithm::calendar::{month_of_day, month_window, DAY_US};
use crate::model::policy::{Headroom, Policy};
use crate::model::refusal::{Cause, RateLimited};
#[cfg(feature = "axum")]
use axum_core::body::Body;
#[cfg(feature = "axum")]
use axum_core::response::{IntoResponse, Response};
#[cfg(feature = "axum")]
use http::header::CONTENT_TYPE;
use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use std::cell::RefCell;
use std::fmt::Write;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The `RateLimit-Policy` field name.
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The `RateLimit` field name.
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Structured-field integers have at most 15 digits (RFC 9651 §3.3.1).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// Whole seconds, rounded up: what `Retry-After` and the `w` / `t` parameters carry.
fn secs_ceil(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn sf_int(n: u64) -> u64 {
    n.min(SF_INTEGER_MAX)
}

/// Writes `name` (any `Display`) as a structured-field string, formatted in place: names are
/// almost always plain ASCII, which needs only the quotes.
fn sf_display(out: &mut String, name: impl std::fmt::Display) {
    let start = out.len();
    let _ = write!(out, "{name}");
    if out.as_bytes()[start..].iter().all(|&b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\') {
        out.insert(start, '"');
        out.push('"');
    } else {
        let text = out.split_off(start);
        sf_string(out, &text);
    }
}

/// Writes `s` as a structured-field string (`"…"`, with `"` and `\` escaped and anything outside
/// printable ASCII replaced, so the result is always a valid header value).
fn sf_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
}

/// The `RateLimit-Policy` value of a limiter's policies, rendered once per limiter and thread
/// (every response of a limiter carries the same one; a limiter with rules in calendar months,
/// once per month). Keeps the `Arc` it was rendered from, so that its address cannot be reused
/// by another limiter's list while cached.
fn policy_field_cached(policies: &Arc<[Policy]>) -> Option<HeaderValue> {
    type Rendered = (Arc<[Policy]>, u64, Option<HeaderValue>);
    thread_local! {
        static RENDERED: RefCell<Vec<Rendered>> = const { RefCell::new(Vec::new()) };
    }
    // Only calendar windows change length: the clock is read for them alone.
    let now = policies.iter().any(|p| p.rule.months().is_some()).then(wall_clock_us);
    let month = now.map_or(0, |now| month_of_day(now / DAY_US));
    RENDERED.with(|cell| {
        let mut rendered = cell.borrow_mut();
        if let Some((_, _, v)) = rendered.iter().find(|(p, m, _)| Arc::ptr_eq(p, policies) && *m == month) {
            return v.clone();
        }
        let v = policy_field(policies, now.unwrap_or(0));
        rendered.retain(|(p, _, _)| !Arc::ptr_eq(p, policies));
        if rendered.len() >= 16 {
            rendered.remove(0);
        }
        rendered.push((policies.clone(), month, v.clone()));
        v
    })
}

/// Now by the system's clock, in µs since the Unix epoch.
fn wall_clock_us() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
}

/// `"ip-20s";q=10;w=20, "ip-50s";q=100;w=50`, or `None` when there are no policies. Limits in
/// their order, the rules of each by window, shortest first. A rule in calendar months
/// (`"user-1mo";q=3;w=2592000`) has the length of its window holding `now` (µs since the epoch):
/// `w` is the window a quota of `q` applies to, and this window is that long.
fn policy_field(policies: &[Policy], now: u64) -> Option<HeaderValue> {
    let mut ordered: Vec<(usize, &Policy)> = Vec::with_capacity(policies.len());
    let mut group = 0;
    for (i, p) in policies.iter().enumerate() {
        if i > 0 && policies[i - 1].limit_type != p.limit_type {
            group += 1;
        }
        ordered.push((group, p));
    }
    ordered.sort_by_key(|&(g, p)| (g, p.rule.window_order()));
    let mut out = String::new();
    for (i, (_, p)) in ordered.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        sf_display(&mut out, p);
        let window = match p.rule.months() {
            Some(months) => {
                let (_, start, end) = month_window(u64::from(months), now);
                Duration::from_micros(end - start)
            }
            None => p.rule.window(),
        };
        let _ = write!(out, ";q={};w={}", sf_int(p.rule.count()), sf_int(secs_ceil(window)));
    }
    if out.is_empty() {
        return None;
    }
    HeaderValue::from_str(&out).ok()
}

/// `"ip-20s";r=0;t=4`.
fn ratelimit_field(policy: &Policy, remaining: u64, reset: Duration) -> Option<HeaderValue> {
    let mut out = String::with_capacity(40);
    sf_display(&mut out, policy);
    let _ = write!(out, ";r={};t={}", sf_int(remaining), sf_int(secs_ceil(reset)));
    // The string becomes the value's buffer (no copy).
    HeaderValue::try_from(out).ok()
}

impl RateLimited {
    /// The HTTP status of this refusal: `429 Too Many Requests`; `503 Service Unavailable`
    /// when the store could not decide ([`Cause::StoreUnavailable`]); `500 Internal Server
    /// Error` when the server is misconfigured and retrying will not help: the identity to count
    /// for was missing ([`Cause::SubjectMissing`]: e.g. no `ConnectInfo` or no user set), or the
    /// limiter itself is invalid ([`Cause::Misconfigured`]).
    pub fn status(&self) -> StatusCode {
        match self.cause {
            Cause::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Cause::SubjectMissing | Cause::Misconfigured => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// Whether no retry can help (no `Retry-After`): the server must be fixed, or the call's
    /// cost can never fit ([`Cause::CostTooHigh`], still a `429`: the client asked too much).
    pub(crate) fn no_retry(&self) -> bool {
        matches!(self.cause, Cause::SubjectMissing | Cause::Misconfigured | Cause::CostTooHigh)
    }

    /// [`retry_after`](Self::retry_after) in whole seconds, rounded up: the `Retry-After` value.
    pub fn retry_after_secs(&self) -> u64 {
        secs_ceil(self.retry_after)
    }

    /// The header fields of this refusal: `Retry-After`, `RateLimit-Policy` (every rule of the
    /// limiter) and `RateLimit` (the rule that refused: `r=0`, `t` = retry-after in seconds).
    ///
    /// ```
    /// # use ratelimit_runtime::{Limit, Limiter, LimitType, Rule, Subject, store::MemoryStore};
    /// # use std::{sync::Arc, time::Duration};
    /// let limiter = Limiter::builder("demo")
    ///     .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(20), 1).unwrap()]))
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let ip = [Subject::ip("203.0.113.7".parse().unwrap())];
    /// limiter.check(&ip).blocking().unwrap();
    /// let headers = limiter.check(&ip).blocking().unwrap_err().headers();
    /// assert_eq!(headers["retry-after"], "20");
    /// assert_eq!(headers["ratelimit-policy"], r#""ip-20s";q=1;w=20"#);
    /// assert_eq!(headers["ratelimit"], r#""ip-20s";r=0;t=20"#);
    /// ```
    pub fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::with_capacity(3);
        self.write_headers(&mut headers);
        headers
    }

    /// Inserts [`headers`](Self::headers) into `headers` (a response's own map: no second map
    /// to build and merge per refusal).
    fn write_headers(&self, headers: &mut HeaderMap) {
        // A missing identity, an invalid limiter or a cost above the capacity: no time would make
        // a retry succeed.
        if !self.no_retry() {
            headers.insert(RETRY_AFTER, HeaderValue::from(self.retry_after_secs()));
        }
        if let Some(v) = policy_field_cached(&self.policies) {
            headers.insert(RATELIMIT_POLICY, v);
        }
        if let Some(v) = self.policy.and_then(|p| ratelimit_field(&p, 0, self.retry_after)) {
            headers.insert(RATELIMIT, v);
        }
    }

    /// The JSON body of the response: `{"error":"rate_limited","retry_after_ms":3200}`
    /// (`{"error":"store_unavailable","retry_after_ms":1000}` when the store could not decide, so
    /// that a client tells an outage from its own limit without reading the status;
    /// `{"error":"rate_limit_subject_missing"}` for a missing identity,
    /// `{"error":"rate_limiter_misconfigured","limiter":"<name>"}` for an invalid limiter).
    ///
    /// ```
    /// # use ratelimit_runtime::{Limit, Limiter, LimitType, Rule, Subject, store::MemoryStore, Cause};
    /// # use std::{sync::Arc, time::Duration};
    /// let limiter = Limiter::builder("demo")
    ///     .limit(Limit::new(LimitType::User, [Rule::new(Duration::from_secs(20), 1).unwrap()]))
    ///     .store(Arc::new(MemoryStore::new()))
    ///     .build()
    ///     .unwrap();
    /// let missing = limiter.check(&[Subject::missing()]).blocking().unwrap_err();
    /// assert_eq!(missing.cause(), Cause::SubjectMissing);
    /// assert_eq!(missing.status(), 500);
    /// assert!(missing.headers().get("retry-after").is_none());
    /// assert_eq!(missing.json_body(), r#"{"error":"rate_limit_subject_missing"}"#);
    /// ```
    pub fn json_body(&self) -> String {
        match self.cause {
            Cause::SubjectMissing => return r#"{"error":"rate_limit_subject_missing"}"#.to_owned(),
            Cause::CostTooHigh => return r#"{"error":"rate_limit_cost_too_high"}"#.to_owned(),
            Cause::Misconfigured => {
                let mut body = r#"{"error":"rate_limiter_misconfigured","limiter":"#.to_owned();
                json_string(&mut body, &self.limiter);
                body.push('}');
                return body;
            }
            _ => {}
        }
        let error = if self.cause == Cause::StoreUnavailable { "store_unavailable" } else { "rate_limited" };
        let ms = self.retry_after.as_micros().div_ceil(1000);
        format!(r#"{{"error":"{error}","retry_after_ms":{ms}}}"#)
    }
}

/// `429 Too Many Requests` (`503` when the store was unavailable, `500` when the identity was
/// missing or the limiter is invalid) with `Retry-After`,
/// `RateLimit-Policy`, `RateLimit` and the JSON body of [`json_body`](RateLimited::json_body)
/// (`{"error":"rate_limited","retry_after_ms":N}`, `"store_unavailable"` for a 503).
#[cfg(feature = "axum")]
impl IntoResponse for RateLimited {
    fn into_response(self) -> Response {
        let mut response = Response::new(Body::from(self.json_body()));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.reserve(4);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        self.write_headers(headers);
        response
    }
}

/// `text` as a JSON string.
fn json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl Headroom {
    /// The header fields of an allowed call: `RateLimit-Policy` (every rule of the limiter) and
    /// `RateLimit` for the tightest rule (`r` = units left, `t` = seconds until its oldest
    /// counted unit leaves the window).
    pub fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::with_capacity(2);
        if let Some(v) = policy_field_cached(&self.policies) {
            headers.insert(RATELIMIT_POLICY, v);
        }
        if let Some(v) = ratelimit_field(&self.policy, self.remaining, self.reset) {
            headers.insert(RATELIMIT, v);
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_and_escaped_as_structured_field_strings() {
        let cases: [(&str, &str); 4] = [
            ("ip-20s", r#""ip-20s""#),
            (r#"a"b\c"#, r#""a\"b\\c""#),
            ("tab\there", r#""tab_here""#),
            ("ü-1m", r#""_-1m""#),
        ];
        for (name, field) in cases {
            let mut out = "x".to_owned();
            sf_display(&mut out, name);
            assert_eq!(out, format!("x{field}"), "{name:?}");
        }
    }

    #[test]
    fn a_calendar_policy_has_its_months_length() {
        use crate::model::limit_type::LimitType;
        use crate::model::rule::Rule;
        let rules = [Rule::calendar_months(1, 3).unwrap(), Rule::new(Duration::from_secs(10), 1).unwrap()];
        let policies: Vec<Policy> = rules.iter().map(|&rule| Policy { limit_type: LimitType::User, rule }).collect();
        // 2028-02-10 and 2027-02-10, 00:00 UTC.
        let (leap, plain) = (1_833_753_600_000_000, 1_802_217_600_000_000);
        let field = |now| policy_field(&policies, now).unwrap();
        assert_eq!(field(leap), r#""user-10s";q=1;w=10, "user-1mo";q=3;w=2505600"#);
        assert_eq!(field(plain), r#""user-10s";q=1;w=10, "user-1mo";q=3;w=2419200"#);
    }
}
