//! The example server's command line: its grammar (clap's builder, no derive macro to compile),
//! its `--help` text with the routes and the environment, and what it asks for.

use ratelimit::subject::Cidr;
use std::net::SocketAddr;

/// What `--help` prints after the options: the routes, and the environment with its defaults.
const AFTER_HELP: &str = "\
Routes:
  GET  /healthz      no limit
  GET  /api/hello    per client IP: 20 per 10s and 50 per 60s
  GET  /api/global   30 per 10s, shared by everyone
  POST /api/orders   per user (X-User-Id header, required): 10 per 10s,
                     and per client IP: 15 per 10s
  POST /api/login    JSON body with a password: 200 for letmein, else 401; per client
                     IP only failures count: after 5 in 60s, 2 minutes of 429
  GET  /api/report   ?ms=N: sleeps N ms (at most 10000); per client IP at most 2 at a time
  GET  /api/search   per user (X-User-Id, required): 5 per 10s; the plan in the
                     X-Plan header chooses the tier (pro: 50 per 10s; tier names are
                     case-sensitive: Pro is not pro)
  GET  /api/complete ?tokens=N: per user (X-User-Id, required): 1000 tokens per 60s;
                     100 taken before the call, settled to the N it generated
                     (missing or not a number: 400, settled to 0)
  GET  /api/export   per user (X-User-Id, required): 3 per calendar month (UTC; the
                     quota is whole again at 00:00 on the 1st)
  GET  /metrics      the limiter's metrics, Prometheus text format (no limit)

Environment (at most one of REDIS_URL, REDIS_CLUSTER_URLS, REDIS_SENTINEL_URLS;
none: counts in process memory):
  REDIS_URL                 count in this Redis (redis://127.0.0.1:6379/; rediss:// for TLS,
                            redis+unix:///path for a socket) [default: unset]
  REDIS_CLUSTER_URLS        count in a Redis Cluster: comma-separated seed node URLs
                            [default: unset]
  REDIS_SENTINEL_URLS       count in the primary these Redis Sentinels name (comma-separated
                            sentinel URLs) [default: unset], with
  REDIS_SENTINEL_MASTER     the name the sentinels monitor, and for a primary with a password
  REDIS_PASSWORD            its password (REDIS_USERNAME for an ACL user) [default: none]
  REDIS_CA_CERT             PEM file of a private CA to trust for rediss://, besides the
                            system's roots [default: the system's roots only]
  REDIS_CLIENT_CERT         PEM client certificate and key for mutual TLS [default: none]
  REDIS_CLIENT_KEY
  RATELIMIT_ON_ERROR        allow or deny calls when the store cannot decide, or local:
                            decide them in this process's memory until it answers
                            [default: allow]
  RATELIMIT_REFUSAL_CACHE   on or off: the local cache of refusals (remote stores)
                            [default: on for Redis, off in memory]
  RATELIMIT_REFUSAL_CACHE_SIZE
                            refusals the cache holds, 1 or more [default: 100000]
  RATELIMIT_MEMORY_MAX_KEYS keys (a subject under one limit) the memory store holds, 1 or more;
                            when full, one not used lately is forgotten [default: 250000]
  RATELIMIT_CONFIG          a TOML file that overrides the limits (rules, tiers, mode = shadow|off,
                            [exempt] ips and users); re-read on SIGHUP [default: unset]
  RATELIMIT_ADMIN_TOKEN     serve /admin/ (runtime overrides per subject; see
                            docs/production.md) to requests with Authorization: Bearer <token>;
                            unset: /admin/ is 404 [default: unset]
  RATELIMIT_RUNTIME_OVERRIDES
                            on or off: decide with the subjects' runtime overrides (on
                            whenever RATELIMIT_ADMIN_TOKEN is set) [default: off]
Values are read exactly as shown (lower case); any other value stops the server with a message
naming the variable. A blank variable counts as unset.
  RUST_LOG                  log filter for stderr [default: info]";

/// The command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Proxies whose forwarded headers are believed.
    pub trust_proxy: Vec<Cidr>,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Serve.
    Serve(Args),
    /// Print the usage.
    Help,
}

/// The command line's grammar (clap): its `--help` and its errors.
pub fn cli() -> clap::Command {
    use clap::{Arg, ArgAction};
    clap::Command::new("server")
        .about("Serves rate-limited HTTP routes (#[rate_limiter] behind the axum layer).")
        .override_usage("server [--listen ADDR:PORT] [--trust-proxy CIDR]...")
        .arg(
            Arg::new("listen")
                .long("listen")
                .value_name("ADDR:PORT")
                .default_value("127.0.0.1:3000")
                .value_parser(|v: &str| {
                    v.parse::<SocketAddr>().map_err(|_| {
                        "expected ADDR:PORT, an IP address and a port (not a host name), e.g. 127.0.0.1:3000 or [::1]:3000"
                    })
                })
                .help("Where to listen: an IP address and a port, not a host name (port 0 picks a free one)"),
        )
        .arg(
            Arg::new("trust-proxy")
                .long("trust-proxy")
                .value_name("CIDR")
                .action(ArgAction::Append)
                .value_parser(|v: &str| v.parse::<Cidr>().map_err(|e| e.to_string()))
                .help(
                    "Believe X-Forwarded-For / Forwarded / X-Real-IP from peers in CIDR \
                     (e.g. 10.0.0.0/8, ::1/128, 192.0.2.1); repeatable [default: none]",
                ),
        )
        .after_help(AFTER_HELP)
}

/// Parses the arguments (without the program name); an error is clap's message (`error: …`,
/// the usage, a hint).
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let matches = match cli().try_get_matches_from(std::iter::once("server".to_owned()).chain(args)) {
        Ok(matches) => matches,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => return Ok(Command::Help),
        Err(e) => return Err(e.render().to_string()),
    };
    let listen = matches.get_one::<SocketAddr>("listen").copied().ok_or("--listen has no value")?;
    let trust_proxy = matches.get_many::<Cidr>("trust-proxy").map_or_else(Vec::new, |v| v.copied().collect());
    Ok(Command::Serve(Args { listen, trust_proxy }))
}
