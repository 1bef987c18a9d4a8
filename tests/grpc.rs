//! The gRPC example (`examples/grpc.rs`, compiled into this binary with `#[path]`) served by a
//! real tonic server on a free loopback port and called by a real tonic client over HTTP/2.
//! Each test's client binds its own loopback address (127.0.0.x), so tests running side by side
//! are distinct clients of the one `SayHello` limiter of this process.

#[path = "../examples/grpc.rs"]
#[allow(dead_code)]
mod grpc;

use grpc::{call_say_hello, HelloRequest};
use ratelimit::store::RedisStore;
use ratelimit::tonic::RequestContextLayer;
use ratelimit::{Cause, FailurePolicy, Limit, LimitType, Limiter, Rule, Subject};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request};

/// A server on a free port, stopped when dropped.
struct GrpcServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl GrpcServer {
    async fn start(layer: RequestContextLayer) -> GrpcServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a free port");
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            grpc::serve(listener, layer, async {
                let _ = stopped.await;
            })
            .await
            .expect("the gRPC server runs");
        });
        GrpcServer { addr, stop: Some(stop) }
    }

    /// A client connecting from `from` (a loopback address).
    async fn client(&self, from: IpAddr) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .local_address(Some(from))
            .connect()
            .await
            .expect("connect to the gRPC server")
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

fn hello(name: &str) -> Request<HelloRequest> {
    Request::new(HelloRequest { name: name.to_owned() })
}

fn meta<'a>(metadata: &'a tonic::metadata::MetadataMap, key: &str) -> &'a str {
    metadata.get(key).unwrap_or_else(|| panic!("no {key} in {metadata:?}")).to_str().unwrap()
}

const POLICY: &str = r#""ip-10s";q=5;w=10, "ip-1m";q=20;w=60"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sixth_call_in_ten_seconds_is_resource_exhausted() {
    let server = GrpcServer::start(RequestContextLayer::new()).await;
    let channel = server.client(loopback(2)).await;
    for left in (0..5).rev() {
        let response = call_say_hello(channel.clone(), hello("ada")).await.expect("an allowed call");
        assert_eq!(response.get_ref().message, "hello, ada");
        // Allowed calls carry the quota in their response metadata.
        assert_eq!(meta(response.metadata(), "ratelimit-policy"), POLICY);
        assert_eq!(meta(response.metadata(), "ratelimit"), format!(r#""ip-10s";r={left};t=10"#));
    }
    let refused = call_say_hello(channel.clone(), hello("ada")).await.expect_err("the 6th call is refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().starts_with("rate limited by grpc::grpc::say_hello (ip, 5 per 10s)"), "{refused:?}");
    let retry_after: u64 = meta(refused.metadata(), "retry-after").parse().unwrap();
    assert!((1..=10).contains(&retry_after), "{retry_after}");
    assert_eq!(meta(refused.metadata(), "ratelimit-policy"), POLICY);
    assert_eq!(meta(refused.metadata(), "ratelimit"), format!(r#""ip-10s";r=0;t={retry_after}"#));

    // Another client has its own budget.
    let other = server.client(loopback(3)).await;
    call_say_hello(other, hello("bob")).await.expect("another client IP is not limited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_metadata_names_the_client_only_from_a_trusted_proxy() {
    let proxy = loopback(4);
    let server = GrpcServer::start(RequestContextLayer::new().trust_proxy("127.0.0.4/32".parse().unwrap())).await;
    let from_proxy = server.client(proxy).await;
    let forwarded = |client: &str| {
        let mut request = hello("via proxy");
        request.metadata_mut().insert("x-forwarded-for", client.parse().unwrap());
        request
    };
    for _ in 0..5 {
        call_say_hello(from_proxy.clone(), forwarded("198.51.100.7")).await.expect("allowed");
    }
    let refused = call_say_hello(from_proxy.clone(), forwarded("198.51.100.7")).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    // The proxy itself is not the client: another forwarded client passes.
    call_say_hello(from_proxy, forwarded("198.51.100.8")).await.expect("another client behind the proxy");
    // From an untrusted peer the header is ignored: the peer is the client.
    let direct = server.client(loopback(5)).await;
    call_say_hello(direct, forwarded("198.51.100.7")).await.expect("an untrusted peer is counted as itself");
}

/// Every cause has its code: what a service returns for store failures and misconfiguration.
#[tokio::test]
async fn status_codes_of_every_cause() {
    let rule = || [Rule::new(Duration::from_secs(10), 2).unwrap()];
    let ip = [Subject::ip("203.0.113.9".parse().unwrap())];

    // A store that cannot answer (nothing listens on the port), failing closed: UNAVAILABLE.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let redis = RedisStore::open(&format!("redis://{closed}/"), Duration::from_millis(200)).unwrap();
    let down = Limiter::builder("grpc_down")
        .limit(Limit::new(LimitType::Ip, rule()))
        .store(Arc::new(redis))
        .on_error(FailurePolicy::Deny)
        .build()
        .unwrap();
    let e = down.check(&ip).await.unwrap_err();
    assert_eq!(e.cause(), Cause::StoreUnavailable);
    let status = tonic::Status::from(e);
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let retry_after: u64 = meta(status.metadata(), "retry-after").parse().unwrap();
    assert!(retry_after >= 1, "{retry_after}");

    // No identity to count for (no request context): a server bug, INTERNAL, no retry-after.
    let memory = || Arc::new(ratelimit::store::MemoryStore::new());
    let limiter =
        Limiter::builder("grpc_missing").limit(Limit::new(LimitType::Ip, rule())).store(memory()).build().unwrap();
    let status = tonic::Status::from(limiter.check(&[Subject::missing()]).await.unwrap_err());
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(status.metadata().get("retry-after").is_none());

    // A cost that can never fit: RESOURCE_EXHAUSTED, and no retry-after (waiting cannot help).
    let status = tonic::Status::from(limiter.check(&ip).cost(3).await.unwrap_err());
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.metadata().get("retry-after").is_none());
}
