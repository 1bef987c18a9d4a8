//! The example server: rate-limited HTTP routes with `#[rate_limiter]` and the axum layer.
//!
//! ```text
//! cargo run --release --example server                      # in memory, 127.0.0.1:3000
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release --example server -- --listen 127.0.0.1:3001
//! REDIS_URL=rediss://:PASSWORD@redis.example.com:6380/ REDIS_CA_CERT=ca.pem cargo run --release --example server
//! ```
//!
//! The library's `tracing` events (the store probe, fail-open warnings) go to stderr: `info` by
//! default, `RUST_LOG` to change (e.g. `RUST_LOG=debug`, `RUST_LOG=ratelimit_runtime=warn`).
//!
//! Routes: `GET /healthz`, `GET /api/hello` (per IP: 20 per 10s and 50 per 60s),
//! `GET /api/global` (30 per 10s for everyone), `POST /api/orders` (per user from `X-User-Id`:
//! 10 per 10s, and per IP: 15 per 10s, decided together), `POST /api/login` (per IP, only
//! failed attempts count: 5 per 60s, then 2 minutes blocked), `GET /api/report?ms=N` (per IP,
//! at most 2 at a time), `GET /api/search` (per user: 5 per 10s, 50 per 10s for the `pro` plan
//! of the `X-Plan` header), `GET /api/complete?tokens=N` (per user: 1000 units per 60s, 100
//! taken before the call and settled to the N tokens it generated),
//! `GET /api/export` (per user: 3 per calendar month, UTC),
//! `GET /metrics` (Prometheus text format, never limited).
//!
//! `RATELIMIT_ADMIN_TOKEN=<secret>` serves the admin API (`/admin/`, see `server/admin.rs`): one
//! user's limits changed at runtime, on every server sharing the store.
//!
//! `RATELIMIT_CONFIG=limits.toml` overrides those limits (rules, shadow mode, exemptions; see
//! docs/configuration.md); `kill -HUP <pid>` re-reads it.

use axum::extract::FromRequestParts;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use ratelimit::http::RequestContextLayer;
use ratelimit::subject::Cidr;
use ratelimit::{rate_limiter, RateLimited};
use std::net::SocketAddr;
use std::process::ExitCode;

#[path = "server/admin.rs"]
pub mod admin;
#[path = "server/cli.rs"]
pub mod cli;
#[path = "server/process.rs"]
mod process;
pub use cli::{cli, parse_args, Command};
use process::{init_logs, reload_on_sighup, shutdown_signal};
use std::sync::OnceLock;

/// The routes, behind the rate-limit layer.
pub fn app(trust_proxy: &[Cidr]) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/api/hello", get(hello))
        .route("/api/global", get(global))
        .route("/api/orders", post(orders))
        .route("/api/login", post(login))
        .route("/api/report", get(report))
        .route("/api/search", get(search))
        .route("/api/complete", get(complete))
        .route("/api/export", get(export))
        .route("/metrics", get(metrics))
        .layer(RequestContextLayer::new().trust_proxies(trust_proxy.iter().copied()))
}

/// A handler's error: no user id, or rate limited.
#[derive(Debug)]
pub enum AppError {
    /// The request has no `X-User-Id`.
    MissingUser,
    /// A limit refused the call.
    RateLimited(RateLimited),
    /// `POST /api/login` with a wrong password.
    WrongPassword,
    /// A malformed request.
    BadRequest(&'static str),
}

impl From<RateLimited> for AppError {
    fn from(e: RateLimited) -> Self {
        AppError::RateLimited(e)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        match self {
            AppError::MissingUser => (
                StatusCode::UNAUTHORIZED,
                [(CONTENT_TYPE, "application/json")],
                r#"{"error":"unauthorized","message":"send the user id in the X-User-Id header"}"#,
            )
                .into_response(),
            AppError::RateLimited(e) => e.into_response(),
            AppError::WrongPassword => {
                (StatusCode::UNAUTHORIZED, [(CONTENT_TYPE, "application/json")], r#"{"error":"wrong_password"}"#)
                    .into_response()
            }
            AppError::BadRequest(message) => (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response(),
        }
    }
}

/// The user id from `X-User-Id` (401 without it), recorded in the request context for
/// `type = User` limits. A real application would authenticate here. The header's bytes are the
/// id: a non-ASCII one (`ü名字`, UTF-8 or not) is a user like any other.
pub struct UserId(pub Vec<u8>);

impl<S: Send + Sync> FromRequestParts<S> for UserId {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, AppError> {
        let user = parts.headers.get("x-user-id").map_or(&b""[..], |v| v.as_bytes().trim_ascii());
        if user.is_empty() {
            return Err(AppError::MissingUser);
        }
        ratelimit::context::set_user_bytes(user);
        Ok(UserId(user.to_vec()))
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

#[rate_limiter(type = Ip, rules = [(10s, 20), (60s, 50)])]
async fn hello() -> Result<&'static str, AppError> {
    Ok("hello\n")
}

#[rate_limiter(type = Global, rules = [(10s, 30)])]
async fn global() -> Result<&'static str, AppError> {
    Ok("global\n")
}

#[rate_limiter(type = User, rules = [(10s, 10)])]
#[rate_limiter(type = Ip, rules = [(10s, 15)])]
async fn orders(user: UserId) -> Result<String, AppError> {
    Ok(format!("order accepted for {}\n", String::from_utf8_lossy(&user.0)))
}

/// The caller's plan (the `X-Plan` header) is the tier: `pro` gets [`PRO_SEARCH`] instead.
#[rate_limiter(type = User, rules = [(10s, 5)], tier = headers.get("x-plan").and_then(|v| v.to_str().ok()))]
async fn search(user: UserId, headers: HeaderMap) -> Result<String, AppError> {
    Ok(format!("search results for {}\n", String::from_utf8_lossy(&user.0)))
}

/// A monthly quota: 3 exports per user per calendar month, whatever the month's length.
#[rate_limiter(type = User, rules = [(1mo, 3)])]
async fn export(user: UserId) -> Result<String, AppError> {
    Ok(format!("export started for {}\n", String::from_utf8_lossy(&user.0)))
}

/// The `pro` tier of `/api/search`: 50 per 10s (an overrides file may change it).
pub const PRO_SEARCH: (u64, u64) = (10, 50);

/// The configuration from the environment, with the tiers this server gives in code.
pub fn config() -> Result<ratelimit::Config, ratelimit::error::ConfigError> {
    // A constant, checked when the server is compiled.
    const PRO: ratelimit::Rule = match ratelimit::Rule::from_millis(PRO_SEARCH.0 * 1000, PRO_SEARCH.1) {
        Ok(rule) => rule,
        Err(_) => panic!("PRO_SEARCH is not a valid rule"),
    };
    let search = format!("{}::search", module_path!());
    let config = ratelimit::Config::from_env()?.tier(search, ratelimit::LimitType::User, "pro", [PRO]);
    // The admin API's overrides bind this server's limiters (and, with
    // RATELIMIT_RUNTIME_OVERRIDES=on, those of servers without the admin API).
    Ok(if admin::token().is_some() { config.runtime_overrides(true) } else { config })
}

/// The body of `GET /api/complete`: the tokens the call generated.
#[derive(serde::Serialize)]
pub struct Completion {
    /// Tokens generated, which the call is charged.
    pub tokens: u64,
}

/// An LLM-style endpoint priced by what it generated: 100 tokens are taken before the call (an
/// estimate, so that concurrent calls cannot overrun the limit), and the call is settled to the
/// tokens it really generated once it returned: fewer give the rest back, more are taken past
/// the limit (later calls wait until they have left). A bad request generated nothing: 0.
#[rate_limiter(type = User, rules = [(60s, 1000)], cost = 100, settle = |r| r.as_ref().map_or(0, |c| c.tokens))]
async fn complete(_user: UserId, uri: axum::http::Uri) -> Result<axum::Json<Completion>, AppError> {
    let tokens =
        query_number(uri.query(), "tokens").ok_or(AppError::BadRequest("?tokens= takes a number of tokens"))?;
    Ok(axum::Json(Completion { tokens }))
}

/// The number `name=N` of the query; `None` when it is missing or not a number.
fn query_number(query: Option<&str>, name: &str) -> Option<u64> {
    let value = query?.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))?;
    value.parse().ok()
}

/// The body of `POST /api/login`.
#[derive(serde::Deserialize)]
pub struct Login {
    /// The password tried.
    pub password: String,
}

/// Only failed logins count (`refund = on_ok` gives a successful attempt back): after 5
/// failures from one IP within 60 s, the next attempt is refused and blocks that IP for 2
/// minutes, on every server sharing the store.
#[rate_limiter(type = Ip, rules = [(60s, 5)], refund = on_ok, block = 2m)]
async fn login(axum::Json(login): axum::Json<Login>) -> Result<&'static str, AppError> {
    if login.password == "letmein" {
        Ok("welcome\n")
    } else {
        Err(AppError::WrongPassword)
    }
}

/// A slow endpoint: at most 2 reports per IP run at once, across every server sharing the
/// store; a third is refused (429) while they run.
#[rate_limiter(type = Ip, concurrency = 2)]
async fn report(uri: axum::http::Uri) -> Result<String, AppError> {
    let ms = report_ms(uri.query()).ok_or(AppError::BadRequest("?ms= takes a number of milliseconds"))?;
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    Ok(format!("report ready after {ms} ms\n"))
}

/// `ms=N` of the query (absent: 0), at most 10 000.
fn report_ms(query: Option<&str>) -> Option<u64> {
    let value = query.unwrap_or("").split('&').find_map(|pair| pair.strip_prefix("ms="));
    match value {
        None => Some(0),
        Some(v) => v.parse::<u64>().ok().map(|ms| ms.min(10_000)),
    }
}

/// The Prometheus recorder's handle, once [`install_metrics`] ran.
static METRICS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder (before the first rate-limited call: limiters take their
/// metric handles when they are built). Store latencies get histogram buckets, so that p99 can
/// be computed across instances.
pub fn install_metrics() -> Result<(), String> {
    if METRICS.get().is_some() {
        return Ok(());
    }
    const BUCKETS: [f64; 14] =
        [0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full("ratelimit_store_duration_seconds".to_owned()), &BUCKETS)
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| e.to_string())?;
    let _ = METRICS.set(handle);
    Ok(())
}

/// `GET /metrics`: every metric in the Prometheus text format. Not rate-limited.
async fn metrics() -> Response {
    match METRICS.get() {
        // Decision counts are kept per thread and handed to the recorder every second: a scrape
        // hands them over first, to show every decision made so far.
        Some(handle) => ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], {
            ratelimit::metrics::flush();
            handle.render()
        })
            .into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "metrics are not installed\n").into_response(),
    }
}

/// Runs the server with these arguments (without the program name); returns the exit status:
/// 0 after a graceful shutdown (or `--help`), 1 if it cannot start, 2 for a bad command line.
pub fn run(args: impl IntoIterator<Item = String>) -> u8 {
    let args = match parse_args(args) {
        Ok(Command::Serve(args)) => args,
        Ok(Command::Help) => {
            print!("{}", cli().render_help());
            return 0;
        }
        Err(e) => {
            eprint!("{e}");
            return 2;
        }
    };
    init_logs();
    if let Err(e) = install_metrics() {
        eprintln!("server: cannot install the metrics recorder: {e}");
        return 1;
    }
    if let Err(e) = config().and_then(ratelimit::init) {
        eprintln!("server: cannot configure the rate-limit store or limits: {e}");
        return 1;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("server: cannot start the async runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(async {
        let listener = match tokio::net::TcpListener::bind(args.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("server: cannot listen on {}: {e}", args.listen);
                return 1;
            }
        };
        let addr = listener.local_addr().unwrap_or(args.listen);
        let shutdown = shutdown_signal();
        reload_on_sighup();
        // The settings in force, so that an operator sees what a deployment's variables did.
        let proxies = match args.trust_proxy.as_slice() {
            [] => "none".to_owned(),
            cidrs => cidrs.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
        };
        let token = admin::token();
        let admin_api = if token.is_some() { "; admin API: on" } else { "" };
        println!(
            "server: listening on http://{addr} (rate-limit {}; trusted proxies: {proxies}{admin_api})",
            ratelimit::config::settings()
        );
        let app =
            app(&args.trust_proxy).merge(admin::routes(token)).into_make_service_with_connect_info::<SocketAddr>();
        match axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            Ok(()) => {
                eprintln!("server: shut down");
                0
            }
            Err(e) => {
                eprintln!("server: {e}");
                1
            }
        }
    })
}

#[allow(dead_code)] // The tests include this file as a module and call `run`.
fn main() -> ExitCode {
    ExitCode::from(run(std::env::args().skip(1)))
}
