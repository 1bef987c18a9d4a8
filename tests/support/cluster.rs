//! A real local Redis Cluster: `redis-server` processes with `cluster-enabled yes` in temp dirs,
//! joined by `redis-cli --cluster create`, torn down by pid on drop.
#![allow(dead_code)]

use super::{free_port, redis_server_binary};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub struct RedisCluster {
    nodes: Vec<Node>,
    dir: PathBuf,
    /// Served over TLS too (`tls-cluster yes`), with these certificates.
    pki: Option<super::tls::Pki>,
}

struct Node {
    port: u16,
    /// The TLS port, when the cluster has one (clients on it are told TLS ports).
    tls_port: Option<u16>,
    child: Option<Child>,
}

/// A free port for a cluster node whose bus port (10 000 above it, which Redis also binds) is
/// free too: a bus port taken by another test's connection kept the node from starting.
fn free_node_port() -> u16 {
    loop {
        let port = free_port();
        let bus = port.checked_add(10_000).and_then(|p| std::net::TcpListener::bind(("127.0.0.1", p)).ok());
        if bus.is_some() {
            return port;
        }
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli is not installed (apt-get install -y redis-tools); these tests never skip");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl RedisCluster {
    /// `masters` primaries with `replicas` replicas each, slots spread evenly.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_with(masters, replicas, false)
    }

    /// `masters` primaries, no replicas, each also on a TLS port with a private CA
    /// ([`pki`](Self::pki)); always `redis-server` (or `RATELIMIT_TEST_TLS_SERVER`), as in
    /// `tls.rs`. The plain ports stay for `redis-cli`.
    pub fn start_tls(masters: usize) -> RedisCluster {
        RedisCluster::start_with(masters, 0, true)
    }

    fn start_with(masters: usize, replicas: usize, tls: bool) -> RedisCluster {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ratelimit-test-cluster-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let pki = tls.then(|| super::tls::Pki::make(&dir.join("pki")));
        let mut cluster = RedisCluster { nodes: Vec::new(), dir, pki };
        for _ in 0..masters * (1 + replicas) {
            let port = free_node_port();
            let mut node = Node { port, tls_port: tls.then(free_port), child: None };
            cluster.spawn(&mut node);
            cluster.nodes.push(node);
        }
        let addrs: Vec<String> = cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli is not installed (apt-get install -y redis-tools); these tests never skip");
        assert!(status.success(), "redis-cli --cluster create failed");
        cluster.wait_ready(Duration::from_secs(30));
        cluster
    }

    fn spawn(&self, node: &mut Node) {
        let dir = self.dir.join(node.port.to_string());
        std::fs::create_dir_all(&dir).expect("node dir");
        let mut command = match &self.pki {
            None => Command::new(redis_server_binary()),
            Some(pki) => {
                let mut command = Command::new(super::tls::tls_server_binary());
                command
                    .args(["--tls-port", &node.tls_port.unwrap_or_default().to_string(), "--tls-cluster", "yes"])
                    .args(["--tls-replication", "yes", "--tls-auth-clients", "no"])
                    .arg("--tls-cert-file")
                    .arg(&pki.server_cert)
                    .arg("--tls-key-file")
                    .arg(&pki.server_key)
                    .arg("--tls-ca-cert-file")
                    .arg(&pki.ca_cert);
                command
            }
        };
        let child = command
            .args(["--port", &node.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"])
            .args(["--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is not installed (apt-get install -y redis-server); these tests never skip");
        node.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cli(node.port, &["PING"]).contains("PONG") {
            assert!(Instant::now() < deadline, "cluster node {} did not start", node.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until every live node reports `cluster_state:ok` and every replica's link is up.
    pub fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let ready = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                let info = cli(n.port, &["CLUSTER", "INFO"]);
                let repl = cli(n.port, &["INFO", "replication"]);
                info.contains("cluster_state:ok")
                    && (!repl.contains("role:slave") || repl.contains("master_link_status:up"))
            });
            if ready {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not become ready within {within:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The certificates of a TLS cluster.
    pub fn pki(&self) -> &super::tls::Pki {
        self.pki.as_ref().expect("a cluster started with start_tls")
    }

    /// `rediss://` seed URLs of every node of a TLS cluster.
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes.iter().filter_map(|n| n.tls_port).map(|p| format!("rediss://127.0.0.1:{p}/")).collect()
    }

    /// Seed URLs of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| format!("redis://127.0.0.1:{}/", n.port)).collect()
    }

    /// The port of the primary that serves `slot` now, as a live node sees it (`CLUSTER NODES`:
    /// `<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot ranges>...`).
    pub fn primary_of(&self, slot: u16) -> u16 {
        self.try_primary_of(slot).unwrap_or_else(|nodes| panic!("no primary for slot {slot} in:\n{nodes}"))
    }

    /// As [`primary_of`](Self::primary_of), or the `CLUSTER NODES` text when no live primary
    /// serves the slot (during a failover).
    pub fn try_primary_of(&self, slot: u16) -> Result<u16, String> {
        let live = self.nodes.iter().find(|n| n.child.is_some()).expect("a live node");
        let nodes = cli(live.port, &["CLUSTER", "NODES"]);
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| {
                let mut ends = range.split('-').map(|x| x.parse::<u16>());
                match (ends.next(), ends.next()) {
                    (Some(Ok(a)), Some(Ok(b))) => (a..=b).contains(&slot),
                    (Some(Ok(a)), None) => a == slot,
                    _ => false,
                }
            });
            if serves {
                let port = fields[1].split(['@', ':']).nth(1).and_then(|p| p.parse().ok());
                return Ok(port.expect("a port in CLUSTER NODES"));
            }
        }
        Err(nodes)
    }

    /// `SIGKILL`s the node on `port`.
    pub fn kill(&mut self, port: u16) {
        let node = self.nodes.iter_mut().find(|n| n.port == port).expect("a node of this cluster");
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The slot of `key`, as the cluster itself computes it (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &[u8]) -> u16 {
        let port = self.nodes.iter().find(|n| n.child.is_some()).expect("a running node").port;
        let mut node = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut node).unwrap()
    }

    /// A plain connection to the node serving `slot` (to inspect keys).
    pub fn client_for_slot(&self, slot: u16) -> redis::Connection {
        let port = self.primary_of(slot);
        redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
