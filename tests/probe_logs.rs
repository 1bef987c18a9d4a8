//! The startup probe as an operator sees it: the example server, configured from the
//! environment, reports on stderr within seconds whether its store answers, in the store's own
//! words, and never prints the password.
//!
//! Each server is this test binary re-executed to run only [`server_process`] (see
//! tests/support/server_process.rs).

#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use std::time::{Duration, Instant};
use support::server_process::{loopback, request_blocking, Process};
use support::RedisServer;

const PASSWORD: &str = "s3cret-Pa55word";

/// Not a test of its own: the body of the server processes that the tests start (see
/// tests/support/server_process.rs and tests/support/child.rs).
#[test]
#[ignore = "the server process the other tests start"]
fn server_process() {
    support::server_process::child_main(server::run);
}

/// `GET path` over plain HTTP/1.1; the status code.
fn get(addr: std::net::SocketAddr, path: &str) -> u16 {
    request_blocking(addr, loopback(1), "GET", path, &[]).status
}

/// "Within seconds": generous for a loaded 2-core machine.
const WITHIN: Duration = Duration::from_secs(10);

#[test]
fn a_wrong_password_is_reported_in_the_stores_words_without_the_password() {
    let redis = RedisServer::start_with(&["--requirepass", "the-right-one"]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/", redis.port());
    let server = Process::spawn(&[], &[("REDIS_URL", &url)]);
    let start = Instant::now();
    let line = server.wait_for("rate-limit store unreachable", WITHIN);
    let took = start.elapsed();
    assert!(line.contains("WRONGPASS") || line.contains("invalid password"), "{line}");
    assert!(line.contains("ERROR"), "logged at error: {line}");
    assert!(line.contains("redis://***@127.0.0.1"), "the masked URL names the store: {line}");
    assert!(took < WITHIN, "{took:?}");
    // Calls go through (fail open), and that is visible too.
    let addr = server.addr();
    assert_eq!(get(addr, "/api/hello"), 200);
    server.wait_for("letting calls through", WITHIN);
    let output = server.output();
    assert!(!output.contains(PASSWORD), "the password leaked:\n{output}");
}

#[test]
fn a_missing_password_is_reported_as_noauth() {
    let redis = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let server = Process::spawn(&[], &[("REDIS_URL", &redis.url())]);
    let line = server.wait_for("rate-limit store unreachable", WITHIN);
    assert!(line.contains("NOAUTH"), "{line}");
    let output = server.output();
    assert!(!output.contains(PASSWORD), "the password leaked:\n{output}");
}

#[test]
fn a_good_store_is_reported_reachable_with_its_latency() {
    let redis = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/", redis.port());
    let server = Process::spawn(&[], &[("REDIS_URL", &url)]);
    let line = server.wait_for("rate-limit store reachable", WITHIN);
    assert!(line.contains(" INFO "), "logged at info: {line}");
    assert!(line.contains("latency_ms="), "{line}");
    assert!(line.contains("redis://***@127.0.0.1"), "{line}");
    // The probe loaded the three decision scripts: the general one, and the sliding-window and
    // O(1) ones, which decide a lone call or a batch of concurrent calls.
    let mut conn = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
    let info: String = redis::cmd("INFO").arg("memory").query(&mut conn).unwrap();
    let scripts = info.lines().find_map(|l| l.strip_prefix("number_of_cached_scripts:")).map(str::trim);
    assert_eq!(scripts, Some("3"), "{info}");
    let output = server.output();
    assert!(!output.contains(PASSWORD), "the password leaked:\n{output}");
}

#[test]
fn a_refused_connection_is_reported() {
    let url = format!("redis://127.0.0.1:{}/", support::free_port());
    let server = Process::spawn(&[], &[("REDIS_URL", &url)]);
    let line = server.wait_for("rate-limit store unreachable", WITHIN);
    assert!(line.to_ascii_lowercase().contains("refused"), "{line}");
}

#[cfg(feature = "tls")]
#[test]
fn tls_from_the_environment_with_and_without_the_ca() {
    let redis = support::tls::TlsRedis::start(false);
    let ca = redis.pki.ca_cert.to_string_lossy().into_owned();
    let good = Process::spawn(&[], &[("REDIS_URL", &redis.url()), ("REDIS_CA_CERT", &ca)]);
    good.wait_for("rate-limit store reachable", WITHIN);
    let bad = Process::spawn(&[], &[("REDIS_URL", &redis.url())]);
    let line = bad.wait_for("rate-limit store unreachable", WITHIN);
    assert!(line.contains("certificate"), "{line}");
    assert!(line.contains("REDIS_CA_CERT"), "the hint names the fix: {line}");
}

#[cfg(all(feature = "tls", feature = "cluster"))]
#[test]
fn a_tls_cluster_without_the_ca_is_reported_with_the_certificate_problem() {
    let cluster = support::cluster::RedisCluster::start_tls(3);
    let seeds = cluster.tls_urls().join(",");
    let ca = cluster.pki().ca_cert.to_string_lossy().into_owned();
    let good = Process::spawn(&[], &[("REDIS_CLUSTER_URLS", &seeds), ("REDIS_CA_CERT", &ca)]);
    good.wait_for("rate-limit store reachable", WITHIN);
    let bad = Process::spawn(&[], &[("REDIS_CLUSTER_URLS", &seeds)]);
    let line = bad.wait_for("rate-limit store unreachable", WITHIN);
    assert!(line.contains("UnknownIssuer") && line.contains("REDIS_CA_CERT"), "{line}");
}

#[test]
fn a_unix_socket_url_is_a_store_too() {
    let dir = std::env::temp_dir().join(format!("ratelimit-test-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let socket = dir.join("redis.sock");
    let socket_arg = socket.to_string_lossy().into_owned();
    let _redis = RedisServer::start_with(&["--unixsocket", &socket_arg, "--unixsocketperm", "700"]);
    let server = Process::spawn(&[], &[("REDIS_URL", &format!("redis+unix://{socket_arg}"))]);
    let line = server.wait_for("rate-limit store reachable", WITHIN);
    assert!(line.contains("redis+unix://"), "{line}");
    let addr = server.addr();
    let statuses: Vec<u16> = (0..22).map(|_| get(addr, "/api/hello")).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 20, "20 per 10s from one IP: {statuses:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sentinel_primaries_are_probed_too() {
    use support::sentinel::{SentinelSet, MASTER};
    let set = SentinelSet::start();
    let sentinels = set.sentinel_url();
    let server = Process::spawn(&[], &[("REDIS_SENTINEL_URLS", &sentinels), ("REDIS_SENTINEL_MASTER", MASTER)]);
    let line = server.wait_for("rate-limit store reachable", WITHIN);
    assert!(line.contains("sentinel") && line.contains(MASTER), "names the store: {line}");
    // A master name the sentinel does not monitor: reported, in the sentinel's terms.
    let wrong =
        Process::spawn(&[], &[("REDIS_SENTINEL_URLS", &sentinels), ("REDIS_SENTINEL_MASTER", "no-such-master")]);
    let line = wrong.wait_for("rate-limit store unreachable", WITHIN);
    assert!(line.contains("no-such-master"), "{line}");
}
