//! gRPC with tonic (feature `tonic`): the request context for a tonic server, and `RateLimited`
//! as a `tonic::Status`.
//!
//! - [`RequestContextLayer`] is the tower layer of [`ratelimit::http`](crate::http), which reads
//!   the peer address a tonic server puts in every request (`TcpConnectInfo`), believes forwarded
//!   headers (gRPC metadata) from [trusted proxies](RequestContextLayer::trust_proxy) only, and
//!   adds the `ratelimit` / `ratelimit-policy` fields to the initial metadata of allowed calls.
//! - `impl From<RateLimited> for tonic::Status`: a refused call ends with `RESOURCE_EXHAUSTED`
//!   (`UNAVAILABLE` when the store could not decide, `INTERNAL` when the server is
//!   misconfigured), its message the refusal's text, and the metadata `retry-after` (whole
//!   seconds, at least 1), `ratelimit-policy` and `ratelimit`. So an attribute on a service
//!   method returning `Result<_, tonic::Status>` needs nothing more.
//!
//! ```no_run
//! use ratelimit::{rate_limiter, tonic::RequestContextLayer};
//! use tonic::{Request, Response, Status};
//!
//! #[rate_limiter(type = Ip, rules = [(10s, 5), (1m, 20)])]
//! async fn say_hello(request: Request<String>) -> Result<Response<String>, Status> {
//!     Ok(Response::new(format!("hello, {}", request.into_inner())))
//! }
//!
//! # async fn run(greeter: impl Clone) {
//! // Installed in front of every service of the server:
//! let layer = RequestContextLayer::new().trust_proxy("10.0.0.0/8".parse().unwrap());
//! // tonic::transport::Server::builder().layer(layer).add_service(GreeterServer::new(greeter))…
//! # }
//! ```
//!
//! A whole service is in `examples/grpc.rs` of the repository (`cargo run --example grpc
//! --features grpc-example`); the guide is docs/integrations.md. A server serving TLS itself
//! reports its peers as `TlsConnectInfo`, which the layer does not read: terminate TLS in front
//! of it (and trust that proxy), or set the context with
//! [`context::scope`](crate::context::scope).

pub use crate::http::{ClientIp, RequestContextLayer, RequestContextService};
