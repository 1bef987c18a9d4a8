//! `ratelimit-server` over a real socket, on a real Redis: Envoy's matching rules, the
//! reference's options, and what this server adds (one atomic decision per request).

mod rls;

use rls::*;
use std::time::Duration;

const CONFIG: &str = r#"
domain: edge
descriptors:
  # Per client address; one address has its own, larger limit (the most specific match wins).
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: remote_address
    value: 10.0.0.1
    rate_limit: { unit: minute, requests_per_unit: 5 }
  # Nested: per client and path; one path of theirs has its own limit.
  - key: client
    descriptors:
      - key: path
        rate_limit: { unit: minute, requests_per_unit: 2 }
      - key: path
        value: /bulk
        rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: path
    value: /health
    rate_limit: { unlimited: true }
  - key: canary
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: tier
    value: free
    rate_limit: { unit: minute, requests_per_unit: 2, name: free }
  - key: user
    value: alice
    rate_limit:
      unit: minute
      requests_per_unit: 6
      name: alice
      replaces: [{ name: free }]
  - key: wide
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: narrow
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: fixed
    algorithm: fixed_window
    rate_limit: { unit: minute, requests_per_unit: 4 }
  - key: window
    algorithm: gcra
    burst: 2
    rate_limit: { window: 30s, requests_per_unit: 2 }
    rate_limits: [{ unit: hour, requests_per_unit: 50 }]
"#;

fn start(test: &str, redis: &RedisServer) -> Rls {
    let dir = config_dir(test, &[("edge.yaml", CONFIG)]);
    Rls::start(&dir, &[("REDIS_URL", &redis.url())], &["--response-headers"])
}

async fn admitted(ch: &tonic::transport::Channel, d: &[&[(&str, &str)]], hits: u32) -> usize {
    let mut n = 0;
    for _ in 0..20 {
        let r = ask(ch, "edge", d.iter().map(|e| descriptor(e)).collect(), hits).await;
        if over(&r) {
            break;
        }
        n += 1;
    }
    n
}

#[tokio::test]
async fn the_most_specific_descriptor_wins_and_nested_keys_are_walked() {
    let redis = RedisServer::start();
    let server = start("specific", &redis);
    let ch = server.channel().await;
    // Key-only: each address counts on its own, 3 each; 10.0.0.1 has its own 5.
    assert_eq!(admitted(&ch, &[&[("remote_address", "192.0.2.1")]], 0).await, 3);
    assert_eq!(admitted(&ch, &[&[("remote_address", "192.0.2.2")]], 0).await, 3);
    assert_eq!(admitted(&ch, &[&[("remote_address", "10.0.0.1")]], 0).await, 5);
    // Nested: client + path; /bulk has 10 per hour.
    assert_eq!(admitted(&ch, &[&[("client", "a"), ("path", "/x")]], 0).await, 2);
    let r = ask(&ch, "edge", vec![descriptor(&[("client", "a"), ("path", "/bulk")])], 0).await;
    let st = &r.statuses[0];
    let limit = st.current_limit.as_ref().expect("current_limit");
    assert_eq!((limit.requests_per_unit, limit.unit), (10, proto::Unit::Hour as i32));
    assert_eq!(st.limit_remaining, 9);
    // Not at the end of a configured path (or an unknown domain): no limit.
    let r = ask(&ch, "edge", vec![descriptor(&[("client", "a")])], 0).await;
    assert!(!over(&r) && r.statuses[0].current_limit.is_none());
    let r = ask(&ch, "nowhere", vec![descriptor(&[("remote_address", "192.0.2.1")])], 0).await;
    assert!(!over(&r) && r.statuses[0].current_limit.is_none());
}

#[tokio::test]
async fn unlimited_shadow_and_replaces() {
    let redis = RedisServer::start();
    let server = start("options", &redis);
    let ch = server.channel().await;
    for _ in 0..10 {
        let r = ask(&ch, "edge", vec![descriptor(&[("path", "/health")])], 0).await;
        assert!(!over(&r));
        assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
    }
    // Shadow: decided and counted, never refused.
    for _ in 0..5 {
        let r = ask(&ch, "edge", vec![descriptor(&[("canary", "x")])], 0).await;
        assert!(!over(&r) && r.statuses[0].code == Code::Ok as i32);
    }
    // `free` alone: 2 a minute; beside alice's limit, which replaces it, alice's 6 apply.
    assert_eq!(admitted(&ch, &[&[("tier", "free")]], 0).await, 2);
    let both: &[&[(&str, &str)]] = &[&[("tier", "free")], &[("user", "alice")]];
    let r = ask(&ch, "edge", both.iter().map(|e| descriptor(e)).collect(), 0).await;
    assert!(!over(&r), "{r:?}");
    assert!(r.statuses[0].current_limit.is_none(), "the replaced limit does not apply");
    assert_eq!(r.statuses[1].current_limit.as_ref().map(|l| l.requests_per_unit), Some(6));
    assert_eq!(admitted(&ch, both, 0).await, 5);
}

#[tokio::test]
async fn hits_addend_on_the_request_and_on_a_descriptor() {
    let redis = RedisServer::start();
    let server = start("hits", &redis);
    let ch = server.channel().await;
    let r = ask(&ch, "edge", vec![descriptor(&[("wide", "a")])], 4).await;
    assert_eq!(r.statuses[0].limit_remaining, 6);
    assert_eq!(admitted(&ch, &[&[("wide", "a")]], 4).await, 1);
    assert_eq!(admitted(&ch, &[&[("wide", "a")]], 0).await, 2);
    // A descriptor's own hits_addend wins over the request's.
    let mut d = descriptor(&[("wide", "b")]);
    d.hits_addend = Some(proto::UInt64Value { value: 7 });
    let r = ask(&ch, "edge", vec![d], 1).await;
    assert_eq!(r.statuses[0].limit_remaining, 3);
    // Different addends in one request: still nothing counted when one refuses.
    let mut heavy = descriptor(&[("wide", "c")]);
    heavy.hits_addend = Some(proto::UInt64Value { value: 5 });
    let r = ask(&ch, "edge", vec![heavy, descriptor(&[("narrow", "c")])], 3).await;
    assert!(over(&r), "3 units never fit narrow's 2: {r:?}");
    assert_eq!(r.statuses[1].code, Code::OverLimit as i32);
    let r = ask(&ch, "edge", vec![descriptor(&[("wide", "c")])], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 9, "the refused request took nothing from wide");
    // A descriptor's hits_addend of 0 takes nothing (and passes while the limit is not over).
    assert_eq!(admitted(&ch, &[&[("narrow", "z")]], 0).await, 2);
    let mut free = descriptor(&[("narrow", "z")]);
    free.hits_addend = Some(proto::UInt64Value { value: 0 });
    assert!(!over(&ask(&ch, "edge", vec![free], 0).await));
    // The same descriptor twice in one request: decided, and refused as soon as either is over.
    let twice = || vec![descriptor(&[("narrow", "t")]), descriptor(&[("narrow", "t")])];
    let r = ask(&ch, "edge", twice(), 0).await;
    assert!(!over(&r), "{r:?}");
    let mut refused = false;
    for _ in 0..3 {
        refused |= over(&ask(&ch, "edge", twice(), 0).await);
    }
    assert!(refused, "a limit of 2 cannot admit 4 requests");
}

#[tokio::test]
async fn a_stacked_request_refused_by_one_descriptor_counts_in_none() {
    let redis = RedisServer::start();
    let server = start("stacked", &redis);
    let ch = server.channel().await;
    let both: &[&[(&str, &str)]] = &[&[("wide", "k")], &[("narrow", "k")]];
    assert_eq!(admitted(&ch, both, 0).await, 2);
    let r = ask(&ch, "edge", both.iter().map(|e| descriptor(e)).collect(), 0).await;
    assert!(over(&r));
    assert_eq!(r.statuses[0].code, Code::Ok as i32);
    assert_eq!(r.statuses[1].code, Code::OverLimit as i32);
    assert_eq!(r.statuses[1].limit_remaining, 0);
    let reset = r.statuses[1].duration_until_reset.expect("duration_until_reset");
    assert!(reset.seconds > 0 && reset.seconds <= 60, "{reset:?}");
    assert!(r.response_headers_to_add.iter().any(|h| h.key == "ratelimit"), "{r:?}");
    // Envoy's reference would have counted the refused calls in `wide`: here wide has 8 left.
    assert_eq!(admitted(&ch, &[&[("wide", "k")]], 0).await, 8);
}

#[tokio::test]
async fn extensions_fixed_window_and_several_rules() {
    let redis = RedisServer::start();
    let server = start("extensions", &redis);
    let ch = server.channel().await;
    let r = ask(&ch, "edge", vec![descriptor(&[("fixed", "a")])], 0).await;
    let st = &r.statuses[0];
    assert_eq!(st.limit_remaining, 3);
    let reset = st.duration_until_reset.expect("reset");
    assert!(reset.seconds <= 60, "a fixed window ends at the next minute: {reset:?}");
    // GCRA with burst 2 over 30 s, and 50 per hour beside it.
    assert_eq!(admitted(&ch, &[&[("window", "a")]], 0).await, 2);
    let r = ask(&ch, "edge", vec![descriptor(&[("window", "b")])], 0).await;
    let limit = r.statuses[0].current_limit.clone().expect("limit");
    assert!(limit.requests_per_unit == 2 || limit.requests_per_unit == 50, "{limit:?}");
    assert!(r.response_headers_to_add.iter().any(|h| h.key == "ratelimit-policy"), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_health_and_a_clean_shutdown() {
    let redis = RedisServer::start();
    let mut server = start("ops", &redis);
    let ch = server.channel().await;
    ask(&ch, "edge", vec![descriptor(&[("narrow", "m")])], 0).await;
    let (status, body) = server.http_get("/healthz");
    assert!(status.contains("200"), "{status}");
    assert_eq!(body.trim(), "ok");
    let (status, body) = server.http_get("/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("ratelimit_decisions_total"), "{body}");
    assert!(body.contains(r#"ratelimit_server_descriptors_total{descriptor="edge.narrow",code="ok"}"#), "{body}");
    let mut health = tonic_health::pb::health_client::HealthClient::new(ch.clone());
    let served = health
        .check(tonic_health::pb::HealthCheckRequest { service: proto::SERVICE.into() })
        .await
        .expect("health check")
        .into_inner();
    assert_eq!(served.status, tonic_health::pb::health_check_response::ServingStatus::Serving as i32);
    // A client that has gone: the server closes at once (one that stays is cut after a grace period).
    drop((ch, health));
    let status =
        server.terminate(Duration::from_secs(10)).unwrap_or_else(|| panic!("exits on SIGTERM: {}", server.stderr()));
    assert!(status.success(), "{status:?}\n{}", server.stderr());
    // Closed at once, not cut after the grace period.
    assert!(server.stderr().contains("ratelimit-server: shut down\n"), "{}", server.stderr());
}

#[tokio::test]
async fn a_descriptor_naming_a_limiter_shares_its_count_with_rust_code() {
    use ratelimit::{Limit, LimitType, Limiter, Rule, Subject};
    let redis = RedisServer::start();
    let shared = r#"
domain: gateway
descriptors:
  - key: remote_address
    limiter: my_app::hello
    type: ip
    rate_limit: { unit: minute, requests_per_unit: 4 }
"#;
    let dir = config_dir("shared", &[("gateway.yaml", shared)]);
    let server = Rls::start(&dir, &[("REDIS_URL", &redis.url())], &[]);
    let ch = server.channel().await;
    // What `#[rate_limiter(name = "my_app::hello", type = Ip, rules = [(1m, 4)])]` builds.
    let store = ratelimit::store::RedisStore::open(&redis.url(), Duration::from_secs(1)).expect("store");
    let hello = Limiter::builder("my_app::hello")
        .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(60), 4).unwrap()]))
        .store(std::sync::Arc::new(store))
        .build()
        .unwrap();
    let ip = [Subject::ip("203.0.113.9".parse().unwrap())];
    hello.check(&ip).await.expect("1 of 4");
    hello.check(&ip).await.expect("2 of 4");
    let d = || vec![descriptor(&[("remote_address", "203.0.113.9")])];
    assert!(!over(&ask(&ch, "gateway", d(), 0).await));
    let r = ask(&ch, "gateway", d(), 0).await;
    assert!(!over(&r) && r.statuses[0].limit_remaining == 0, "{r:?}");
    assert!(over(&ask(&ch, "gateway", d(), 0).await), "the Rust handler's calls count at the gateway");
    assert!(hello.check(&ip).await.is_err(), "and the gateway's at the handler");
    // An address that is not one cannot be keyed as the attribute keys it.
    let request = RateLimitRequest {
        domain: "gateway".into(),
        descriptors: vec![descriptor(&[("remote_address", "nope")])],
        hits_addend: 0,
    };
    let e = proto::should_rate_limit(ch.clone(), request).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
}

#[tokio::test]
async fn a_store_that_fails_gets_the_failure_policy() {
    let dead = format!("redis://127.0.0.1:{}/", rls::support::free_port());
    let dir = config_dir("failure", &[("edge.yaml", CONFIG)]);
    // Fail open (the default): allowed, with the limit shown.
    let open = Rls::start(&dir, &[("REDIS_URL", &dead)], &[]);
    let r = ask(&open.channel().await, "edge", vec![descriptor(&[("narrow", "x")])], 0).await;
    assert!(!over(&r) && r.statuses[0].current_limit.is_some(), "{r:?}");
    // Fail closed: UNAVAILABLE, so that Envoy applies its own failure_mode_deny.
    let closed = Rls::start(&dir, &[("REDIS_URL", &dead), ("RATELIMIT_ON_ERROR", "deny")], &[]);
    let request =
        RateLimitRequest { domain: "edge".into(), descriptors: vec![descriptor(&[("narrow", "x")])], hits_addend: 0 };
    let e = proto::should_rate_limit(closed.channel().await, request).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
}

#[tokio::test]
async fn the_reference_variables_shadow_mode_and_merged_domains() {
    let redis = RedisServer::start();
    // SHADOW_MODE: every limit decided and counted, none refusing.
    let dir = config_dir("global-shadow", &[("edge.yaml", CONFIG)]);
    let server = Rls::start(&dir, &[("REDIS_URL", &redis.url()), ("SHADOW_MODE", "true")], &[]);
    assert_eq!(admitted(&server.channel().await, &[&[("narrow", "s")]], 0).await, 20);
    // MERGE_DOMAIN_CONFIG: two files of one domain add up.
    let second = "domain: edge\ndescriptors:\n  - key: extra\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n";
    let dir = config_dir("merged", &[("edge.yaml", CONFIG), ("extra.yaml", second)]);
    let merged = Rls::start(&dir, &[("REDIS_URL", &redis.url()), ("MERGE_DOMAIN_CONFIG", "true")], &[]);
    let ch = merged.channel().await;
    assert_eq!(admitted(&ch, &[&[("extra", "e")]], 0).await, 1);
    assert_eq!(admitted(&ch, &[&[("narrow", "e")]], 0).await, 2);
}
