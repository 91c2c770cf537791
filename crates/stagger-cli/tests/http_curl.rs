//! `stagger http` used from curl habits: https with a certificate the test
//! makes, `--cacert`, `-k`, `-o`, `-i`, `-s`, `-L`, `--retry`, `-A`, the
//! body flags and their Content-Type, exit 22 with the body discarded.
//!
//! The servers are a few lines over tokio on 127.0.0.1 (plain, or behind
//! tokio-rustls), each recording the requests it read; every request to
//! them and every run of the binary is bounded in time.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// A request as the server read it.
#[derive(Debug, Clone)]
struct Seen {
    /// Request line and headers, header names lower-cased.
    head: String,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim().eq_ignore_ascii_case(name)).then(|| v.trim().to_string())
        })
    }

    fn path(&self) -> String {
        self.head
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string()
    }
}

/// An answer: status, extra headers, body, and a delay before it.
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    delay: Duration,
}

fn ok(body: &str) -> Answer {
    answer(200, body)
}

fn answer(status: u16, body: &str) -> Answer {
    Answer {
        status,
        headers: vec![],
        body: body.as_bytes().to_vec(),
        delay: Duration::ZERO,
    }
}

type Script = Arc<dyn Fn(&Seen, usize) -> Answer + Send + Sync>;

struct Server {
    /// `http://127.0.0.1:PORT` or `https://…`, without a trailing slash.
    base: String,
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one request (head, then a Content-Length body), or None.
async fn read_request(sock: &mut (impl AsyncRead + Unpin)) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut seen = Seen {
        head,
        body: buf[end + 4..].to_vec(),
    };
    let len: usize = seen
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while seen.body.len() < len {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        seen.body.extend_from_slice(&chunk[..n]);
    }
    Some(seen)
}

async fn handle(
    mut sock: impl AsyncRead + AsyncWrite + Unpin,
    script: Script,
    seen: Arc<Mutex<Vec<Seen>>>,
) {
    let Some(req) = read_request(&mut sock).await else {
        return;
    };
    let n = {
        let mut all = seen.lock().unwrap();
        all.push(req.clone());
        all.len()
    };
    let a = script(&req, n);
    tokio::time::sleep(a.delay).await;
    let mut out = format!(
        "HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        a.status,
        a.body.len()
    );
    for (k, v) in &a.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&a.body);
    let _ = sock.write_all(&bytes).await;
    let _ = sock.shutdown().await;
}

/// Serves `script` on 127.0.0.1, over TLS when `tls` is given.
async fn serve(script: Script, tls: Option<tokio_rustls::TlsAcceptor>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let all = seen.clone();
    tokio::spawn(async move {
        // Bounded: no test here makes more than a few dozen connections.
        for _ in 0..64 {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            let (script, all, tls) = (script.clone(), all.clone(), tls.clone());
            tokio::spawn(tokio::time::timeout(Duration::from_secs(10), async move {
                match tls {
                    Some(acceptor) => {
                        if let Ok(s) = acceptor.accept(sock).await {
                            handle(s, script, all).await;
                        }
                    }
                    None => handle(sock, script, all).await,
                }
            }));
        }
    });
    Server {
        base: format!("{scheme}://127.0.0.1:{port}"),
        port,
        seen,
    }
}

async fn plain(script: impl Fn(&Seen, usize) -> Answer + Send + Sync + 'static) -> Server {
    serve(Arc::new(script), None).await
}

/// A self-signed certificate for 127.0.0.1 and localhost, made here: the
/// acceptor, and the certificate's PEM for `--cacert`.
fn certificate() -> (tokio_rustls::TlsAcceptor, String) {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let rcgen::CertifiedKey { cert, key_pair } = rcgen::generate_simple_self_signed(names).unwrap();
    acceptor(cert, key_pair)
}

/// A self-signed certificate that says it is a CA (`CA:TRUE`, what
/// `openssl req -x509` makes by default), for `names`, used as the
/// server's own certificate.
fn ca_certificate(names: &[&str]) -> (tokio_rustls::TlsAcceptor, String) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut params = rcgen::CertificateParams::new(names).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key_pair = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key_pair).unwrap();
    acceptor(cert, key_pair)
}

fn acceptor(
    cert: rcgen::Certificate,
    key_pair: rcgen::KeyPair,
) -> (tokio_rustls::TlsAcceptor, String) {
    let der = cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::try_from(key_pair.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der], key)
        .unwrap();
    (
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        cert.pem(),
    )
}

/// A directory of its own for one test.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("stagger-curl-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn file(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `stagger http ARGS` with `stdin`, bounded by 20 s.
async fn stagger_in(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let stdin = stdin.map(<[u8]>::to_vec);
    tokio::time::timeout(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || {
            let mut child = Command::new(env!("CARGO_BIN_EXE_stagger"))
                .arg("http")
                .args(args)
                .stdin(if stdin.is_some() {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
                pipe.write_all(&bytes).unwrap();
            }
            child.wait_with_output().unwrap()
        }),
    )
    .await
    .expect("stagger http took too long")
    .unwrap()
}

async fn stagger(args: &[&str]) -> Output {
    stagger_in(args, None).await
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "tls"), ignore = "https needs the tls feature")]
async fn https_with_the_servers_certificate_in_cacert() {
    let _quiet = crate::support::quiet();
    let (acceptor, pem) = certificate();
    let s = serve(Arc::new(|_: &Seen, _| ok("secret")), Some(acceptor)).await;
    let dir = Dir::new("cacert");
    std::fs::write(dir.file("ca.pem"), &pem).unwrap();
    let url = format!("{}/x", s.base);
    let o = stagger(&[&url, "--cacert", &dir.file("ca.pem")]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o), "secret");
    // By name too: the certificate is for localhost as well.
    let url = format!("https://localhost:{}/y", s.port);
    let o = stagger(&[&url, "--cacert", &dir.file("ca.pem")]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(s.seen().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "tls"), ignore = "https needs the tls feature")]
async fn an_untrusted_certificate_exits_60_unless_insecure() {
    let _quiet = crate::support::quiet();
    let (acceptor, _) = certificate();
    let s = serve(Arc::new(|_: &Seen, _| ok("secret")), Some(acceptor)).await;
    let url = format!("{}/", s.base);
    let o = stagger(&[&url, "--attempts", "1"]).await;
    assert_eq!(o.status.code(), Some(60), "{}", err(&o));
    assert!(err(&o).contains("certificate"), "{}", err(&o));
    assert_eq!(out(&o), "");
    // A --cacert with another certificate replaces the system's roots and
    // does not trust this one either.
    let (_, other) = certificate();
    let dir = Dir::new("other-ca");
    std::fs::write(dir.file("ca.pem"), other).unwrap();
    let o = stagger(&[&url, "--attempts", "1", "--cacert", &dir.file("ca.pem")]).await;
    assert_eq!(o.status.code(), Some(60), "{}", err(&o));
    let o = stagger(&[&url, "-k"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o), "secret");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "tls"), ignore = "https needs the tls feature")]
async fn cacert_accepts_a_ca_true_certificate_that_is_the_servers_own() {
    let _quiet = crate::support::quiet();
    let (acceptor, pem) = ca_certificate(&["localhost", "127.0.0.1"]);
    let s = serve(Arc::new(|_: &Seen, _| ok("pinned")), Some(acceptor)).await;
    let dir = Dir::new("ca-true");
    std::fs::write(dir.file("cert.pem"), &pem).unwrap();
    let url = format!("{}/", s.base);
    let o = stagger(&[&url, "--attempts", "1", "--cacert", &dir.file("cert.pem")]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o), "pinned");
    // Without it the same server is refused, and the message says what to do.
    let o = stagger(&[&url, "--attempts", "1"]).await;
    assert_eq!(o.status.code(), Some(60), "{}", err(&o));
    assert!(err(&o).contains("--cacert"), "{}", err(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "tls"), ignore = "https needs the tls feature")]
async fn a_pinned_certificate_for_another_name_is_still_refused() {
    let _quiet = crate::support::quiet();
    let (acceptor, pem) = ca_certificate(&["elsewhere.invalid"]);
    let s = serve(Arc::new(|_: &Seen, _| ok("pinned")), Some(acceptor)).await;
    let dir = Dir::new("ca-true-name");
    std::fs::write(dir.file("cert.pem"), &pem).unwrap();
    let url = format!("{}/", s.base);
    let o = stagger(&[&url, "--attempts", "1", "--cacert", &dir.file("cert.pem")]).await;
    assert_eq!(o.status.code(), Some(60), "{}", err(&o));
    assert!(err(&o).contains("not for the host"), "{}", err(&o));
    assert_eq!(out(&o), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "tls"), ignore = "https needs the tls feature")]
async fn certificate_errors_say_what_was_wrong_and_which_flag_changes_it() {
    let _quiet = crate::support::quiet();
    let (acceptor, _) = certificate();
    let s = serve(Arc::new(|_: &Seen, _| ok("secret")), Some(acceptor)).await;
    let (_, other) = certificate();
    let dir = Dir::new("worded");
    std::fs::write(dir.file("other.pem"), other).unwrap();
    let url = format!("{}/", s.base);
    let o = stagger(&[&url, "--attempts", "1", "--cacert", &dir.file("other.pem")]).await;
    assert_eq!(o.status.code(), Some(60), "{}", err(&o));
    let e = err(&o);
    assert!(e.contains("signed by none of the certificates in"), "{e}");
    assert!(e.contains("--cacert FILE") && e.contains("-k"), "{e}");
    // rustls' own words for it are not what a person reads.
    assert!(!e.contains("UnknownIssuer"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "tls"), ignore = "https needs the tls feature")]
async fn a_bad_cacert_is_bad_usage_naming_the_flag() {
    let _quiet = crate::support::quiet();
    let dir = Dir::new("bad-ca");
    std::fs::write(dir.file("empty.pem"), "not a certificate\n").unwrap();
    for file in [dir.file("missing.pem"), dir.file("empty.pem")] {
        let o = stagger(&["https://127.0.0.1:9/", "--cacert", &file]).await;
        assert_eq!(o.status.code(), Some(2), "{}", err(&o));
        assert!(err(&o).contains("--cacert"), "{}", err(&o));
    }
}

/// A TLS handshake that never comes counts against `--connect-timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "tls"), ignore = "https needs the tls feature")]
async fn connect_timeout_bounds_a_silent_handshake_with_28() {
    let _quiet = crate::support::quiet();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        for _ in 0..8 {
            if let Ok((sock, _)) = listener.accept().await {
                held.push(sock);
            }
        }
    });
    let url = format!("https://127.0.0.1:{port}/");
    let started = Instant::now();
    let o = stagger(&[&url, "--connect-timeout", "0.3", "--attempts", "1"]).await;
    assert_eq!(o.status.code(), Some(28), "{}", err(&o));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_error_exits_22_with_one_line_and_no_body() {
    let _quiet = crate::support::quiet();
    let s = plain(|_, _| answer(404, "<h1>no such page</h1>")).await;
    let dir = Dir::new("fail");
    let url = format!("{}/data.json", s.base);
    let o = stagger(&[&url]).await;
    assert_eq!(o.status.code(), Some(22));
    assert_eq!(out(&o), "", "the error page reached stdout");
    let lines: Vec<String> = err(&o).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("HTTP 404"), "{lines:?}");
    assert!(lines[0].contains("/data.json"), "{lines:?}");
    // -o: no file is made for an error page.
    let o = stagger(&[&url, "-o", &dir.file("data.json")]).await;
    assert_eq!(o.status.code(), Some(22));
    assert!(!std::path::Path::new(&dir.file("data.json")).exists());
    // --fail-with-body keeps it, and the status.
    let o = stagger(&[&url, "--fail-with-body"]).await;
    assert_eq!(o.status.code(), Some(22));
    assert_eq!(out(&o), "<h1>no such page</h1>");
    // -s hides the line, -sS shows it; -f is accepted.
    let o = stagger(&[&url, "-s"]).await;
    assert_eq!((o.status.code(), err(&o)), (Some(22), String::new()));
    let o = stagger(&[&url, "-fsS"]).await;
    assert_eq!(o.status.code(), Some(22));
    assert_eq!(err(&o).lines().count(), 1, "{}", err(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_file_and_include() {
    let _quiet = crate::support::quiet();
    let s = plain(|_, _| {
        let mut a = ok("payload");
        a.headers.push(("x-note", "hi".into()));
        a
    })
    .await;
    let dir = Dir::new("output");
    let url = format!("{}/", s.base);
    let o = stagger(&[&url, "-o", &dir.file("body")]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o), "");
    assert_eq!(
        std::fs::read_to_string(dir.file("body")).unwrap(),
        "payload"
    );
    let o = stagger(&[&url, "-i"]).await;
    let text = out(&o);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text:?}");
    assert!(text.contains("\r\nx-note: hi\r\n"), "{text:?}");
    assert!(text.ends_with("\r\n\r\npayload"), "{text:?}");
    // A directory cannot be written: curl's 23.
    let o = stagger(&[&url, "-o", &dir.file("")]).await;
    assert_eq!(o.status.code(), Some(23), "{}", err(&o));
    assert!(err(&o).contains("-o"), "{}", err(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_followed_only_with_location() {
    let _quiet = crate::support::quiet();
    let s = plain(|req, _| {
        if req.path() == "/old" {
            let mut a = answer(301, "moved");
            a.headers.push(("location", "/new".into()));
            a
        } else {
            ok("new place")
        }
    })
    .await;
    let url = format!("{}/old", s.base);
    let o = stagger(&[&url]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o), "moved");
    assert_eq!(s.seen().len(), 1);
    let o = stagger(&[&url, "-L"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o), "new place");
    let o = stagger(&[&url, "-L", "--max-redirs", "0", "--attempts", "1"]).await;
    assert_eq!(o.status.code(), Some(47), "{}", err(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_counts_retries_as_curl_does() {
    let _quiet = crate::support::quiet();
    let s = plain(|_, _| answer(503, "busy")).await;
    let url = format!("{}/", s.base);
    let o = stagger(&[&url, "--retry", "2", "--base", "1ms"]).await;
    assert_eq!(o.status.code(), Some(22));
    assert_eq!(s.seen().len(), 3);
    let o = stagger(&[&url, "--retry", "0"]).await;
    assert_eq!(o.status.code(), Some(22));
    assert_eq!(s.seen().len(), 4);
    let o = stagger(&[&url, "--retry", "2", "--attempts", "5"]).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--retry"), "{}", err(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_agent_is_stagger_by_default() {
    let _quiet = crate::support::quiet();
    let s = plain(|_, _| ok("")).await;
    let url = format!("{}/", s.base);
    stagger(&[&url]).await;
    stagger(&[&url, "-A", "probe/2"]).await;
    stagger(&[&url, "-A", ""]).await;
    stagger(&[&url, "-H", "User-Agent: mine"]).await;
    let seen = s.seen();
    assert_eq!(
        seen[0].header("user-agent").as_deref(),
        Some(concat!("stagger/", env!("CARGO_PKG_VERSION")))
    );
    assert_eq!(seen[1].header("user-agent").as_deref(), Some("probe/2"));
    assert_eq!(seen[2].header("user-agent"), None);
    assert_eq!(seen[3].header("user-agent").as_deref(), Some("mine"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_flags_send_what_curl_sends() {
    let _quiet = crate::support::quiet();
    let s = plain(|_, _| ok("")).await;
    let dir = Dir::new("body");
    std::fs::write(dir.file("form.txt"), "a=1\r\n&b=2\n").unwrap();
    let at = format!("@{}", dir.file("form.txt"));
    let url = format!("{}/", s.base);
    let form = "application/x-www-form-urlencoded";
    stagger(&[&url, "-d", "x=1", "-d", "y=2"]).await;
    stagger(&[&url, "-d", &at]).await;
    stagger(&[&url, "--data-binary", &at]).await;
    stagger_in(&[&url, "-d", "@-"], Some(b"from=stdin\n")).await;
    stagger_in(&[&url, "--json", "@-"], Some(b"{\"a\":1}\n")).await;
    stagger(&[&url, "-d", "{}", "-H", "Content-Type: application/json"]).await;
    let seen = s.seen();
    assert_eq!(seen.len(), 6);
    let expect: [(&[u8], &str); 6] = [
        (b"x=1&y=2", form),
        (b"a=1&b=2", form),
        (b"a=1\r\n&b=2\n", form),
        (b"from=stdin", form),
        (b"{\"a\":1}\n", "application/json"),
        (b"{}", "application/json"),
    ];
    for (i, (req, (body, ct))) in seen.iter().zip(expect).enumerate() {
        assert!(req.head.starts_with("POST / "), "{i}: {}", req.head);
        assert_eq!(req.body, body, "{i}");
        assert_eq!(req.header("content-type").as_deref(), Some(ct), "{i}");
    }
    assert_eq!(
        seen[4].header("accept").as_deref(),
        Some("application/json")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_without_scheme_is_http_and_zero_max_time_is_no_limit() {
    let _quiet = crate::support::quiet();
    let s = plain(|_, _| Answer {
        delay: Duration::from_millis(300),
        ..ok("late")
    })
    .await;
    let url = format!("127.0.0.1:{}/", s.port);
    let o = stagger(&[&url, "-m", "0"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o), "late");
    let o = stagger(&[&url, "-m", "0.1", "--attempts", "1"]).await;
    assert_eq!(o.status.code(), Some(28), "{}", err(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_idempotency_key_is_refused() {
    let _quiet = crate::support::quiet();
    for key in ["", "\"\"", " "] {
        let o = stagger(&["127.0.0.1:9/", "-d", "x", "--idempotency-key", key]).await;
        assert_eq!(o.status.code(), Some(2), "{key:?}");
        assert!(err(&o).contains("--idempotency-key"), "{}", err(&o));
    }
}
