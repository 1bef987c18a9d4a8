//! A rate-limited gRPC service on tonic: `#[rate_limiter]` on the method, the request context
//! installed by `ratelimit::tonic::RequestContextLayer`.
//!
//! ```text
//! cargo run --example grpc --features grpc-example                          # 127.0.0.1:50051, in memory
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example grpc --features grpc-example -- --listen 127.0.0.1:50052
//! ```
//!
//! The service, as a `.proto` would declare it:
//!
//! ```proto
//! syntax = "proto3";
//! package ratelimit.demo;
//! service Greeter { rpc SayHello (HelloRequest) returns (HelloReply); }
//! message HelloRequest { string name = 1; }
//! message HelloReply { string message = 1; }
//! ```
//!
//! `SayHello` allows 5 calls per 10 s and 20 per minute per client IP. A refused call ends with
//! `RESOURCE_EXHAUSTED` and the metadata `retry-after` (seconds), `ratelimit-policy` and
//! `ratelimit`; allowed calls carry the last two in their response metadata. No `protoc` and no
//! build script: the messages are written with prost's derive, and the service's routing and the
//! client call below are what tonic's code generator would write.

use ratelimit::rate_limiter;
use ratelimit::tonic::RequestContextLayer;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::server::{NamedService, UnaryService};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

/// `message HelloRequest { string name = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloRequest {
    /// Who to greet.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `message HelloReply { string message = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloReply {
    /// The greeting.
    #[prost(string, tag = "1")]
    pub message: String,
}

/// The method's path: `/<package>.<service>/<method>`.
pub const SAY_HELLO: &str = "/ratelimit.demo.Greeter/SayHello";

/// The method. A refusal returns `Err(Status)`: `RateLimited` converts into one.
#[rate_limiter(type = Ip, rules = [(10s, 5), (1m, 20)])]
pub async fn say_hello(request: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
    let name = request.into_inner().name;
    Ok(Response::new(HelloReply { message: format!("hello, {name}") }))
}

/// The server side of `Greeter`: routes each call to its method (what tonic-build generates).
#[derive(Clone, Copy, Debug, Default)]
pub struct GreeterServer;

impl NamedService for GreeterServer {
    const NAME: &'static str = "ratelimit.demo.Greeter";
}

/// `SayHello` as tonic's unary-call machinery calls it.
struct SayHello;

impl UnaryService<HelloRequest> for SayHello {
    type Response = HelloReply;
    type Future = Pin<Box<dyn Future<Output = Result<Response<HelloReply>, Status>> + Send>>;

    fn call(&mut self, request: Request<HelloRequest>) -> Self::Future {
        Box::pin(say_hello(request))
    }
}

impl tower_service::Service<http::Request<Body>> for GreeterServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        match request.uri().path() {
            SAY_HELLO => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ProstCodec::default());
                Ok(grpc.unary(SayHello, request).await)
            }),
            _ => Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}

/// The client side of `SayHello` (what tonic-build generates).
pub async fn call_say_hello(channel: Channel, request: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.map_err(|e| Status::unavailable(format!("the service is not ready: {e}")))?;
    let path = http::uri::PathAndQuery::from_static(SAY_HELLO);
    client.unary(request, path, ProstCodec::default()).await
}

/// Serves `Greeter` on `listener` until `shutdown` resolves, behind the rate-limit layer.
pub async fn serve(
    listener: tokio::net::TcpListener,
    layer: RequestContextLayer,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    Server::builder()
        .layer(layer)
        .add_service(GreeterServer)
        // Nagle's algorithm off: a reply that leaves in two writes would otherwise wait for the
        // client's delayed ACK, up to 40 ms.
        .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), shutdown)
        .await
}

#[allow(dead_code)] // The test includes this file as a module and calls `serve`.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut listen = SocketAddr::from(([127, 0, 0, 1], 50051));
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--listen", Some(addr)) => listen = addr.parse().map_err(|e| format!("--listen {addr:?}: {e}"))?,
            _ => return Err(format!("unknown argument {arg:?}; usage: grpc [--listen ADDR:PORT]").into()),
        }
    }
    // REDIS_URL, REDIS_CLUSTER_URLS, … as for the HTTP example server; else in memory.
    ratelimit::Config::from_env().and_then(ratelimit::init)?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!(
        "grpc: serving ratelimit.demo.Greeter on {} (rate-limit store: {})",
        listener.local_addr()?,
        ratelimit::config::describe_store()
    );
    serve(listener, RequestContextLayer::new(), async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
