//! The cluster store on a real local Redis Cluster (3 primaries; 3 + 3 for failover).
#![cfg(feature = "cluster")]

mod support;

use ratelimit::{store::ClusterStore, store::StoreHandle, FailurePolicy, Limit, LimitType, Limiter, Rule, Subject};
use redis::Commands;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::cluster::RedisCluster;

fn rule(ms: u64, count: u64) -> Rule {
    Rule::from_millis(ms, count).unwrap()
}

fn cluster_store(cluster: &RedisCluster, timeout: Duration) -> StoreHandle {
    Arc::new(ClusterStore::open(&cluster.urls(), timeout).unwrap())
}

fn ip(s: &str) -> Subject<'static> {
    Subject::ip(s.parse().unwrap())
}

fn user(s: &str) -> Subject<'static> {
    Subject::bytes(s.as_bytes().to_vec())
}

/// The key a limiter writes for a subject, as the store builds it (for slot and inspection).
fn key_of(limiter: &str, t: &str, subject: &str, rules: &str) -> String {
    format!("rate_limit:{{{limiter}|{t}|{subject}}}:sw:{rules}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_exact_per_ip_and_all_or_nothing_across_slots() {
    let cluster = RedisCluster::start(3, 0);
    let store = cluster_store(&cluster, Duration::from_secs(2));

    // Exactness per IP, under concurrency.
    let per_ip = Limiter::builder("cl::ip")
        .limit(Limit::new(LimitType::Ip, [rule(60_000, 50)]))
        .store(store.clone())
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let l = per_ip.clone();
            tokio::spawn(async move {
                let mut ok = 0;
                for _ in 0..30 {
                    ok += usize::from(l.check(&[ip("192.0.2.10")]).await.is_ok());
                }
                ok
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert_eq!(admitted, 50);

    // Ip stacked with User, the two subjects in different slots.
    let stacked = Limiter::builder("cl::orders")
        .limit(Limit::new(LimitType::Ip, [rule(60_000, 15)]))
        .limit(Limit::new(LimitType::User, [rule(60_000, 2)]))
        .store(store.clone())
        .build()
        .unwrap();
    let ip_key = key_of("cl::orders", "ip", "198.51.100.7", "1mx15");
    let ip_slot = cluster.slot_of(ip_key.as_bytes());
    // A user whose log lives on another primary than the IP's.
    let (name, user_slot) = (0..100)
        .map(|i| format!("alice{i}"))
        .map(|n| {
            let slot = cluster.slot_of(key_of("cl::orders", "user", &n, "1mx2").as_bytes());
            (n, slot)
        })
        .find(|&(_, slot)| cluster.primary_of(slot) != cluster.primary_of(ip_slot))
        .expect("some user on another primary");
    assert_ne!(ip_slot, user_slot);
    let alice = [ip("198.51.100.7"), user(&name)];
    assert!(stacked.check(&alice).await.is_ok());
    assert!(stacked.check(&alice).await.is_ok());
    let ip_count = || -> usize { cluster.client_for_slot(ip_slot).zcard(&ip_key).unwrap() };
    assert_eq!(ip_count(), 2);
    for _ in 0..5 {
        let err = stacked.check(&alice).await.unwrap_err();
        assert_eq!(err.limit_type(), LimitType::User);
    }
    assert_eq!(ip_count(), 2, "the IP slot admitted each denied call, then released it");
    // The IP budget is intact: 13 more calls from other users pass, the 14th is denied by the IP.
    for i in 0..13 {
        assert!(stacked.check(&[ip("198.51.100.7"), user(&format!("u{i}"))]).await.is_ok(), "call {i}");
    }
    let err = stacked.check(&[ip("198.51.100.7"), user("late")]).await.unwrap_err();
    assert_eq!(err.limit_type(), LimitType::Ip);
}

/// The O(1) algorithms give a refused call back too: a token bucket whose call is refused by a
/// GCRA limit on another primary gets its token back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_release_restores_o1_algorithms() {
    use ratelimit::Algorithm;
    let cluster = RedisCluster::start(3, 0);
    let limiter = Limiter::builder("cl::o1")
        .limit(Limit::new(LimitType::Ip, [rule(60_000, 3)]).algorithm(Algorithm::TokenBucket).prefix("rl:"))
        .limit(Limit::new(LimitType::User, [rule(60_000, 1)]).algorithm(Algorithm::Gcra).prefix("rl:"))
        .store(cluster_store(&cluster, Duration::from_secs(2)))
        .build()
        .unwrap();
    let ip_slot = cluster.slot_of(b"rl:{cl::o1|ip|198.51.100.9}:tb:1mx3");
    let name = (0..100)
        .map(|i| format!("bob{i}"))
        .find(|n| {
            let slot = cluster.slot_of(format!("rl:{{cl::o1|user|{n}}}:gcra:1mx1").as_bytes());
            cluster.primary_of(slot) != cluster.primary_of(ip_slot)
        })
        .expect("a user on another primary");
    // Pinned (future) time: no refill between calls.
    const T: u64 = 4_000_000_000_000_000;
    let call = |user: String| {
        let limiter = limiter.clone();
        async move {
            limiter.check(&[ip("198.51.100.9"), Subject::bytes(user.into_bytes())]).at(support::at(T)).await.map(|_| ())
        }
    };
    assert!(call(name.clone()).await.is_ok(), "token 1 of 3, the user's one call");
    for _ in 0..4 {
        let err = call(name.clone()).await.unwrap_err();
        assert_eq!(err.limit_type(), LimitType::User, "refused by the GCRA limit");
    }
    // Had the refused calls kept their tokens, the bucket would be empty now.
    assert!(call("carol".to_owned()).await.is_ok(), "token 2");
    assert!(call("dave".to_owned()).await.is_ok(), "token 3");
    let err = call("erin".to_owned()).await.unwrap_err();
    assert_eq!(err.limit_type(), LimitType::Ip, "now the bucket is empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_global_limit_shared_by_two_clients() {
    let cluster = RedisCluster::start(3, 0);
    let build = || {
        Limiter::builder("cl::global")
            .limit(Limit::new(LimitType::Global, [rule(60_000, 30)]))
            .store(cluster_store(&cluster, Duration::from_secs(2)))
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    let mut admitted = 0;
    for _ in 0..25 {
        admitted += usize::from(a.check(&[Subject::global()]).await.is_ok());
        admitted += usize::from(b.check(&[Subject::global()]).await.is_ok());
    }
    assert_eq!(admitted, 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_keeps_answering_and_resumes_exact_limiting() {
    let mut cluster = RedisCluster::start(3, 1);
    let timeout = Duration::from_millis(250);
    let limiter = Limiter::builder("cl::failover")
        .limit(Limit::new(LimitType::Key, [rule(60_000, 1_000_000)]))
        .on_error(FailurePolicy::Allow)
        .store(cluster_store(&cluster, timeout))
        .build()
        .unwrap();
    let subject = [Subject::bytes(&b"hot"[..])];
    assert!(limiter.check(&subject).await.unwrap().quota().is_some());

    let slot = cluster.slot_of(key_of("cl::failover", "key", "hot", "1mx1000000").as_bytes());
    let primary = cluster.primary_of(slot);
    cluster.kill(primary);

    // Calls keep returning (failing open) until the replica is promoted.
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    loop {
        let t = Instant::now();
        let permit = limiter.check(&subject).await.expect("fail open");
        slowest = slowest.max(t.elapsed());
        if permit.quota().is_some() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no recovery after a failover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // How long a call takes meanwhile is the benchmark harness's to measure.
    eprintln!("cluster failover: decisions resumed after {:?}, slowest call {slowest:?}", started.elapsed());
    // Every node learns of the promotion in its own time: ask until the live ones agree.
    let every = Duration::from_millis(100);
    support::poll_until_async(Duration::from_secs(15), every, "no replica was promoted", || async {
        cluster.try_primary_of(slot).ok().filter(|&p| p != primary)
    })
    .await;

    // Exact limiting resumes on the promoted replica by itself.
    let exact = Limiter::builder("cl::after_failover")
        .limit(Limit::new(LimitType::Key, [rule(60_000, 10)]))
        .store(cluster_store(&cluster, Duration::from_secs(2)))
        .build()
        .unwrap();
    let mut admitted = 0;
    for _ in 0..15 {
        admitted += usize::from(exact.check(&subject).await.is_ok());
    }
    assert_eq!(admitted, 10);
}

/// A shadow limit beside an enforced one: decided once the enforced limit admits the call, as a
/// group that records nothing when it would refuse. In another slot than the enforced limit, in
/// a second round of scripts; in the same slot, in the enforced limit's script (one `EVALSHA`
/// per decision).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_shadow_limits_beside_enforced_ones() {
    let cluster = RedisCluster::start(3, 0);
    let store = cluster_store(&cluster, Duration::from_secs(2));
    let limiter = Limiter::builder("cl::shadow")
        .limit(Limit::new(LimitType::Ip, [rule(60_000, 5)]))
        .limit(Limit::new(LimitType::User, [rule(60_000, 4)]).mode(ratelimit::Mode::Shadow))
        .store(store)
        .build()
        .unwrap();
    let evalsha = |slot: u16| support::command_calls(&mut cluster.client_for_slot(slot), "evalsha");
    for (address, same_slot) in [("198.51.100.20", false), ("198.51.100.21", true)] {
        let ip_key = key_of("cl::shadow", "ip", address, "1mx5");
        let ip_slot = cluster.slot_of(ip_key.as_bytes());
        let user_key = |n: &str| key_of("cl::shadow", "user", n, "1mx4");
        let name = (0..1_000_000)
            .map(|i| format!("u{i}"))
            .find(|n| (cluster.slot_of(user_key(n).as_bytes()) == ip_slot) == same_slot)
            .expect("a user in the wanted slot");
        let user_slot = cluster.slot_of(user_key(&name).as_bytes());
        let subjects = [ip(address), user(&name)];
        // Connected and loaded: the counts start with the decisions.
        limiter.check(&[ip("192.0.2.99"), user("warm")]).await.unwrap();
        let before = evalsha(ip_slot);
        let mut outcomes = Vec::new();
        // The shadow limit holds 1, 2, would hold 5 of 4 (records nothing), then is not
        // decided (the enforced limit refuses).
        for cost in [1, 1, 3, 1] {
            outcomes.push(limiter.check(&subjects).cost(cost).await.is_ok());
        }
        assert_eq!(outcomes, [true, true, true, false], "same slot: {same_slot}");
        let count = |slot: u16, key: &str| -> usize { cluster.client_for_slot(slot).zcard(key).unwrap() };
        assert_eq!(count(ip_slot, &ip_key), 5, "same slot: {same_slot}");
        assert_eq!(count(user_slot, &user_key(&name)), 2, "same slot: {same_slot}: what the shadow limit admitted");
        if same_slot {
            assert_eq!(evalsha(ip_slot) - before, 4, "one script per decision");
        }
    }
}
