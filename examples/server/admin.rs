//! The example server's admin API: runtime overrides over HTTP, served on the server's own
//! listener, only when `RATELIMIT_ADMIN_TOKEN` is set (else every `/admin/*` path is 404).
//!
//! Every request needs `Authorization: Bearer <token>` (compared in constant time), else 401:
//!
//! * `GET /admin/limiters`: every limiter this server declares (called yet or not), with the
//!   rules in force, as JSON;
//! * `PUT /admin/overrides` with `{"limiter": NAME, "subject": TEXT, "rules": [["10s", 2]],
//!   "ttl": "30s"}` (`ttl` optional; `type` optional, the limit's type, by default the
//!   limiter's first limit counted per subject): sets one subject's override, which every server
//!   on the same store decides with from its next call;
//! * `DELETE /admin/overrides` with `{"limiter": NAME, "subject": TEXT}` (and `type`) clears it;
//! * `GET /admin/overrides?limiter=NAME` lists them.
//!
//! An invalid body is 400 with a message and changes nothing; an unknown limiter is 404; a store
//! failure is 503. Each change is logged on stderr (never the token).

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ratelimit::error::OverrideError;
use ratelimit::{LimitType, Limiter, Rule, Subject};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The variable whose value is the admin token.
pub const TOKEN_VAR: &str = "RATELIMIT_ADMIN_TOKEN";

/// The admin token, when set (blank counts as unset, as for every variable of the server).
pub fn token() -> Option<String> {
    std::env::var(TOKEN_VAR).ok().filter(|t| !t.trim().is_empty())
}

/// The admin routes with this token; none without one (then `/admin/*` is the server's 404).
pub fn routes(token: Option<String>) -> Router {
    let Some(token) = token else { return Router::new() };
    Router::new()
        .route("/admin/limiters", get(limiters))
        .route("/admin/overrides", get(list).put(set).delete(clear))
        .route("/admin/{*rest}", get(unknown).put(unknown).post(unknown).delete(unknown))
        .with_state(Arc::new(token.into_bytes()))
}

type Token = State<Arc<Vec<u8>>>;

/// Whether `given` is the token: every byte of the token is compared whatever the given one
/// holds, so the time taken tells nothing of how much of it was right (nor of its length).
fn same_token(token: &[u8], given: &[u8]) -> bool {
    let mut diff = u8::from(token.len() != given.len());
    for (i, t) in token.iter().enumerate() {
        diff |= t ^ given.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

/// 401 unless the request carries `Authorization: Bearer <token>`.
fn authorize(token: &[u8], headers: &HeaderMap) -> Result<(), Refused> {
    // The scheme's name is case-insensitive (RFC 9110); the token is compared exactly.
    let given = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .filter(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer "))
        .map(|v| &v[7..]);
    match given {
        Some(given) if same_token(token, given) => Ok(()),
        _ => Err(error(StatusCode::UNAUTHORIZED, "send Authorization: Bearer <RATELIMIT_ADMIN_TOKEN>".to_owned())),
    }
}

/// A request the admin API refuses: its status and a message for the operator, as JSON
/// `{"error": reason, "message": …}`.
pub struct Refused {
    status: StatusCode,
    message: String,
}

#[derive(serde::Serialize)]
struct ErrorJson {
    error: &'static str,
    message: String,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let error = self.status.canonical_reason().unwrap_or("error");
        (self.status, Json(ErrorJson { error, message: self.message })).into_response()
    }
}

fn error(status: StatusCode, message: String) -> Refused {
    Refused { status, message }
}

/// What `PUT /admin/overrides` answers: the override as set.
#[derive(serde::Serialize)]
struct SetJson {
    limiter: String,
    #[serde(rename = "type")]
    limit_type: &'static str,
    subject: String,
    rules: Vec<(String, u64)>,
    ttl: Option<String>,
}

/// A window as the admin API writes it: `10s`, `2m`, `1500ms`.
fn window_text(window: Duration) -> String {
    let ms = window.as_millis();
    for (unit, len) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms.is_multiple_of(len) {
            return format!("{}{unit}", ms / len);
        }
    }
    format!("{ms}ms")
}

/// Rules as the admin API writes them: `[["10s", 2], ["1mo", 3], ...]`.
fn rules_json(rules: &[Rule]) -> Vec<(String, u64)> {
    rules.iter().map(|r| (rule_window_text(r), r.count())).collect()
}

/// A rule's window as the admin API writes it: calendar months as `1mo` (their `window()` is
/// only the longest month, 31 days), others as [`window_text`].
fn rule_window_text(rule: &Rule) -> String {
    match rule.months() {
        Some(months) => format!("{months}mo"),
        None => window_text(rule.window()),
    }
}

#[derive(serde::Serialize)]
struct LimitJson {
    #[serde(rename = "type")]
    limit_type: &'static str,
    rules: Vec<(String, u64)>,
}

#[derive(serde::Serialize)]
struct LimiterJson {
    name: String,
    limits: Vec<LimitJson>,
}

/// `GET /admin/limiters`.
async fn limiters(State(token): Token, headers: HeaderMap) -> Result<Response, Refused> {
    authorize(&token, &headers)?;
    let all: Vec<LimiterJson> = ratelimit::limiters()
        .iter()
        .map(|l| {
            let mut limits: Vec<LimitJson> = Vec::new();
            for p in l.policies().iter() {
                let rule = (rule_window_text(&p.rule), p.rule.count());
                match limits.last_mut() {
                    Some(last) if last.limit_type == p.limit_type.as_str() => last.rules.push(rule),
                    _ => limits.push(LimitJson { limit_type: p.limit_type.as_str(), rules: vec![rule] }),
                }
            }
            LimiterJson { name: l.name().to_owned(), limits }
        })
        .collect();
    Ok(Json(all).into_response())
}

/// `PUT /admin/overrides`'s body (and `DELETE`'s, without rules and TTL).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OverrideBody {
    limiter: String,
    subject: String,
    #[serde(rename = "type")]
    limit_type: Option<String>,
    rules: Option<Vec<(String, u64)>>,
    ttl: Option<String>,
}

/// What a change names, checked: the limiter (404 if unknown), the subject and its type (400).
struct Named {
    limiter: Limiter,
    limit_type: LimitType,
    subject: Subject<'static>,
}

fn named(body: &OverrideBody) -> Result<Named, Refused> {
    let limiter = ratelimit::limiter(&body.limiter).ok_or_else(|| {
        let message = format!(
            "unknown limiter {:?} (a limiter is known once this server decided one of its calls)",
            body.limiter
        );
        error(StatusCode::NOT_FOUND, message)
    })?;
    let policies = limiter.policies();
    let limit_type = match body.limit_type.as_deref() {
        Some("ip") => LimitType::Ip,
        Some("user") => LimitType::User,
        Some("key") => LimitType::Key,
        Some("global") => LimitType::Global,
        Some(other) => return Err(bad(format!("unknown type {other:?}: expected ip, user, key or global"))),
        // The limiter's first limit counted per subject, as the library picks it.
        None => policies
            .iter()
            .map(|p| p.limit_type)
            .find(|t| *t != LimitType::Global)
            .or_else(|| policies.first().map(|p| p.limit_type))
            .unwrap_or(LimitType::Global),
    };
    if body.subject.is_empty() && limit_type != LimitType::Global {
        return Err(bad("the subject is empty".to_owned()));
    }
    let subject = match limit_type {
        LimitType::Ip => Subject::ip(
            body.subject.parse().map_err(|_| bad(format!("subject {:?}: not an IP address", body.subject)))?,
        ),
        LimitType::Global => Subject::global(),
        LimitType::User | LimitType::Key => Subject::bytes(body.subject.clone().into_bytes()),
    };
    Ok(Named { limiter, limit_type, subject })
}

fn bad(message: String) -> Refused {
    error(StatusCode::BAD_REQUEST, message)
}

fn body_of(bytes: &Bytes) -> Result<OverrideBody, Refused> {
    Json::<OverrideBody>::from_bytes(bytes).map(|Json(b)| b).map_err(|e| bad(e.body_text()))
}

fn store_failed(e: OverrideError) -> Refused {
    match e {
        OverrideError::Invalid(invalid) => bad(invalid.to_string()),
        other => error(StatusCode::SERVICE_UNAVAILABLE, other.to_string()),
    }
}

/// `PUT /admin/overrides`.
async fn set(
    State(token): Token,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Refused> {
    authorize(&token, &headers)?;
    let body = body_of(&body)?;
    let named = named(&body)?;
    let given = body.rules.as_deref().ok_or_else(|| bad("no rules: give e.g. \"rules\": [[\"10s\", 2]]".to_owned()))?;
    let rules = given
        .iter()
        .map(|(window, count)| ratelimit::config::parse_rule(&format!("{count}/{window}")))
        .collect::<Result<Vec<Rule>, String>>()
        .map_err(bad)?;
    let ttl = body.ttl.as_deref().map(|t| ratelimit::config::parse_duration("ttl", t)).transpose().map_err(bad)?;
    let mut request = named.limiter.set_override(&named.subject, rules.iter().copied()).limit_type(named.limit_type);
    if let Some(ttl) = ttl {
        request = request.ttl(ttl);
    }
    request.await.map_err(store_failed)?;
    // The subject and rules are the operator's own input; the token never appears.
    eprintln!(
        "server: admin: override set by {}: limiter {:?}, {} {:?}, rules {:?}, ttl {}",
        peer.ip(),
        body.limiter,
        named.limit_type,
        body.subject,
        rules_json(&rules),
        ttl.map_or_else(|| "none".to_owned(), window_text),
    );
    Ok(Json(SetJson {
        limiter: body.limiter,
        limit_type: named.limit_type.as_str(),
        subject: body.subject,
        rules: rules_json(&rules),
        ttl: ttl.map(window_text),
    })
    .into_response())
}

/// `DELETE /admin/overrides`.
async fn clear(
    State(token): Token,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, Refused> {
    authorize(&token, &headers)?;
    let body = body_of(&body)?;
    if body.rules.is_some() || body.ttl.is_some() {
        return Err(bad("DELETE takes only limiter, subject and type".to_owned()));
    }
    let named = named(&body)?;
    named.limiter.clear_override(&named.subject).limit_type(named.limit_type).await.map_err(store_failed)?;
    eprintln!(
        "server: admin: override cleared by {}: limiter {:?}, {} {:?}",
        peer.ip(),
        body.limiter,
        named.limit_type,
        body.subject
    );
    Ok(StatusCode::NO_CONTENT)
}

#[derive(serde::Deserialize)]
struct ListQuery {
    limiter: Option<String>,
}

#[derive(serde::Serialize)]
struct OverrideJson {
    #[serde(rename = "type")]
    limit_type: &'static str,
    subject: String,
    rules: Vec<(String, u64)>,
    /// What is left of its TTL, ms (`None`: until cleared).
    ttl_ms: Option<u64>,
}

/// `GET /admin/overrides?limiter=NAME`.
async fn list(State(token): Token, headers: HeaderMap, Query(query): Query<ListQuery>) -> Result<Response, Refused> {
    authorize(&token, &headers)?;
    let name = query.limiter.ok_or_else(|| bad("give the limiter: ?limiter=NAME".to_owned()))?;
    let limiter =
        ratelimit::limiter(&name).ok_or_else(|| error(StatusCode::NOT_FOUND, format!("unknown limiter {name:?}")))?;
    let now = SystemTime::now();
    let all: Vec<OverrideJson> = limiter
        .overrides()
        .await
        .map_err(store_failed)?
        .into_iter()
        .map(|o| OverrideJson {
            limit_type: o.limit_type.as_str(),
            subject: String::from_utf8_lossy(&o.subject).into_owned(),
            rules: rules_json(&o.rules),
            ttl_ms: o
                .expires
                .map(|e| e.duration_since(now).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))),
        })
        .collect();
    Ok(Json(all).into_response())
}

/// Any other `/admin/` path: 401 without the token, else 404.
async fn unknown(State(token): Token, headers: HeaderMap) -> Refused {
    match authorize(&token, &headers) {
        Err(refused) => refused,
        Ok(()) => error(StatusCode::NOT_FOUND, "no such admin route".to_owned()),
    }
}
