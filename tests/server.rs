//! The example server over real TCP on loopback.
//!
//! Every server runs in its own process, this test binary re-executed (see
//! tests/support/server_process.rs): the rate-limit configuration and the limiters of the
//! annotated handlers are per process, as in production. Clients bind to 127.0.0.2, 127.0.0.3, …
//! to be distinct client IPs.

#[path = "support/prometheus.rs"]
#[allow(dead_code)]
mod prometheus;
#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::server_process::{loopback, post_json, request, request_bytes, Reply, Server};
use support::RedisServer;

/// Not a test of its own: the body of the server processes that the tests start (see
/// tests/support/server_process.rs and tests/support/child.rs).
#[test]
#[ignore = "the server process the other tests start"]
fn server_process() {
    support::server_process::child_main(server::run);
}

async fn get(server: &Server, from: u8, path: &str) -> Reply {
    request(server.addr, loopback(from), "GET", path, &[]).await
}

/// Sends `n` requests and returns their statuses.
async fn statuses(
    server: SocketAddr,
    from: u8,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    n: usize,
) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(request(server, loopback(from), method, path, headers).await.status);
    }
    out
}

/// The first `ok` are 200, the rest 429.
fn assert_exactly(statuses: &[u16], ok: usize, what: &str) {
    let expected: Vec<u16> = (0..statuses.len()).map(|i| if i < ok { 200 } else { 429 }).collect();
    assert_eq!(statuses, expected, "{what}: expected exactly {ok} × 200 then 429s");
}

fn assert_refusal(r: &Reply, policy: &str) {
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/json"));
    let retry: u64 = r.header("retry-after").expect("Retry-After").parse().expect("whole seconds");
    assert!((1..=10).contains(&retry), "Retry-After {retry}");
    assert_eq!(r.header("ratelimit"), Some(format!(r#""{policy}";r=0;t={retry}"#).as_str()));
    let ms: u64 = r
        .body
        .strip_prefix(r#"{"error":"rate_limited","retry_after_ms":"#)
        .and_then(|b| b.strip_suffix('}'))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("body {:?}", r.body));
    assert!(ms > 0 && ms.div_ceil(1000) == retry, "retry_after_ms {ms} vs Retry-After {retry}");
}

#[tokio::test]
async fn hello_is_exact_per_client_ip() {
    let server = Server::start(&[], &[]);
    assert!(server.startup_line.contains("memory"), "{}", server.startup_line);
    let health = get(&server, 2, "/healthz").await;
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    assert!(health.header("ratelimit").is_none() && health.header("ratelimit-policy").is_none());

    for i in 0..20u64 {
        let r = get(&server, 2, "/api/hello").await;
        assert_eq!(r.status, 200, "call {i}: {r:?}");
        assert_eq!(r.body, "hello\n");
        assert_eq!(r.header("ratelimit-policy"), Some(r#""ip-10s";q=20;w=10, "ip-1m";q=50;w=60"#));
        let rl = r.header("ratelimit").expect("RateLimit on 200");
        let expected = format!(r#""ip-10s";r={};t="#, 19 - i);
        assert!(rl.starts_with(&expected), "call {i}: {rl}");
        let t: u64 = rl[expected.len()..].parse().unwrap();
        assert!((1..=10).contains(&t), "{rl}");
    }
    for _ in 0..5 {
        let r = get(&server, 2, "/api/hello").await;
        assert_refusal(&r, "ip-10s");
        assert_eq!(r.header("ratelimit-policy"), Some(r#""ip-10s";q=20;w=10, "ip-1m";q=50;w=60"#));
    }
    // Another client IP has its own budget.
    assert_exactly(&statuses(server.addr, 3, "GET", "/api/hello", &[], 23).await, 20, "127.0.0.3");
    // Unlimited routes stay open.
    assert_eq!(get(&server, 2, "/healthz").await.status, 200);
}

#[tokio::test]
async fn global_is_one_budget_for_everyone() {
    let server = Server::start(&[], &[]);
    let mut all = Vec::new();
    for i in 0..45u8 {
        let r = get(&server, 2 + i % 3, "/api/global").await;
        if r.status == 200 {
            assert!(r.header("ratelimit").is_some_and(|v| v.starts_with(r#""global-10s";r="#)), "{r:?}");
        } else {
            assert_refusal(&r, "global-10s");
        }
        all.push(r.status);
    }
    assert_exactly(&all, 30, "/api/global from three IPs");
}

#[tokio::test]
async fn orders_need_a_user_and_are_all_or_nothing() {
    let server = Server::start(&[], &[]);
    let addr = server.addr;
    let alice = [("X-User-Id", "alice")];
    let bob = [("X-User-Id", "bob")];

    // No user: 401 before any limit is counted.
    for headers in [&[][..], &[("X-User-Id", "")][..], &[("X-User-Id", "   ")][..]] {
        let r = request(addr, loopback(2), "POST", "/api/orders", headers).await;
        assert_eq!(r.status, 401, "{r:?}");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert!(r.body.contains(r#""error":"unauthorized""#));
        assert!(r.header("ratelimit").is_none());
    }
    assert_eq!(request(addr, loopback(2), "GET", "/api/orders", &alice).await.status, 405);

    // alice: her 10, then the user rule refuses; those refusals must not count against the IP.
    let first = request(addr, loopback(2), "POST", "/api/orders", &alice).await;
    assert_eq!((first.status, first.body.as_str()), (200, "order accepted for alice\n"));
    assert_eq!(first.header("ratelimit-policy"), Some(r#""user-10s";q=10;w=10, "ip-10s";q=15;w=10"#));
    assert!(first.header("ratelimit").is_some_and(|v| v.starts_with(r#""user-10s";r=9;t="#)), "{first:?}");
    assert_exactly(&statuses(addr, 2, "POST", "/api/orders", &alice, 9).await, 9, "alice's remaining 9");
    for _ in 0..4 {
        assert_refusal(&request(addr, loopback(2), "POST", "/api/orders", &alice).await, "user-10s");
    }
    // bob from the same IP: 15 - 10 = exactly 5 left on the IP rule.
    let bob_calls = statuses(addr, 2, "POST", "/api/orders", &bob, 5).await;
    assert_exactly(&bob_calls, 5, "bob from alice's IP");
    assert_refusal(&request(addr, loopback(2), "POST", "/api/orders", &bob).await, "ip-10s");
    // alice is limited from any IP; a new user on a new IP is not.
    assert_refusal(&request(addr, loopback(3), "POST", "/api/orders", &alice).await, "user-10s");
    assert_eq!(request(addr, loopback(3), "POST", "/api/orders", &[("X-User-Id", "carol")]).await.status, 200);
    // bob's refusal by the IP rule did not count against bob: from a fresh IP he has 10 - 5 = 5.
    assert_exactly(&statuses(addr, 4, "POST", "/api/orders", &bob, 7).await, 5, "bob from a fresh IP");
}

#[tokio::test]
async fn forwarded_headers_only_from_trusted_proxies() {
    // No trusted proxy: a client rotating X-Forwarded-For is still one client.
    let plain = Server::start(&[], &[]);
    let mut all = Vec::new();
    for i in 0..24 {
        let spoof = format!("198.51.100.{i}");
        let headers = [("X-Forwarded-For", spoof.as_str()), ("X-Real-IP", spoof.as_str())];
        all.push(request(plain.addr, loopback(2), "GET", "/api/hello", &headers).await.status);
    }
    assert_exactly(&all, 20, "spoofed XFF from an untrusted peer");

    // 127.0.0.2 is a trusted proxy: its X-Forwarded-For names the client.
    let proxied = Server::start(&["--trust-proxy", "127.0.0.2/32"], &[]);
    let addr = proxied.addr;
    let client_a = [("X-Forwarded-For", "203.0.113.50, 198.51.100.7")];
    assert_exactly(&statuses(addr, 2, "GET", "/api/hello", &client_a, 22).await, 20, "198.51.100.7 via the proxy");
    // The same client named with `Forwarded` is the same client.
    let forwarded = [("Forwarded", r#"for="198.51.100.7:1234";proto=http"#)];
    assert_refusal(&request(addr, loopback(2), "GET", "/api/hello", &forwarded).await, "ip-10s");
    // Another client behind the same proxy has its own budget.
    let client_b = [("X-Forwarded-For", "198.51.100.8")];
    assert_eq!(request(addr, loopback(2), "GET", "/api/hello", &client_b).await.status, 200);
    // From an untrusted peer the header is ignored: 127.0.0.3 is counted, whatever it claims.
    let mut all = Vec::new();
    for i in 0..22 {
        let spoof = format!("198.51.100.{}", 100 + i);
        all.push(request(addr, loopback(3), "GET", "/api/hello", &[("X-Forwarded-For", spoof.as_str())]).await.status);
    }
    assert_exactly(&all, 20, "XFF from untrusted 127.0.0.3");
    // …and claiming to be the exhausted client does not hurt it either: 127.0.0.4 is fresh.
    assert_eq!(request(addr, loopback(4), "GET", "/api/hello", &client_a).await.status, 200);
}

#[tokio::test]
async fn two_processes_on_one_redis_share_the_limits_exactly() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str())];
    let a = Server::start(&[], &env);
    let b = Server::start(&[], &env);
    assert!(a.startup_line.contains("redis"), "{}", a.startup_line);
    let mut all = Vec::new();
    for i in 0..40u8 {
        let server = if i % 2 == 0 { &a } else { &b };
        all.push(request(server.addr, loopback(2 + i % 3), "GET", "/api/global", &[]).await.status);
    }
    assert_exactly(&all, 30, "/api/global across two processes");
    let r = get(&a, 9, "/api/hello").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("ratelimit").map(|v| v.starts_with(r#""ip-10s";r=19;t="#)), Some(true), "{r:?}");
    // Per IP, across both processes.
    let mut all = Vec::new();
    for i in 0..26 {
        let server = if i % 2 == 0 { &a } else { &b };
        all.push(request(server.addr, loopback(5), "GET", "/api/hello", &[]).await.status);
    }
    assert_exactly(&all, 20, "/api/hello from one IP across two processes");
    // The stacked limits too: alice's 10 spread over both.
    let alice = [("X-User-Id", "alice")];
    let mut all = Vec::new();
    for i in 0..12 {
        let server = if i % 2 == 0 { &a } else { &b };
        all.push(request(server.addr, loopback(6), "POST", "/api/orders", &alice).await.status);
    }
    assert_exactly(&all, 10, "alice across two processes");
}

#[tokio::test]
async fn store_failure_policy() {
    // Nothing listens on this port: the store is down.
    let down = format!("redis://127.0.0.1:{}/", support::free_port());
    let open = Server::start(&[], &[("REDIS_URL", down.as_str())]);
    assert_eq!(get(&open, 2, "/api/global").await.status, 200, "fail open by default");
    let closed = Server::start(&[], &[("REDIS_URL", down.as_str()), ("RATELIMIT_ON_ERROR", "deny")]);
    let r = get(&closed, 2, "/api/global").await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.header("retry-after").is_some_and(|v| v.parse::<u64>().is_ok()));
    // The body tells an outage from the client's own limit.
    assert!(r.body.starts_with(r#"{"error":"store_unavailable","retry_after_ms":"#), "{}", r.body);
    // And the operator learns why, as under the other policies.
    closed.wait_for("rate-limit store failed; refusing calls (fail closed)", Duration::from_secs(10));
    assert_eq!(get(&closed, 2, "/healthz").await.status, 200);
}

#[test]
fn graceful_shutdown_on_ctrl_c() {
    let mut server = Server::start(&[], &[]);
    server.signal("INT");
    let status = server.wait_exit(Duration::from_secs(10)).expect("the server exits on SIGINT");
    assert!(status.success(), "{status:?}");
}

/// Runs a server process to completion: (exit code, stdout, stderr).
fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = support::server_process::command(args, env).output().expect("run the server process");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn command_line() {
    let (code, stdout, _) = run_to_exit(&["--help"], &[]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("Usage: server [--listen ADDR:PORT] [--trust-proxy CIDR]..."), "{stdout}");
    // Every option and variable, with its default.
    for shown in [
        "--listen <ADDR:PORT>",
        "[default: 127.0.0.1:3000]",
        "--trust-proxy <CIDR>",
        "repeatable [default: none]",
        "REDIS_URL ",
        "REDIS_CLUSTER_URLS ",
        "REDIS_SENTINEL_URLS ",
        "REDIS_SENTINEL_MASTER ",
        "REDIS_CA_CERT ",
        "RATELIMIT_ON_ERROR        allow or deny calls when the store cannot decide, or local:",
        "RATELIMIT_CONFIG ",
        "RUST_LOG                  log filter for stderr [default: info]",
        "GET  /api/hello",
    ] {
        assert!(stdout.contains(shown), "--help lacks {shown:?}:\n{stdout}");
    }
    // A bad command line: clap's message on stderr, status 2, nothing served.
    let bad = |args: &[&str], says: &str| {
        let (code, stdout, stderr) = run_to_exit(args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(says), "{args:?}: expected {says:?} in {stderr}");
        assert!(stderr.contains("For more information, try '--help'."), "{stderr}");
        assert!(!stdout.contains("listening"), "{stdout}");
    };
    bad(
        &["--listen", "localhost"],
        "error: invalid value 'localhost' for '--listen <ADDR:PORT>': expected ADDR:PORT, an IP address and a port \
         (not a host name), e.g. 127.0.0.1:3000",
    );
    bad(&["--trust-proxy=10.0.0.1/8"], "did you mean 10.0.0.0/8?");
    bad(&["--trust-proxy"], "error: a value is required for '--trust-proxy <CIDR>' but none was supplied");
    bad(&["--verbose"], "error: unexpected argument '--verbose' found");
    bad(&["--lisen", "127.0.0.1:0"], "tip: a similar argument exists: '--listen'");
    let (code, _, stderr) = run_to_exit(&[], &[("RATELIMIT_ON_ERROR", "maybe")]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot configure the rate-limit store") && stderr.contains("maybe"), "{stderr}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    let (code, _, stderr) = run_to_exit(&["--listen", &busy], &[]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains(&format!("cannot listen on {busy}")), "{stderr}");
}

/// Compiled only without the `cluster` feature, which the test command (`--all-features`)
/// always has: [`cluster_without_the_feature_is_a_clear_error_in_a_build_without_it`] runs it.
#[cfg(not(feature = "cluster"))]
#[test]
fn cluster_without_the_feature_is_a_clear_error() {
    let (code, stdout, stderr) = run_to_exit(&[], &[("REDIS_CLUSTER_URLS", "redis://127.0.0.1:7000")]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("cannot configure the rate-limit store"), "{stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
}

/// Runs [`cluster_without_the_feature_is_a_clear_error`] from a build without the `cluster`
/// feature: `cargo test --no-default-features --features axum --test server`, offline, in a
/// target directory of its own inside this build's (so that later runs only rebuild what
/// changed; the first one compiles the dependencies once more).
#[cfg(feature = "cluster")]
#[test]
fn cluster_without_the_feature_is_a_clear_error_in_a_build_without_it() {
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-cluster");
    let entry = "cluster_without_the_feature_is_a_clear_error";
    let out = std::process::Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["test", "--frozen", "--no-default-features", "--features", "axum", "--test", "server", "--"])
        .args(["--exact", entry])
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cargo");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "cargo test without the cluster feature failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(&format!("test {entry} ... ok")), "{entry} did not run:\n{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[test]
fn two_store_variables_are_a_clear_error() {
    let env = [
        ("REDIS_URL", "redis://127.0.0.1:6379/"),
        ("REDIS_SENTINEL_URLS", "redis://127.0.0.1:26379"),
        ("REDIS_SENTINEL_MASTER", "mymaster"),
    ];
    let (code, stdout, stderr) = run_to_exit(&[], &env);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("REDIS_URL and REDIS_SENTINEL_URLS are set together"), "{stderr}");
    let (code, _, stderr) = run_to_exit(&[], &[("REDIS_SENTINEL_URLS", "redis://127.0.0.1:26379")]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("without REDIS_SENTINEL_MASTER"), "{stderr}");
}

#[test]
fn argument_parser() {
    use server::cli::Args;
    use server::{parse_args, Command};
    let parse = |args: &[&str]| parse_args(args.iter().map(|s| s.to_string()));
    assert_eq!(parse(&[]), Ok(Command::Serve(Args { listen: "127.0.0.1:3000".parse().unwrap(), trust_proxy: vec![] })));
    let Ok(Command::Serve(args)) = parse(&["--listen=[::1]:8080", "--trust-proxy", "10.0.0.0/8", "--trust-proxy=::1"])
    else {
        panic!()
    };
    assert_eq!(args.listen, "[::1]:8080".parse().unwrap());
    assert_eq!(args.trust_proxy.iter().map(ToString::to_string).collect::<Vec<_>>(), ["10.0.0.0/8", "::1/128"]);
    assert_eq!(parse(&["-h"]), Ok(Command::Help));
    assert_eq!(parse(&["--listen", "1.2.3.4:5", "--help"]), Ok(Command::Help));
    assert!(parse(&["--listen"]).is_err());
    assert!(parse(&["extra"]).is_err());
}

/// Sentinel: the server follows a failover by itself, and refuses (deny) meanwhile.
#[tokio::test]
async fn sentinel_failover_without_a_restart() {
    use support::sentinel::{cli, SentinelSet, MASTER};
    let mut set = SentinelSet::start();
    let url = set.sentinel_url();
    let env =
        [("REDIS_SENTINEL_URLS", url.as_str()), ("REDIS_SENTINEL_MASTER", MASTER), ("RATELIMIT_ON_ERROR", "deny")];
    let server = Server::start(&[], &env);
    assert!(server.startup_line.contains("sentinel"), "{}", server.startup_line);
    let server = &server;
    let until_200 = |limit: Duration| async move {
        let (deadline, mut refused) = (Instant::now() + limit, 0);
        loop {
            let r = get(server, 2, "/api/global").await;
            if r.status == 200 {
                return refused;
            }
            assert_eq!(r.status, 503, "{r:?}");
            refused += 1;
            assert!(Instant::now() < deadline, "no 200 within {limit:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    until_200(Duration::from_secs(10)).await;
    let old = set.first_primary();
    let keys = |port| cli(port, &["KEYS", "*server::global*"]).unwrap_or_default();
    assert!(!keys(old).is_empty(), "no key on the primary");
    set.sync_replica(old);
    set.kill(old);
    let refused = until_200(Duration::from_secs(30)).await;
    assert!(refused > 0, "no 503 while the primary was down");
    let new = set.wait_for_new_primary(old, Duration::from_secs(30));
    assert!(!keys(new).is_empty(), "no key on the new primary");
}

/// `GET /metrics` after real traffic: the counters, parsed from the Prometheus text format, are
/// exactly what the server decided; `/metrics` itself is never limited; no client IP or user id
/// is a label.
#[tokio::test]
async fn metrics_count_what_the_server_decided() {
    let server = Server::start(&[], &[]);
    let hello = format!("{}::server::hello", module_path!());
    let orders = format!("{}::server::orders", module_path!());
    assert_exactly(&statuses(server.addr, 2, "GET", "/api/hello", &[], 23).await, 20, "hello");
    let user = [("X-User-Id", "metrics-user-7")];
    assert_exactly(&statuses(server.addr, 3, "POST", "/api/orders", &user, 12).await, 10, "orders");
    // No user: refused before any limiter decides.
    assert_eq!(request(server.addr, loopback(3), "POST", "/api/orders", &[]).await.status, 401);
    let mut last = None;
    for _ in 0..40 {
        let r = get(&server, 4, "/metrics").await;
        assert_eq!(r.status, 200, "/metrics is never limited");
        assert!(r.header("content-type").is_some_and(|v| v.starts_with("text/plain")), "{r:?}");
        last = Some(r);
    }
    let text = last.expect("scraped").body;
    let s = prometheus::Scrape::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let decisions = |limiter: &str, outcome: &str| {
        s.count("ratelimit_decisions_total", &[("limiter", limiter), ("outcome", outcome)])
    };
    assert_eq!((decisions(&hello, "allowed"), decisions(&hello, "denied")), (20.0, 3.0), "{text}");
    assert_eq!((decisions(&orders, "allowed"), decisions(&orders, "denied")), (10.0, 2.0), "{text}");
    assert_eq!(decisions(&orders, "subject_missing"), 0.0);
    assert_eq!(s.sum("ratelimit_store_errors_total", &[]), 0.0);
    assert_eq!(s.types.get("ratelimit_store_duration_seconds").map(String::as_str), Some("histogram"));
    assert!(s.value("ratelimit_store_duration_seconds_count", &[("store", "memory")]).is_some(), "{text}");
    for (key, value) in s.label_values() {
        assert!(!value.contains("127.0.0") && !value.contains("metrics-user"), "label {key}={value:?}");
    }
}

/// A user id is the header's bytes: UTF-8 beyond ASCII, or not UTF-8 at all, is a user with a
/// budget of its own, not a missing one.
#[tokio::test]
async fn non_ascii_user_ids_are_users() {
    let server = Server::start(&[], &[]);
    let addr = server.addr;
    let utf8: [(&str, &[u8]); 1] = [("X-User-Id", "ü名字".as_bytes())];
    let first = request_bytes(addr, loopback(2), "POST", "/api/orders", &utf8).await;
    assert_eq!((first.status, first.body.as_str()), (200, "order accepted for ü名字\n"), "{first:?}");
    let mut all = Vec::new();
    for _ in 0..11 {
        all.push(request_bytes(addr, loopback(2), "POST", "/api/orders", &utf8).await.status);
    }
    assert_exactly(&all, 9, "ü名字's remaining 9");
    // Latin-1 `ü` (0xFC) alone is not UTF-8, and is another user than the UTF-8 one.
    let latin1: [(&str, &[u8]); 1] = [("X-User-Id", b"\xfc")];
    let mut all = Vec::new();
    for _ in 0..11 {
        all.push(request_bytes(addr, loopback(3), "POST", "/api/orders", &latin1).await.status);
    }
    assert_exactly(&all, 10, "0xFC");
    let other: [(&str, &[u8]); 1] = [("X-User-Id", "ü名字2".as_bytes())];
    assert_eq!(request_bytes(addr, loopback(4), "POST", "/api/orders", &other).await.status, 200);
}

/// `POST /api/login` with a JSON body, from `from`.
async fn login(server: SocketAddr, from: u8, password: &str) -> Reply {
    post_json(server, loopback(from), "/api/login", &format!(r#"{{"password":"{password}"}}"#)).await
}

/// Password guessing against two processes sharing one Redis: correct passwords never count,
/// failures count jointly, and the sixth failure blocks the IP on both for 2 minutes.
#[tokio::test]
async fn login_failures_are_counted_and_blocked_across_two_processes() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str())];
    let (a, b) = (Server::start(&[], &env), Server::start(&[], &env));
    for i in 0..10 {
        let server = if i % 2 == 0 { a.addr } else { b.addr };
        let ok = login(server, 20, "letmein").await;
        assert_eq!((ok.status, ok.body.as_str()), (200, "welcome\n"), "{ok:?}");
        // Refunded: the header says nothing was used.
        assert_eq!(ok.header("ratelimit"), Some(r#""ip-1m";r=5;t=60"#), "{ok:?}");
    }
    // Five failures, alternating processes: all answered 401.
    for i in 0..5 {
        let server = if i % 2 == 0 { a.addr } else { b.addr };
        assert_eq!(login(server, 20, "guess").await.status, 401);
    }
    // The sixth attempt is refused and starts the block, seen by both processes.
    let refused = login(b.addr, 20, "guess").await;
    assert_eq!(refused.status, 429, "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("120"), "{refused:?}");
    for server in [a.addr, b.addr] {
        let blocked = login(server, 20, "letmein").await;
        assert_eq!(blocked.status, 429, "even the right password waits out the block: {blocked:?}");
        let retry: u64 = blocked.header("retry-after").and_then(|v| v.parse().ok()).expect("retry-after");
        assert!((118..=120).contains(&retry), "the rest of the block, not a new one: {retry}");
    }
    // Another IP logs in.
    assert_eq!(login(a.addr, 21, "letmein").await.status, 200);
}

/// `GET /api/report` admits at most 2 calls of one IP at a time across two processes.
#[tokio::test]
async fn reports_run_at_most_two_at_a_time_across_two_processes() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str())];
    let (a, b) = (Server::start(&[], &env), Server::start(&[], &env));
    let slow =
        |server: SocketAddr| async move { request(server, loopback(30), "GET", "/api/report?ms=6000", &[]).await };
    let first = tokio::spawn(slow(a.addr));
    let second = tokio::spawn(slow(b.addr));
    // Both hold their slots once the slot set of 127.0.0.30 has two members (read from Redis:
    // a probing call would take a slot itself and could crowd one of them out). They run 6 s, so
    // that a loaded machine still makes the next calls while both hold their slots.
    let mut conn = redis.client();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*report|ip|127.0.0.30}*").query(&mut conn).unwrap();
        let held: u64 = match keys.first() {
            Some(key) => redis::cmd("ZCARD").arg(key).query(&mut conn).unwrap(),
            None => 0,
        };
        if held == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the two reports never both held a slot ({held}, {keys:?})");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let third = request(a.addr, loopback(30), "GET", "/api/report?ms=0", &[]).await;
    assert_eq!(third.status, 429, "{third:?}");
    assert_eq!(third.header("retry-after"), Some("1"));
    assert_eq!(request(b.addr, loopback(30), "GET", "/api/report?ms=0", &[]).await.status, 429);
    // Another IP has its own two slots.
    assert_eq!(request(b.addr, loopback(31), "GET", "/api/report?ms=0", &[]).await.status, 200);
    for done in [first, second] {
        let done = done.await.unwrap();
        assert_eq!((done.status, done.body.as_str()), (200, "report ready after 6000 ms\n"));
    }
    // Their slots were freed when they returned.
    assert_eq!(request(b.addr, loopback(30), "GET", "/api/report?ms=0", &[]).await.status, 200);
    assert_eq!(request(a.addr, loopback(30), "GET", "/api/report?ms=0", &[]).await.status, 200);
}
