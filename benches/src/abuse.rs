//! The abuse benchmark (issue 12): the example server on Redis under a real HTTP load generator,
//! `wrk -t2 -c64 -d8s` hammering `/api/hello` (20 per 10 s per IP) from one IP, next to
//! `/healthz` (no limit) in the same run. With the local refusal cache, refused requests cost no
//! Redis round trip: targets ≥ 0.8× the `/healthz` rate and ≤ 1 `EVALSHA` per 100 refused.
//!
//! Alone: `cargo run --release --manifest-path benches/Cargo.toml -- --abuse`.

use crate::report::{fmt, Figure, Report, Target};
use crate::support::RedisServer;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

const WRK_ARGS: [&str; 4] = ["-t2", "-c64", "-d8s", "--latency"];
/// wrk runs per route, interleaved (each 8 s).
const ROUNDS: usize = 5;

/// The example server, built in release mode from the library's own package.
pub fn server_binary() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "--release", "--example", "server", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .status()
        .expect("run cargo build --example server");
    assert!(status.success(), "building the example server failed");
    root.join("target/release/examples/server")
}

pub struct Server(Child, pub String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server(binary: &PathBuf, redis: &RedisServer) -> Server {
    start_server_with(binary, redis, &[])
}

/// The example server on `redis`, with more environment variables; its address is `.1`.
pub fn start_server_with(binary: &PathBuf, redis: &RedisServer, env: &[(&str, &str)]) -> Server {
    let mut child = Command::new(binary)
        .args(["--listen", "127.0.0.1:0"])
        .env("REDIS_URL", redis.url())
        .env_remove("RATELIMIT_REFUSAL_CACHE")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the example server");
    let stdout = child.stdout.take().expect("server stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("server startup line");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected startup line {line:?}"))
        .to_owned();
    Server(child, addr)
}

/// One wrk run: (requests/s, non-2xx responses, requests).
fn wrk(url: &str) -> (f64, u64, u64) {
    let out = Command::new("wrk").args(WRK_ARGS).arg(url).output().unwrap_or_else(|e| {
        panic!("wrk is not installed ({e}): apt-get install -y wrk; the abuse benchmark needs a real HTTP load")
    });
    assert!(out.status.success(), "wrk failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |prefix: &str| -> Option<f64> {
        text.lines().find_map(|l| l.trim().strip_prefix(prefix)).and_then(|v| v.trim().parse().ok())
    };
    let rate = field("Requests/sec:").expect("wrk Requests/sec");
    let non2xx = field("Non-2xx or 3xx responses:").unwrap_or(0.0) as u64;
    let requests = text
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("wrk request count");
    (rate, non2xx, requests)
}

fn evalsha_calls(redis: &RedisServer) -> u64 {
    redis.calls("evalsha")
}

fn flush_and_reset(redis: &RedisServer) {
    let mut c = redis.client();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).expect("flushall");
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).expect("resetstat");
}

pub fn run(redis: &RedisServer, report: &mut Report) {
    println!("\n== 9. Abuse: example server on Redis, wrk {} on one route from one IP ==", WRK_ARGS.join(" "));
    let binary = server_binary();
    let server = start_server(&binary, redis);
    let base = format!("http://{}", server.1);
    let (mut health, mut abuse, mut ratio, mut per100) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (h, _, _) = wrk(&format!("{base}/healthz"));
        // A fresh budget each round: the first 20 requests pass, the rest are 429.
        flush_and_reset(redis);
        let (a, refused, requests) = wrk(&format!("{base}/api/hello"));
        let evals = evalsha_calls(redis);
        let p = evals as f64 * 100.0 / refused.max(1) as f64;
        println!(
            "round {round}: /healthz {h:.0}/s; /api/hello {a:.0}/s ({requests} requests, {refused} refused, {evals} EVALSHA = {p:.3} per 100 refused)"
        );
        health.push(h);
        abuse.push(a);
        // The ratio of each round's adjacent runs: steadier than a ratio of medians on a machine
        // whose load drifts.
        ratio.push(a / h);
        per100.push(p);
    }
    let (h, a, r, p) = (Figure::of(health), Figure::of(abuse), Figure::of(ratio), Figure::of(per100));
    println!("/healthz                                 {}", h.show("/s"));
    println!("/api/hello, one IP, all but 20 refused   {}", a.show("/s"));
    println!("refused route / healthz, per round       {}", r.show("x"));
    println!("EVALSHA per 100 refused requests         {}", p.show(""));
    report.target(Target {
        name: "9. abuse: refused route / healthz rate",
        measured: format!("{}/s", fmt(a.median)),
        reference: format!("{}/s", fmt(h.median)),
        ratio: r.median,
        bound: 0.8,
        at_most: false,
    });
    report.target(Target {
        name: "9. abuse: EVALSHA per 100 refused requests",
        measured: fmt(p.median),
        reference: "1".to_owned(),
        ratio: p.median,
        bound: 1.0,
        at_most: true,
    });
}
