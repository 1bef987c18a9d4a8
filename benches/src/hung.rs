//! A hung store (issue 23): Redis stopped with `SIGSTOP` under the example server, its circuit
//! breaker open, `wrk -t2 -c64 -d5s --latency` on `/api/hello` (decided in process memory,
//! `RATELIMIT_ON_ERROR=local`) next to `/healthz` (no limit), interleaved. Without the breaker
//! every decision would wait for the 250 ms store timeout; with it, only one trial call per
//! pause does. Target: p99 of `/api/hello` ≤ 2× the p99 of `/healthz`.
//!
//! Alone: `cargo run --release --manifest-path benches/Cargo.toml -- --hung`.

use crate::abuse::{server_binary, start_server_with};
use crate::report::{fmt, Figure, Report, Target};
use crate::support::RedisServer;
use std::process::Command;

const WRK_ARGS: [&str; 4] = ["-t2", "-c64", "-d5s", "--latency"];
const ROUNDS: usize = 3;

/// One wrk run: (p50, p99) in µs, from its latency distribution.
fn wrk_latency(url: &str, args: &[&str]) -> (f64, f64) {
    let out = Command::new("wrk").args(args).arg(url).output().unwrap_or_else(|e| {
        panic!("wrk is not installed ({e}): apt-get install -y wrk; this benchmark needs a real HTTP load")
    });
    assert!(out.status.success(), "wrk failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let percentile = |p: &str| -> f64 {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(p).map(str::trim))
            .and_then(micros)
            .unwrap_or_else(|| panic!("no {p} line in wrk's output:\n{text}"))
    };
    (percentile("50%"), percentile("99%"))
}

/// `391.00us`, `1.04ms`, `2.00s` in µs.
fn micros(v: &str) -> Option<f64> {
    let (number, scale) = if let Some(n) = v.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e6)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|x| x * scale)
}

pub fn run(report: &mut Report) {
    println!("\n== 10. A hung store: Redis stopped (SIGSTOP), wrk {} ==", WRK_ARGS.join(" "));
    let redis = RedisServer::start();
    let binary = server_binary();
    let server = start_server_with(&binary, &redis, &[("RATELIMIT_ON_ERROR", "local")]);
    let base = format!("http://{}", server.1);
    let (p50, p99) = wrk_latency(&format!("{base}/api/hello"), &["-t1", "-c8", "-d1s", "--latency"]);
    println!("Redis up: /api/hello p50 {} µs, p99 {} µs", fmt(p50), fmt(p99));
    redis.pause();
    // Three calls wait for the timeout, then the breaker opens.
    let (p50, p99) = wrk_latency(&format!("{base}/api/hello"), &["-t1", "-c8", "-d2s", "--latency"]);
    println!("Redis stopped, breaker opening: /api/hello p50 {} µs, p99 {} µs", fmt(p50), fmt(p99));
    let (mut health, mut hung, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (h50, h99) = wrk_latency(&format!("{base}/healthz"), &WRK_ARGS);
        let (a50, a99) = wrk_latency(&format!("{base}/api/hello"), &WRK_ARGS);
        println!(
            "round {round}: /healthz p50 {} µs p99 {} µs; /api/hello (store hung) p50 {} µs p99 {} µs",
            fmt(h50),
            fmt(h99),
            fmt(a50),
            fmt(a99)
        );
        health.push(h99);
        hung.push(a99);
        ratio.push(a99 / h99);
    }
    redis.resume();
    let (h, a, r) = (Figure::of(health), Figure::of(hung), Figure::of(ratio));
    println!("/healthz p99                              {}", h.show("µs"));
    println!("/api/hello p99, store hung, breaker open  {}", a.show("µs"));
    println!("hung p99 / healthz p99, per round         {}", r.show("x"));
    report.target(Target {
        name: "10. store hung: p99, breaker open / healthz",
        measured: format!("{} µs", fmt(a.median)),
        reference: format!("{} µs", fmt(h.median)),
        ratio: r.median,
        bound: 2.0,
        at_most: true,
    });
}
