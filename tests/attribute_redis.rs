//! `#[rate_limiter]` against a real `redis-server`: the global store is per process, so this
//! binary points it at its own server, and one test owns that server and runs the scenarios in
//! turn (the server is killed when the test ends).

mod support;

use ratelimit::{rate_limiter, Config, LimitType, RateLimited};
use redis::Commands;
use std::net::IpAddr;
use std::time::Duration;
use support::{addr, denied_by, RedisServer};

#[rate_limiter(type = Ip, rules = [(1m, 2)], ip = client, name = "redis::stacked")]
#[rate_limiter(type = Global, rules = [(1m, 3)])]
async fn stacked(client: IpAddr) -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Ip, rules = [(1m, 100), (10s, 50)], ip = client, name = "redis::three")]
#[rate_limiter(type = User, rules = [(1m, 100)], user = user)]
#[rate_limiter(type = Global, rules = [(1m, 1000)])]
async fn three_attributes(client: IpAddr, user: &str) -> Result<(), RateLimited> {
    Ok(())
}

#[rate_limiter(type = Key, rules = [(1m, 3)], key = "one", name = "redis::shared")]
fn shared_sync() -> Result<&'static str, RateLimited> {
    Ok("sync")
}

#[rate_limiter(type = Key, rules = [(1m, 3)], key = "one", name = "redis::shared")]
async fn shared_async() -> Result<&'static str, RateLimited> {
    Ok("async")
}

struct Connection {
    ip: IpAddr,
}

impl Connection {
    #[rate_limiter(type = Ip, rules = [(1m, 2)], ip = self.ip, name = "redis::method")]
    async fn serve(&self) -> Result<IpAddr, RateLimited> {
        Ok(self.ip)
    }
}

#[rate_limiter(type = Key, rules = [(1m, 10)], key = account, cost = units, name = "redis::cost")]
fn spend(account: &str, units: u32) -> Result<u32, RateLimited> {
    Ok(units)
}

#[rate_limiter(type = Global, rules = [(1m, 50)], name = "redis::concurrent")]
async fn concurrent() -> Result<(), RateLimited> {
    Ok(())
}

/// EVALSHA calls since the last `CONFIG RESETSTAT`, and whether any other command ran.
fn commandstats(con: &mut redis::Connection) -> (u64, Vec<String>) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    let mut evalsha = 0;
    let mut others = Vec::new();
    for line in info.lines().filter(|l| l.starts_with("cmdstat_")) {
        let name = line.trim_start_matches("cmdstat_").split(':').next().unwrap_or("").to_owned();
        let calls: u64 = line.split([':', ',']).find_map(|kv| kv.strip_prefix("calls=")).unwrap().parse().unwrap();
        match name.as_str() {
            "evalsha" => evalsha = calls,
            // The script's own commands, and this inspection.
            "time" | "zremrangebyscore" | "zcard" | "zcount" | "zadd" | "pexpireat" | "config|resetstat" | "info" => {}
            // The startup probe loads the scripts in the background, once; on a loaded machine
            // it can land after the reset. (A load on the decision path follows a NOSCRIPT and
            // comes with a second EVALSHA, which the EVALSHA count catches.)
            "script|load" => {}
            _ => others.push(format!("{name}={calls}")),
        }
    }
    (evalsha, others)
}

#[test]
fn the_attribute_on_redis() {
    let server = RedisServer::start();
    ratelimit::init(Config::redis(server.url()).timeout(Duration::from_secs(2))).unwrap();
    let mut con = server.client();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();

    // Stacked Ip + Global admit per the tightest rule; a refused call is counted by no rule.
    rt.block_on(async {
        let (a, b, c) = (addr("198.51.100.1"), addr("198.51.100.2"), addr("198.51.100.3"));
        stacked(a).await.unwrap();
        stacked(a).await.unwrap();
        let ip_key = "rate_limit:{redis::stacked|ip|198.51.100.1}:sw:1mx2";
        let global_key = "rate_limit:{redis::stacked|global|}:sw:1mx3";
        for _ in 0..3 {
            denied_by(stacked(a).await, LimitType::Ip);
        }
        let counts = |con: &mut redis::Connection| -> (usize, usize) {
            (con.zcard(ip_key).unwrap(), con.zcard(global_key).unwrap())
        };
        assert_eq!(counts(&mut con), (2, 2), "the refused calls are in neither log");
        stacked(b).await.unwrap();
        denied_by(stacked(c).await, LimitType::Global);
        assert_eq!(counts(&mut con), (2, 3));
    });

    // One EVALSHA per call, however many attributes are stacked (3 here, 4 rules), and nothing else.
    rt.block_on(async {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut con).unwrap();
        for i in 0..40 {
            three_attributes(addr("203.0.113.9"), &format!("user-{}", i % 4)).await.unwrap();
        }
        let (evalsha, others) = commandstats(&mut con);
        assert_eq!(evalsha, 40, "one round trip per call");
        assert!(others.is_empty(), "no other command: {others:?}");
    });

    // A sync and an async function with the same name, type and rules share one window.
    rt.block_on(async {
        assert_eq!(shared_sync().unwrap(), "sync");
        assert_eq!(shared_async().await.unwrap(), "async");
        assert_eq!(shared_sync().unwrap(), "sync");
        denied_by(shared_async().await, LimitType::Key);
        denied_by(shared_sync(), LimitType::Key);
    });
    // The plain fn also works outside any runtime.
    denied_by(shared_sync(), LimitType::Key);

    // Methods count per `self.ip`; `cost` spends that many units.
    rt.block_on(async {
        let (first, second) = (Connection { ip: addr("192.0.2.1") }, Connection { ip: addr("192.0.2.2") });
        first.serve().await.unwrap();
        first.serve().await.unwrap();
        denied_by(first.serve().await, LimitType::Ip);
        second.serve().await.unwrap();
    });
    assert_eq!(spend("acme", 4).unwrap(), 4);
    assert_eq!(spend("acme", 6).unwrap(), 6);
    denied_by(spend("acme", 1), LimitType::Key);
    let units: usize = con.zcard("rate_limit:{redis::cost|key|acme}:sw:1mx10").unwrap();
    assert_eq!(units, 10, "one member per unit");

    // Exactness under concurrency, through the attribute.
    rt.block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                tokio::spawn(async {
                    let mut ok = 0;
                    for _ in 0..20 {
                        ok += usize::from(concurrent().await.is_ok());
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
    });
}
