//! The process: command line, logs, metrics recorder, store, the gRPC listener (the service and
//! `grpc.health.v1.Health`), the metrics listener (`/metrics`, `/healthz`), the configuration
//! watcher, and a clean shutdown on `SIGTERM` or Ctrl-C.

use crate::decide::Loaded;
use crate::service::{RateLimitService, State};
use arc_swap::ArcSwap;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use clap::{Arg, ArgAction};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;

/// The gRPC listener's connections, with Nagle's algorithm off. A response that leaves in two
/// writes would otherwise hold its second until the client acknowledges the first, which a
/// client may delay by up to 40 ms: under 64 callers about one call in 400 took 35-50 ms that
/// way, which set the p99.
fn grpc_incoming(listener: tokio::net::TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// How long a shutdown waits for open connections to finish.
const GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// What the command line gives.
#[derive(Debug)]
struct Args {
    config: PathBuf,
    listen: SocketAddr,
    metrics_listen: SocketAddr,
    headers: bool,
}

fn cli() -> clap::Command {
    clap::Command::new("ratelimit-server")
        .about(
            "An Envoy rate-limit service (envoy.service.ratelimit.v3) reading envoyproxy/ratelimit's YAML \
             configuration. The store comes from the library's variables (REDIS_URL, REDIS_CLUSTER_URLS, \
             REDIS_SENTINEL_URLS, RATELIMIT_ON_ERROR, …); without one, counts live in this process's memory.",
        )
        .arg(
            Arg::new("config")
                .long("config")
                .value_name("PATH")
                .required(true)
                .value_parser(clap::value_parser!(PathBuf))
                .help("A YAML file, or a directory of them (watched: changes are loaded within a second)"),
        )
        .arg(
            Arg::new("listen")
                .long("listen")
                .value_name("ADDR:PORT")
                .default_value("127.0.0.1:8081")
                .value_parser(clap::value_parser!(SocketAddr))
                .help("The gRPC address (ShouldRateLimit and grpc.health.v1.Health)"),
        )
        .arg(
            Arg::new("metrics-listen")
                .long("metrics-listen")
                .value_name("ADDR:PORT")
                .default_value("127.0.0.1:8080")
                .value_parser(clap::value_parser!(SocketAddr))
                .help("The HTTP address of /metrics (Prometheus) and /healthz"),
        )
        .arg(
            Arg::new("response-headers").long("response-headers").action(ArgAction::SetTrue).help(
                "Add the RateLimit and RateLimit-Policy header fields to every response (response_headers_to_add)",
            ),
        )
}

/// Runs the server with these arguments (without the program name); returns the exit status:
/// 0 after a clean shutdown (or `--help`), 1 if it cannot start, 2 for a bad command line.
pub fn run(args: impl IntoIterator<Item = String>) -> u8 {
    let matches = match cli().try_get_matches_from(std::iter::once("ratelimit-server".to_owned()).chain(args)) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let args = Args {
        config: matches.get_one::<PathBuf>("config").cloned().unwrap_or_default(),
        listen: matches.get_one::<SocketAddr>("listen").copied().unwrap_or(([127, 0, 0, 1], 8081).into()),
        metrics_listen: matches
            .get_one::<SocketAddr>("metrics-listen")
            .copied()
            .unwrap_or(([127, 0, 0, 1], 8080).into()),
        headers: matches.get_flag("response-headers"),
    };
    init_logs();
    let metrics = match install_metrics() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("ratelimit-server: cannot install the metrics recorder: {e}");
            return 1;
        }
    };
    let options = match crate::config::Options::from_env() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ratelimit-server: {e}");
            return 1;
        }
    };
    let config = match crate::config::load(&args.config, &options) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ratelimit-server: configuration refused: {e}");
            return 1;
        }
    };
    if let Err(e) = ratelimit::Config::from_env().and_then(ratelimit::init) {
        eprintln!("ratelimit-server: cannot configure the rate-limit store: {e}");
        return 1;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ratelimit-server: cannot start the async runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(serve(args, options, config, metrics))
}

async fn serve(
    args: Args,
    options: crate::config::Options,
    config: crate::config::Config,
    metrics: PrometheusHandle,
) -> u8 {
    let (domains, limits) = (config.domains.len(), config.limits);
    let state = Arc::new(State { loaded: ArcSwap::from_pointee(Loaded::new(config)), headers: args.headers });
    let grpc = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ratelimit-server: cannot listen on {}: {e}", args.listen);
            return 1;
        }
    };
    let http = match tokio::net::TcpListener::bind(args.metrics_listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ratelimit-server: cannot listen on {}: {e}", args.metrics_listen);
            return 1;
        }
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let signal = shutdown_signal();
    crate::watch::spawn(args.config.clone(), options, state.clone());
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<RateLimitService>().await;
    println!(
        "ratelimit-server: grpc on {} metrics on http://{} (configuration {}: {domains} domains, {limits} limits; \
         rate-limit {})",
        grpc.local_addr().unwrap_or(args.listen),
        http.local_addr().unwrap_or(args.metrics_listen),
        args.config.display(),
        ratelimit::config::settings()
    );
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok\n" })).route(
        "/metrics",
        axum::routing::get(move || {
            let metrics = metrics.clone();
            async move {
                ratelimit::metrics::flush();
                ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], metrics.render()).into_response()
            }
        }),
    );
    let http_task = tokio::spawn(axum::serve(http, app).with_graceful_shutdown(stopped(stop_rx.clone())).into_future());
    let service = RateLimitService { state };
    let grpc_task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(service)
            .serve_with_incoming_shutdown(grpc_incoming(grpc), stopped(stop_rx)),
    );
    signal.await;
    eprintln!("ratelimit-server: shutting down");
    health.set_not_serving::<RateLimitService>().await;
    let _ = stop_tx.send(true);
    // Calls under way finish; a client that keeps its connection open past the grace period
    // does not hold the process.
    let both = async { (grpc_task.await, http_task.await) };
    let Ok((g, h)) = tokio::time::timeout(GRACE, both).await else {
        eprintln!("ratelimit-server: shut down ({GRACE:?} grace period over; open connections closed)");
        return 0;
    };
    match (g, h) {
        (Ok(Ok(())), Ok(Ok(()))) => {
            eprintln!("ratelimit-server: shut down");
            0
        }
        (g, h) => {
            eprintln!("ratelimit-server: stopped with an error: grpc {g:?}, http {h:?}");
            1
        }
    }
}

/// The Prometheus recorder, with histogram buckets for the store's latency.
fn install_metrics() -> Result<PrometheusHandle, String> {
    const BUCKETS: [f64; 14] =
        [0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full("ratelimit_store_duration_seconds".to_owned()), &BUCKETS)
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| e.to_string())
}

/// Resolves on `SIGTERM` or Ctrl-C; the handlers are installed by this call, so a signal sent
/// right after the startup line is not missed.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let handlers = signal(SignalKind::interrupt()).and_then(|int| Ok((int, signal(SignalKind::terminate())?)));
        async move {
            match handlers {
                Ok((mut int, mut term)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Prints `tracing` events on stderr: `RUST_LOG` if set and valid, else `info`.
fn init_logs() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO));
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(filter);
    let _ = tracing_subscriber::registry().with(logs).try_init();
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn grpc_connections_are_accepted_with_nagle_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let mut incoming = super::grpc_incoming(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let accepted = tokio_stream::StreamExt::next(&mut incoming).await.expect("a connection").expect("accepted");
        assert!(accepted.nodelay().expect("TCP_NODELAY"), "Nagle's algorithm is on");
    }
}
