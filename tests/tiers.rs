//! Tiers: a call's tier (the user's plan) chooses the rules that decide it. On the memory store
//! and on a real Redis: tiers from code and from the overrides file (which wins), reloads, a
//! subject moving between tiers mid-window, unknown tier names (decided by the default rules,
//! leaving nothing behind), the attribute's `tier = …`; and the example server's `/api/search`
//! over TCP, its tiers from code, from a file and after `SIGHUP`.
//!
//! The overrides table is per process: the library tests share one file (rewritten and
//! reloaded under a lock); each server runs in its own process (this binary, re-executed).

#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use ratelimit::store::{MemoryStore, RedisStore, StoreHandle};
use ratelimit::{rate_limiter, Limit, LimitType, Limiter, RateLimited, Rule, Subject};
use std::path::Path;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;
use support::overrides_file::{self, Shared};
use support::server_process::{loopback, request_blocking, Server};
use support::RedisServer;

// ---------------------------------------------------------------------------------------------
// The library, in this process.

/// The process's configuration: memory as the global store and one overrides file, and a tier
/// given in code to the attribute's limiter `tiers::attr`.
fn shared() -> &'static Shared {
    overrides_file::shared("tiers", |config| config.tier("tiers::attr", LimitType::User, "pro", [rule(60, 50)]))
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

/// How many of `n` calls pass, in `tier` (or without one).
fn passes(limiter: &Limiter, subjects: &[Subject<'_>], tier: Option<&str>, n: usize) -> usize {
    (0..n)
        .filter(|_| match tier {
            Some(t) => limiter.check(subjects).tier(t).blocking().is_ok(),
            None => limiter.check(subjects).blocking().is_ok(),
        })
        .count()
}

/// A user of the search limiter below: the user, and the global subject.
fn user(name: &'static str) -> [Subject<'static>; 2] {
    [Subject::bytes(name.as_bytes()), Subject::global()]
}

/// The rules of the user limit a refusal names, as (window s, count) pairs.
fn user_policies(e: &RateLimited) -> Vec<(u64, u64)> {
    e.policies()
        .iter()
        .filter(|p| p.limit_type == LimitType::User)
        .map(|p| (p.rule.window().as_secs(), p.rule.count()))
        .collect()
}

/// Every scenario on one store. `keys` counts the store's keys; limiter names carry `tag`.
fn scenarios(store: StoreHandle, tag: &str, keys: &dyn Fn() -> usize) {
    let _guard = locked();
    apply("");
    let search = Limiter::builder(format!("{tag}::search"))
        .limit(
            Limit::new(LimitType::User, [rule(60, 5)])
                .tier("pro", [rule(60, 50)])
                .tier("team", [rule(60, 20), rule(3600, 200)]),
        )
        .limit(Limit::new(LimitType::Global, [rule(60, 1000)]))
        .store(store.clone())
        .build()
        .unwrap();

    // Each tier its rules; without a tier, the limit's own.
    assert_eq!(passes(&search, &user("alice"), None, 10), 5, "{tag}: free");
    assert_eq!(passes(&search, &user("carol"), Some("pro"), 60), 50, "{tag}: pro");
    assert_eq!(passes(&search, &user("erin"), Some("team"), 30), 20, "{tag}: team");

    // Refusals and quotas name the tier's rules (and the untiered global limit's).
    let e = search.check(&user("carol")).tier("pro").blocking().unwrap_err();
    assert_eq!(e.rule(), Some(rule(60, 50)), "{tag}: {e}");
    assert_eq!(user_policies(&e), [(60, 50)]);
    assert_eq!(e.policies().len(), 2, "{tag}: the global limit's rule too");
    let e = search.check(&user("erin")).tier("team").blocking().unwrap_err();
    assert_eq!(user_policies(&e), [(3600, 200), (60, 20)]);
    let e = search.check(&user("alice")).blocking().unwrap_err();
    assert_eq!(user_policies(&e), [(60, 5)]);
    let permit = search.check(&user("dave")).tier("pro").blocking().unwrap();
    let quota = permit.quota().expect("a quota");
    assert_eq!((quota.policy.rule, quota.remaining), (rule(60, 50), 49));
    drop(permit);

    // A tier change mid-window: the tier's rules are part of the keys, so moving to pro starts
    // fresh counts; moving back finds the free counts, still in their window.
    assert_eq!(passes(&search, &user("bob"), None, 3), 3);
    assert_eq!(passes(&search, &user("bob"), Some("pro"), 60), 50, "{tag}: fresh counts in pro");
    assert_eq!(passes(&search, &user("bob"), None, 5), 2, "{tag}: the free counts are found again");
    assert_eq!(passes(&search, &user("bob"), Some("pro"), 5), 0, "{tag}: and so are the pro ones");
    // A reset forgets the subject in every tier.
    search.reset(&user("bob")).blocking().unwrap();
    assert_eq!(passes(&search, &user("bob"), None, 6), 5, "{tag}: reset (free)");
    assert_eq!(passes(&search, &user("bob"), Some("pro"), 51), 50, "{tag}: reset (pro)");

    // Unknown tiers (any text a user sends) are decided by the default rules, on the default
    // keys: 1000 names leave one key, the one a call without a tier makes.
    let before = keys();
    let names: Vec<String> = (0..1000).map(|i| format!("plan-{i}")).collect();
    let admitted = names.iter().filter(|t| search.check(&user("frank")).tier(t.as_str()).blocking().is_ok()).count();
    assert_eq!(admitted, 5, "{tag}: unknown tiers share the default rules");
    assert_eq!(keys(), before + 1, "{tag}: unknown tier names leave no state");
    for odd in ["", "PRO", "pro ", "pro\0", "🙂"] {
        let e = search.check(&user("frank")).tier(odd).blocking().unwrap_err();
        assert_eq!(user_policies(&e), [(60, 5)], "{tag}: {odd:?} is not pro");
    }
    assert_eq!(passes(&search, &user("frank"), None, 1), 0, "{tag}: the same counts as without a tier");

    // The file's tiers win over the code's; an entry without rules gives the tier the default
    // rules; the file may add tiers; the default rules it sets apply to tiers without rules.
    apply(&format!(
        r#"
[[limit]]
limiter = "{tag}::search"
type = "user"
rules = ["3/1m"]

[[limit]]
limiter = "{tag}::search"
type = "user"
tier = "pro"
rules = ["8/1m"]

[[limit]]
limiter = "{tag}::search"
type = "user"
tier = "team"

[[limit]]
limiter = "{tag}::search"
type = "user"
tier = "enterprise"
rules = ["12/1m"]
"#
    ));
    assert_eq!(passes(&search, &user("grace"), Some("pro"), 20), 8, "{tag}: the file's pro");
    assert_eq!(passes(&search, &user("heidi"), Some("team"), 20), 3, "{tag}: team on the default rules");
    assert_eq!(passes(&search, &user("ivan"), Some("enterprise"), 20), 12, "{tag}: a tier from the file");
    assert_eq!(passes(&search, &user("judy"), None, 20), 3, "{tag}: the file's default");
    assert_eq!(passes(&search, &user("judy"), Some("gold"), 20), 0, "{tag}: unknown: the default's counts");
    let e = search.check(&user("grace")).tier("pro").blocking().unwrap_err();
    assert_eq!(user_policies(&e), [(60, 8)], "{tag}");

    // Reload: a tier's changed rules start fresh counts.
    apply(&format!("[[limit]]\nlimiter = \"{tag}::search\"\ntype = \"user\"\ntier = \"pro\"\nrules = [\"9/1m\"]\n"));
    assert_eq!(passes(&search, &user("grace"), Some("pro"), 20), 9, "{tag}: the reloaded pro rules");
    assert_eq!(passes(&search, &user("ivan"), Some("enterprise"), 20), 5, "{tag}: enterprise is gone");
    // Without the file, the code's tiers again, with the counts they kept in their window.
    apply("");
    assert_eq!(passes(&search, &user("carol"), Some("pro"), 5), 0, "{tag}: carol's 50 pro calls are still counted");
    assert_eq!(passes(&search, &user("grace"), Some("pro"), 60), 50, "{tag}: the code's pro again");
}

#[test]
fn tiers_in_memory() {
    shared();
    let memory = Arc::new(MemoryStore::new());
    let keys = {
        let memory = memory.clone();
        move || memory.len()
    };
    scenarios(memory, "mem", &keys);
}

#[test]
fn tiers_on_redis() {
    shared();
    let redis = RedisServer::start();
    let store = RedisStore::open(&redis.url(), Duration::from_secs(2)).expect("open");
    let keys = || {
        let n: usize = redis::cmd("DBSIZE").query(&mut redis.client()).expect("DBSIZE");
        n
    };
    scenarios(Arc::new(store), "redis", &keys);

    // The tier's rules are in the key: one key per (subject, rules) a subject called under.
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*|user|bob}*").query(&mut redis.client()).expect("KEYS");
    keys.sort();
    assert_eq!(keys, ["rate_limit:{redis::search|user|bob}:sw:1mx5", "rate_limit:{redis::search|user|bob}:sw:1mx50"]);

    // Resetting a subject of a limiter with tiers is one store call, whatever the tiers.
    let _guard = locked();
    let store: StoreHandle = Arc::new(RedisStore::open(&redis.url(), Duration::from_secs(2)).expect("open"));
    let search = Limiter::builder("redis::reset")
        .limit(Limit::new(LimitType::User, [rule(60, 1)]).tier("pro", [rule(60, 2)]).tier("team", [rule(60, 3)]))
        .store(store)
        .build()
        .unwrap();
    let kim = [Subject::bytes(&b"kim"[..])];
    for tier in ["free", "pro", "team"] {
        search.check(&kim).tier(tier).blocking().unwrap();
    }
    let del = redis.calls("del");
    search.reset(&kim).blocking().unwrap();
    assert_eq!(redis.calls("del"), del + 1, "one DEL for every tier");
    let left: Vec<String> = redis::cmd("KEYS").arg("*|user|kim}*").query(&mut redis.client()).expect("KEYS");
    assert!(left.is_empty(), "{left:?}");
}

#[rate_limiter(type = User, rules = [(1m, 5)], user = user, tier = plan, name = "tiers::attr")]
fn attr_search(user: &str, plan: Option<&str>) -> Result<(), RateLimited> {
    Ok(())
}

/// The attribute's `tier = …`, with a tier given in code (`Config::tier`) and by the file.
#[test]
fn the_attribute_takes_its_tier_from_the_call() {
    shared();
    let _guard = locked();
    apply("");
    let passes = |user: &str, plan: Option<&str>, n: usize| (0..n).filter(|_| attr_search(user, plan).is_ok()).count();
    assert_eq!(passes("alice", None, 10), 5);
    assert_eq!(passes("bob", Some("pro"), 60), 50, "Config::tier gives pro 50 per minute");
    assert_eq!(passes("carol", Some("platinum"), 10), 5, "an unknown tier: the attribute's rules");
    let e = attr_search("bob", Some("pro")).unwrap_err();
    assert_eq!(user_policies(&e), [(60, 50)]);

    apply("[[limit]]\nlimiter = \"tiers::attr\"\ntype = \"user\"\ntier = \"pro\"\nrules = [\"7/1m\"]\n");
    assert_eq!(passes("dave", Some("pro"), 10), 7, "the file wins over Config::tier");
    apply("");
    assert_eq!(passes("dave", Some("pro"), 60), 50, "and Config::tier is back without it");
}

#[test]
fn tier_entries_are_checked() {
    use ratelimit::config::Overrides;
    let err = |text: &str| Overrides::parse(text, "o.toml").unwrap_err().to_string();
    let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\ntier = \"pro\"\nmode = \"shadow\"\n");
    assert!(e.starts_with("o.toml:5:8: a tier's [[limit]] gives rules only"), "{e}");
    let e = err("[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\ntier = \" \"\n");
    assert!(e.contains("`tier` may not be empty"), "{e}");
    let twice = "[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\ntier = \"pro\"\n";
    let e = err(&format!("{twice}{twice}"));
    assert!(e.starts_with("o.toml:8:8: a second [[limit]] for the \"pro\" tier of the ip limit"), "{e}");
    // A tier entry and the untiered one for the same limit are two entries, not a repeat.
    let ok = Overrides::parse(&format!("{twice}[[limit]]\nlimiter = \"a\"\ntype = \"ip\"\nrules = [\"1/1s\"]\n"), "o")
        .unwrap();
    assert_eq!(ok.limits().len(), 2);
    assert_eq!(ok.limits()[0].tier.as_deref(), Some("pro"));

    // In code: the builder refuses what cannot work.
    let build = |tiers: &[(&str, Vec<Rule>)]| {
        let mut limit = Limit::new(LimitType::Global, [rule(60, 5)]);
        for (name, rules) in tiers {
            limit = limit.tier(*name, rules.clone());
        }
        Limiter::builder("tiers::bad")
            .limit(limit)
            .store(Arc::new(MemoryStore::new()))
            .build()
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert_eq!(build(&[("", vec![rule(60, 1)])]), Err("a tier needs a name, e.g. \"pro\"".to_owned()));
    let e = build(&[("pro", vec![rule(60, 1)]), ("pro", vec![rule(60, 2)])]).unwrap_err();
    assert!(e.contains("\"pro\" is given twice"), "{e}");
    assert!(build(&[("pro", vec![])]).unwrap_err().contains("at least one rule"));
    assert!(build(&[("pro", vec![rule(60, 1), rule(60, 2)])]).unwrap_err().contains("same window"));
    assert_eq!(build(&[("pro", vec![rule(60, 50)])]), Ok(()));
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

/// A server process (memory store), with `config` as its limits file.
fn start_server(config: Option<&Path>) -> Server {
    let config = config.map(|c| c.to_str().expect("a UTF-8 path"));
    let env: Vec<(&str, &str)> = config.map(|c| ("RATELIMIT_CONFIG", c)).into_iter().collect();
    Server::start(&[], &env)
}

impl Server {
    /// `GET /api/search` with these headers: the status and the `RateLimit-Policy` and
    /// `RateLimit` headers.
    fn search(&self, headers: &[(&str, &str)]) -> (u16, Option<String>, Option<String>) {
        let reply = request_blocking(self.addr, loopback(1), "GET", "/api/search", headers);
        let header = |name: &str| reply.header(name).map(str::to_owned);
        (reply.status, header("ratelimit-policy"), header("ratelimit"))
    }

    /// The statuses of `n` searches.
    fn statuses(&self, headers: &[(&str, &str)], n: usize) -> Vec<u16> {
        (0..n).map(|_| self.search(headers).0).collect()
    }
}

/// `ok` × 200, then 429s, `n` in all.
fn exactly(ok: usize, n: usize) -> Vec<u16> {
    (0..n).map(|i| if i < ok { 200 } else { 429 }).collect()
}

#[test]
fn example_server_search_pro_gets_50_free_gets_5() {
    let server = start_server(None);
    let (status, policy, quota) = server.search(&[("X-User-Id", "alice")]);
    assert_eq!(status, 200);
    assert_eq!(policy.as_deref(), Some("\"user-10s\";q=5;w=10"), "free: the attribute's rules");
    assert_eq!(quota.as_deref(), Some("\"user-10s\";r=4;t=10"));
    assert_eq!(server.statuses(&[("X-User-Id", "alice")], 5), exactly(4, 5));

    let pro = [("X-User-Id", "bob"), ("X-Plan", "pro")];
    let (status, policy, quota) = server.search(&pro);
    assert_eq!(status, 200);
    assert_eq!(policy.as_deref(), Some("\"user-10s\";q=50;w=10"), "pro: the server's tier");
    assert_eq!(quota.as_deref(), Some("\"user-10s\";r=49;t=10"));
    assert_eq!(server.statuses(&pro, 50), exactly(49, 50));
    let (status, policy, quota) = server.search(&pro);
    assert_eq!(status, 429);
    assert_eq!(policy.as_deref(), Some("\"user-10s\";q=50;w=10"), "the refusal names the pro rules");
    assert!(quota.is_some_and(|q| q.starts_with("\"user-10s\";r=0;t=")));

    // Bob's plan lapses: the free tier's counts are his own, untouched by his pro calls.
    assert_eq!(server.statuses(&[("X-User-Id", "bob")], 6), exactly(5, 6));
    // A plan the server does not know is the free tier.
    let (status, policy, _) = server.search(&[("X-User-Id", "carol"), ("X-Plan", "platinum")]);
    assert_eq!((status, policy.as_deref()), (200, Some("\"user-10s\";q=5;w=10")));
    // No user: 401, whatever the plan.
    assert_eq!(server.search(&[("X-Plan", "pro")]).0, 401);
}

#[test]
fn example_server_search_tiers_from_the_file_and_sighup() {
    let dir = shared().dir.join("server");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("limits.toml");
    // Compiled into this test binary as the module `server`, the handler is `tiers::server::search`.
    let entry = |rules: &str| {
        format!(
            "[[limit]]\nlimiter = \"tiers::server::search\"\ntype = \"user\"\ntier = \"pro\"\nrules = [\"{rules}\"]\n"
        )
    };
    std::fs::write(&file, entry("8/10s")).unwrap();
    let server = start_server(Some(&file));
    let pro = [("X-User-Id", "dave"), ("X-Plan", "pro")];
    let (status, policy, _) = server.search(&pro);
    assert_eq!((status, policy.as_deref()), (200, Some("\"user-10s\";q=8;w=10")), "the file's pro tier");
    assert_eq!(server.statuses(&pro, 8), exactly(7, 8));
    assert_eq!(server.statuses(&[("X-User-Id", "erin")], 6), exactly(5, 6), "free is unchanged");

    std::fs::write(&file, entry("12/10s")).unwrap();
    server.signal("HUP");
    server.wait_for("limits reloaded", Duration::from_secs(10));
    let pro = [("X-User-Id", "frank"), ("X-Plan", "pro")];
    let (status, policy, _) = server.search(&pro);
    assert_eq!((status, policy.as_deref()), (200, Some("\"user-10s\";q=12;w=10")), "reloaded");
    assert_eq!(server.statuses(&pro, 12), exactly(11, 12));
}
