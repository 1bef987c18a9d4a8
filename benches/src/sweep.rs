//! Decisions per second against the number of concurrent callers, for every mode next to its
//! reference, drawn to benches/throughput.svg (`--sweep` runs this alone; the whole harness runs
//! it last).
//!
//! Redis series run in this process (tokio tasks on a 2-worker runtime, one shared connection,
//! as section 2); in-memory series in a child process whose global store is memory, each caller
//! an OS thread (so past the machine's cores they show contention, not more throughput). Each
//! point is the median of `ROUNDS` rounds of `RUN` (`REDIS_ROUNDS` for Redis), the series
//! interleaved within a round (on Redis, each round's `RUN` in five turns per series).
//!
//! Another series joins by pushing one more [`Series`] into the list [`run`] returns before
//! [`write`] draws it (e.g. a hot key in sync mode, measured at [`CALLERS`]).

use crate::plot::Series;
use crate::report::{fmt, Figure, Report};
use crate::support::RedisServer;
use governor::{Quota, RateLimiter};
use ratelimit::{rate_limiter, RateLimited};
use std::hint::black_box;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The numbers of concurrent callers measured.
pub const CALLERS: [u32; 5] = [1, 4, 16, 64, 256];
/// Rounds per point (the median is drawn) and the length of one measurement.
const ROUNDS: usize = 3;
const RUN: Duration = Duration::from_millis(1000);
/// The Redis series' rounds: their points carry target rows, and on a 2-core machine shared with
/// the redis-server a round's ratio of the two series ranges ±15 % around the median (0.77–1.41×
/// at 4 callers in five rounds of one run), so they take the median of more.
const REDIS_ROUNDS: usize = 9;
const SUBJECTS: usize = 1000;

/// Where the figure goes: committed, next to the harness.
pub fn svg_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("throughput.svg")
}

/// Every series: Redis (here) and in memory (in a child process).
pub fn run(server: &RedisServer, report: &mut Report) -> Vec<Series> {
    println!("\n== Sweep: decisions per second against concurrent callers ==");
    let mut series = crate::redis_load::sweep(server, &CALLERS, RUN, REDIS_ROUNDS, report);
    series.push(hot_key(server));
    series.extend(run_memory_child());
    for s in &series {
        let row: Vec<String> = s.points.iter().map(|(c, v)| format!("{c}: {}", fmt(*v))).collect();
        println!("{:<52} {}", s.name, row.join("  "));
    }
    series
}

/// Sync mode: one worker process of section 11 (its callers are tokio tasks on one
/// connection, as the Redis series), on one global key that admits nearly every call.
fn hot_key(server: &RedisServer) -> Series {
    let points = CALLERS
        .iter()
        .map(|&c| {
            let runs = (0..ROUNDS).map(|_| crate::hot_key::decisions_per_sec(server, "sync", 1, c as usize)).collect();
            (c, Figure::of(runs).median)
        })
        .collect();
    Series { name: "Redis, hot key in sync mode (FixedWindow, sync = 10ms)".to_owned(), points }
}

/// Draws `series` to benches/throughput.svg.
pub fn write(series: &[Series]) {
    let path = svg_path();
    // The machine's load when the figure was drawn: on a shared machine it moves the figures.
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(|one| format!("; load {one} after the sweep")))
        .unwrap_or_default();
    let note = format!(
        "{} cores; Redis: tokio tasks, one connection; in memory: OS threads; median of {ROUNDS} runs of {} s ({REDIS_ROUNDS} on Redis){load}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        RUN.as_secs_f64()
    );
    match crate::plot::write_svg(&path, &note, series) {
        Ok(()) => println!("plot: {}", path.display()),
        Err(e) => println!("plot not written ({}): {e}", path.display()),
    }
}

/// Runs the in-memory child and reads its `SWEEP|series|callers|per_sec` lines.
fn run_memory_child() -> Vec<Series> {
    let exe = std::env::current_exe().expect("current exe");
    let out = std::process::Command::new(exe)
        .arg("--sweep-child")
        .env_remove("REDIS_URL")
        .env_remove("REDIS_CLUSTER_URLS")
        .output()
        .expect("run the sweep child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "sweep child failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let mut series: Vec<Series> = Vec::new();
    for line in stdout.lines() {
        let f: Vec<&str> = match line.strip_prefix("SWEEP|") {
            Some(rest) => rest.split('|').collect(),
            None => continue,
        };
        let (Some(name), Some(Ok(c)), Some(Ok(v))) =
            (f.first(), f.get(1).map(|c| c.parse()), f.get(2).map(|v| v.parse()))
        else {
            continue;
        };
        match series.iter_mut().find(|s| s.name == *name) {
            Some(s) => s.points.push((c, v)),
            None => series.push(Series { name: (*name).to_owned(), points: vec![(c, v)] }),
        }
    }
    series
}

#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 1_000_000_000)], name = "bench::sweep")]
fn decorated(ip: IpAddr) -> Result<(), RateLimited> {
    let _ = ip;
    Ok(())
}

/// The child (`--sweep-child`): the in-memory series, printed for the parent.
pub fn run_child() {
    let ips: Vec<IpAddr> = (0..SUBJECTS).map(|i| IpAddr::from([10, 2, (i / 256) as u8, (i % 256) as u8])).collect();
    let governor = RateLimiter::keyed(Quota::per_minute(NonZeroU32::new(u32::MAX).expect("nonzero")));
    let ours = |i: usize| black_box(decorated(ips[i % SUBJECTS])).expect("allowed");
    let theirs = |i: usize| {
        let _ = black_box(governor.check_key(&ips[i % SUBJECTS]));
    };
    let cases: [(&str, &(dyn Fn(usize) + Sync)); 2] =
        [("#[rate_limiter] fn, in memory (OS threads)", &ours), ("governor keyed, in memory (OS threads)", &theirs)];
    for (_, f) in &cases {
        for i in 0..SUBJECTS * 10 {
            f(i);
        }
    }
    let mut figures = vec![vec![Vec::new(); CALLERS.len()]; cases.len()];
    for _ in 0..ROUNDS {
        for (k, &callers) in CALLERS.iter().enumerate() {
            for (s, (_, f)) in cases.iter().enumerate() {
                figures[s][k].push(per_second(callers, *f));
            }
        }
    }
    for (s, (name, _)) in cases.iter().enumerate() {
        for (k, &callers) in CALLERS.iter().enumerate() {
            println!("SWEEP|{name}|{callers}|{}", Figure::of(figures[s][k].clone()).median);
        }
    }
}

/// Decisions per second of `f` called in a loop by `threads` threads for `RUN`.
fn per_second(threads: u32, f: &(dyn Fn(usize) + Sync)) -> f64 {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads as usize {
            let (stop, total) = (&stop, &total);
            s.spawn(move || {
                let mut n = 0usize;
                // The flag is read once per 256 calls: a clock or atomic read per call would
                // weigh on calls of a few dozen ns.
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        f(t * 7919 + n);
                        n += 1;
                    }
                }
                total.fetch_add(n as u64, Ordering::Relaxed);
            });
        }
        std::thread::sleep(RUN);
        stop.store(true, Ordering::Relaxed);
    });
    total.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}
