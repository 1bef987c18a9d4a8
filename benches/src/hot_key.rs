//! Section 11: one hot key from four processes, exact mode next to sync mode.
//!
//! Every process is a child of this binary (`--hot-key-worker`), with its own limiter and its
//! own connection to the harness's Redis, as four app servers would be. Two figures:
//! decisions per second on a limit high enough to admit nearly every call (exact mode is then
//! bound by Redis's one core on the key), and, on a tight limit, the busiest second's admissions
//! against the documented bound `count + P × (cap + tasks)`.

use crate::report::{fmt, Figure, Report, Target, ROUNDS};
use crate::support::{busiest_span, RedisServer};
use ratelimit::store::{RedisStore, StoreHandle};
use ratelimit::{Algorithm, Limit, LimitType, Limiter, Rule, Subject};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const PROCESSES: usize = 4;
/// Callers per process: 64 in all, the harness's concurrency.
pub const TASKS: usize = 16;
const SYNC: Duration = Duration::from_millis(10);
/// The tight limit of the bound figure: 20 000 per second, so a reserve holds at most 200.
const TIGHT: u64 = 20_000;
const HIGH: u64 = 1_000_000_000;

/// One worker's answer: decisions made, and the time (µs since the epoch) of each admission
/// when asked for them.
pub struct Worker {
    pub decisions: u64,
    pub admitted: Vec<u64>,
}

/// The body of a worker process: `--hot-key-worker <redis url> <exact|sync> <count> <ms> <tasks> <times|count> <threads>`.
/// A tight limit (`times`) is a sliding window, whose exact admissions in any second are at
/// most its count, so the bound is checked against the exact definition; the throughput figure
/// uses a fixed window, the usual choice for a global limit (a sliding window stores one entry
/// per unit, so a batch costs Redis as much work as its units: see docs/sync.md).
pub fn run_child() {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == "--hot-key-worker").unwrap_or(0);
    let arg = |i: usize| args.get(at + i).cloned().unwrap_or_default();
    let (url, mode) = (arg(1), arg(2));
    let count: u64 = arg(3).parse().unwrap_or(HIGH);
    let run = Duration::from_millis(arg(4).parse().unwrap_or(1500));
    let tasks: usize = arg(5).parse().unwrap_or(TASKS);
    let times = arg(6) == "times";
    // One runtime thread per process when four share the machine; two when one process runs
    // alone (as the other Redis series of the sweep).
    let threads: usize = arg(7).parse().unwrap_or(1);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().expect("runtime");
    rt.block_on(async move {
        let store: StoreHandle = Arc::new(RedisStore::open(&url, Duration::from_secs(2)).expect("redis"));
        let algorithm = if times { Algorithm::SlidingWindow } else { Algorithm::FixedWindow };
        let mut limit = Limit::new(LimitType::Global, [Rule::new(Duration::from_secs(1), count).expect("rule")])
            .algorithm(algorithm);
        if mode == "sync" {
            limit = limit.sync(SYNC);
        }
        let l = Limiter::builder(format!("bench::hot::{mode}::{count}"))
            .limit(limit)
            .store(store)
            .build()
            .expect("limiter");
        let decisions = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + run;
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                let (l, decisions) = (l.clone(), decisions.clone());
                tokio::spawn(async move {
                    let mut admitted = Vec::new();
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        let ok = l.check(&[Subject::global()]).await.is_ok();
                        if ok && times {
                            admitted.push(now_us());
                        }
                        n += 1;
                        // Local decisions never yield by themselves: let the other callers run.
                        if n.is_multiple_of(64) {
                            tokio::task::yield_now().await;
                        }
                    }
                    decisions.fetch_add(n, Ordering::Relaxed);
                    admitted
                })
            })
            .collect();
        let mut admitted = Vec::new();
        for h in handles {
            admitted.extend(h.await.unwrap_or_default());
        }
        println!("decisions {}", decisions.load(Ordering::Relaxed));
        let times: Vec<String> = admitted.iter().map(u64::to_string).collect();
        println!("admitted {}", times.join(" "));
    });
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// Runs `processes` workers at once, each with `tasks` callers; their answers.
pub fn workers(
    server: &RedisServer,
    mode: &str,
    count: u64,
    run: Duration,
    processes: usize,
    tasks: usize,
    times: bool,
) -> Vec<Worker> {
    let exe = std::env::current_exe().expect("own path");
    let children: Vec<_> = (0..processes)
        .map(|_| {
            Command::new(&exe)
                .args(["--hot-key-worker", &server.url(), mode, &count.to_string(), &run.as_millis().to_string()])
                .args([tasks.to_string(), if times { "times" } else { "count" }.to_owned()])
                .arg(if processes == 1 { "2" } else { "1" })
                .stdout(Stdio::piped())
                .spawn()
                .expect("a worker process")
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().expect("worker output");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let mut w = Worker { decisions: 0, admitted: Vec::new() };
            for line in text.lines() {
                if let Some(n) = line.strip_prefix("decisions ") {
                    w.decisions = n.trim().parse().unwrap_or(0);
                } else if let Some(rest) = line.strip_prefix("admitted ") {
                    w.admitted.extend(rest.split(' ').filter_map(|t| t.parse::<u64>().ok()));
                }
            }
            w
        })
        .collect()
}

/// Decisions per second of `processes × tasks` callers on one hot key that admits nearly all.
pub fn decisions_per_sec(server: &RedisServer, mode: &str, processes: usize, tasks: usize) -> f64 {
    // Each worker counts for `run` from its own start: process start-up is not decisions' time.
    let run = Duration::from_millis(1500);
    let total: u64 = workers(server, mode, HIGH, run, processes, tasks, false).iter().map(|w| w.decisions).sum();
    total as f64 / run.as_secs_f64()
}

pub fn run(server: &RedisServer, report: &mut Report) {
    println!(
        "\n== 11. One hot key, {PROCESSES} processes x {TASKS} callers (exact vs sync = {}ms) ==",
        SYNC.as_millis()
    );
    let (mut exact, mut sync) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        exact.push(decisions_per_sec(server, "exact", PROCESSES, TASKS));
        sync.push(decisions_per_sec(server, "sync", PROCESSES, TASKS));
    }
    let (exact, sync) = (Figure::of(exact), Figure::of(sync));
    println!("{:<40} {}", "exact mode (every decision in Redis)", exact.show("/s"));
    println!("{:<40} {}", "sync mode", sync.show("/s"));
    report.target(Target {
        name: "11. hot key, 4 processes: sync / exact",
        measured: format!("{}/s", fmt(sync.median)),
        reference: format!("{}/s", fmt(exact.median)),
        ratio: sync.median / exact.median,
        bound: 10.0,
        at_most: false,
    });

    // The bound, on a limit the callers exceed many times over.
    let cap = TIGHT * SYNC.as_micros() as u64 / 1_000_000;
    let bound = TIGHT + PROCESSES as u64 * (cap + TASKS as u64);
    let mut busiest = Vec::new();
    for mode in ["exact", "sync"] {
        let mut times: Vec<u64> = workers(server, mode, TIGHT, Duration::from_secs(3), PROCESSES, TASKS, true)
            .into_iter()
            .flat_map(|w| w.admitted)
            .collect();
        times.sort_unstable();
        let most = busiest_span(&times, 1_000_000) as u64;
        println!(
            "{:<40} {most} admitted in the busiest second ({} in all; limit {TIGHT}, bound {bound})",
            mode,
            times.len()
        );
        busiest.push(most);
    }
    report.target(Target {
        name: "11. hot key, sync: busiest second / bound",
        measured: format!("{}", busiest[1]),
        reference: format!("{bound}"),
        ratio: busiest[1] as f64 / bound as f64,
        bound: 1.0,
        at_most: true,
    });
}
