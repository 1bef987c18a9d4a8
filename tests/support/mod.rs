//! Test fixtures: real `redis-server` processes on free loopback ports, in temp dirs, killed on
//! drop. A missing `redis-server` binary fails the test loudly (never a silent skip).
#![allow(dead_code)]

pub mod child;
pub mod cluster;
pub mod overrides_file;
pub mod sentinel;
pub mod server_process;
pub mod tls;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The time `us` µs after the Unix epoch: a pinned time for `Check::at` and `Peek::at`.
pub fn at(us: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_micros(us)
}

/// An IP address from text.
pub fn addr(text: &str) -> std::net::IpAddr {
    text.parse().expect("an IP address")
}

/// The refusal of a call that must have been refused by a rule of `limit_type`.
#[track_caller]
pub fn denied_by<T: std::fmt::Debug>(
    result: Result<T, ratelimit::RateLimited>,
    limit_type: ratelimit::LimitType,
) -> ratelimit::RateLimited {
    let e = result.expect_err("the call should be refused");
    assert_eq!(e.cause(), ratelimit::Cause::Exceeded, "{e}");
    assert_eq!(e.limit_type(), limit_type, "{e}");
    e
}

/// One `redis-server` on 127.0.0.1.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

/// The most of `sorted` times (µs) that fall in any span of `window_us`: what a limit of that
/// window admitted at its busiest.
pub fn busiest_span(sorted: &[u64], window_us: u64) -> usize {
    let (mut start, mut most) = (0, 0);
    for (end, &t) in sorted.iter().enumerate() {
        while sorted[start] + window_us <= t {
            start += 1;
        }
        most = most.max(end + 1 - start);
    }
    most
}

/// A free TCP port on 127.0.0.1 (bound, then released for the server to take).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// One field (`calls`, `usec`, `usec_per_call`) of `command`'s line in the text of
/// `INFO commandstats` (`cmdstat_evalsha:calls=3,usec=40,...`); 0 when the command never ran.
pub fn command_stat(info: &str, command: &str, field: &str) -> f64 {
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_")?.strip_prefix(command)?.strip_prefix(':'))
        .and_then(|fields| fields.split(',').find_map(|kv| kv.strip_prefix(field)?.strip_prefix('=')))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// A plain synchronous connection to the server on 127.0.0.1:`port` (a cluster node, a
/// sentinel's primary…), for inspecting it.
pub fn connect(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("connect to the test server on port {port}: {e}"))
}

/// `CONFIG RESETSTAT`: the counts of [`command_calls`] and [`evalsha_runs`] start again at 0.
pub fn reset_stats(con: &mut redis::Connection) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con).expect("CONFIG RESETSTAT");
}

/// How many times the server behind `con` ran `command` (`evalsha`, `del`…) since it started or
/// since the last [`reset_stats`], failed runs included.
pub fn command_calls(con: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).expect("INFO commandstats");
    command_stat(&info, command, "calls") as u64
}

/// The scripts the server behind `con` ran (`EVALSHA`) since it started or since the last
/// [`reset_stats`], but those refused with `NOSCRIPT` (a store loads its scripts in the
/// background when it opens, and again on `NOSCRIPT`).
pub fn evalsha_runs(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).expect("INFO commandstats");
    (command_stat(&info, "evalsha", "calls") - command_stat(&info, "evalsha", "failed_calls")) as u64
}

/// Asks `ready` every `every` until it gives a value, and returns it; fails the test with
/// `what` when `within` passes first.
#[track_caller]
pub fn poll_until<T>(within: Duration, every: Duration, what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(done) = ready() {
            return done;
        }
        assert!(Instant::now() < deadline, "{what} (waited {within:?})");
        std::thread::sleep(every);
    }
}

/// As [`poll_until`], for an async `ready`, sleeping on the runtime's timer.
pub async fn poll_until_async<T, F: std::future::Future<Output = Option<T>>>(
    within: Duration,
    every: Duration,
    what: &str,
    mut ready: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(done) = ready().await {
            return done;
        }
        assert!(Instant::now() < deadline, "{what} (waited {within:?})");
        tokio::time::sleep(every).await;
    }
}

/// The tests' pseudo-random numbers: xorshift64, small, deterministic, the same sequence from the
/// same (non-zero) seed on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The server binary the Redis tests run: `RATELIMIT_TEST_SERVER` (e.g. a `valkey-server`),
/// else `redis-server` from `PATH`. Checked once; a missing binary fails loudly.
pub fn redis_server_binary() -> String {
    let binary = std::env::var("RATELIMIT_TEST_SERVER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| "redis-server".to_owned());
    let found = Command::new(&binary).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    match found {
        Ok(s) if s.success() => binary,
        _ => panic!(
            "{binary} is not installed: these tests need a real Redis (apt-get install -y redis-server, or \
             RATELIMIT_TEST_SERVER=/path/to/valkey-server); they never skip silently"
        ),
    }
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// As [`start`](Self::start), with more server arguments (e.g. `--requirepass`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ratelimit-test-redis-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let extra = extra.iter().map(|a| a.to_string()).collect();
        let mut server = RedisServer { child: None, port: free_port(), dir, extra };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = Command::new(redis_server_binary())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.answers_ping() {
            assert!(Instant::now() < deadline, "redis-server on port {} did not start within 10s", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn answers_ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 7];
        // A server with `--requirepass` answers, too: with `NOAUTH`.
        s.write_all(b"PING\r\n").is_ok()
            && s.read_exact(&mut buf).is_ok()
            && (&buf == b"+PONG\r\n" || &buf == b"-NOAUTH")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A plain synchronous connection for inspecting keys.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url()).expect("client").get_connection().expect("connect to test redis")
    }

    /// How many times the server ran `command` (`evalsha`, `del`…) since it started or since
    /// the last `CONFIG RESETSTAT`.
    pub fn calls(&self, command: &str) -> u64 {
        command_calls(&mut self.client(), command)
    }

    /// [`evalsha_runs`] of this server.
    pub fn evalsha_runs(&self) -> u64 {
        evalsha_runs(&mut self.client())
    }

    /// [`reset_stats`] of this server.
    pub fn reset_stats(&self) {
        reset_stats(&mut self.client())
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// `SIGKILL`s the server.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (after [`kill`](Self::kill)).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// `SIGSTOP`: the server keeps its socket but answers nothing.
    pub fn pause(&self) {
        signal(self.pid(), "-STOP");
    }

    /// `SIGCONT`.
    pub fn resume(&self) {
        signal(self.pid(), "-CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").args([sig, &pid.to_string()]).status().map(|s| s.success()).unwrap_or(false);
    assert!(ok, "kill {sig} {pid} failed");
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A stopped process must be continued to die promptly on some kernels.
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Tasks of [`remaining_of_concurrent_calls`].
pub const TASKS: usize = 64;
/// Calls per task of [`remaining_of_concurrent_calls`].
pub const CALLS: usize = 20;

/// `TASKS` tasks making `CALLS` calls each at once on `limiter`'s one global key (at `pinned`, or
/// the server's time): the remaining of every admitted call, sorted. A refusal must be for the
/// limit, with a wait.
pub async fn remaining_of_concurrent_calls(
    limiter: &std::sync::Arc<ratelimit::Limiter>,
    pinned: Option<std::time::SystemTime>,
) -> Vec<u64> {
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut remaining = Vec::new();
                for _ in 0..CALLS {
                    let decided = match pinned {
                        Some(at) => limiter.check(&[ratelimit::Subject::global()]).at(at).await,
                        None => limiter.check(&[ratelimit::Subject::global()]).await,
                    };
                    match decided {
                        Ok(permit) => remaining.push(permit.quota().expect("a quota").remaining),
                        Err(e) => assert!(
                            e.cause() == ratelimit::Cause::Exceeded && e.retry_after() > std::time::Duration::ZERO,
                            "{e}"
                        ),
                    }
                }
                remaining
            })
        })
        .collect();
    let mut remaining = Vec::new();
    for t in tasks {
        remaining.extend(t.await.unwrap());
    }
    remaining.sort_unstable();
    remaining
}
