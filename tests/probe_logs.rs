//! The startup probe as an operator sees it: the example server, configured from the
//! environment, reports on stderr within seconds whether its store answers, in the store's own
//! words, and never prints the password.
//!
//! As in `tests/server.rs`, each server is this test binary re-executed to run only
//! [`server_process`], which calls the example's `run` (`examples/server.rs` compiled in).

#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::RedisServer;

const CHILD_ARGS: &str = "RATELIMIT_TEST_SERVER_ARGS";
const PASSWORD: &str = "s3cret-Pa55word";

/// Not a test: the body of the server processes that the tests start.
#[test]
fn server_process() {
    let Ok(args) = std::env::var(CHILD_ARGS) else { return };
    // Exit when the test (our stdin's writer) goes away, however it dies.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(3);
    });
    let status = server::run(args.lines().filter(|a| !a.is_empty()).map(str::to_owned));
    std::process::exit(i32::from(status));
}

/// A server process whose stderr and stdout lines are collected; killed on drop.
struct Logged {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Logged {
    fn start(env: &[(&str, &str)]) -> Logged {
        let mut child = Command::new(std::env::current_exe().expect("test binary path"))
            .args(["server_process", "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env(CHILD_ARGS, "--listen\n127.0.0.1:0\n")
            .env_remove("REDIS_URL")
            .env_remove("REDIS_CLUSTER_URLS")
            .env_remove("REDIS_SENTINEL_URLS")
            .env_remove("REDIS_SENTINEL_MASTER")
            .env_remove("REDIS_CA_CERT")
            .env_remove("REDIS_CLIENT_CERT")
            .env_remove("REDIS_CLIENT_KEY")
            .env_remove("RATELIMIT_ON_ERROR")
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server process");
        let (tx, lines) = mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().expect("piped stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("piped stderr")),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        Logged { child, lines, seen: Vec::new() }
    }

    /// Waits up to `within` for a line containing `needle`; returns it and how long it took.
    fn wait_for(&mut self, needle: &str, within: Duration) -> (String, Duration) {
        let start = Instant::now();
        let deadline = start + within;
        if let Some(line) = self.seen.iter().find(|l| l.contains(needle)) {
            return (line.clone(), start.elapsed());
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return (line, start.elapsed());
                    }
                }
                Err(_) => panic!("no line with {needle:?} within {within:?}; output:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// Everything printed so far (after a short drain).
    fn output(&mut self) -> String {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }

    /// The address from the startup line.
    fn addr(&mut self) -> std::net::SocketAddr {
        let (line, _) = self.wait_for("listening on http://", Duration::from_secs(30));
        line.split("listening on http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` over plain HTTP/1.1; the status code.
fn get(addr: std::net::SocketAddr, path: &str) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the server");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("write the request");
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status in {reply:?}"))
}

/// "Within seconds": generous for a loaded 2-core machine.
const WITHIN: Duration = Duration::from_secs(10);

#[test]
fn a_wrong_password_is_reported_in_the_stores_words_without_the_password() {
    let redis = RedisServer::start_with(&["--requirepass", "the-right-one"]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/", redis.port());
    let mut server = Logged::start(&[("REDIS_URL", &url)]);
    let (line, took) = server.wait_for("rate-limit store unreachable", WITHIN);
    assert!(line.contains("WRONGPASS") || line.contains("invalid password"), "{line}");
    assert!(line.contains("ERROR"), "logged at error: {line}");
    assert!(line.contains("redis://***@127.0.0.1"), "the masked URL names the store: {line}");
    assert!(took < WITHIN, "{took:?}");
    // Calls go through (fail open), and that is visible too.
    let addr = server.addr();
    assert_eq!(get(addr, "/api/hello"), 200);
    server.wait_for("letting calls through", WITHIN);
    let output = server.output();
    assert!(!output.contains(PASSWORD), "the password leaked:\n{output}");
}

#[test]
fn a_missing_password_is_reported_as_noauth() {
    let redis = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let mut server = Logged::start(&[("REDIS_URL", &redis.url())]);
    let (line, _) = server.wait_for("rate-limit store unreachable", WITHIN);
    assert!(line.contains("NOAUTH"), "{line}");
    let output = server.output();
    assert!(!output.contains(PASSWORD), "the password leaked:\n{output}");
}

#[test]
fn a_good_store_is_reported_reachable_with_its_latency() {
    let redis = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/", redis.port());
    let mut server = Logged::start(&[("REDIS_URL", &url)]);
    let (line, _) = server.wait_for("rate-limit store reachable", WITHIN);
    assert!(line.contains(" INFO "), "logged at info: {line}");
    assert!(line.contains("latency_ms="), "{line}");
    assert!(line.contains("redis://***@127.0.0.1"), "{line}");
    // The probe loaded the three decision scripts.
    let mut conn = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
    let info: String = redis::cmd("INFO").arg("memory").query(&mut conn).unwrap();
    let scripts = info.lines().find_map(|l| l.strip_prefix("number_of_cached_scripts:")).map(str::trim);
    assert_eq!(scripts, Some("3"), "{info}");
    let output = server.output();
    assert!(!output.contains(PASSWORD), "the password leaked:\n{output}");
}

#[test]
fn a_refused_connection_is_reported() {
    let url = format!("redis://127.0.0.1:{}/", support::free_port());
    let mut server = Logged::start(&[("REDIS_URL", &url)]);
    let (line, _) = server.wait_for("rate-limit store unreachable", WITHIN);
    assert!(line.to_ascii_lowercase().contains("refused"), "{line}");
}

#[cfg(feature = "tls")]
#[test]
fn tls_from_the_environment_with_and_without_the_ca() {
    let redis = support::tls::TlsRedis::start(false);
    let ca = redis.pki.ca_cert.to_string_lossy().into_owned();
    let mut good = Logged::start(&[("REDIS_URL", &redis.url()), ("REDIS_CA_CERT", &ca)]);
    good.wait_for("rate-limit store reachable", WITHIN);
    let mut bad = Logged::start(&[("REDIS_URL", &redis.url())]);
    let (line, _) = bad.wait_for("rate-limit store unreachable", WITHIN);
    assert!(line.contains("certificate"), "{line}");
    assert!(line.contains("REDIS_CA_CERT"), "the hint names the fix: {line}");
}

#[cfg(all(feature = "tls", feature = "cluster"))]
#[test]
fn a_tls_cluster_without_the_ca_is_reported_with_the_certificate_problem() {
    let cluster = support::cluster::RedisCluster::start_tls(3);
    let seeds = cluster.tls_urls().join(",");
    let ca = cluster.pki().ca_cert.to_string_lossy().into_owned();
    let mut good = Logged::start(&[("REDIS_CLUSTER_URLS", &seeds), ("REDIS_CA_CERT", &ca)]);
    good.wait_for("rate-limit store reachable", WITHIN);
    let mut bad = Logged::start(&[("REDIS_CLUSTER_URLS", &seeds)]);
    let (line, _) = bad.wait_for("rate-limit store unreachable", WITHIN);
    assert!(line.contains("UnknownIssuer") && line.contains("REDIS_CA_CERT"), "{line}");
}

#[test]
fn a_unix_socket_url_is_a_store_too() {
    let dir = std::env::temp_dir().join(format!("ratelimit-test-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let socket = dir.join("redis.sock");
    let socket_arg = socket.to_string_lossy().into_owned();
    let _redis = RedisServer::start_with(&["--unixsocket", &socket_arg, "--unixsocketperm", "700"]);
    let mut server = Logged::start(&[("REDIS_URL", &format!("redis+unix://{socket_arg}"))]);
    let (line, _) = server.wait_for("rate-limit store reachable", WITHIN);
    assert!(line.contains("redis+unix://"), "{line}");
    let addr = server.addr();
    let statuses: Vec<u16> = (0..22).map(|_| get(addr, "/api/hello")).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 20, "20 per 10s from one IP: {statuses:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sentinel_primaries_are_probed_too() {
    use support::sentinel::{SentinelSet, MASTER};
    let set = SentinelSet::start();
    let sentinels = set.sentinel_url();
    let mut server = Logged::start(&[("REDIS_SENTINEL_URLS", &sentinels), ("REDIS_SENTINEL_MASTER", MASTER)]);
    let (line, _) = server.wait_for("rate-limit store reachable", WITHIN);
    assert!(line.contains("sentinel") && line.contains(MASTER), "names the store: {line}");
    // A master name the sentinel does not monitor: reported, in the sentinel's terms.
    let mut wrong = Logged::start(&[("REDIS_SENTINEL_URLS", &sentinels), ("REDIS_SENTINEL_MASTER", "no-such-master")]);
    let (line, _) = wrong.wait_for("rate-limit store unreachable", WITHIN);
    assert!(line.contains("no-such-master"), "{line}");
}
