//! What the example server says when it starts: the settings in force on its startup line, a
//! stop with the variable's name for any value a documented variable does not take, and the
//! documentation's example limits file taken without a complaint.
//!
//! Every server runs in its own process, this test binary re-executed (see
//! tests/support/server_process.rs).

#[path = "../examples/server.rs"]
#[allow(dead_code)]
mod server;
mod support;

use std::path::PathBuf;
use support::server_process::{command, loopback, request_blocking, Server};

/// Not a test of its own: the body of the server processes that the tests start (see
/// tests/support/server_process.rs and tests/support/child.rs).
#[test]
#[ignore = "the server process the other tests start"]
fn server_process() {
    support::server_process::child_main(server::run);
}

/// The part of the startup line after the address: `(rate-limit store: …)`.
fn settings_of(line: &str) -> &str {
    line.split_once(" (").map_or(line, |(_, rest)| rest)
}

/// A directory of this test process's own, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ratelimit-startup-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

#[test]
fn the_startup_line_states_the_settings_in_force() {
    let plain = Server::start(&[], &[]);
    assert_eq!(
        settings_of(&plain.startup_line),
        "rate-limit store: memory; on_error: allow; refusal cache: off; overrides file: none; \
         memory bound: 250000 keys; trusted proxies: none)"
    );

    // Every setting given. Nothing listens at the URL: the line is printed all the same (the
    // store is probed in the background), and the password never appears.
    let dir = scratch("settings");
    let file = dir.join("limits.toml");
    std::fs::write(&file, "[exempt]\nusers = [\"ops-bot\"]\n").expect("write the limits file");
    let file = file.to_str().expect("a UTF-8 path");
    let port = support::free_port();
    let url = format!("redis://:hunter2@127.0.0.1:{port}/");
    let all = Server::start(
        &["--trust-proxy", "10.0.0.0/8", "--trust-proxy", "::1/128"],
        &[
            ("REDIS_URL", url.as_str()),
            ("RATELIMIT_ON_ERROR", "local"),
            ("RATELIMIT_REFUSAL_CACHE_SIZE", "500"),
            ("RATELIMIT_MEMORY_MAX_KEYS", "1000"),
            ("RATELIMIT_CONFIG", file),
        ],
    );
    assert_eq!(
        settings_of(&all.startup_line),
        format!(
            "rate-limit store: redis (redis://***@127.0.0.1:{port}/); on_error: local; refusal cache: on, \
             500 entries; overrides file: {file}; memory bound: 1000 keys; trusted proxies: 10.0.0.0/8, ::1/128)"
        )
    );
    assert!(!all.output().contains("hunter2"), "the password is never printed");

    // A remote store with the cache turned off, failing closed: counts never live in memory.
    let off = Server::start(
        &[],
        &[("REDIS_URL", url.as_str()), ("RATELIMIT_ON_ERROR", "deny"), ("RATELIMIT_REFUSAL_CACHE", "off")],
    );
    assert_eq!(
        settings_of(&off.startup_line),
        format!(
            "rate-limit store: redis (redis://***@127.0.0.1:{port}/); on_error: deny; refusal cache: off; \
             overrides file: none; trusted proxies: none)"
        )
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A value a variable does not take stops the server before it listens, with a message that
/// names the variable (and, for a variable with a few values, the values it takes).
#[test]
fn a_bad_value_of_any_variable_stops_the_server_naming_it() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("REDIS_URL", "http://127.0.0.1:6379/")], "REDIS_URL: "),
        (&[("REDIS_URL", "redis://127.0.0.1:port/")], "REDIS_URL: "),
        (&[("REDIS_CLUSTER_URLS", "http://127.0.0.1:7000")], "REDIS_CLUSTER_URLS: "),
        (
            &[("REDIS_SENTINEL_URLS", "redis://127.0.0.1:26379")],
            "REDIS_SENTINEL_URLS is set without REDIS_SENTINEL_MASTER",
        ),
        (&[("REDIS_SENTINEL_MASTER", "mymaster")], "REDIS_SENTINEL_MASTER is set without REDIS_SENTINEL_URLS"),
        (
            &[("REDIS_URL", "redis://127.0.0.1:6379/"), ("REDIS_PASSWORD", "pw")],
            "REDIS_PASSWORD is set without REDIS_SENTINEL_URLS",
        ),
        (&[("REDIS_USERNAME", "app")], "REDIS_USERNAME is set without REDIS_SENTINEL_URLS"),
        (&[("REDIS_CA_CERT", "ca.pem")], "REDIS_CA_CERT is set without REDIS_URL"),
        (
            &[("REDIS_URL", "rediss://127.0.0.1:6379/"), ("REDIS_CA_CERT", "/nonexistent/ca.pem")],
            "cannot read the CA certificate (REDIS_CA_CERT) /nonexistent/ca.pem",
        ),
        (
            &[("REDIS_URL", "redis://127.0.0.1:6379/"), ("REDIS_CLIENT_CERT", "c.pem")],
            "REDIS_CLIENT_CERT is set without REDIS_CLIENT_KEY",
        ),
        (
            &[("REDIS_URL", "redis://127.0.0.1:6379/"), ("REDIS_CLIENT_KEY", "k.pem")],
            "REDIS_CLIENT_KEY is set without REDIS_CLIENT_CERT",
        ),
        (
            &[("RATELIMIT_ON_ERROR", "closed")],
            r#"RATELIMIT_ON_ERROR="closed": unknown failure policy "closed": expected `allow`, `deny` or `local`"#,
        ),
        (&[("RATELIMIT_ON_ERROR", "Deny")], r#"RATELIMIT_ON_ERROR="Deny""#),
        (
            &[("RATELIMIT_REFUSAL_CACHE", "yes")],
            r#"RATELIMIT_REFUSAL_CACHE="yes": unknown switch "yes": expected on, off, 1, 0, true or false"#,
        ),
        (&[("RATELIMIT_REFUSAL_CACHE_SIZE", "0")], r#"RATELIMIT_REFUSAL_CACHE_SIZE="0": "0" is out of range"#),
        (
            &[("RATELIMIT_REFUSAL_CACHE_SIZE", "lots")],
            r#"RATELIMIT_REFUSAL_CACHE_SIZE="lots": "lots" is not a whole number"#,
        ),
        (
            &[("RATELIMIT_MEMORY_MAX_KEYS", "0")],
            r#"RATELIMIT_MEMORY_MAX_KEYS="0": "0" is out of range: expected 1 or more keys"#,
        ),
        (&[("RATELIMIT_MEMORY_MAX_KEYS", "1e6")], r#"RATELIMIT_MEMORY_MAX_KEYS="1e6": "1e6" is not a whole number"#),
        (&[("RATELIMIT_DENY_CACHE", "maybe")], r#"RATELIMIT_DENY_CACHE="maybe""#),
        (&[("RATELIMIT_DENY_CACHE_SIZE", "0")], r#"RATELIMIT_DENY_CACHE_SIZE="0""#),
        (&[("RATELIMIT_CONFIG", "/nonexistent/limits.toml")], "/nonexistent/limits.toml: cannot read"),
    ];
    for (env, says) in cases {
        let out = command(&["--listen", "127.0.0.1:0"], env).output().expect("run the server process");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{env:?}: {stdout}{stderr}");
        assert!(stderr.contains(says), "{env:?}: expected {says:?} in {stderr}");
        assert!(!stdout.contains("listening"), "{env:?}: {stdout}");
    }
}

/// The example limits file of docs/configuration.md, applied to the example server: every entry
/// names a limit the server has, so nothing is logged as overriding a limit that does not exist.
#[test]
fn the_documented_limits_file_fits_the_example_server() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md")).expect("read the doc");
    let start =
        doc.find("```toml\n# limits.toml").expect("the example file in docs/configuration.md") + "```toml\n".len();
    let end = start + doc[start..].find("```").expect("the end of the example file");
    // Compiled into this test binary as the module `server`, the handlers are named
    // `startup::server::…`, not `server::…`.
    let text = doc[start..end].replace("limiter = \"server::", "limiter = \"startup::server::");
    let dir = scratch("documented");
    let file = dir.join("limits.toml");
    std::fs::write(&file, text).expect("write the limits file");
    let server = Server::start(&[], &[("RATELIMIT_CONFIG", file.to_str().expect("a UTF-8 path"))]);
    // Each limiter reads the table on its first call: call every one the file names.
    for (method, path, headers) in [
        ("GET", "/api/hello", &[][..]),
        ("GET", "/api/global", &[][..]),
        ("GET", "/api/search", &[("X-User-Id", "alice")][..]),
        ("POST", "/api/orders", &[("X-User-Id", "alice")][..]),
    ] {
        let status = request_blocking(server.addr, loopback(2), method, path, headers).status;
        assert!(status == 200 || status == 429, "{method} {path}: {status}");
    }
    let output = server.output();
    assert!(!output.contains("does not have"), "an entry of the documented file fits no limit:\n{output}");
    assert!(!output.contains("ERROR") && !output.contains("WARN"), "{output}");
    let _ = std::fs::remove_dir_all(dir);
}
