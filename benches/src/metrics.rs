//! The cost of the metrics (issue 13): one in-memory decision with no recorder installed, and
//! with the Prometheus recorder installed, in two child processes (a recorder, once installed,
//! stays for the life of the process). Target: at most 5% more per decision with the recorder.
//!
//!     cargo run --release --manifest-path benches/Cargo.toml -- --metrics-only

use crate::report::{fmt, Figure, Report, Target, ROUNDS};
use ratelimit::{store::MemoryStore, Limit, LimitType, Limiter, Rule, Subject};
use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

const SUBJECTS: usize = 1000;

fn calls() -> usize {
    std::env::var("BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000)
}

fn limiter(name: &str) -> Limiter {
    Limiter::builder(name)
        .limit(Limit::new(LimitType::Ip, [Rule::from_millis(60_000, 1_000_000_000).expect("rule")]))
        .store(Arc::new(MemoryStore::new()))
        .build()
        .expect("limiter")
}

fn run_calls(limiter: &Limiter, ips: &[IpAddr], n: usize) {
    for i in 0..n {
        black_box(limiter.check(&[Subject::ip(ips[i % SUBJECTS])]).blocking()).expect("allowed");
    }
}

/// The child. With `BENCH_ONCE` (for callgrind): installs the Prometheus recorder globally if
/// `BENCH_RECORDER=1`, makes `BENCH_CALLS` calls, and nothing else. Otherwise, for nanoseconds:
/// two limiters in one process, rounds interleaved, one built with no recorder (its handles
/// are no-ops) and one built under the Prometheus recorder (a thread-local one, so the other
/// stays without); prints `NS|` and the median, min and max
/// without, then with.
pub fn run_child() {
    let ips: Vec<IpAddr> = (0..SUBJECTS).map(|i| IpAddr::from([10, 2, (i / 256) as u8, (i % 256) as u8])).collect();
    if std::env::var_os("BENCH_ONCE").is_some() {
        if std::env::var("BENCH_RECORDER").is_ok_and(|v| v == "1") {
            metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder().expect("install the recorder");
        }
        let l = limiter("bench::metrics");
        // Warmed up first (the store, the clock's calibration, the recorder's first handles):
        // callgrind counts `measured` alone.
        run_calls(&l, &ips, SUBJECTS);
        measured(&l, &ips, calls());
        return;
    }
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let without = limiter("bench::metrics_off");
    // Built, and first called, under the recorder: the limiter's handles and the memory store's
    // (shared by both limiters: the 1-in-64 timing sample records for both) are the recorder's.
    let with = metrics::with_local_recorder(&recorder, || {
        let l = limiter("bench::metrics_on");
        run_calls(&l, &ips, calls() / 10);
        l
    });
    run_calls(&without, &ips, calls() / 10);
    let (mut off, mut on) = (Vec::new(), Vec::new());
    let timed = |l: &Limiter, out: &mut Vec<f64>| {
        let started = Instant::now();
        run_calls(l, &ips, calls());
        out.push(started.elapsed().as_secs_f64() * 1e9 / calls() as f64);
    };
    for round in 0..ROUNDS * 2 - 1 {
        if round % 2 == 0 {
            timed(&without, &mut off);
            timed(&with, &mut on);
        } else {
            timed(&with, &mut on);
            timed(&without, &mut off);
        }
    }
    let (off, on) = (Figure::of(off), Figure::of(on));
    println!("NS|{}|{}|{}|{}|{}|{}", off.median, off.min, off.max, on.median, on.min, on.max);
    // The recorder really counted every call of its limiter (warm-up included).
    ratelimit::metrics::flush();
    let text = handle.render();
    let expected = calls() / 10 + (ROUNDS * 2 - 1) * calls();
    let line = format!("ratelimit_decisions_total{{limiter=\"bench::metrics_on\",outcome=\"allowed\"}} {expected}");
    assert!(text.lines().any(|l| l == line), "the recorder did not count {expected} calls:\n{text}");
    assert!(!text.contains("bench::metrics_off"), "the limiter without a recorder reported to it");
}

/// The calls callgrind counts (`--toggle-collect`).
#[inline(never)]
fn measured(limiter: &Limiter, ips: &[IpAddr], n: usize) {
    run_calls(limiter, ips, n);
}

fn child(recorder: bool) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("current exe"));
    cmd.arg("--metrics-child").env("BENCH_RECORDER", if recorder { "1" } else { "0" });
    cmd
}

/// (without, with) nanoseconds per decision, from the child.
fn ns_per_call() -> (Figure, Figure) {
    let out = child(false).output().expect("run the metrics child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "metrics child failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let f: Vec<f64> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("NS|"))
        .expect("an NS line")
        .split('|')
        .filter_map(|v| v.parse().ok())
        .collect();
    (Figure { median: f[0], min: f[1], max: f[2] }, Figure { median: f[3], min: f[4], max: f[5] })
}

/// Instructions per call under callgrind: the difference between 200 000 and 100 000 calls.
fn instructions_per_call(recorder: bool) -> Option<f64> {
    let mut totals = Vec::new();
    for calls in [100_000u64, 200_000] {
        let out =
            std::env::temp_dir().join(format!("ratelimit-bench-metrics-{}-{recorder}-{calls}.cg", std::process::id()));
        let exe = std::env::current_exe().ok()?;
        let status = std::process::Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg("--collect-atstart=no")
            .arg("--toggle-collect=ratelimit_bench::metrics::measured")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(exe)
            .arg("--metrics-child")
            .env("BENCH_RECORDER", if recorder { "1" } else { "0" })
            .env("BENCH_ONCE", "1")
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

/// The harness built again with every metric and log call compiled out
/// (`--cfg ratelimit_no_instrumentation`), in its own target dir; its path.
fn uninstrumented_twin() -> Option<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = dir.join("target").join("no-instrumentation");
    let status = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .env("RUSTFLAGS", "--cfg ratelimit_no_instrumentation")
        .status()
        .ok()?;
    status.success().then(|| target.join("release").join("ratelimit-bench"))
}

/// Instructions per decision by hand (`Limiter::check(..).blocking()`, no recorder, no subscriber)
/// in this build and in the twin without instrumentation.
fn instrumentation_cost(report: &mut Report) {
    let Some(twin) = uninstrumented_twin() else {
        println!("(cargo could not build the twin without instrumentation: its cost is not measured)");
        return;
    };
    let Ok(this) = std::env::current_exe() else { return };
    match (crate::memory::instructions_per_call_of(&this, 3), crate::memory::instructions_per_call_of(&twin, 3)) {
        (Some(with), Some(without)) => {
            println!("under callgrind: instrumented {with:.0}, no instrumentation at all {without:.0} instructions per decision");
            report.target(Target {
                name: "8. no recorder / no instrumentation, instr",
                measured: format!("{with:.0} instr"),
                reference: format!("{without:.0} instr"),
                ratio: with / without,
                bound: 1.02,
                at_most: true,
            });
        }
        _ => println!("(valgrind not found: the instrumentation's cost is not measured)"),
    }
}

/// The section: nanoseconds (one child, rounds interleaved) and instructions (callgrind, one
/// child per count, the recorder installed globally or not at all).
pub fn run(report: &mut Report) {
    println!("\n== 8. Metrics: one in-memory decision without and with a recorder installed ==");
    let (without, with) = ns_per_call();
    println!("no recorder {}   Prometheus recorder {}", without.show("ns"), with.show("ns"));
    report.target(Target {
        name: "8. decision with / without recorder, ns",
        measured: format!("{} ns", fmt(with.median)),
        reference: format!("{} ns", fmt(without.median)),
        ratio: with.median / without.median,
        bound: 1.05,
        at_most: true,
    });
    match (instructions_per_call(false), instructions_per_call(true)) {
        (Some(off), Some(on)) => {
            println!("under callgrind: no recorder {off:.0}, Prometheus recorder {on:.0} instructions per decision");
            report.target(Target {
                name: "8. decision with / without recorder, instr",
                measured: format!("{on:.0} instr"),
                reference: format!("{off:.0} instr"),
                ratio: on / off,
                bound: 1.05,
                at_most: true,
            });
        }
        _ => println!("(valgrind not found: the metrics overhead in instructions is not measured)"),
    }
    instrumentation_cost(report);
}
