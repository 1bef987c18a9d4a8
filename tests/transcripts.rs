//! The console transcripts of README.md and docs/http.md, run against the example server, so that
//! they cannot drift from what it answers.
//!
//! Each ```` ```console ```` block is one terminal session: its `$ ` commands run in order, in one
//! `bash` (so `&`, `wait` and loops work as they do in a terminal), with the real `curl`.
//!
//! **Every block gets servers of its own, fresh**: each transcript in these files counts from a
//! server that has seen no call yet. Two start their server in the transcript; http.md's first
//! follows the start of the server; the others call routes that no earlier block called (the
//! limits of a route are its own), so a fresh server is what they show too. A
//! `$ [VAR=value …] cargo run … --example server [-- FLAGS]` line is not run: it names a server
//! that the test starts for the block, with that environment and those flags (a `REDIS_URL` gets
//! a real `redis-server` of the block's own on a free port). A block without such a line talks to
//! one fresh in-memory server, the default `127.0.0.1:3000`. The transcript's ports (3000, 3001,
//! a Redis's 6390…) are replaced by the real ones in the commands.
//!
//! Compared for each command, in order: the status lines (`HTTP/1.1 429 Too Many Requests`, and
//! the `200 200 … 429` lines of `-w "%{http_code} "` loops), the `ratelimit`, `ratelimit-policy`
//! and `retry-after` fields, and the `retry_after_ms` of refusal bodies; a field the transcript
//! does not show must be absent too. Other headers and body text are not compared. The times
//! (`retry-after`, `t=` and `retry_after_ms`) depend on when a command ran: they match when they
//! are within [`TIME_TOLERANCE_MS`] of the transcript's. A startup line (`server: listening on
//! http://…`) matches the server's up to the store it names: more settings may follow it.

#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use support::server_process::Server;
use support::RedisServer;

/// How far a time in an answer may be from the transcript's.
const TIME_TOLERANCE_MS: u64 = 3000;
/// How long one block's commands may take, all together.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(120);
/// What the example prints once it listens.
const STARTUP: &str = "server: listening on ";

/// Not a test of its own: the body of the server processes that the tests start (see
/// tests/support/server_process.rs and tests/support/child.rs).
#[test]
#[ignore = "the server process the other tests start"]
fn server_process() {
    support::server_process::child_main(server::run);
}

#[test]
fn readme_transcripts() {
    check_file("README.md");
}

#[test]
fn http_md_transcripts() {
    check_file("docs/http.md");
}

/// One `$ ` command of a transcript, and what the transcript shows it printed.
struct Step {
    /// The line of the `$ `, from 1.
    line: usize,
    command: String,
    /// `(line, text)`.
    output: Vec<(usize, String)>,
}

/// A ```` ```console ```` block.
struct Block {
    line: usize,
    steps: Vec<Step>,
}

/// A server that a block starts: `$ [VAR=value …] cargo run … --example server [-- FLAGS]`.
struct ServerSpec {
    /// The port of its `--listen` in the transcript (the example's default: 3000).
    port: String,
    env: Vec<(String, String)>,
    /// Its flags, but `--listen` (the test's servers listen on a free port).
    args: Vec<String>,
}

fn check_file(file: &str) {
    let curl = Command::new("curl").arg("--version").output();
    assert!(
        curl.is_ok_and(|o| o.status.success()),
        "curl is not installed: the transcripts are run with the real curl (apt-get install -y curl); \
         this test never skips"
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let blocks = console_blocks(file, &text);
    assert!(!blocks.is_empty(), "{file} has no console block: is this test still reading the right file?");
    let mut failures = Vec::new();
    for block in &blocks {
        check_block(file, block, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{} transcript line(s) of {file} differ from what the example server answers:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

fn console_blocks(file: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    for (n, line) in (1..).zip(text.lines()) {
        let Some(block) = current.as_mut() else {
            if line.trim() == "```console" {
                current = Some(Block { line: n, steps: Vec::new() });
            }
            continue;
        };
        if line.trim_start().starts_with("```") {
            blocks.extend(current.take());
        } else if let Some(command) = line.strip_prefix("$ ") {
            block.steps.push(Step { line: n, command: command.to_owned(), output: Vec::new() });
        } else {
            let step = block.steps.last_mut().unwrap_or_else(|| panic!("{file}:{n}: output before any `$ ` command"));
            step.output.push((n, line.to_owned()));
        }
    }
    assert!(current.is_none(), "{file}: a console block is not closed");
    blocks
}

fn server_spec(command: &str) -> Option<ServerSpec> {
    let words: Vec<&str> = command.split_whitespace().filter(|w| *w != "&").collect();
    let cargo = words.iter().position(|w| *w == "cargo")?;
    if !words.windows(2).any(|w| w == ["--example", "server"]) {
        return None;
    }
    let env = words[..cargo]
        .iter()
        .map(|w| {
            let (name, value) = w.split_once('=').unwrap_or_else(|| panic!("not VAR=value: {w:?} in `{command}`"));
            (name.to_owned(), value.to_owned())
        })
        .collect();
    let (mut port, mut args) = ("3000".to_owned(), Vec::new());
    let mut flags = words.iter().skip_while(|w| **w != "--").skip(1);
    while let Some(flag) = flags.next() {
        if *flag == "--listen" {
            let addr = flags.next().unwrap_or_else(|| panic!("--listen without a value in `{command}`"));
            port = addr.rsplit(':').next().unwrap_or_default().to_owned();
        } else {
            args.push((*flag).to_owned());
        }
    }
    Some(ServerSpec { port, env, args })
}

/// `text` with the port `from` replaced by `to` where it stands alone: not inside a longer
/// number, nor a value after `=` (`?ms=3000` stays).
fn replace_port(text: &str, from: &str, to: &str) -> String {
    let mut out = String::new();
    let mut rest = 0;
    for (at, _) in text.match_indices(from) {
        let before = text[..at].chars().next_back();
        let after = text[at + from.len()..].chars().next();
        if before.is_some_and(|c| c.is_ascii_digit() || c == '=') || after.is_some_and(|c| c.is_ascii_digit()) {
            continue;
        }
        out.push_str(&text[rest..at]);
        out.push_str(to);
        rest = at + from.len();
    }
    out.push_str(&text[rest..]);
    out
}

/// [`replace_port`] for each `(from, to)` in turn (a real port is an ephemeral one, far from the
/// transcripts' 3000s and 6390: one replacement does not feed the next).
fn replace_ports(text: &str, ports: &[(String, String)]) -> String {
    ports.iter().fold(text.to_owned(), |text, (from, to)| replace_port(&text, from, to))
}

fn check_block(file: &str, block: &Block, failures: &mut Vec<String>) {
    let mut specs: Vec<ServerSpec> = block.steps.iter().filter_map(|s| server_spec(&s.command)).collect();
    if specs.is_empty() {
        specs.push(ServerSpec { port: "3000".to_owned(), env: Vec::new(), args: Vec::new() });
    }
    // (transcript port, real port); the Redis servers and the example servers live until the end.
    let mut ports: Vec<(String, String)> = Vec::new();
    let mut redis: Vec<RedisServer> = Vec::new();
    let mut servers: Vec<Server> = Vec::new();
    for spec in &specs {
        let mut env = spec.env.clone();
        for (name, value) in &mut env {
            if name == "REDIS_URL" {
                let port = value.trim_end_matches('/').rsplit(':').next().unwrap_or_default().to_owned();
                if !ports.iter().any(|(from, _)| *from == port) {
                    let server = RedisServer::start();
                    ports.push((port, server.port().to_string()));
                    redis.push(server);
                }
                *value = replace_ports(value, &ports);
            }
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let args: Vec<&str> = spec.args.iter().map(String::as_str).collect();
        let server = Server::start(&args, &env);
        ports.push((spec.port.clone(), server.addr.port().to_string()));
        servers.push(server);
    }
    // The startup lines the transcript shows, the servers' in order.
    let startups: Vec<&(usize, String)> =
        block.steps.iter().flat_map(|s| &s.output).filter(|(_, l)| l.starts_with(STARTUP)).collect();
    for (i, (line, expected)) in startups.iter().enumerate() {
        let expected = replace_ports(expected, &ports);
        let expected = expected.trim_end_matches(')');
        match servers.get(i) {
            Some(server) if server.startup_line.starts_with(expected) => {}
            Some(server) => failures.push(format!(
                "{file}:{line}: the startup line\n    expected: {expected}…\n    got:      {}",
                server.startup_line
            )),
            None => failures.push(format!("{file}:{line}: a startup line, but the block starts no such server")),
        }
    }

    let run: Vec<&Step> = block.steps.iter().filter(|s| server_spec(&s.command).is_none()).collect();
    for step in &run {
        if !step.command.contains("curl") {
            failures.push(format!(
                "{file}:{}: `$ {}` is neither curl nor the server: this test does not know how to run it",
                step.line, step.command
            ));
            return;
        }
    }
    let commands: Vec<String> = run.iter().map(|s| replace_ports(&s.command, &ports)).collect();
    let (outputs, stderr) = run_session(file, block, &commands);
    let (before, mut compared) = (failures.len(), startups.len());
    for (step, got) in run.iter().zip(&outputs) {
        compared += compare(file, step, got, failures);
    }
    eprintln!(
        "{file}:{}: {} command(s) run, {compared} line(s) compared, against fresh server(s): {}",
        block.line,
        run.len(),
        servers.iter().map(|s| s.startup_line.as_str()).collect::<Vec<_>>().join("; ")
    );
    if failures.len() > before && !stderr.trim().is_empty() {
        failures.push(format!("{file}:{}: the stderr of that block's commands:\n{stderr}", block.line));
    }
}

/// Runs `commands` in one `bash`; returns what each printed on stdout, in lines, and their stderr.
fn run_session(file: &str, block: &Block, commands: &[String]) -> (Vec<Vec<String>>, String) {
    const MARK: &str = "#transcript-step#";
    let mut script = String::new();
    for (i, command) in commands.iter().enumerate() {
        script.push_str(&format!("printf '\\n{MARK}{i}\\n'\n{command}\n"));
    }
    let mut bash = Command::new("bash");
    bash.arg("-c").arg(&script).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // A group of its own: on a timeout, its background jobs are killed with it.
    bash.process_group(0);
    for name in ["http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        bash.env_remove(name);
    }
    let child = bash.spawn().expect("start bash");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(BLOCK_TIMEOUT) {
        Ok(output) => output.expect("run bash"),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &format!("-{pid}")]).status();
            panic!("{file}:{}: the block's commands did not finish within {BLOCK_TIMEOUT:?}", block.line);
        }
    };
    let mut outputs = vec![Vec::new(); commands.len()];
    let mut current = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        if let Some(i) = line.strip_prefix(MARK).and_then(|i| i.parse::<usize>().ok()) {
            current = Some(i);
        } else if let Some(i) = current {
            outputs[i].push(line.to_owned());
        }
    }
    // Without a terminal, `curl -i` draws its progress meter on stderr: not worth showing.
    let progress = |l: &&str| l.contains("% Total") || l.contains("Dload") || l.contains("--:--");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stderr: Vec<&str> = stderr.lines().filter(|l| !progress(l)).collect();
    (outputs, stderr.join("\n"))
}

/// A line as compared: its text with each time replaced by `{t}`, and those times in ms.
type Compared = (String, Vec<u64>);

/// `line` as compared; `None` for the lines that are not compared.
fn significant(line: &str) -> Option<Compared> {
    let line = line.trim_end();
    let codes = !line.is_empty() && line.split(' ').all(|w| w.len() == 3 && w.bytes().all(|b| b.is_ascii_digit()));
    if line.starts_with("HTTP/") || codes {
        return Some((line.to_owned(), Vec::new()));
    }
    if line.contains("\"retry_after_ms\":") {
        return Some(loosen(line, "\"retry_after_ms\":", 1));
    }
    let (name, _) = line.split_once(':')?;
    match name.to_ascii_lowercase().as_str() {
        "ratelimit-policy" => Some((line.to_owned(), Vec::new())),
        "ratelimit" => Some(loosen(line, ";t=", 1000)),
        "retry-after" => Some(loosen(line, ": ", 1000)),
        _ => None,
    }
}

/// `line` with the number after each `key` replaced by `{t}`, and those numbers × `unit_ms`.
fn loosen(line: &str, key: &str, unit_ms: u64) -> Compared {
    let (mut text, mut times) = (String::new(), Vec::new());
    let mut rest = line;
    while let Some(at) = rest.find(key) {
        let (head, tail) = rest.split_at(at + key.len());
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        text.push_str(head);
        match tail[..digits].parse::<u64>() {
            Ok(n) => {
                text.push_str("{t}");
                times.push(n * unit_ms);
            }
            Err(_) => text.push_str(&tail[..digits]),
        }
        rest = &tail[digits..];
    }
    text.push_str(rest);
    (text, times)
}

/// Compares what `step` printed with the transcript (pushing each difference to `failures`);
/// returns how many of the transcript's lines were compared.
fn compare(file: &str, step: &Step, got: &[String], failures: &mut Vec<String>) -> usize {
    let expected: Vec<(usize, &str, Compared)> = step
        .output
        .iter()
        .filter(|(_, l)| !l.starts_with(STARTUP))
        .filter_map(|(n, l)| Some((*n, l.as_str(), significant(l)?)))
        .collect();
    let got: Vec<(&str, Compared)> = got.iter().filter_map(|l| Some((l.trim_end(), significant(l)?))).collect();
    let command = format!("(the output of `$ {}`, line {})", step.command, step.line);
    for i in 0..expected.len().max(got.len()) {
        match (expected.get(i), got.get(i)) {
            (Some((n, want, (want_text, want_times))), Some((have, (have_text, have_times)))) => {
                let close =
                    want_times.iter().zip(have_times).all(|(w, h)| *h > 0 && w.abs_diff(*h) <= TIME_TOLERANCE_MS);
                if want_text != have_text || !close {
                    failures.push(format!("{file}:{n}: {command}\n    expected: {want}\n    got:      {have}"));
                }
            }
            (Some((n, want, _)), None) => {
                failures.push(format!("{file}:{n}: {command}\n    expected: {want}\n    got:      nothing"));
            }
            (None, Some((have, _))) => {
                let n = step.output.last().map_or(step.line, |(n, _)| *n);
                failures.push(format!("{file}:{n}: {command}\n    expected: nothing more\n    got:      {have}"));
            }
            (None, None) => unreachable!(),
        }
    }
    expected.len()
}
