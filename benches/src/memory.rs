//! The in-process figures, run in a child process whose global store is memory: ns per decision
//! next to governor, the attribute's overhead over a hand-written call, and bytes per subject.

use crate::report::{fmt, Figure, Report, Target, ROUNDS};
use governor::{Quota, RateLimiter};
use ratelimit::{
    clock::ManualClock, rate_limiter, store::MemoryStore, Algorithm, Limit, LimitType, Limiter, RateLimited, Rule,
    Subject,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counts live heap bytes while `COUNTING` is on (off during timings, so they pay nothing but a
/// relaxed load).
struct Counting;
static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const HUGE: u64 = 1_000_000_000;
const SUBJECTS: usize = 1000;
/// Calls per measurement (`BENCH_CALLS` overrides, e.g. for a run under callgrind).
fn calls() -> usize {
    std::env::var("BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000)
}

#[rate_limiter(type = Ip, ip = ip, rules = [(60s, 1_000_000_000)], name = "bench::macro")]
fn decorated(ip: IpAddr) -> Result<(), RateLimited> {
    let _ = ip;
    Ok(())
}

fn ips() -> Vec<IpAddr> {
    (0..SUBJECTS).map(|i| IpAddr::from([10, 1, (i / 256) as u8, (i % 256) as u8])).collect()
}

/// ns per decision with `threads` threads each making `CALLS / threads` calls (wall time over
/// all calls, so 2 threads show how the store scales).
fn ns_per_call(threads: usize, f: &(dyn Fn(usize) + Sync)) -> f64 {
    let calls = calls();
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                for i in 0..calls / threads {
                    f(t * 7919 + i);
                }
            });
        }
    });
    started.elapsed().as_secs_f64() * 1e9 / calls as f64
}

/// `calls` calls of `f` on this thread: what callgrind counts (`--toggle-collect`).
#[inline(never)]
fn measure(calls: usize, f: &(dyn Fn(usize) + Sync)) {
    for i in 0..calls {
        f(i);
    }
}

type Case<'a> = (&'a str, &'a (dyn Fn(usize) + Sync));

fn cases_one<'a>(cases: &[Case<'a>], k: usize) -> &'a (dyn Fn(usize) + Sync) {
    cases[k.min(cases.len() - 1)].1
}

fn memory_limiter(alg: Algorithm) -> Limiter {
    Limiter::builder(format!("bench::memory::{alg:?}"))
        .limit(Limit::new(LimitType::Ip, [Rule::from_millis(60_000, HUGE).expect("rule")]).algorithm(alg).prefix("m:"))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .expect("limiter")
}

pub fn run_child() {
    let ips = ips();
    let quota = Quota::per_minute(NonZeroU32::new(u32::MAX).expect("nonzero"));
    let governor = RateLimiter::keyed(quota);
    let sliding = memory_limiter(Algorithm::SlidingWindow);
    let gcra = memory_limiter(Algorithm::Gcra);
    // Three rules decided exactly together (all pass or none counts), against governor's keyed
    // limiters called in turn (which cannot take back what the first ones took).
    let rules3 = [1_000, 60_000, 3_600_000].map(|ms| Rule::from_millis(ms, HUGE).expect("rule"));
    let gcra3 = Limiter::builder("bench::memory::gcra3")
        .limit(Limit::new(LimitType::Ip, rules3).algorithm(Algorithm::Gcra).prefix("m:"))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .expect("limiter");
    let per = |n: u32| NonZeroU32::new(n).expect("nonzero");
    let governors =
        [Quota::per_second(per(u32::MAX)), Quota::per_minute(per(u32::MAX)), Quota::per_hour(per(u32::MAX))]
            .map(RateLimiter::keyed);
    // Two stacked limits (the README's shape): an Ip limit of two rules and a Global one, against
    // governor's two keyed limiters and one direct limiter called in turn.
    let stacked = Limiter::builder("bench::memory::stacked")
        .limit(Limit::new(LimitType::Ip, [rules3[0], rules3[1]]).algorithm(Algorithm::Gcra).prefix("m:"))
        .limit(Limit::new(LimitType::Global, [rules3[2]]).algorithm(Algorithm::Gcra).prefix("m:"))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .expect("limiter");
    let global = RateLimiter::direct(Quota::per_hour(per(u32::MAX)));
    let by_hand = Limiter::builder("bench::by_hand")
        .limit(Limit::new(LimitType::Ip, [Rule::from_millis(60_000, HUGE).expect("rule")]))
        .build()
        .expect("limiter");

    let gov = |i: usize| {
        let _ = black_box(governor.check_key(&ips[i % SUBJECTS]));
    };
    let sw = |i: usize| {
        black_box(sliding.check(&[Subject::ip(ips[i % SUBJECTS])]).blocking()).expect("allowed");
    };
    let gc = |i: usize| {
        black_box(gcra.check(&[Subject::ip(ips[i % SUBJECTS])]).blocking()).expect("allowed");
    };
    let hand = |i: usize| {
        black_box(by_hand.check(&[Subject::ip(ips[i % SUBJECTS])]).blocking()).expect("allowed");
    };
    let attr = |i: usize| black_box(decorated(ips[i % SUBJECTS])).expect("allowed");
    let gov3 = |i: usize| {
        for g in &governors {
            let _ = black_box(g.check_key(&ips[i % SUBJECTS]));
        }
    };
    let gc3 = |i: usize| {
        black_box(gcra3.check(&[Subject::ip(ips[i % SUBJECTS])]).blocking()).expect("allowed");
    };
    let st = |i: usize| {
        black_box(stacked.check(&[Subject::ip(ips[i % SUBJECTS]), Subject::global()]).blocking()).expect("allowed");
    };
    let gov_st = |i: usize| {
        let _ = black_box(governors[0].check_key(&ips[i % SUBJECTS]));
        let _ = black_box(governors[1].check_key(&ips[i % SUBJECTS]));
        let _ = black_box(global.check());
    };
    let floor = crate::floor::Floor::new(60_000_000, HUGE);
    let fl = |i: usize| {
        match black_box(floor.check(&[crate::floor::Ip::of(ips[i % SUBJECTS])], 1)) {
            Ok(p) => black_box((p.floor, p.cost, p.remaining, p.reset_us, p.at_us, p.subject)),
            Err(refused) => panic!("the floor refused for {} µs", refused.retry_after_us),
        };
    };

    println!("== 4. In-memory store, ns per decision (1000 client IPs) ==");
    let cases: [Case; 10] = [
        ("governor keyed (reference)", &gov),
        ("ratelimit SlidingWindow", &sw),
        ("ratelimit Gcra", &gc),
        ("Limiter::check(..).blocking() by hand", &hand),
        ("#[rate_limiter] fn", &attr),
        ("governor keyed x3, in turn", &gov3),
        ("ratelimit Gcra, 3 rules at once", &gc3),
        ("floor: exact GCRA, no layers (yardstick)", &fl),
        ("ratelimit Gcra, 2 stacked limits", &st),
        ("governor keyed x2 + direct, in turn", &gov_st),
    ];
    // One case alone, for an instruction count: `BENCH_CASE=3 BENCH_CALLS=100000 valgrind
    // --tool=callgrind <bench> --in-memory` (3: by hand, 4: the attribute).
    if let Some(k) = std::env::var("BENCH_CASE").ok().and_then(|v| v.parse::<usize>().ok()) {
        // Warmed up first (stores, lazy limiters, the clock's calibration), then measured on this
        // thread: callgrind counts `measure` alone (`--toggle-collect`, see
        // `instructions_per_call`), so no one-time or timing-dependent work enters the count.
        let f = cases_one(&cases, k);
        for i in 0..SUBJECTS {
            f(i);
        }
        measure(calls(), f);
        return;
    }
    // Nanosecond figures are noisy on a shared 2-core machine: more rounds, and the order of the
    // cases alternates so no case always runs first (or right after another).
    let mut figures = vec![[Vec::new(), Vec::new()]; cases.len()];
    for round in 0..ROUNDS * 2 - 1 {
        let mut order: Vec<usize> = (0..cases.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for k in order {
            figures[k][0].push(ns_per_call(1, cases[k].1));
            figures[k][1].push(ns_per_call(2, cases[k].1));
        }
    }
    let figures: Vec<[Figure; 2]> = figures.into_iter().map(|[a, b]| [Figure::of(a), Figure::of(b)]).collect();
    for (k, (label, _)) in cases.iter().enumerate() {
        println!("{label:<36} 1 thread {:<24} 2 threads {}", figures[k][0].show("ns"), figures[k][1].show("ns"));
    }
    let target = |name: &str, ours: usize, theirs: usize, threads: usize, bound: f64| {
        println!(
            "TARGET|{name}|{} ns|{} ns|{}|{bound}|1",
            fmt(figures[ours][threads].median),
            fmt(figures[theirs][threads].median),
            figures[ours][threads].median / figures[theirs][threads].median
        );
    };
    target("4. memory SlidingWindow / governor, 1 thread", 1, 0, 0, 2.5);
    target("4. memory SlidingWindow / governor, 2 threads", 1, 0, 1, 2.5);
    target("4. memory Gcra / governor, 1 thread", 2, 0, 0, 1.5);
    target("4. memory Gcra / governor, 2 threads", 2, 0, 1, 1.5);

    println!("\n== 5. Attribute overhead (in-memory store, 1 thread) ==");
    println!("by hand {}  decorated {}", figures[3][0].show("ns"), figures[4][0].show("ns"));
    target("5. #[rate_limiter] fn / Limiter by hand", 4, 3, 0, 1.05);
    target("4. memory Gcra 3 rules / governor x3, 1 thread", 6, 5, 0, 1.0);
    target("4. memory Gcra 3 rules / governor x3, 2 threads", 6, 5, 1, 1.0);

    println!(
        "stacked limits (Ip of 2 rules + Global of 1) / governor (2 keyed + 1 direct, in turn): {:.2}x on 1 thread, \
         {:.2}x on 2",
        figures[8][0].median / figures[9][0].median,
        figures[8][1].median / figures[9][1].median
    );

    println!("\n== 6. In-memory store, heap bytes per subject ==");
    bytes_per_subject();
}

fn bytes_per_subject() {
    let clock = Arc::new(ManualClock::new(4_000_000_000_000_000));
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let limiter = Limiter::builder("bench::bytes")
        .limit(Limit::new(LimitType::User, [Rule::from_millis(1000, 10).expect("rule")]))
        .store(store.clone())
        .build()
        .expect("limiter");
    let users: Vec<String> = (0..10_000).map(|i| format!("user-{i:05}")).collect();
    let call = |u: &str, cost| limiter.check(&[Subject::bytes(u.as_bytes())]).cost(cost).blocking();
    let _ = call("warm-up", 1);
    COUNTING.store(true, Ordering::SeqCst);
    let before = LIVE.load(Ordering::SeqCst);
    for u in &users {
        call(u, 1).expect("allowed");
    }
    let active = LIVE.load(Ordering::SeqCst) - before;
    clock.advance(Duration::from_secs(2));
    let idle = LIVE.load(Ordering::SeqCst) - before;
    for _ in 0..70_000 {
        call("sweeper", 0).expect("allowed");
    }
    let swept = LIVE.load(Ordering::SeqCst) - before;
    COUNTING.store(false, Ordering::SeqCst);
    let per = |b: isize| b as f64 / users.len() as f64;
    println!(
        "active subject (1 entry): {:.0} B; idle before its shard is swept: {:.0} B; after the sweep: {:.1} B (store.len() = {})",
        per(active),
        per(idle),
        per(swept),
        store.len()
    );
}

/// Instructions per call of one in-memory case, counted by callgrind (repeatable, unlike
/// nanoseconds on a shared machine) inside `measure` only, after a warm-up: the difference
/// between runs of 200 000 and 100 000 calls.
fn instructions_per_call(case: usize) -> Option<f64> {
    instructions_per_call_of(&std::env::current_exe().ok()?, case)
}

/// As [`instructions_per_call`], of the harness binary `exe` (this one, or a twin built
/// differently).
pub fn instructions_per_call_of(exe: &std::path::Path, case: usize) -> Option<f64> {
    let mut totals = Vec::new();
    for calls in [100_000u64, 200_000] {
        let out = std::env::temp_dir().join(format!("ratelimit-bench-{}-{case}-{calls}.cg", std::process::id()));
        let status = std::process::Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg("--collect-atstart=no")
            .arg("--toggle-collect=ratelimit_bench::memory::measure")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(exe)
            .arg("--in-memory")
            .env("BENCH_CASE", case.to_string())
            .env("BENCH_CALLS", calls.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        let text = std::fs::read_to_string(&out).ok();
        let _ = std::fs::remove_file(&out);
        if !status.success() {
            return None;
        }
        let total = text?
            .lines()
            .find_map(|l| l.strip_prefix("summary: ").or_else(|| l.strip_prefix("totals: ")).map(str::to_owned))?;
        totals.push(total.trim().parse::<f64>().ok()?);
    }
    Some((totals[1] - totals[0]) / 100_000.0)
}

/// Runs the child and folds its TARGET lines into the report.
pub fn run_from_parent(report: &mut Report) {
    let exe = std::env::current_exe().expect("current exe");
    let out = std::process::Command::new(exe)
        .arg("--in-memory")
        .env_remove("REDIS_URL")
        .env_remove("REDIS_CLUSTER_URLS")
        .output()
        .expect("run the in-memory child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "in-memory child failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    println!();
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("TARGET|") else {
            println!("{line}");
            continue;
        };
        let f: Vec<&str> = rest.split('|').collect();
        let name: &'static str = Box::leak(f[0].to_owned().into_boxed_str());
        report.target(Target {
            name,
            measured: f[1].to_owned(),
            reference: f[2].to_owned(),
            ratio: f[3].parse().unwrap_or(f64::NAN),
            bound: f[4].parse().unwrap_or(f64::NAN),
            at_most: f[5] == "1",
        });
    }
    // A one-limit decision's instructions against governor's: repeatable on any host.
    let governor = instructions_per_call(0);
    let mut gcra = None;
    if let Some(governor) = governor {
        for (name, case, bound) in [
            ("4. memory Gcra / governor, instructions", 2, 1.5),
            ("4. memory SlidingWindow / governor, instructions", 1, 2.5),
        ] {
            let Some(ours) = instructions_per_call(case) else { continue };
            println!("{name}: {ours:.0} against {governor:.0} instructions per call");
            if case == 2 {
                gcra = Some(ours);
            }
            report.target(Target {
                name,
                measured: format!("{ours:.0} instr"),
                reference: format!("{governor:.0} instr"),
                ratio: ours / governor,
                bound,
                at_most: true,
            });
        }
    }
    // The yardstick (src/floor.rs): what the library's building blocks cost without its layers.
    if let (Some(stacked), Some(theirs)) = (instructions_per_call(8), instructions_per_call(9)) {
        println!("stacked limits under callgrind: {stacked:.0} against governor's {theirs:.0} instructions per call");
    }
    if let (Some(governor), Some(gcra), Some(floor)) = (governor, gcra, instructions_per_call(7)) {
        println!(
            "floor (exact GCRA from the store's crates, no layers): {floor:.0} instructions per call, \
             {:.2}x governor's {governor:.0}; the library's Gcra is {:.2}x the floor",
            floor / governor,
            gcra / floor
        );
    }
    match (instructions_per_call(3), instructions_per_call(4)) {
        (Some(hand), Some(attr)) => {
            println!(
                "attribute overhead under callgrind: by hand {hand:.0}, decorated {attr:.0} instructions per call"
            );
            report.target(Target {
                name: "5. #[rate_limiter] / by hand, instructions",
                measured: format!("{attr:.0} instr"),
                reference: format!("{hand:.0} instr"),
                ratio: attr / hand,
                bound: 1.05,
                at_most: true,
            });
        }
        _ => println!("(valgrind not found: the attribute overhead in instructions is not measured)"),
    }
}
