//! `rediss://` on a real TLS-only Redis with a private CA made by `openssl`: the right
//! CA passes; no CA or the wrong CA is a clear certificate error and the failure policy applies;
//! mutual TLS passes with the client certificate and fails without it.
#![cfg(feature = "tls")]

mod support;

use ratelimit::{
    store::RedisStore, store::StoreHandle, store::TlsConfig, Cause, Config, FailurePolicy, Limit, LimitType, Limiter,
    RateLimited, Rule, Subject,
};
use std::error::Error;
use std::sync::Arc;
use std::time::Duration;
use support::tls::TlsRedis;

/// Generous: a TLS handshake on a loaded 2-core machine.
const TIMEOUT: Duration = Duration::from_secs(3);

fn limiter(name: &str, store: StoreHandle, on_error: FailurePolicy) -> Limiter {
    Limiter::builder(name)
        .limit(Limit::new(LimitType::Global, [Rule::new(Duration::from_secs(60), 3).unwrap()]))
        .on_error(on_error)
        .store(store)
        .build()
        .unwrap()
}

/// Exactly 3 of 5 calls admitted: the store decides over TLS.
async fn decides(store: StoreHandle, name: &str) {
    let limiter = limiter(name, store, FailurePolicy::Deny);
    let mut admitted = 0;
    for _ in 0..5 {
        match limiter.check(&[Subject::global()]).await {
            Ok(_) => admitted += 1,
            Err(e) => assert_eq!(e.cause(), Cause::Exceeded, "{e}: {:?}", e.source().map(ToString::to_string)),
        }
    }
    assert_eq!(admitted, 3);
}

fn source(e: &RateLimited) -> String {
    e.source().map(ToString::to_string).unwrap_or_default()
}

/// The store cannot decide: fail-open lets the call through, fail-closed refuses it with a
/// store error whose text satisfies `names_problem`.
async fn fails_with_policy(store: StoreHandle, name: &str, names_problem: impl Fn(&str) -> bool) {
    let open = limiter(&format!("{name}::open"), store.clone(), FailurePolicy::Allow);
    for _ in 0..5 {
        assert!(open.check(&[Subject::global()]).await.is_ok(), "fail-open lets calls through");
    }
    let closed = limiter(&format!("{name}::closed"), store, FailurePolicy::Deny);
    let e = closed.check(&[Subject::global()]).await.expect_err("fail-closed refuses");
    assert_eq!(e.cause(), Cause::StoreUnavailable);
    let why = source(&e);
    assert!(names_problem(&why), "the error should name the certificate problem: {why}");
}

fn names_unknown_ca(why: &str) -> bool {
    let w = why.to_ascii_lowercase();
    w.contains("certificate") && (w.contains("unknownissuer") || w.contains("unknown issuer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_private_ca_verifies_the_server() {
    let server = TlsRedis::start(false);
    let tls = TlsConfig::new().ca_cert(&server.pki.ca_cert);
    decides(Arc::new(RedisStore::open_with_tls(&server.url(), TIMEOUT, &tls).unwrap()), "tls::good_ca").await;
    // The same through `Config`, as `REDIS_URL` + `REDIS_CA_CERT` configure it.
    let store = Config::redis(server.url()).timeout(TIMEOUT).ca_cert(&server.pki.ca_cert).build_store().unwrap();
    decides(store, "tls::good_ca_config").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_ca_the_certificate_is_refused_and_the_policy_applies() {
    let server = TlsRedis::start(false);
    let store = Arc::new(RedisStore::open(&server.url(), TIMEOUT).unwrap());
    fails_with_policy(store, "tls::no_ca", names_unknown_ca).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_ca_is_refused_and_the_policy_applies() {
    let server = TlsRedis::start(false);
    let tls = TlsConfig::new().ca_cert(&server.pki.other_ca_cert);
    let store = Arc::new(RedisStore::open_with_tls(&server.url(), TIMEOUT, &tls).unwrap());
    fails_with_policy(store, "tls::wrong_ca", names_unknown_ca).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostname_the_certificate_does_not_name_is_refused() {
    let server = TlsRedis::start(false);
    // The certificate names IP:127.0.0.1 only.
    let url = format!("rediss://localhost:{}/", server.port());
    let tls = TlsConfig::new().ca_cert(&server.pki.ca_cert);
    let store = Arc::new(RedisStore::open_with_tls(&url, TIMEOUT, &tls).unwrap());
    fails_with_policy(store, "tls::wrong_name", |why| {
        let w = why.to_ascii_lowercase();
        w.contains("certificate") && (w.contains("notvalidforname") || w.contains("not valid for name"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_the_client_certificate() {
    let server = TlsRedis::start(true);
    let pki = &server.pki;
    let with_cert = TlsConfig::new().ca_cert(&pki.ca_cert).client_cert(&pki.client_cert, &pki.client_key);
    decides(Arc::new(RedisStore::open_with_tls(&server.url(), TIMEOUT, &with_cert).unwrap()), "tls::mtls").await;
    let store = Config::redis(server.url())
        .timeout(TIMEOUT)
        .ca_cert(&pki.ca_cert)
        .client_cert(&pki.client_cert, &pki.client_key)
        .build_store()
        .unwrap();
    decides(store, "tls::mtls_config").await;

    let without = TlsConfig::new().ca_cert(&pki.ca_cert);
    let store = Arc::new(RedisStore::open_with_tls(&server.url(), TIMEOUT, &without).unwrap());
    let closed = limiter("tls::mtls_missing", store, FailurePolicy::Deny);
    let e = closed.check(&[Subject::global()]).await.expect_err("no client certificate: refused");
    assert_eq!(e.cause(), Cause::StoreUnavailable, "{e}");
}

#[test]
fn unreadable_certificate_files_are_named_at_startup() {
    let e = Config::redis("rediss://127.0.0.1:1/")
        .ca_cert("/nonexistent/ca.pem")
        .build_store()
        .err()
        .expect("a missing CA file is a configuration error");
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    let e = Config::redis("rediss://127.0.0.1:1/")
        .client_cert("/nonexistent/client.pem", "/nonexistent/client.key")
        .build_store()
        .err()
        .expect("a missing client certificate is a configuration error");
    assert!(e.to_string().contains("/nonexistent/client.pem"), "{e}");
}

/// `rediss://` cluster seeds (`tls-cluster yes`: the nodes tell TLS clients their TLS ports).
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls() {
    let cluster = support::cluster::RedisCluster::start_tls(3);
    let seeds = cluster.tls_urls();
    let tls = TlsConfig::new().ca_cert(&cluster.pki().ca_cert);
    let store = ratelimit::store::ClusterStore::open_with_tls(&seeds, TIMEOUT, &tls).unwrap();
    decides(Arc::new(store), "tls::cluster").await;
    let store = Config::cluster(seeds.clone()).timeout(TIMEOUT).ca_cert(&cluster.pki().ca_cert).build_store().unwrap();
    decides(store, "tls::cluster_config").await;
    // Without the CA: the policy applies (the cluster client's own error does not name the
    // certificate; the startup probe asks a seed alone for that, see tests/probe_logs.rs).
    let store = Arc::new(ratelimit::store::ClusterStore::open(&seeds, TIMEOUT).unwrap());
    fails_with_policy(store, "tls::cluster_no_ca", |why| !why.is_empty()).await;
}
