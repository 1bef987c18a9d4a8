//! A real Redis Sentinel set: a primary, a replica (`--replicaof`) and one sentinel
//! (`redis-server sentinel.conf --sentinel`, quorum 1), on free loopback ports in a temp dir,
//! killed on drop. Missing binaries fail loudly (never a skip).
#![allow(dead_code)]

use super::free_port;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The name the sentinel monitors the primary under.
pub const MASTER: &str = "mymaster";

pub struct SentinelSet {
    dir: PathBuf,
    /// Data nodes by port (the first started as the primary).
    nodes: Vec<(u16, Option<Child>)>,
    sentinel_port: u16,
    sentinel: Option<Child>,
}

fn spawn(args: &[String]) -> Child {
    Command::new("redis-server")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server is not installed (apt-get install -y redis-server); these tests never skip")
}

/// `redis-cli -p port args…`, its stdout (`--raw`), or `None` when the server did not answer.
pub fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--raw"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli is not installed (apt-get install -y redis-tools); these tests never skip");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !text.starts_with("Could not connect")).then_some(text)
}

fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl SentinelSet {
    /// Starts the three processes and waits until the sentinel knows the replica (so that it
    /// can promote it).
    pub fn start() -> SentinelSet {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ratelimit-test-sentinel-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut set = SentinelSet { dir, nodes: Vec::new(), sentinel_port: free_port(), sentinel: None };
        let primary = set.start_node(None);
        set.start_node(Some(primary));
        let replica = set.nodes[1].0;
        wait_for("the replica in sync with the primary", Duration::from_secs(30), || {
            cli(replica, &["INFO", "replication"]).is_some_and(|i| i.contains("master_link_status:up"))
        });
        let conf = set.dir.join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {MASTER} 127.0.0.1 {primary} 1\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 5000\n",
            port = set.sentinel_port,
            dir = set.dir.display(),
        );
        std::fs::write(&conf, text).expect("write sentinel.conf");
        set.sentinel = Some(spawn(&[conf.display().to_string(), "--sentinel".to_owned()]));
        let port = set.sentinel_port;
        wait_for("the sentinel knows the replica", Duration::from_secs(30), || {
            cli(port, &["SENTINEL", "replicas", MASTER]).is_some_and(|r| r.contains(&replica.to_string()))
        });
        set
    }

    fn start_node(&mut self, replica_of: Option<u16>) -> u16 {
        let port = free_port();
        let node_dir = self.dir.join(port.to_string());
        std::fs::create_dir_all(&node_dir).expect("node dir");
        let mut args: Vec<String> =
            ["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        args.extend(["--dir".to_owned(), node_dir.display().to_string()]);
        if let Some(primary) = replica_of {
            args.extend(["--replicaof".to_owned(), "127.0.0.1".to_owned(), primary.to_string()]);
        }
        self.nodes.push((port, Some(spawn(&args))));
        wait_for("redis-server answering PING", Duration::from_secs(10), || {
            cli(port, &["PING"]).is_some_and(|r| r.trim() == "PONG")
        });
        port
    }

    /// The sentinel's URL, for `REDIS_SENTINEL_URLS`.
    pub fn sentinel_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.sentinel_port)
    }

    pub fn sentinel_port(&self) -> u16 {
        self.sentinel_port
    }

    /// The port of the node started as the primary.
    pub fn first_primary(&self) -> u16 {
        self.nodes[0].0
    }

    /// The port of the node started as the replica.
    pub fn first_replica(&self) -> u16 {
        self.nodes[1].0
    }

    /// The primary's port as the sentinel names it now.
    pub fn primary_port(&self) -> Option<u16> {
        let answer = cli(self.sentinel_port, &["SENTINEL", "get-master-addr-by-name", MASTER])?;
        answer.lines().nth(1)?.trim().parse().ok()
    }

    /// Waits until every write the primary acknowledged reached the replica.
    pub fn sync_replica(&self, primary: u16) {
        let acked = cli(primary, &["WAIT", "1", "5000"]).unwrap_or_default();
        assert_eq!(acked.trim(), "1", "the replica did not acknowledge the writes");
    }

    /// `SIGKILL`s the data node on `port`.
    pub fn kill(&mut self, port: u16) {
        if let Some((_, child)) = self.nodes.iter_mut().find(|(p, _)| *p == port) {
            if let Some(mut c) = child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// Waits (up to `limit`) until the sentinel names a primary other than `old`; its port.
    pub fn wait_for_new_primary(&self, old: u16, limit: Duration) -> u16 {
        let mut new = None;
        wait_for("a replica promoted by the sentinel", limit, || {
            new = self.primary_port().filter(|p| *p != old);
            new.is_some()
        });
        new.unwrap_or(old)
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        for child in self.nodes.iter_mut().filter_map(|(_, c)| c.as_mut()).chain(self.sentinel.as_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
