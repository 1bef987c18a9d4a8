//! Section 12: `ratelimit-server` under load. 64 gRPC callers ask `ShouldRateLimit` for one
//! descriptor (`remote_address`, 1000 addresses in turn) of a 1-minute limit that never refuses;
//! the reference is the seed-style script (one ZSET per rule) behind the same gRPC front: the
//! same messages, codec, tonic server and client, its handler one `EVALSHA`. Both run in this
//! process on one Redis; the figure is decisions per second and the callers' p99 latency.

use crate::redis_load::SEED_SCRIPT;
use crate::report::{fmt, quantile, Figure, Report, Target, ROUNDS};
use crate::support::RedisServer;
use ratelimit_server::proto::{self, RateLimitRequest, RateLimitResponse};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tonic::body::Body;
use tonic::server::{NamedService, UnaryService};
use tonic::{Request, Response, Status};

const CALLERS: usize = 64;
/// Callers per gRPC connection (Envoy keeps a few connections to its rate-limit cluster).
const PER_CONNECTION: usize = 16;
const SUBJECTS: usize = 1000;
const RUN: Duration = Duration::from_secs(3);

const CONFIG: &str = "domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 1000000000 }\n";

/// The seed-style script behind the rate-limit service's gRPC front.
#[derive(Clone)]
struct SeedService {
    conn: redis::aio::MultiplexedConnection,
    sha: Arc<str>,
}

impl NamedService for SeedService {
    const NAME: &'static str = proto::SERVICE;
}

impl UnaryService<RateLimitRequest> for SeedService {
    type Response = RateLimitResponse;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RateLimitResponse>, Status>> + Send>>;

    fn call(&mut self, request: Request<RateLimitRequest>) -> Self::Future {
        let (mut conn, sha) = (self.conn.clone(), self.sha.clone());
        Box::pin(async move {
            let request = request.into_inner();
            let value = request.descriptors.first().and_then(|d| d.entries.first()).map_or("", |e| e.value.as_str());
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
            let ok: i64 = redis::cmd("EVALSHA")
                .arg(&*sha)
                .arg(1)
                .arg(format!("seed:{}:{value}", request.domain))
                .arg(now)
                .arg(uuid::Uuid::new_v4().to_string())
                .arg(60_000)
                .arg(1_000_000_000u64)
                .query_async(&mut conn)
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            let code = if ok == 1 { proto::Code::Ok } else { proto::Code::OverLimit };
            Ok(Response::new(RateLimitResponse { overall_code: code as i32, ..Default::default() }))
        })
    }
}

impl tower_service::Service<http::Request<Body>> for SeedService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(this, request).await)
        })
    }
}

async fn serve<S>(service: S) -> SocketAddr
where
    S: tower_service::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    // Connections accepted as ratelimit-server accepts them, with Nagle's algorithm off (else a
    // reply in two writes can wait about 40 ms for the client's delayed ACK).
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))),
    );
    addr
}

/// Decisions per second and the p99 latency (µs) of `CALLERS` callers for `RUN`.
async fn load(addr: SocketAddr) -> (f64, f64) {
    let mut channels = Vec::new();
    for _ in 0..CALLERS / PER_CONNECTION {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("endpoint");
        channels.push(endpoint.connect().await.expect("connect"));
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CALLERS {
        let channel = channels[c / PER_CONNECTION].clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(20_000);
            let mut i = c;
            while started.elapsed() < RUN {
                let ip = format!("10.0.{}.{}", (i % SUBJECTS) / 256, (i % SUBJECTS) % 256);
                let request = RateLimitRequest {
                    domain: "bench".into(),
                    descriptors: vec![proto::RateLimitDescriptor {
                        entries: vec![proto::Entry { key: "remote_address".into(), value: ip }],
                        hits_addend: None,
                    }],
                    hits_addend: 0,
                };
                let t = Instant::now();
                let r = proto::should_rate_limit(channel.clone(), request).await.expect("ShouldRateLimit");
                samples.push(t.elapsed().as_secs_f64() * 1e6);
                assert_eq!(r.into_inner().overall_code, proto::Code::Ok as i32);
                i += CALLERS;
            }
            samples
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("caller"));
    }
    let secs = started.elapsed().as_secs_f64();
    all.sort_by(f64::total_cmp);
    // RLS_DIST=1: each round's quantiles, and the calls that took 35-50 ms (a reply held for a
    // delayed ACK by Nagle's algorithm takes about 40 ms).
    if std::env::var_os("RLS_DIST").is_some() {
        let held = all.iter().filter(|&&x| (35_000.0..50_000.0).contains(&x)).count();
        let q = |p| fmt(quantile(&all, p));
        println!(
            "  µs: p50 {} p90 {} p99 {} p99.9 {} max {}; {held} of {} calls in 35-50 ms",
            q(0.5),
            q(0.9),
            q(0.99),
            q(0.999),
            q(1.0),
            all.len()
        );
    }
    (all.len() as f64 / secs, quantile(&all, 0.99))
}

pub fn run(server: &RedisServer, report: &mut Report) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let _ = ratelimit::init(ratelimit::Config::redis(server.url()).timeout(Duration::from_secs(2)));
        let dir = std::env::temp_dir().join(format!("ratelimit-bench-rls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("bench.yaml"), CONFIG).expect("config");
        let config = ratelimit_server::config::load(&dir, &ratelimit_server::config::Options::default())
            .expect("the bench configuration");
        let state = Arc::new(ratelimit_server::service::State {
            loaded: arc_swap::ArcSwap::from_pointee(ratelimit_server::decide::Loaded::new(config)),
            headers: false,
        });
        let ours = serve(ratelimit_server::service::RateLimitService { state }).await;
        let client = redis::Client::open(server.url()).expect("client");
        let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
        let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(SEED_SCRIPT).query_async(&mut conn).await.expect("load");
        let seed = serve(SeedService { conn, sha: sha.into() }).await;

        println!("\n== 12. ratelimit-server: ShouldRateLimit, {CALLERS} gRPC callers, 1 descriptor ==");
        // Warm up both (connections, script caches, the key populations).
        load(ours).await;
        load(seed).await;
        let (mut rate, mut p99) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        for _ in 0..ROUNDS {
            for (k, addr) in [ours, seed].into_iter().enumerate() {
                let (r, p) = load(addr).await;
                rate[k].push(r);
                p99[k].push(p);
            }
        }
        // The rows take the median of the rounds' own ratios: a round's two fronts ran within
        // seconds of each other, while the machine's speed drifts from round to round.
        let paired = |xs: &[Vec<f64>; 2]| Figure::of(xs[0].iter().zip(&xs[1]).map(|(o, s)| o / s).collect());
        let (rate_ratio, p99_ratio) = (paired(&rate), paired(&p99));
        println!("per round, ours / seed: decisions/s {}, p99 {}", rate_ratio.show("x"), p99_ratio.show("x"));
        let rate = rate.map(Figure::of);
        let p99 = p99.map(Figure::of);
        for (k, label) in ["ratelimit-server (sliding window)", "seed-style script, same gRPC front"].iter().enumerate()
        {
            println!("{label:<40} {:<28} p99 {}", rate[k].show("/s"), p99[k].show("µs"));
        }
        report.target(Target {
            name: "12. RLS decisions/s: ratelimit-server / seed",
            measured: format!("{}/s", fmt(rate[0].median)),
            reference: format!("{}/s", fmt(rate[1].median)),
            ratio: rate_ratio.median,
            bound: 1.0,
            at_most: false,
        });
        report.target(Target {
            name: "12. RLS p99: ratelimit-server / seed",
            measured: format!("{} µs", fmt(p99[0].median)),
            reference: format!("{} µs", fmt(p99[1].median)),
            ratio: p99_ratio.median,
            bound: 1.1,
            at_most: true,
        });
    });
}
