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
    /// The data nodes' password (`requirepass`), if any.
    data_password: Option<String>,
    /// The sentinel's own password, if any.
    sentinel_password: Option<String>,
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
    cli_auth(port, None, args)
}

/// [`cli`] with a password.
pub fn cli_auth(port: u16, password: Option<&str>, args: &[&str]) -> Option<String> {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "--raw"]);
    if let Some(password) = password {
        cmd.args(["--no-auth-warning", "-a", password]);
    }
    let out = cmd
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
        SentinelSet::start_with(None, None)
    }

    /// The same, with a password on the data nodes and one on the sentinel.
    pub fn start_with(data_password: Option<&str>, sentinel_password: Option<&str>) -> SentinelSet {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ratelimit-test-sentinel-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut set = SentinelSet {
            dir,
            nodes: Vec::new(),
            sentinel_port: free_port(),
            sentinel: None,
            data_password: data_password.map(str::to_owned),
            sentinel_password: sentinel_password.map(str::to_owned),
        };
        let primary = set.start_node(None);
        set.start_node(Some(primary));
        let replica = set.nodes[1].0;
        wait_for("the replica in sync with the primary", Duration::from_secs(30), || {
            set.node_cli(replica, &["INFO", "replication"]).is_some_and(|i| i.contains("master_link_status:up"))
        });
        let conf = set.dir.join("sentinel.conf");
        let mut text = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {MASTER} 127.0.0.1 {primary} 1\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 5000\n",
            port = set.sentinel_port,
            dir = set.dir.display(),
        );
        if let Some(password) = &set.data_password {
            text.push_str(&format!("sentinel auth-pass {MASTER} {password}\n"));
        }
        if let Some(password) = &set.sentinel_password {
            text.push_str(&format!("requirepass {password}\n"));
        }
        std::fs::write(&conf, text).expect("write sentinel.conf");
        set.sentinel = Some(spawn(&[conf.display().to_string(), "--sentinel".to_owned()]));
        wait_for("the sentinel knows the replica", Duration::from_secs(30), || {
            set.sentinel_cli(&["SENTINEL", "replicas", MASTER]).is_some_and(|r| r.contains(&replica.to_string()))
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
        if let Some(password) = &self.data_password {
            args.extend(["--requirepass".to_owned(), password.clone(), "--masterauth".to_owned(), password.clone()]);
        }
        if let Some(primary) = replica_of {
            args.extend(["--replicaof".to_owned(), "127.0.0.1".to_owned(), primary.to_string()]);
        }
        self.nodes.push((port, Some(spawn(&args))));
        wait_for("redis-server answering PING", Duration::from_secs(10), || {
            self.node_cli(port, &["PING"]).is_some_and(|r| r.trim() == "PONG")
        });
        port
    }

    /// The sentinel's URL, for `REDIS_SENTINEL_URLS` (with the sentinel's password, if any).
    pub fn sentinel_url(&self) -> String {
        match &self.sentinel_password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.sentinel_port),
            None => format!("redis://127.0.0.1:{}", self.sentinel_port),
        }
    }

    /// `redis-cli` on a data node, with its password.
    pub fn node_cli(&self, port: u16, args: &[&str]) -> Option<String> {
        cli_auth(port, self.data_password.as_deref(), args)
    }

    /// `redis-cli` on the sentinel, with its password.
    pub fn sentinel_cli(&self, args: &[&str]) -> Option<String> {
        cli_auth(self.sentinel_port, self.sentinel_password.as_deref(), args)
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
        let answer = self.sentinel_cli(&["SENTINEL", "get-master-addr-by-name", MASTER])?;
        answer.lines().nth(1)?.trim().parse().ok()
    }

    /// Waits until every write the primary acknowledged reached the replica.
    pub fn sync_replica(&self, primary: u16) {
        let acked = self.node_cli(primary, &["WAIT", "1", "5000"]).unwrap_or_default();
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

    /// `SIGSTOP`s the data node on `port`: it keeps its socket but answers nothing.
    pub fn pause(&self, port: u16) {
        if let Some((_, Some(child))) = self.nodes.iter().find(|(p, _)| *p == port) {
            let ok = Command::new("kill").args(["-STOP", &child.id().to_string()]).status().is_ok_and(|s| s.success());
            assert!(ok, "kill -STOP failed");
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
            // A stopped process must be continued to die promptly on some kernels.
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
