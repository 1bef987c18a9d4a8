//! A key flood through the example server, as an attacker would send it: `wrk` asks
//! `GET /api/hello` from a new IPv6 /64 on every request (through a trusted proxy's
//! `X-Forwarded-For`: every client a subject of its own for a minute, the route's longest
//! window), on the memory store with its default bound, until the store is full and forgets
//! subjects; meanwhile a client blocked for guessing passwords keeps trying. The server's memory
//! stays bounded, and the blocked client stays refused.
//!
//! The server runs in its own process, this test binary re-executed (see
//! tests/support/server_process.rs).

#[path = "support/prometheus.rs"]
#[allow(dead_code)]
mod prometheus;
#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use prometheus::Scrape;
use ratelimit::store::DEFAULT_MAX_KEYS;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::server_process::{loopback, post_json, request, Server};

/// Not a test of its own: the body of the server processes that the tests start (see
/// tests/support/server_process.rs and tests/support/child.rs).
#[test]
#[ignore = "the server process the other tests start"]
fn server_process() {
    support::server_process::child_main(server::run);
}

/// The most the server may hold resident with the default bound full. Measured: about 70 MB
/// (250 000 keys of about 200 bytes, each a one-entry sliding-window log, and the runtime),
/// flat once the store is full; without the bound, the same flood passes it in a minute at
/// 8 000 requests a second, and grows without end.
const MAX_RSS_MB: u64 = 120;
/// The longest the flood may last: well inside the 2-minute block of the password guesser.
const FLOOD_AT_MOST: Duration = Duration::from_secs(75);

/// wrk's request generator: every request from a /64 no one sent from before (a group of its
/// own per run, given as the script's argument, and thread, then a counter over two more).
const FLOOD_LUA: &str = r#"
local next_thread = 0
function setup(thread)
  next_thread = next_thread + 1
  thread:set("tid", next_thread)
end
local group
function init(args)
  group = tonumber(args[1]) * 16 + tid
end
local n = 0
function request()
  n = n + 1
  local ip = string.format("fd00:%x:%x:%x::1", group, math.floor(n / 65536), n % 65536)
  return wrk.format("GET", "/api/hello", { ["X-Forwarded-For"] = ip })
end
"#;

/// A line of `/proc/<pid>/status`, in kB.
fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read the server's /proc status");
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} in {status}"));
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{line:?}"))
}

fn scrape(server: &Server) -> Scrape {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let reply = rt.block_on(request(server.addr, loopback(3), "GET", "/metrics", &[]));
    assert_eq!(reply.status, 200, "{reply:?}");
    Scrape::parse(&reply.body).expect("the Prometheus text format")
}

#[test]
fn a_key_flood_stays_within_the_memory_bound_and_a_blocked_client_stays_blocked() {
    // wrk connects from 127.0.0.1, the proxy; the password guesser from 127.0.0.9, itself.
    let server = Server::start(&["--trust-proxy", "127.0.0.1/32"], &[]);
    assert!(server.startup_line.contains(&format!("memory bound: {DEFAULT_MAX_KEYS} keys")), "{}", server.startup_line);
    let addr = server.addr;
    let rss_before = status_kb(server.pid(), "VmRSS:");

    // The password guesser: 5 failures in a minute, then 2 minutes of 429 from the 6th try.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let guess = || rt.block_on(post_json(addr, loopback(9), "/api/login", r#"{"password":"guess"}"#)).status;
    for _ in 0..5 {
        assert_eq!(guess(), 401);
    }
    assert_eq!(guess(), 429, "the 6th failure starts the block");

    // It keeps trying, from its own thread, all through the flood.
    let stop = Arc::new(AtomicBool::new(false));
    let guesser = std::thread::spawn({
        let stop = stop.clone();
        move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let mut statuses = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                statuses
                    .push(rt.block_on(post_json(addr, loopback(9), "/api/login", r#"{"password":"guess"}"#)).status);
                std::thread::sleep(Duration::from_millis(100));
            }
            statuses
        }
    });

    // The flood, 5 s at a time, until the store has been full for a whole round.
    let dir = std::env::temp_dir().join(format!("ratelimit-flood-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let script = dir.join("flood.lua");
    std::fs::write(&script, FLOOD_LUA).expect("write the wrk script");
    let started = Instant::now();
    let mut requests = 0u64;
    let mut full_rounds = 0;
    for run in 1.. {
        if full_rounds == 2 {
            break;
        }
        assert!(
            started.elapsed() < FLOOD_AT_MOST,
            "the store never filled: {requests} requests in {:?}",
            started.elapsed()
        );
        let out = Command::new("wrk")
            .args(["-t2", "-c32", "-d5s", "-s"])
            .arg(&script)
            .arg(format!("http://{addr}/"))
            .args(["--", &run.to_string()])
            .output()
            .unwrap_or_else(|e| panic!("wrk is not installed ({e}): scripts/test.sh installs it"));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr));
        requests += text
            .lines()
            .find(|l| l.contains(" requests in "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no request count in wrk's output:\n{text}"));
        if scrape(&server).sum("ratelimit_memory_evictions_total", &[]) > 0.0 {
            full_rounds += 1;
        }
    }
    let flood = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let statuses = guesser.join().expect("the guesser thread");
    let _ = std::fs::remove_dir_all(&dir);

    let metrics = scrape(&server);
    let keys = metrics.sum("ratelimit_memory_keys", &[]);
    let evicted = metrics.sum("ratelimit_memory_evictions_total", &[]);
    let rss_peak = status_kb(server.pid(), "VmHWM:");
    eprintln!(
        "flood: {requests} requests (new subjects) in {flood:.1?}; {keys} keys held, {evicted} forgotten; \
         RSS {} MB before, peak {} MB",
        rss_before / 1024,
        rss_peak / 1024
    );

    assert!(keys <= DEFAULT_MAX_KEYS as f64, "{keys} keys held");
    assert!(evicted > 0.0 && requests > DEFAULT_MAX_KEYS as u64, "the flood filled the store");
    assert!(rss_peak / 1024 < MAX_RSS_MB, "peak RSS {} MB", rss_peak / 1024);
    assert!(!statuses.is_empty());
    assert!(statuses.iter().all(|&s| s == 429), "the blocked client got through during the flood: {statuses:?}");
    assert!(server.logged("memory store full") >= 1, "the eviction warning is logged");
    assert!(server.logged("memory store full") <= 2, "at most once a minute: {}", server.output());
}
