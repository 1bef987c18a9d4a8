//! actix-web 4 (feature `actix`): a middleware that installs the request context, and
//! `RateLimited` as an actix-web error.
//!
//! - [`RateLimitMiddleware`] runs each request inside a
//!   [`RequestContext`](crate::context::RequestContext): the client IP (the connection's peer;
//!   forwarded headers only from [trusted proxies](RateLimitMiddleware::trust_proxy), as
//!   [`ClientIpResolver`] reads them), IPv6 clients grouped by /64, optionally the user from a
//!   header. After the handler, an allowed call's quota is added as `RateLimit-Policy` and
//!   `RateLimit` fields.
//! - `RateLimited: actix_web::ResponseError`: the status, header fields and JSON body that axum
//!   gets (`429` with `Retry-After`, `RateLimit-Policy`, `RateLimit` and
//!   `{"error":"rate_limited","retry_after_ms":N}`; `503` with `{"error":"store_unavailable",…}`
//!   when the store could not decide; `500`
//!   when the server is misconfigured). A handler returns `Result<_, RateLimited>`, or its own
//!   error type built from it.
//!
//! ```no_run
//! use actix_web::{web, App, HttpServer};
//! use ratelimit::{actix::RateLimitMiddleware, rate_limiter, RateLimited};
//!
//! #[rate_limiter(type = Ip, rules = [(10s, 20), (1m, 50)])]
//! async fn hello() -> Result<&'static str, RateLimited> {
//!     Ok("hello\n")
//! }
//!
//! # fn main() -> std::io::Result<()> {
//! actix_web::rt::System::new().block_on(
//!     HttpServer::new(|| {
//!         App::new()
//!             .wrap(RateLimitMiddleware::new().trust_proxy("10.0.0.0/8".parse().unwrap()))
//!             .route("/api/hello", web::get().to(hello))
//!     })
//!     .bind(("127.0.0.1", 8080))?
//!     .run(),
//! )
//! # }
//! ```
//!
//! The guide is docs/integrations.md in the repository.

use crate::http::{ClientIp, ClientIpResolver, Config, HeaderFields};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{HeaderMap, HeaderName};
use actix_web::HttpMessage;
use ratelimit_runtime::context;
use ratelimit_runtime::subject::Cidr;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::Arc;

/// An actix-web middleware (`App::wrap`) that runs each request inside a request context: who
/// is calling, for `type = Ip` and `type = User` limits. See the [module](self).
#[derive(Clone, Debug, Default)]
pub struct RateLimitMiddleware {
    config: Arc<Config>,
}

impl RateLimitMiddleware {
    /// A middleware with no trusted proxies, IPv6 grouped by /64, no user header, quota headers
    /// on.
    pub fn new() -> RateLimitMiddleware {
        RateLimitMiddleware::default()
    }

    fn config(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// Believes forwarded headers (`X-Forwarded-For`, `Forwarded`, `X-Real-IP`) from peers in
    /// `network`. Repeatable.
    pub fn trust_proxy(mut self, network: Cidr) -> RateLimitMiddleware {
        let c = self.config();
        c.resolver = std::mem::take(&mut c.resolver).trust(network);
        self
    }

    /// Believes forwarded headers from peers in each of `networks`.
    pub fn trust_proxies(self, networks: impl IntoIterator<Item = Cidr>) -> RateLimitMiddleware {
        networks.into_iter().fold(self, RateLimitMiddleware::trust_proxy)
    }

    /// Replaces the client-IP resolver (trusted proxies and the headers they set).
    pub fn resolver(mut self, resolver: ClientIpResolver) -> RateLimitMiddleware {
        self.config().resolver = resolver;
        self
    }

    /// Groups IPv6 clients by their first `bits` bits (default 64; 128 = per address).
    pub fn ipv6_prefix(mut self, bits: u8) -> RateLimitMiddleware {
        self.config().ipv6_prefix = bits.min(128);
        self
    }

    /// Takes the user id from this request header (when present and not blank), as bytes. Only
    /// for headers that a trusted component sets (an authenticating proxy): anyone can send any
    /// header. Otherwise an extractor or middleware inside this one calls
    /// [`context::set_user`].
    pub fn user_header(mut self, name: HeaderName) -> RateLimitMiddleware {
        // Header names are lowercase in both versions of the `http` types: this cannot fail.
        self.config().user_header = http::HeaderName::from_bytes(name.as_str().as_bytes()).ok();
        self
    }

    /// Whether to add `RateLimit-Policy` / `RateLimit` to allowed responses (default `true`).
    pub fn quota_headers(mut self, on: bool) -> RateLimitMiddleware {
        self.config().quota_headers = on;
        self
    }

    /// The client-IP resolver.
    pub fn client_ip_resolver(&self) -> &ClientIpResolver {
        &self.config.resolver
    }
}

impl HeaderFields for HeaderMap {
    fn values(&self, name: &str) -> Vec<&[u8]> {
        self.get_all(name).map(|v| v.as_bytes()).collect()
    }
}

impl<S, B> Transform<S, ServiceRequest> for RateLimitMiddleware
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>>,
    S::Future: 'static,
{
    type Response = ServiceResponse<B>;
    type Error = S::Error;
    type Transform = RateLimitService<S>;
    type InitError = ();
    type Future = Ready<Result<RateLimitService<S>, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitService { service, config: self.config.clone() }))
    }
}

/// The service of [`RateLimitMiddleware`].
#[derive(Debug)]
pub struct RateLimitService<S> {
    service: S,
    config: Arc<Config>,
}

impl<S, B> Service<ServiceRequest> for RateLimitService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>>,
    S::Future: 'static,
{
    type Response = ServiceResponse<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<ServiceResponse<B>, S::Error>>>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let peer = req.peer_addr().map(|a| a.ip());
        let ctx = Arc::new(self.config.context(peer, req.headers()));
        if let Some(ip) = ctx.ip() {
            req.extensions_mut().insert(ClientIp(ip));
        }
        // The synchronous part of the inner call sees the context too.
        let fut = context::sync_scope(ctx.clone(), || self.service.call(req));
        let quota_headers = self.config.quota_headers;
        Box::pin(async move {
            let mut response = context::scope(ctx.clone(), fut).await?;
            if quota_headers {
                let headers = response.headers_mut();
                let present = headers.contains_key("ratelimit") || headers.contains_key("ratelimit-policy");
                if let Some(quota) = ctx.quota().filter(|_| !present) {
                    for (name, value) in quota.actix_headers() {
                        headers.insert(name, value);
                    }
                }
            }
            Ok(response)
        })
    }
}
