//! actix-web: `RateLimitMiddleware` and `RateLimited: ResponseError`, through a real actix-web
//! server on a free loopback port, called over TCP by an HTTP/1.1 client that binds its own
//! loopback address (127.0.0.x) to be a distinct client IP.

use actix_web::{web, App, HttpResponse, HttpServer};
use ratelimit::actix::RateLimitMiddleware;
use ratelimit::store::RedisStore;
use ratelimit::{rate_limiter, FailurePolicy, Limit, LimitType, Limiter, RateLimited, Rule, Subject};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

#[rate_limiter(type = Ip, rules = [(10s, 3), (1m, 10)])]
async fn hello() -> Result<&'static str, RateLimited> {
    Ok("hello\n")
}

/// The user comes from `X-User-Id`, which the middleware copies into the request context.
#[rate_limiter(type = User, rules = [(10s, 2)])]
async fn orders() -> Result<HttpResponse, RateLimited> {
    Ok(HttpResponse::Ok().body("order accepted\n"))
}

/// A limiter on a store that cannot answer, failing closed.
async fn down(limiter: web::Data<Limiter>) -> Result<&'static str, RateLimited> {
    limiter.check(&[Subject::ip("203.0.113.9".parse().unwrap())]).await?;
    Ok("never\n")
}

/// An actix-web server on its own thread and runtime, stopped when dropped.
struct ActixServer {
    addr: SocketAddr,
    handle: actix_web::dev::ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ActixServer {
    fn start() -> ActixServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let addr = listener.local_addr().unwrap();
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let redis = RedisStore::open(&format!("redis://{closed}/"), Duration::from_millis(200)).unwrap();
                let limiter = Limiter::builder("actix_down")
                    .limit(Limit::new(LimitType::Ip, [Rule::new(Duration::from_secs(10), 5).unwrap()]))
                    .store(Arc::new(redis))
                    .on_error(FailurePolicy::Deny)
                    .build()
                    .unwrap();
                let limiter = web::Data::new(limiter);
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(limiter.clone())
                        .wrap(
                            RateLimitMiddleware::new()
                                .trust_proxy("127.0.0.4/32".parse().unwrap())
                                .user_header(actix_web::http::header::HeaderName::from_static("x-user-id")),
                        )
                        .route("/hello", web::get().to(hello))
                        .route("/orders", web::post().to(orders))
                        .route("/down", web::get().to(down))
                })
                .workers(1)
                .disable_signals()
                .listen(listener)
                .expect("listen")
                .run();
                tx.send(server.handle()).unwrap();
                server.await.expect("the actix server runs");
            })
        });
        let handle = rx.recv_timeout(Duration::from_secs(30)).expect("the actix server starts");
        ActixServer { addr, handle, thread: Some(thread) }
    }
}

impl Drop for ActixServer {
    fn drop(&mut self) {
        // `stop` returns a future; the server stops whether or not it is awaited.
        drop(self.handle.stop(false));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Reply {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// One HTTP/1.1 request from `from`, read to the end of the connection.
async fn request(server: SocketAddr, from: IpAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).expect("bind the client address");
    let mut stream = socket.connect(server).await.expect("connect");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {server}\r\nConnection: close\r\nContent-Length: 0\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).expect("a UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply { status, headers, body: body.to_owned() }
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

const HELLO_POLICY: &str = r#""ip-10s";q=3;w=10, "ip-1m";q=10;w=60"#;

#[tokio::test]
async fn a_refusal_is_the_axum_response() {
    let server = ActixServer::start();
    for left in (0..3).rev() {
        let r = request(server.addr, loopback(2), "GET", "/hello", &[]).await;
        assert_eq!((r.status, r.body.as_str()), (200, "hello\n"));
        assert_eq!(r.header("ratelimit-policy"), Some(HELLO_POLICY));
        assert_eq!(r.header("ratelimit").unwrap(), format!(r#""ip-10s";r={left};t=10"#));
    }
    let r = request(server.addr, loopback(2), "GET", "/hello", &[]).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let retry_after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=10).contains(&retry_after), "{retry_after}");
    assert_eq!(r.header("ratelimit-policy"), Some(HELLO_POLICY));
    assert_eq!(r.header("ratelimit").unwrap(), format!(r#""ip-10s";r=0;t={retry_after}"#));
    let ms: u64 = r
        .body
        .strip_prefix(r#"{"error":"rate_limited","retry_after_ms":"#)
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or_else(|| panic!("{}", r.body))
        .parse()
        .unwrap();
    assert!(ms.div_ceil(1000) == retry_after, "{ms} ms, Retry-After {retry_after}");
    // Another client IP has its own budget.
    assert_eq!(request(server.addr, loopback(3), "GET", "/hello", &[]).await.status, 200);
}

#[tokio::test]
async fn forwarded_headers_only_from_the_trusted_proxy() {
    let server = ActixServer::start();
    let via_proxy = [("X-Forwarded-For", "198.51.100.7")];
    for _ in 0..3 {
        assert_eq!(request(server.addr, loopback(4), "GET", "/hello", &via_proxy).await.status, 200);
    }
    assert_eq!(request(server.addr, loopback(4), "GET", "/hello", &via_proxy).await.status, 429);
    let other = [("X-Forwarded-For", "198.51.100.8")];
    assert_eq!(request(server.addr, loopback(4), "GET", "/hello", &other).await.status, 200);
    // Not from the proxy: the header is ignored, the peer 127.0.0.5 is the client.
    assert_eq!(request(server.addr, loopback(5), "GET", "/hello", &via_proxy).await.status, 200);
}

#[tokio::test]
async fn users_from_the_header_and_the_other_statuses() {
    let server = ActixServer::start();
    let alice = [("X-User-Id", "alice")];
    for _ in 0..2 {
        assert_eq!(request(server.addr, loopback(6), "POST", "/orders", &alice).await.status, 200);
    }
    let r = request(server.addr, loopback(6), "POST", "/orders", &alice).await;
    assert_eq!(r.status, 429);
    assert!(r.header("ratelimit").unwrap().starts_with(r#""user-10s";r=0;t="#), "{:?}", r.headers);
    // Same IP, another user: counted apart.
    assert_eq!(request(server.addr, loopback(6), "POST", "/orders", &[("X-User-Id", "bob")]).await.status, 200);
    // No user: a misconfigured server (500, no Retry-After), never a shared key.
    let r = request(server.addr, loopback(6), "POST", "/orders", &[]).await;
    assert_eq!((r.status, r.body.as_str()), (500, r#"{"error":"rate_limit_subject_missing"}"#));
    assert!(r.header("retry-after").is_none());
    // The store cannot answer and the limiter fails closed: 503 with Retry-After.
    let r = request(server.addr, loopback(6), "GET", "/down", &[]).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
    assert!(r.body.starts_with(r#"{"error":"store_unavailable","retry_after_ms":"#), "{}", r.body);
}
