//! The gRPC service: `ShouldRateLimit` routed to [`decide`](crate::decide::decide()) (what
//! tonic's code generator would write for rls.proto, written by hand).

use crate::decide::{decide, Loaded};
use crate::proto::{RateLimitRequest, RateLimitResponse, SERVICE, SHOULD_RATE_LIMIT};
use arc_swap::ArcSwap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::server::{NamedService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

/// What the service decides with: the configuration in force (swapped whole on reload).
pub struct State {
    pub loaded: ArcSwap<Loaded>,
    /// Add the `RateLimit` / `RateLimit-Policy` fields to responses.
    pub headers: bool,
}

/// `envoy.service.ratelimit.v3.RateLimitService`.
#[derive(Clone)]
pub struct RateLimitService {
    pub state: Arc<State>,
}

impl NamedService for RateLimitService {
    const NAME: &'static str = SERVICE;
}

struct ShouldRateLimit(Arc<State>);

impl UnaryService<RateLimitRequest> for ShouldRateLimit {
    type Response = RateLimitResponse;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RateLimitResponse>, Status>> + Send>>;

    fn call(&mut self, request: Request<RateLimitRequest>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move {
            let loaded = state.loaded.load_full();
            decide(&loaded, request.into_inner(), state.headers).await.map(Response::new)
        })
    }
}

impl tower_service::Service<http::Request<Body>> for RateLimitService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let state = self.state.clone();
        match request.uri().path() {
            SHOULD_RATE_LIMIT => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ProstCodec::default());
                Ok(grpc.unary(ShouldRateLimit(state), request).await)
            }),
            _ => Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}
