//! Limits from configuration: the overrides file on memory and on a real Redis, and
//! the example server driven over TCP with `RATELIMIT_CONFIG` and `SIGHUP`.
//!
//! The overrides table is per process: the library tests share one file (rewritten and
//! reloaded under a lock); each server runs in its own process (this binary, re-executed).

#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use ratelimit::{store::MemoryStore, store::StoreHandle, Limit, LimitType, Limiter, Mode, Rule, Subject};
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard};
use std::time::Duration;
use support::overrides_file::{self, Shared};
use support::server_process::{loopback, request_blocking, Reply, Server};
use support::RedisServer;

// ---------------------------------------------------------------------------------------------
// The library, in this process.

/// The process's configuration: memory as the global store and one overrides file.
fn shared() -> &'static Shared {
    overrides_file::shared("overrides", |config| config)
}

/// Puts `text` in force (under the lock the caller holds).
fn apply(text: &str) {
    shared().apply(text);
}

fn locked() -> MutexGuard<'static, ()> {
    shared().locked()
}

fn rule(window_s: u64, count: u64) -> Rule {
    Rule::new(Duration::from_secs(window_s), count).unwrap()
}

fn ip(text: &str) -> Subject<'static> {
    Subject::ip(text.parse().unwrap())
}

fn passes(limiter: &Limiter, subjects: &[Subject<'_>], n: usize) -> usize {
    (0..n).filter(|_| limiter.check(subjects).blocking().is_ok()).count()
}

/// Every scenario, on one store; limiter names carry `tag` so stores do not share counts.
fn scenarios(store: StoreHandle, tag: &str) {
    let _guard = locked();
    let build = |name: &str, t: LimitType, r: Rule| {
        Limiter::builder(format!("{tag}::{name}")).limit(Limit::new(t, [r])).store(store.clone()).build().unwrap()
    };
    let hello = build("hello", LimitType::Ip, rule(60, 5));
    let watched = build("watched", LimitType::Global, rule(60, 1));
    let orders = Limiter::builder(format!("{tag}::orders"))
        .limit(Limit::new(LimitType::User, [rule(60, 1)]))
        .limit(Limit::new(LimitType::Ip, [rule(60, 1)]))
        .store(store.clone())
        .build()
        .unwrap();
    let attr_shadow = Limiter::builder(format!("{tag}::attr_shadow"))
        .limit(Limit::new(LimitType::Global, [rule(60, 1)]).mode(Mode::Shadow))
        .store(store.clone())
        .build()
        .unwrap();

    apply(&format!(
        r#"
[[limit]]
limiter = "{tag}::hello"
type = "ip"
rules = ["2/1m", "10/1h"]

[[limit]]
limiter = "{tag}::watched"
type = "global"
mode = "shadow"

[[limit]]
limiter = "{tag}::typo"
type = "ip"
mode = "off"

[exempt]
ips = ["192.0.2.0/29"]
users = ["ops-bot"]
"#
    ));

    // Override rules apply, and show as the rules in force.
    let a = [ip("203.0.113.1")];
    assert_eq!(passes(&hello, &a, 5), 2, "{tag}: the file's 2/1m replaces the attribute's 5/1m");
    let e = hello.check(&a).blocking().unwrap_err();
    assert_eq!(e.rule(), Some(rule(60, 2)));
    let names: Vec<String> = e.policies().iter().map(|p| p.name()).collect();
    assert_eq!(names, ["ip-1h", "ip-1m"]);
    assert_eq!(hello.policies().len(), 2);

    // Shadow (from the file, and from the builder): never refuses.
    assert_eq!(passes(&watched, &[Subject::global()], 5), 5, "{tag}: shadow never refuses");
    assert_eq!(passes(&attr_shadow, &[Subject::global()], 5), 5, "{tag}: mode = shadow never refuses");

    // Exempt IPs and users pass and are not counted; others are refused.
    let exempt_ip = [ip("192.0.2.7")];
    assert_eq!(passes(&hello, &exempt_ip, 10), 10, "{tag}: an exempt IP always passes");
    let bot = [Subject::bytes(&b"ops-bot"[..]), ip("203.0.113.9")];
    assert_eq!(passes(&orders, &bot, 10), 10, "{tag}: an exempt user always passes");
    let alice = [Subject::bytes(&b"alice"[..]), ip("203.0.113.10")];
    assert_eq!(passes(&orders, &alice, 3), 1, "{tag}: a user who is not exempt is limited");

    // A name no limiter uses is reported (the ones used are not).
    let unknown = ratelimit::config::unknown_limiters();
    assert!(unknown.contains(&format!("{tag}::typo")), "{unknown:?}");
    assert!(!unknown.contains(&format!("{tag}::hello")), "{unknown:?}");

    // Reload: shadow becomes enforced; what shadow counted is there (1 of 1 used).
    // Exemptions end: the exempt IP was never counted, so it has its full quota.
    // hello's rules change: fresh counts under the new rules.
    apply(&format!(
        r#"
[[limit]]
limiter = "{tag}::hello"
type = "ip"
rules = ["3/1m"]

[[limit]]
limiter = "{tag}::watched"
type = "global"
mode = "enforce"
"#
    ));
    assert!(watched.check(&[Subject::global()]).blocking().is_err(), "{tag}: shadow counted the calls");
    assert_eq!(passes(&hello, &exempt_ip, 5), 3, "{tag}: exempt calls were not counted");
    assert_eq!(passes(&hello, &a, 5), 3, "{tag}: changed rules start fresh counts");
    assert_eq!(passes(&attr_shadow, &[Subject::global()], 3), 3, "{tag}: the attribute's shadow stays");

    // A malformed file on reload: an error naming the line, and the rules in force stay.
    std::fs::write(&shared().file, "[[limit]]\nlimiter = \"x\"\ntype = \"ip\"\nrules = [\"3/1parsec\"]\n").unwrap();
    let e = ratelimit::reload().unwrap_err();
    assert_eq!(e.line(), 4, "{e}");
    assert!(e.to_string().contains("limits.toml:4:"), "{e}");
    assert!(e.to_string().contains("\"3/1parsec\""), "{e}");
    let b = [ip("203.0.113.2")];
    assert_eq!(passes(&hello, &b, 5), 3, "{tag}: the rules in force stayed");

    // Off: not decided at all; back to the attribute's rules when the file says nothing.
    apply(&format!("[[limit]]\nlimiter = \"{tag}::watched\"\ntype = \"global\"\nmode = \"off\"\n"));
    assert_eq!(passes(&watched, &[Subject::global()], 5), 5, "{tag}: off");
    apply("");
    assert!(watched.check(&[Subject::global()]).blocking().is_err(), "{tag}: the attribute's rule again");
    assert_eq!(passes(&hello, &[ip("203.0.113.3")], 7), 5, "{tag}: the attribute's 5/1m again");
}

#[test]
fn overrides_in_memory() {
    shared();
    scenarios(Arc::new(MemoryStore::new()), "mem");
}

#[test]
fn overrides_on_redis() {
    shared();
    let redis = RedisServer::start();
    let store = ratelimit::store::RedisStore::open(&redis.url(), Duration::from_secs(2)).expect("open");
    scenarios(Arc::new(store), "redis");
}

/// `[exempt] ips` is read as every other address is: mapped IPv6 networks are IPv4 networks,
/// brackets and zone ids are accepted, and a dual-stack peer matches its IPv4 exemption. An IPv6
/// client is counted as its /64 group, and exempt when that group overlaps an exempt network:
/// an exempt host exempts the group it is counted in, an exempt /48 every group inside it.
#[test]
fn exemptions_read_every_address_form() {
    use ratelimit::subject::IpValue;
    let _guard = locked();
    let limiter = Limiter::builder("addr::exempt")
        .limit(Limit::new(LimitType::Ip, [rule(60, 1)]))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    apply(
        r#"
[exempt]
ips = ["::ffff:192.0.2.16/124", "[2001:db8:5::]/48", "::ffff:198.51.100.7", "fe80::%eth0/64", "2001:db8:7:1::7"]
"#,
    );
    for exempt in [
        "192.0.2.17",
        "::ffff:192.0.2.30",
        "198.51.100.7",
        "::ffff:198.51.100.7",
        "2001:db8:5:1::9",
        "fe80::1",
        // Another host of the exempt host's /64: the same client, as counted.
        "2001:db8:7:1::99",
    ] {
        assert_eq!(passes(&limiter, &[ip(exempt)], 3), 3, "{exempt} is exempt");
    }
    for text in ["[2001:db8:5:1::9]:443", "[::ffff:198.51.100.7]:80", "198.51.100.7:80"] {
        assert_eq!(passes(&limiter, &[text.to_ip_subject()], 3), 3, "{text} is exempt");
    }
    for counted in ["192.0.2.32", "::ffff:198.51.100.8", "2001:db8:6::1", "2001:db8:7:2::7"] {
        assert_eq!(passes(&limiter, &[ip(counted)], 3), 1, "{counted} is limited");
    }
    apply("");
}

/// `--trust-proxy` reads networks as the overrides file does.
#[test]
fn trust_proxy_takes_every_network_form() {
    let args = |list: &[&str]| server::parse_args(list.iter().map(|s| s.to_string()));
    let Ok(server::Command::Serve(parsed)) =
        args(&["--trust-proxy", "::ffff:10.0.0.0/104", "--trust-proxy=[2001:db8::]/32", "--trust-proxy", "::1"])
    else {
        panic!("the arguments parse")
    };
    let shown: Vec<String> = parsed.trust_proxy.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["10.0.0.0/8", "2001:db8::/32", "::1/128"]);
    let e = args(&["--trust-proxy", "10.0.0.1/8"]).unwrap_err();
    assert!(e.contains("did you mean 10.0.0.0/8?"), "{e}");
    let e = args(&["--trust-proxy", "10.0.0.1:80"]).unwrap_err();
    assert!(e.contains("not an IP address"), "{e}");
}

/// Under the file, the local refusal cache still answers a hammering client (enforced limits
/// only: a shadow limit's refusals are never cached), and a reload with new rules is not
/// answered by refusals made under the old ones.
#[test]
fn the_refusal_cache_works_under_the_file() {
    let _guard = locked();
    let redis = RedisServer::start();
    let store: StoreHandle =
        Arc::new(ratelimit::store::RedisStore::open(&redis.url(), Duration::from_secs(2)).expect("open"));
    let build = |name: &str| {
        Limiter::builder(name).limit(Limit::new(LimitType::Ip, [rule(60, 100)])).store(store.clone()).build().unwrap()
    };
    let enforced = build("cache::enforced");
    let shadowed = build("cache::shadowed");
    apply(
        r#"
[[limit]]
limiter = "cache::enforced"
type = "ip"
rules = ["3/1m"]

[[limit]]
limiter = "cache::shadowed"
type = "ip"
rules = ["3/1m"]
mode = "shadow"
"#,
    );
    let evalsha = || redis.calls("evalsha");
    let hot = [ip("198.51.100.9")];
    let before = evalsha();
    assert_eq!(passes(&enforced, &hot, 200), 3, "the file's 3 per minute");
    let spent = evalsha() - before;
    assert!(spent <= 6, "200 calls, 197 refused, cost {spent} EVALSHA: the refusals were not cached");
    // Shadow: every call passes and every one is decided by the store (nothing cached).
    let before = evalsha();
    assert_eq!(passes(&shadowed, &hot, 20), 20, "shadow never refuses");
    assert_eq!(evalsha() - before, 20, "a shadow refusal is never answered from the cache");
    // New rules: the old rules' refusals do not answer (fresh counts under the new rules).
    apply(
        r#"
[[limit]]
limiter = "cache::enforced"
type = "ip"
rules = ["5/1m", "6/2m"]
"#,
    );
    assert_eq!(passes(&enforced, &hot, 10), 5, "the new rules, counted afresh");
    apply("");
}

/// Peek and reset act on the rules in force: an operator who tightened a limit in the file
/// and then resets a user's counts unblocks that user.
#[test]
fn peek_and_reset_follow_the_file() {
    let _guard = locked();
    let redis = RedisServer::start();
    let store: StoreHandle =
        Arc::new(ratelimit::store::RedisStore::open(&redis.url(), Duration::from_secs(2)).expect("open"));
    let login = Limiter::builder("admin::login")
        .limit(Limit::new(LimitType::Ip, [rule(60, 100)]))
        .limit(Limit::new(LimitType::User, [rule(60, 100)]))
        .store(store)
        .build()
        .unwrap();
    apply(
        r#"
[[limit]]
limiter = "admin::login"
type = "user"
rules = ["2/1m"]
"#,
    );
    let who = [ip("192.0.2.44"), Subject::bytes(&b"mallory"[..])];
    assert_eq!(passes(&login, &who, 5), 2, "the file's 2 per minute for the user");
    let status = login.peek(&who).blocking().expect("peek");
    let user = status.iter().find(|s| s.limit == 1).expect("the user limit, by its place");
    assert_eq!((user.policy.rule.count(), user.remaining), (2, 0), "{status:?}");
    let by_ip = status.iter().find(|s| s.limit == 0).expect("the ip limit");
    assert_eq!((by_ip.policy.rule.count(), by_ip.remaining), (100, 98), "{status:?}");
    login.reset(&[Subject::missing(), Subject::bytes(&b"mallory"[..])]).blocking().expect("reset the user");
    assert_eq!(passes(&login, &who, 5), 2, "reset under the file's rules gives the user's 2 back");
    apply("");
}

#[test]
fn a_decision_in_flight_keeps_its_rules() {
    let _guard = locked();
    // Many threads decide while the file flips between two rule sets; every refusal names one
    // of the two rule sets whole, never a mix.
    let limiter = Limiter::builder("flip::f")
        .limit(Limit::new(LimitType::Global, [rule(60, 1_000_000), rule(1, 1_000_000)]))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .unwrap();
    let a = "[[limit]]\nlimiter = \"flip::f\"\ntype = \"global\"\nrules = [\"1/1m\", \"1/1h\"]\n";
    let b = "[[limit]]\nlimiter = \"flip::f\"\ntype = \"global\"\nrules = [\"1/2m\", \"1/2h\"]\n";
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (limiter, stop) = (limiter.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seen = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Err(e) = limiter.check(&[Subject::global()]).blocking() {
                        let names: Vec<String> = e.policies().iter().map(|p| p.name()).collect();
                        let whole = names == ["global-1h", "global-1m"]
                            || names == ["global-2h", "global-2m"]
                            || names == ["global-1m", "global-1s"];
                        assert!(whole, "a refusal saw half a change: {names:?}");
                        seen += 1;
                    }
                }
                seen
            })
        })
        .collect();
    for i in 0..40 {
        apply(if i % 2 == 0 { a } else { b });
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let refusals: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(refusals > 0);
    apply("");
}

// ---------------------------------------------------------------------------------------------
// The example server, in its own process.

/// Not a test of its own: the body of the server processes the tests start (see
/// tests/support/server_process.rs and tests/support/child.rs).
#[test]
#[ignore = "the server process the other tests start"]
fn server_process() {
    support::server_process::child_main(server::run);
}

/// A server process with `config` as its limits file.
fn start_server(config: &Path) -> Server {
    Server::start(&[], &[("RATELIMIT_CONFIG", config.to_str().expect("a UTF-8 path"))])
}

impl Server {
    /// One HTTP/1.1 request from 127.0.0.`from`.
    fn request(&self, from: u8, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        request_blocking(self.addr, loopback(from), method, path, headers)
    }

    fn statuses(&self, from: u8, method: &str, path: &str, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
        (0..n).map(|_| self.request(from, method, path, headers).status).collect()
    }
}

fn server_dir(name: &str) -> PathBuf {
    let dir = shared().dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The example's handlers are `server::hello` … when it runs as the example; compiled into this
/// test binary as the module `server`, their default names are `overrides::server::hello` ….
const SERVER_FILE: &str = r#"
[[limit]]
limiter = "overrides::server::hello"
type = "ip"
rules = ["3/10s"]

[[limit]]
limiter = "overrides::server::global"
type = "global"
mode = "shadow"

[exempt]
ips = ["127.0.0.9/32"]
users = ["ops-bot"]
"#;

#[test]
fn example_server_takes_limits_from_the_file() {
    let file = server_dir("server").join("limits.toml");
    std::fs::write(&file, SERVER_FILE).unwrap();
    let server = start_server(&file);

    // The override tightens /api/hello, and its header shows it.
    let reply = server.request(2, "GET", "/api/hello", &[]);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("ratelimit-policy"), Some("\"ip-10s\";q=3;w=10"));
    assert_eq!(server.statuses(2, "GET", "/api/hello", &[], 4), [200, 200, 429, 429]);

    // Shadow on /api/global (30 per 10s) never refuses.
    let global = server.statuses(3, "GET", "/api/global", &[], 40);
    assert!(global.iter().all(|&s| s == 200), "{global:?}");

    // An exempt IP and an exempt user pass.
    assert!(server.statuses(9, "GET", "/api/hello", &[], 10).iter().all(|&s| s == 200));
    let bot = server.statuses(4, "POST", "/api/orders", &[("X-User-Id", "ops-bot")], 20);
    assert!(bot.iter().all(|&s| s == 200), "{bot:?}");
    let alice = server.statuses(5, "POST", "/api/orders", &[("X-User-Id", "alice")], 12);
    assert_eq!(alice.iter().filter(|&&s| s == 200).count(), 10, "{alice:?}");

    // SIGHUP applies a changed file.
    std::fs::write(&file, SERVER_FILE.replace("3/10s", "1/10s")).unwrap();
    server.signal("HUP");
    server.wait_for("limits reloaded", Duration::from_secs(10));
    let reply = server.request(6, "GET", "/api/hello", &[]);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("ratelimit-policy"), Some("\"ip-10s\";q=1;w=10"));
    assert_eq!(server.statuses(6, "GET", "/api/hello", &[], 2), [429, 429]);

    // A malformed file on SIGHUP is reported and the rules in force stay.
    std::fs::write(&file, "[[limit]]\nlimiter = \"overrides::server::hello\"\ntype = \"ipv4\"\n").unwrap();
    server.signal("HUP");
    let line = server.wait_for("the limits in force stay", Duration::from_secs(10));
    assert!(line.contains("limits.toml:3:8") && line.contains("ipv4"), "{line}");
    assert_eq!(server.statuses(7, "GET", "/api/hello", &[], 2), [200, 429]);
}

#[test]
fn a_malformed_file_stops_the_example_server() {
    let file = server_dir("malformed").join("limits.toml");
    std::fs::write(&file, "[[limit]]\nlimiter = \"server::hello\"\ntype = \"ip\"\nrules = [\"3 per 10s\"]\n").unwrap();
    let out = support::server_process::command(
        &["--listen", "127.0.0.1:0"],
        &[("RATELIMIT_CONFIG", file.to_str().expect("a UTF-8 path"))],
    )
    .output()
    .expect("run the server");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let named = format!("{}:4:10", file.display());
    assert!(stderr.contains(&named) && stderr.contains("\"3 per 10s\""), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening"));
}

/// `block = "…"` in the file sets a limit's penalty without a rebuild.
#[test]
fn the_file_sets_a_block() {
    let _guard = locked();
    let store: StoreHandle = Arc::new(ratelimit::store::MemoryStore::new());
    let login =
        Limiter::builder("file::login").limit(Limit::new(LimitType::Ip, [rule(60, 2)])).store(store).build().unwrap();
    apply(
        r#"
[[limit]]
limiter = "file::login"
type = "ip"
block = "5m"
"#,
    );
    let who = [ip("192.0.2.45")];
    assert_eq!(passes(&login, &who, 2), 2);
    assert_eq!(login.check(&who).blocking().unwrap_err().retry_after(), Duration::from_secs(300));
    apply("");
}
