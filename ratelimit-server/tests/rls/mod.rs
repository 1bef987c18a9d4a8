//! The server binary in a child process on free ports, a gRPC client for it, and real
//! `redis-server`s (the workspace's test support, shared by `#[path]`).
#![allow(dead_code)]

#[path = "../../../tests/support/mod.rs"]
pub mod support;

pub use ratelimit_server::proto::{self, Code, RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
pub use support::RedisServer;
use tonic::transport::Channel;

/// A running `ratelimit-server`; killed on drop.
pub struct Rls {
    child: Child,
    pub grpc: SocketAddr,
    pub metrics: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

/// The variables that would configure the child beside what each test gives.
const CLEARED: [&str; 6] = [
    "REDIS_URL",
    "REDIS_CLUSTER_URLS",
    "REDIS_SENTINEL_URLS",
    "RATELIMIT_ON_ERROR",
    "RATELIMIT_REFUSAL_CACHE",
    "RUST_LOG",
];

impl Rls {
    /// Starts the server on `config` with these variables and extra arguments; waits for its
    /// startup line.
    pub fn start(config: &Path, env: &[(&str, &str)], extra: &[&str]) -> Rls {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ratelimit-server"));
        for var in CLEARED {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied())
            .arg("--config")
            .arg(config)
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start ratelimit-server");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("the startup line");
        // Keep reading stdout so the child never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let addr = |after: &str| -> SocketAddr {
            let rest = line.split(after).nth(1).unwrap_or_else(|| panic!("no {after:?} in {line:?}"));
            rest.split_whitespace().next().unwrap().trim_start_matches("http://").parse().expect("an address")
        };
        let (grpc, metrics) = (addr("grpc on "), addr("metrics on "));
        Rls { child, grpc, metrics, stderr }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until stderr holds `text`.
    pub fn wait_for_log(&self, text: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let log = self.stderr();
            if log.contains(text) {
                return log;
            }
            assert!(Instant::now() < deadline, "no {text:?} within {within:?} in:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub async fn channel(&self) -> Channel {
        tonic::transport::Endpoint::from_shared(format!("http://{}", self.grpc))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect to ratelimit-server")
    }

    /// `SIGTERM`, then the exit status within `within`.
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let ok = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().map(|s| s.success());
        assert!(matches!(ok, Ok(true)), "kill -TERM");
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `GET path` on the metrics port: (status line, body).
    pub fn http_get(&self, path: &str) -> (String, String) {
        let mut s = std::net::TcpStream::connect(self.metrics).expect("connect to the metrics port");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).expect("read the response");
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        (head.lines().next().unwrap_or_default().to_owned(), body.to_owned())
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A descriptor from `(key, value)` entries.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries.iter().map(|(k, v)| proto::Entry { key: (*k).into(), value: (*v).into() }).collect(),
        hits_addend: None,
    }
}

/// `ShouldRateLimit` for these descriptors in `domain`, `hits` units (0: one).
pub async fn ask(
    channel: &Channel,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
    hits: u32,
) -> RateLimitResponse {
    let request = RateLimitRequest { domain: domain.into(), descriptors, hits_addend: hits };
    proto::should_rate_limit(channel.clone(), request).await.expect("ShouldRateLimit").into_inner()
}

pub fn over(r: &RateLimitResponse) -> bool {
    r.overall_code == Code::OverLimit as i32
}

/// A fresh directory holding `files` (name, YAML).
pub fn config_dir(test: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rls-test-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (name, yaml) in files {
        std::fs::write(dir.join(name), yaml).expect("write config");
    }
    dir
}

/// Replaces `path` at once (write beside, rename over), as a deployment would.
pub fn replace_file(path: &Path, yaml: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, yaml).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}
