//! WebDriver plumbing of the browser tests: find chromium and
//! chromedriver, start one, open a session, run scripts in the page.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::lab_util::Lab;

pub fn which(names: &[&str]) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for n in names {
            let p = dir.join(n);
            if p.is_file() {
                return Some(p.to_string_lossy().into_owned());
            }
        }
    }
    None
}

/// chromedriver, killed when dropped.
pub struct Driver {
    child: Child,
    base: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One WebDriver session.
pub struct Session {
    http: reqwest::Client,
    url: String,
}

impl Session {
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.expect("webdriver request");
        let status = resp.status();
        let text = resp.text().await.expect("webdriver answer");
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert!(status.is_success(), "webdriver {path}: {status} {text}");
        v["value"].clone()
    }

    pub async fn js(&self, script: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// Polls `cond` (a JS expression) until true, at most `limit`.
    pub async fn wait(&self, cond: &str, limit: Duration) {
        let start = Instant::now();
        loop {
            if self.js(&format!("return !!({cond});")).await == json!(true) {
                return;
            }
            assert!(start.elapsed() < limit, "timed out waiting for {cond}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn element(&self, css: &str) -> String {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await;
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .expect("an element id")
            .to_string()
    }

    pub async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            Some(json!({})),
        )
        .await;
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Only one browser at a time: two chromiums on a small machine time out.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A lab, chromedriver and a session on the lab's page, loaded; `None`
/// (after a note) without chromium or chromedriver, unless `CI` is set:
/// then the test fails.
pub async fn open() -> Option<(Lab, Driver, Session, tokio::sync::MutexGuard<'static, ()>)> {
    let one = ONE_BROWSER.lock().await;
    let chromium = which(&["chromium", "chromium-browser", "google-chrome"]);
    let chromedriver = which(&["chromedriver", "chromium-driver"]);
    let (Some(chromium), Some(chromedriver)) = (chromium, chromedriver) else {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set but chromium or chromedriver is missing: .ci/run installs them");
        }
        eprintln!("note: chromium or chromedriver not found; the browser test is skipped");
        return None;
    };
    let lab = Lab::start();
    let port = free_port();
    let driver = Driver {
        child: Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver"),
        base: format!("http://127.0.0.1:{port}"),
    };
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let start = Instant::now();
    loop {
        let ready = match http.get(format!("{}/status", driver.base)).send().await {
            Ok(r) => r
                .text()
                .await
                .unwrap_or_default()
                .contains("\"ready\":true"),
            Err(_) => false,
        };
        if ready {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "chromedriver not ready in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let caps = json!({ "capabilities": { "alwaysMatch": {
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1000"]
        },
        "goog:loggingPrefs": { "browser": "ALL" }
    }}});
    let resp = http
        .post(format!("{}/session", driver.base))
        .header("content-type", "application/json")
        .body(caps.to_string())
        .send()
        .await
        .expect("new session");
    let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    let id = v["value"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {v}"))
        .to_string();
    let s = Session {
        http: http.clone(),
        url: format!("{}/session/{id}", driver.base),
    };
    s.call(
        reqwest::Method::POST,
        "/url",
        Some(json!({ "url": lab.url })),
    )
    .await;
    Some((lab, driver, s, one))
}

/// Ends the session.
pub async fn close(s: Session, driver: Driver) {
    s.call(reqwest::Method::DELETE, "", None).await;
    drop(driver);
}

pub fn decode_base64(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => continue,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}
