//! The watched configuration: a change is served within seconds without failing a call, a bad
//! file is refused with its file, line and reason while the last good configuration keeps
//! serving, and a bad configuration at startup stops the server with the same words.

mod rls;

use rls::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(count: u32) -> String {
    format!("domain: live\ndescriptors:\n  - key: k\n    rate_limit: {{ unit: minute, requests_per_unit: {count} }}\n")
}

async fn limit_in_force(ch: &tonic::transport::Channel, subject: &str) -> u32 {
    let r = ask(ch, "live", vec![descriptor(&[("k", subject)])], 0).await;
    r.statuses[0].current_limit.as_ref().map_or(0, |l| l.requests_per_unit)
}

async fn admitted(ch: &tonic::transport::Channel, subject: &str) -> usize {
    let mut n = 0;
    while n < 50 && !over(&ask(ch, "live", vec![descriptor(&[("k", subject)])], 0).await) {
        n += 1;
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_served_under_traffic_and_a_bad_file_keeps_the_last_good_one() {
    let redis = RedisServer::start();
    let dir = config_dir("reload", &[("live.yaml", &config(1000))]);
    let file = dir.join("live.yaml");
    let server = Rls::start(&dir, &[("REDIS_URL", &redis.url())], &[]);
    let ch = server.channel().await;
    assert_eq!(limit_in_force(&ch, "probe").await, 1000);

    // Traffic all along: no call may fail while the configuration changes.
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failures) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut traffic = Vec::new();
    for t in 0..4 {
        let (ch, stop, calls, failures) = (ch.clone(), stop.clone(), calls.clone(), failures.clone());
        traffic.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let request = RateLimitRequest {
                    domain: "live".into(),
                    descriptors: vec![descriptor(&[("k", &format!("traffic-{t}"))])],
                    hits_addend: 0,
                };
                match proto::should_rate_limit(ch.clone(), request).await {
                    Ok(_) => calls.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failures.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    replace_file(&file, &config(3));
    let deadline = Instant::now() + Duration::from_secs(10);
    while limit_in_force(&ch, "probe").await != 3 {
        assert!(Instant::now() < deadline, "the new limit is not served within 10 s:\n{}", server.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.wait_for_log("configuration reloaded", Duration::from_secs(5));
    assert_eq!(admitted(&ch, "fresh").await, 3);

    // A bad file: refused with file, line and reason; the limit of 3 keeps serving.
    replace_file(
        &file,
        "domain: live\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 9 }\n",
    );
    let log = server.wait_for_log("configuration refused", Duration::from_secs(10));
    assert!(
        log.contains("live.yaml:3:5: descriptors[0]") && log.contains("invalid rate limit unit 'fortnight'"),
        "{log}"
    );
    assert_eq!(limit_in_force(&ch, "probe-2").await, 3);
    assert_eq!(admitted(&ch, "after-refusal").await, 3);

    // A new file beside it: another domain, loaded with the rest.
    std::fs::write(&file, config(5)).expect("fix the file");
    std::fs::write(
        dir.join("other.yaml"),
        "domain: other\ndescriptors:\n  - key: x\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while limit_in_force(&ch, "probe-3").await != 5 {
        assert!(Instant::now() < deadline, "the fixed file is not served:\n{}", server.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = ask(&ch, "other", vec![descriptor(&[("x", "1")])], 0).await;
    assert_eq!(r.statuses[0].current_limit.as_ref().map(|l| l.requests_per_unit), Some(1));

    stop.store(true, Ordering::Relaxed);
    for t in traffic {
        t.await.expect("traffic task");
    }
    assert_eq!(failures.load(Ordering::Relaxed), 0, "no call failed during the reloads");
    assert!(calls.load(Ordering::Relaxed) > 20, "traffic ran: {} calls", calls.load(Ordering::Relaxed));
}

#[test]
fn a_bad_configuration_at_startup_stops_the_server_naming_file_line_and_reason() {
    let dir = config_dir("startup", &[("bad.yaml", "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n")]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ratelimit-server"))
        .args(["--config", dir.to_str().unwrap(), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .env_remove("REDIS_URL")
        .output()
        .expect("run ratelimit-server");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml:4:5:") && err.contains("unknown field `ratelimit`"), "{err}");
}
