//! `ratelimit-server --config PATH [--listen ADDR:PORT] [--metrics-listen ADDR:PORT]`.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(ratelimit_server::server::run(std::env::args().skip(1)))
}
