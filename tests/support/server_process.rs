//! The example server in a child process, and a raw HTTP/1.1 client for it.
//!
//! Every server runs in its own process: the rate-limit configuration and the limiters of the
//! annotated handlers are per process (as in production), so tests must not share one. The
//! process is the test binary itself, re-executed to run only its `server_process` entry (an
//! `#[ignore]`d test: see tests/support/child.rs), which hands the example's `run` to
//! [`child_main`] (`examples/server.rs` is compiled into each binary
//! with `#[path]`). That needs no second build of the example and always runs the code under
//! test, whatever the profile or features. Clients bind to 127.0.0.2, 127.0.0.3, … to be
//! distinct client IPs.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, SocketAddr};
use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

/// The arguments of a server process, one per line.
const CHILD_ARGS: &str = "RATELIMIT_TEST_SERVER_ARGS";
/// Set for long-running server processes: exit when stdin (a pipe from the test) closes.
const EXIT_WITH_PARENT: &str = "RATELIMIT_TEST_EXIT_WITH_PARENT";
/// What the example prints on stdout once it accepts connections.
const LISTENING: &str = "listening on http://";
/// The environment the test process may carry that would configure the child: removed, so a
/// server runs on its defaults plus exactly what its test gives.
const CLEARED: [&str; 19] = [
    "REDIS_URL",
    "REDIS_CLUSTER_URLS",
    "REDIS_SENTINEL_URLS",
    "REDIS_SENTINEL_MASTER",
    "REDIS_PASSWORD",
    "REDIS_USERNAME",
    "REDIS_CA_CERT",
    "REDIS_CLIENT_CERT",
    "REDIS_CLIENT_KEY",
    "RATELIMIT_ON_ERROR",
    "RATELIMIT_REFUSAL_CACHE",
    "RATELIMIT_REFUSAL_CACHE_SIZE",
    "RATELIMIT_DENY_CACHE",
    "RATELIMIT_DENY_CACHE_SIZE",
    "RATELIMIT_MEMORY_MAX_KEYS",
    "RATELIMIT_CONFIG",
    "RATELIMIT_ADMIN_TOKEN",
    "RATELIMIT_RUNTIME_OVERRIDES",
    "RUST_LOG",
];

/// The body of each binary's `server_process` entry (an `#[ignore]`d test): runs the example's
/// `run` (and exits with its status) when this binary was started as a server process; run by
/// hand, does nothing.
pub fn child_main(run: impl FnOnce(Vec<String>) -> u8) {
    let Some(args) = super::child::given(CHILD_ARGS) else { return };
    if std::env::var_os(EXIT_WITH_PARENT).is_some() {
        // Our stdin is a pipe from the test: when the test process goes away, however it dies,
        // the pipe closes and this server exits instead of lingering.
        std::thread::spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            std::process::exit(3);
        });
    }
    let status = run(args.lines().filter(|a| !a.is_empty()).map(str::to_owned).collect());
    std::process::exit(i32::from(status));
}

/// The command that runs the example server with `args` and `env` (for a run to completion,
/// e.g. with `.output()`); [`Process::spawn`] and [`Server::start`] run it in the background.
pub fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    command_under(&[], args, env)
}

/// As [`command`], run through `wrapper` (`["faketime", "-f", "@2026-11-30 23:59:44"]`: the
/// program and its arguments; none: the server alone).
pub fn command_under(wrapper: &[&str], args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = match wrapper {
        [] => super::child::command("server_process"),
        _ => super::child::command_under(wrapper, "server_process"),
    };
    cmd.env(CHILD_ARGS, args.join("\n") + "\n");
    for name in CLEARED {
        cmd.env_remove(name);
    }
    cmd.envs(env.iter().copied());
    cmd
}

/// What a process printed so far, a line at a time, both streams.
#[derive(Default)]
struct Lines {
    /// `(from stdout, text)`, in the order they were read.
    all: Vec<(bool, String)>,
    /// How many lines [`Process::wait_for`] has gone past.
    read: usize,
}

/// A running example server (on 127.0.0.1, any free port), its stdout and stderr lines
/// collected (stderr also echoed, as `[server] …`); killed on drop.
pub struct Process {
    child: Child,
    lines: Arc<(Mutex<Lines>, Condvar)>,
}

impl Process {
    /// Starts the server without waiting for it to listen.
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_under(&[], args, env)
    }

    /// As [`spawn`](Self::spawn), run through `wrapper` (see [`command_under`]).
    pub fn spawn_under(wrapper: &[&str], args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut all = vec!["--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let mut child = command_under(wrapper, &all, env)
            .env(EXIT_WITH_PARENT, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server process");
        let lines = Arc::new((Mutex::new(Lines::default()), Condvar::new()));
        let stdout = Box::new(child.stdout.take().expect("piped stdout")) as Box<dyn Read + Send>;
        let stderr = Box::new(child.stderr.take().expect("piped stderr")) as Box<dyn Read + Send>;
        for (is_stdout, stream) in [(true, stdout), (false, stderr)] {
            let lines = lines.clone();
            // Drains the stream for the life of the process.
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if !is_stdout {
                        eprintln!("[server] {line}");
                    }
                    lines.0.lock().unwrap_or_else(|e| e.into_inner()).all.push((is_stdout, line));
                    lines.1.notify_all();
                }
            });
        }
        Self { child, lines }
    }

    fn lock(&self) -> MutexGuard<'_, Lines> {
        self.lines.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits up to `within` for a line (either stream) containing `needle`, past the lines
    /// earlier calls returned: so a line that comes again (after a second `SIGHUP`, say) is
    /// waited for again.
    pub fn wait_for(&self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let mut lines = self.lock();
        loop {
            let start = lines.read;
            if let Some(i) = lines.all[start..].iter().position(|(_, l)| l.contains(needle)) {
                lines.read = start + i + 1;
                return lines.all[start + i].1.clone();
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                let output: Vec<&str> = lines.all.iter().map(|(_, l)| l.as_str()).collect();
                panic!("no line with {needle:?} within {within:?}; output:\n{}", output.join("\n"));
            };
            lines = self.lines.1.wait_timeout(lines, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The startup line (`… listening on http://ADDR …`), waiting up to 30s for it.
    pub fn startup_line(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut lines = self.lock();
        loop {
            if let Some((_, line)) = lines.all.iter().find(|(stdout, l)| *stdout && l.contains(LISTENING)) {
                return line.clone();
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                let output: Vec<&str> = lines.all.iter().map(|(_, l)| l.as_str()).collect();
                panic!("the server did not print its startup line within 30s; output:\n{}", output.join("\n"));
            };
            lines = self.lines.1.wait_timeout(lines, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The address from the startup line (waiting for it).
    pub fn addr(&self) -> SocketAddr {
        let line = self.startup_line();
        line.split(LISTENING)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in the startup line {line:?}"))
    }

    /// How many stderr lines so far contain `text`.
    pub fn logged(&self, text: &str) -> usize {
        self.lock().all.iter().filter(|(stdout, l)| !stdout && l.contains(text)).count()
    }

    /// The last stderr line so far containing `text`.
    pub fn last_logged(&self, text: &str) -> Option<String> {
        self.lock().all.iter().rev().find(|(stdout, l)| !stdout && l.contains(text)).map(|(_, l)| l.clone())
    }

    /// Everything printed so far, both streams, once nothing new came for 200 ms.
    pub fn output(&self) -> String {
        let mut lines = self.lock();
        loop {
            let before = lines.all.len();
            lines = self.lines.1.wait_timeout(lines, Duration::from_millis(200)).unwrap_or_else(|e| e.into_inner()).0;
            if lines.all.len() == before {
                break;
            }
        }
        let output: Vec<&str> = lines.all.iter().map(|(_, l)| l.as_str()).collect();
        output.join("\n")
    }

    /// `kill -NAME` (`INT` is what Ctrl-C sends, `HUP` reloads the limits file).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args([&format!("-{name}"), &pid]).status().is_ok_and(|s| s.success());
        assert!(ok, "kill -{name} failed");
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server process that is listening: [`Process`] with its address.
pub struct Server {
    process: Process,
    pub addr: SocketAddr,
    pub startup_line: String,
}

impl Server {
    /// Starts the server and waits (up to 30s) until it listens.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let process = Process::spawn(args, env);
        let startup_line = process.startup_line();
        let addr = process.addr();
        Self { process, addr, startup_line }
    }
}

impl Deref for Server {
    type Target = Process;
    fn deref(&self) -> &Process {
        &self.process
    }
}

impl DerefMut for Server {
    fn deref_mut(&mut self) -> &mut Process {
        &mut self.process
    }
}

/// 127.0.0.`last`: a client address of its own (any 127.0.0.0/8 address is loopback).
pub fn loopback(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// An HTTP response: the status, the headers (names in lower case) and the body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Reply {
    /// A header by its lower-case name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// One HTTP/1.1 request over a fresh connection from `from` (any 127.0.0.0/8 address).
pub async fn request(server: SocketAddr, from: IpAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let headers: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
    request_bytes(server, from, method, path, &headers).await
}

/// As [`request`], for a test without a runtime of its own.
pub fn request_blocking(server: SocketAddr, from: IpAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(request(server, from, method, path, headers))
}

/// As [`request`], with header values as bytes: they need not be ASCII, nor UTF-8.
pub async fn request_bytes(
    server: SocketAddr,
    from: IpAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
) -> Reply {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\nContent-Length: 0\r\n")
        .into_bytes();
    for (name, value) in headers {
        req.extend_from_slice(format!("{name}: ").as_bytes());
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"\r\n");
    exchange(server, from, &req).await
}

/// A `POST` of a JSON `body` to `path` over a fresh connection from `from`.
pub async fn post_json(server: SocketAddr, from: IpAddr, path: &str, body: &str) -> Reply {
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    exchange(server, from, req.as_bytes()).await
}

/// Sends `request` over a fresh connection from `from` and reads the response to its end.
async fn exchange(server: SocketAddr, from: IpAddr, request: &[u8]) -> Reply {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(from, 0)).unwrap_or_else(|e| panic!("bind {from}: {e}"));
    let mut stream = socket.connect(server).await.unwrap_or_else(|e| panic!("connect {server} from {from}: {e}"));
    stream.write_all(request).await.expect("write request");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("response within 10s")
        .expect("read response");
    parse_response(&raw)
}

/// A raw HTTP/1.1 response, read to its end, parsed (a chunked body de-chunked).
pub fn parse_response(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no header end in {text:?}"));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status =
        status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{status_line:?}"));
    let mut headers = HashMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').unwrap_or_else(|| panic!("bad header line {line:?}"));
        let previous = headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        assert!(previous.is_none(), "header {name} twice");
    }
    let body = if headers.get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Reply { status, headers, body }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}
