//! Two `ratelimit-server` processes on one real Redis admit exactly the limit between them.

mod rls;

use rls::*;

const CONFIG: &str = r#"
domain: fleet
descriptors:
  - key: api
    rate_limit: { unit: minute, requests_per_unit: 25 }
  - key: hourly
    algorithm: sliding_window_counter
    rate_limit: { unit: hour, requests_per_unit: 17 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_redis_are_exact_over_a_window() {
    let redis = RedisServer::start();
    let dir = config_dir("fleet", &[("fleet.yaml", CONFIG)]);
    let servers =
        [Rls::start(&dir, &[("REDIS_URL", &redis.url())], &[]), Rls::start(&dir, &[("REDIS_URL", &redis.url())], &[])];
    let channels = [servers[0].channel().await, servers[1].channel().await];
    for key in ["api", "hourly"] {
        let mut tasks = Vec::new();
        for t in 0..8 {
            let ch = channels[t % 2].clone();
            tasks.push(tokio::spawn(async move {
                let mut ok = 0;
                for _ in 0..10 {
                    let r = ask(&ch, "fleet", vec![descriptor(&[(key, "shared")])], 0).await;
                    ok += usize::from(!over(&r));
                }
                ok
            }));
        }
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.expect("task");
        }
        let limit = if key == "api" { 25 } else { 17 };
        assert_eq!(admitted, limit, "{key}: 80 requests through two servers, {limit} admitted");
    }
}
