//! The benchmark harness: one command prints every figure of BENCHMARKS.md, each next to its
//! reference and target, measured in one run on one machine (ratios, not absolute numbers, are
//! what carry over between machines).
//!
//!     cargo run --release --manifest-path benches/Cargo.toml
//!     cargo run --release --manifest-path benches/Cargo.toml -- --metrics-only   # section 8 alone
//!     cargo run --release --manifest-path benches/Cargo.toml -- --in-memory-only # sections 4–6 alone
//!     cargo run --release --manifest-path benches/Cargo.toml -- --throughput     # section 2 alone
//!     cargo run --release --manifest-path benches/Cargo.toml -- --hung           # section 10 alone
//!     cargo run --release --manifest-path benches/Cargo.toml -- --sweep          # the plot alone
//!     cargo run --release --manifest-path benches/Cargo.toml -- --rls            # section 12 alone
//!     cargo run --release --manifest-path benches/Cargo.toml -- --settle         # section 13 alone
//!
//! It starts its own `redis-server` on a free loopback port. Each figure is the median of
//! `ROUNDS` interleaved rounds, with the spread (min–max) beside it. The in-memory and macro
//! figures run in a child process of this binary, whose global store is memory.

#[path = "../../tests/support/mod.rs"]
mod support;

mod abuse;
mod floor;
mod gcra_reference;
mod hot_key;
mod hung;
mod memory;
mod metrics;
mod plot;
mod redis_cell;
mod redis_load;
mod report;
mod rls;
mod settle;
mod sweep;

use report::Report;

const USAGE: &str = "\
ratelimit benchmarks: every figure of BENCHMARKS.md, or one section
  (no flag)          the whole harness (about six minutes)
  --latency          section 1 alone
  --throughput       section 2 alone
  --gcra             our GCRA next to the reference script (and redis-cell's CL.THROTTLE under
                     load when REDIS_CELL_MODULE names its built module)
  --in-memory-only   sections 4-6 alone
  --metrics-only     section 8 alone
  --abuse            section 9 alone (the example server under wrk)
  --hung             section 10 alone (the example server with Redis stopped, its breaker open)
  --hot-key          section 11 alone (one hot key from four processes, exact vs sync)
  --rls              section 12 alone (ratelimit-server vs the seed script behind the same gRPC front)
  --sweep            decisions/s against concurrent callers alone, drawn to benches/throughput.svg
  --settle           section 12 alone (script calls per settled call)
  --profile-redis    1-rule throughput only, for a profiler";

fn main() {
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return;
    }
    if std::env::args().any(|a| a == "--in-memory") {
        memory::run_child();
        return;
    }
    if std::env::args().any(|a| a == "--hot-key-worker") {
        hot_key::run_child();
        return;
    }
    if std::env::args().any(|a| a == "--hot-key") {
        let server = support::RedisServer::start();
        let mut report = Report::default();
        hot_key::run(&server, &mut report);
        report.print_targets();
        return;
    }
    if std::env::args().any(|a| a == "--sweep-child") {
        sweep::run_child();
        return;
    }
    if std::env::args().any(|a| a == "--sweep") {
        // Only the sweep, and its plot.
        let server = support::RedisServer::start();
        let mut report = Report::default();
        let series = sweep::run(&server, &mut report);
        sweep::write(&series);
        report.print_targets();
        return;
    }
    if std::env::args().any(|a| a == "--metrics-child") {
        metrics::run_child();
        return;
    }
    if std::env::args().any(|a| a == "--metrics-only") {
        // Only the metrics section (8) and its targets.
        let mut report = Report::default();
        metrics::run(&mut report);
        report.print_targets();
        return;
    }
    if std::env::args().any(|a| a == "--in-memory-only") {
        // Only the in-memory sections (4–6) and their targets (no Redis).
        let mut report = Report::default();
        memory::run_from_parent(&mut report);
        report.print_targets();
        return;
    }
    if std::env::args().any(|a| a == "--abuse") {
        // Only the abuse benchmark (the example server under wrk).
        let server = support::RedisServer::start();
        let mut report = Report::default();
        abuse::run(&server, &mut report);
        report.print_targets();
        return;
    }
    if std::env::args().any(|a| a == "--hung") {
        // Only the hung store (the example server with Redis stopped, its breaker open).
        let mut report = Report::default();
        hung::run(&mut report);
        report.print_targets();
        return;
    }
    if std::env::args().any(|a| a == "--gcra") {
        // Only our GCRA next to the reference script, and the O(1) scripts before/after.
        gcra_reference::run_alone();
        return;
    }
    if std::env::args().any(|a| a == "--latency") {
        let server = support::RedisServer::start();
        let mut report = Report::default();
        redis_load::run_latency(&server, &mut report);
        report.print_targets();
        return;
    }
    if std::env::args().any(|a| a == "--throughput") {
        // Only section 2 (throughput, 64 callers, decorated / seed) and its targets.
        let server = support::RedisServer::start();
        let mut report = Report::default();
        redis_load::run_throughput(&server, &mut report);
        report.print_targets();
        return;
    }
    if std::env::args().any(|a| a == "--rls") {
        // Only section 12: ratelimit-server under gRPC load, next to the seed script.
        let server = support::RedisServer::start();
        let mut report = Report::default();
        rls::run(&server, &mut report);
        report.print_targets();
        return;
    }
    if std::env::args().any(|a| a == "--settle") {
        let server = support::RedisServer::start();
        let mut report = Report::default();
        settle::run(&server, &mut report);
        report.print_targets();
        return;
    }
    if std::env::args().any(|a| a == "--profile-redis") {
        // Only 1-rule throughput, for a profiler: `perf record -e cpu-clock -g -- <bench> --profile-redis`.
        let server = support::RedisServer::start();
        redis_load::profile(&server);
        return;
    }
    let started = std::time::Instant::now();
    let mut report = Report::default();
    let server = support::RedisServer::start();
    println!("ratelimit benchmarks — redis-server on 127.0.0.1:{}, {} cores", server.port(), cores());
    println!(
        "(each figure: median of {} rounds [min–max]; in-memory: {} rounds)\n",
        report::ROUNDS,
        report::ROUNDS * 2 - 1
    );

    redis_load::run(&server, &mut report);
    abuse::run(&server, &mut report);
    gcra_reference::run(&server, &mut report);
    memory::run_from_parent(&mut report);
    metrics::run(&mut report);
    hung::run(&mut report);
    hot_key::run(&server, &mut report);
    rls::run(&server, &mut report);
    settle::run(&server, &mut report);
    let series = sweep::run(&server, &mut report);
    sweep::write(&series);

    report.print_targets();
    println!("\nwhole harness: {:.0}s", started.elapsed().as_secs_f64());
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
