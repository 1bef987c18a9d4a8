//! HTTP integration (features `axum`, `tonic`, `actix`): a tower layer that tells rate-limited
//! handlers who the client is, and adds `RateLimit` header fields to responses; who the client
//! is behind trusted proxies ([`ClientIpResolver`]). The layer serves axum and tonic alike (see
//! [`ratelimit::tonic`](crate::tonic) for gRPC); actix-web has its own middleware,
//! [`ratelimit::actix`](crate::actix). Guides: docs/integrations.md and docs/http.md in the
//! repository.
//!
//! ```no_run
//! # #[cfg(feature = "axum")] mod axum_only {
//! use axum::{routing::get, Router};
//! use ratelimit::{http::RequestContextLayer, rate_limiter, RateLimited};
//! use std::net::SocketAddr;
//!
//! #[rate_limiter(type = Ip, rules = [(10s, 20), (60s, 50)])]
//! async fn hello() -> Result<&'static str, RateLimited> {
//!     Ok("hello\n")
//! }
//!
//! # async fn run() -> std::io::Result<()> {
//! let app = Router::new()
//!     .route("/api/hello", get(hello))
//!     .layer(RequestContextLayer::new().trust_proxy("10.0.0.0/8".parse().unwrap()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // The layer reads the socket peer from `ConnectInfo<SocketAddr>`: serve with connect info.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
//! # }
//! # }
//! ```
//!
//! `RateLimited` implements axum's `IntoResponse` (`429`, or `503` when the store is
//! unavailable, with `Retry-After`, `RateLimit-Policy`, `RateLimit` and a JSON body; `500`
//! without `Retry-After` when the server is misconfigured: a missing identity, or an invalid
//! limiter, named in the body), so a handler can return it directly or convert it into its own
//! error type.

mod client_ip;

pub(crate) use client_ip::HeaderFields;
pub use client_ip::{ClientIpResolver, ForwardedHeader};

#[cfg(feature = "axum")]
use axum::extract::ConnectInfo;
use http::{HeaderName, Request, Response};
use ratelimit_runtime::context::{self, RequestContext};
use ratelimit_runtime::subject::Cidr;
use ratelimit_runtime::subject::DEFAULT_IPV6_PREFIX;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// The client IP the layer (or the actix middleware) resolved, as a request extension
/// (`Extension<ClientIp>` in axum, `req.extensions().get::<ClientIp>()` in tonic and actix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientIp(pub IpAddr);

/// A tower [`Layer`] that runs each request inside a [`RequestContext`]
/// (see [`ratelimit::context`](crate::context)), for axum and for tonic:
///
/// - the client IP: the socket peer, from axum's `ConnectInfo<SocketAddr>` (serve with
///   `into_make_service_with_connect_info::<SocketAddr>()`) or from the `TcpConnectInfo` a tonic
///   server puts in every request (without either, the request has no IP and `type = Ip` limits
///   refuse it with a missing-subject cause); or, when the peer is a
///   [trusted proxy](Self::trust_proxy), the client named by its forwarded headers (see
///   [`ClientIpResolver`]);
/// - IPv6 clients counted per `/64` ([`ipv6_prefix`](Self::ipv6_prefix) to change);
/// - optionally the user id, copied from a [request header](Self::user_header); otherwise an
///   extractor or middleware inside the layer calls [`context::set_user`].
///
/// After the handler, an allowed rate-limited call's quota is added to the response as
/// `RateLimit-Policy` and `RateLimit` fields, unless the response already has them.
#[derive(Clone, Debug)]
pub struct RequestContextLayer {
    config: Arc<Config>,
}

/// What the layer and the actix middleware are configured with.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) resolver: ClientIpResolver,
    pub(crate) ipv6_prefix: u8,
    pub(crate) user_header: Option<HeaderName>,
    pub(crate) quota_headers: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            resolver: ClientIpResolver::new(),
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            user_header: None,
            quota_headers: true,
        }
    }
}

impl Config {
    /// The request context of a request from `peer` with these header fields.
    pub(crate) fn context(&self, peer: Option<IpAddr>, headers: &impl HeaderFields) -> RequestContext {
        let mut ctx = RequestContext::new().with_ipv6_prefix(self.ipv6_prefix);
        if let Some(ip) = self.resolver.resolve_fields(peer, headers) {
            ctx = ctx.with_ip(ip);
        }
        if let Some(name) = &self.user_header {
            let user = headers.values(name.as_str()).first().map(|v| v.trim_ascii());
            if let Some(user) = user.filter(|u| !u.is_empty()) {
                ctx = ctx.with_user_bytes(user);
            }
        }
        ctx
    }
}

impl Default for RequestContextLayer {
    fn default() -> Self {
        RequestContextLayer::new()
    }
}

impl RequestContextLayer {
    /// A layer with no trusted proxies, IPv6 grouped by /64, no user header, quota headers on.
    pub fn new() -> RequestContextLayer {
        RequestContextLayer { config: Arc::new(Config::default()) }
    }

    fn config(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// Believes forwarded headers (`X-Forwarded-For`, `Forwarded`, `X-Real-IP`) from peers in
    /// `network`. Repeatable.
    pub fn trust_proxy(mut self, network: Cidr) -> RequestContextLayer {
        let c = self.config();
        c.resolver = std::mem::take(&mut c.resolver).trust(network);
        self
    }

    /// Believes forwarded headers from peers in each of `networks`.
    pub fn trust_proxies(self, networks: impl IntoIterator<Item = Cidr>) -> RequestContextLayer {
        networks.into_iter().fold(self, RequestContextLayer::trust_proxy)
    }

    /// Replaces the client-IP resolver (trusted proxies and the headers they set).
    pub fn resolver(mut self, resolver: ClientIpResolver) -> RequestContextLayer {
        self.config().resolver = resolver;
        self
    }

    /// Groups IPv6 clients by their first `bits` bits (default 64; 128 = per address).
    pub fn ipv6_prefix(mut self, bits: u8) -> RequestContextLayer {
        self.config().ipv6_prefix = bits.min(128);
        self
    }

    /// Takes the user id from this request header (when present and not blank), as bytes: a
    /// non-ASCII value (`ü名字`, UTF-8 or not) is a user like any other.
    /// Only for headers that a trusted component sets (an authenticating proxy): anyone can send
    /// any header.
    pub fn user_header(mut self, name: HeaderName) -> RequestContextLayer {
        self.config().user_header = Some(name);
        self
    }

    /// Whether to add `RateLimit-Policy` / `RateLimit` to allowed responses (default `true`).
    pub fn quota_headers(mut self, on: bool) -> RequestContextLayer {
        self.config().quota_headers = on;
        self
    }

    /// The client-IP resolver.
    pub fn client_ip_resolver(&self) -> &ClientIpResolver {
        &self.config.resolver
    }
}

impl<S> Layer<S> for RequestContextLayer {
    type Service = RequestContextService<S>;

    fn layer(&self, inner: S) -> RequestContextService<S> {
        RequestContextService { inner, config: self.config.clone() }
    }
}

/// The service of [`RequestContextLayer`].
#[derive(Clone, Debug)]
pub struct RequestContextService<S> {
    inner: S,
    config: Arc<Config>,
}

/// The socket peer of a request: what axum's `ConnectInfo` or tonic's `TcpConnectInfo` says.
/// (With `actix` alone the layer is compiled but has neither to read.)
#[cfg_attr(not(any(feature = "axum", feature = "tonic")), allow(unused_variables))]
fn peer<B>(req: &Request<B>) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(ConnectInfo(addr)) = req.extensions().get::<ConnectInfo<std::net::SocketAddr>>() {
        return Some(addr.ip());
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = req.extensions().get::<::tonic::transport::server::TcpConnectInfo>().and_then(|c| c.remote_addr)
    {
        return Some(addr.ip());
    }
    None
}

/// The response future of [`RequestContextService`].
pub type ResponseFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, B, ResBody> Service<Request<B>> for RequestContextService<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<Response<ResBody>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let ctx = Arc::new(self.config.context(peer(&req), req.headers()));
        if let Some(ip) = ctx.ip() {
            req.extensions_mut().insert(ClientIp(ip));
        }
        // The synchronous part of the inner call sees the context too.
        let fut = context::sync_scope(ctx.clone(), || self.inner.call(req));
        let quota_headers = self.config.quota_headers;
        Box::pin(async move {
            let mut response = context::scope(ctx.clone(), fut).await?;
            if quota_headers {
                let headers = response.headers_mut();
                let present = headers.contains_key(RATELIMIT) || headers.contains_key(RATELIMIT_POLICY);
                if let Some(quota) = ctx.quota().filter(|_| !present) {
                    headers.extend(quota.headers());
                }
            }
            Ok(response)
        })
    }
}
