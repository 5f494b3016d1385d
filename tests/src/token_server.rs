//! A registry token service for one test (the distribution spec's token
//! authentication), on the host's 127.0.0.1: it signs JWTs with a throwaway RSA key
//! (`openssl`), whose self-signed certificate the registry trusts (`rootcertbundle`)
//! and which each token carries in its `x5c` header.
//!
//! - `GET /token?service=..&scope=..` with HTTP basic auth (the pusher's, as skopeo
//!   asks) → `{"token": JWT}`
//! - `POST /token` with `grant_type=refresh_token` and the refresh token it was made
//!   with (an OAuth2 client's, as crust asks for a CRI identity token) →
//!   `{"access_token": JWT}`; every form it got is kept in [`TokenServer::posts`].
//!
//! Anything else gets 401. One thread per connection, HTTP/1.1 with keep-alive.

use crate::{run, TempDir};
use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

pub const SERVICE: &str = "crust-test-registry";
pub const ISSUER: &str = "crust-test-issuer";

pub struct TokenServer {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub dir: TempDir,
    /// The forms of every POST, decoded.
    pub posts: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
}

struct Conf {
    dir: PathBuf,
    refresh_token: String,
    basic: String,
    posts: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
}

impl TokenServer {
    /// Accepts `refresh_token` on POST and `user:password` (basic auth) on GET.
    pub fn start(refresh_token: &str, user: &str, password: &str) -> TokenServer {
        let dir = TempDir::new("tok");
        let d = dir.path().display();
        let out = run(Command::new("sh").arg("-c").arg(format!(
            "set -e; cd {d}
openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out cert.pem -days 2 -subj /CN=crust-test-token 2>/dev/null
openssl x509 -in cert.pem -outform DER -out cert.der"
        )));
        assert!(
            out.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let posts = Arc::new(Mutex::new(Vec::new()));
        let conf = Arc::new(Conf {
            dir: dir.path().to_path_buf(),
            refresh_token: refresh_token.to_string(),
            basic: format!(
                "Basic {}",
                b64(format!("{user}:{password}").as_bytes(), false)
            ),
            posts: posts.clone(),
        });
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let conf = conf.clone();
                std::thread::spawn(move || serve(conn, &conf));
            }
        });
        TokenServer { addr, dir, posts }
    }

    /// The certificate the registry must trust (`rootcertbundle`).
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    pub fn realm(&self) -> String {
        format!("http://{}/token", self.addr)
    }
}

fn serve(conn: TcpStream, conf: &Conf) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let Some(req) = crate::HttpRequest::read(&mut r) else {
            return;
        };
        let mut parts = req.line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let body = &req.body;
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let (status, json) = if path != "/token" {
            (404, "{}".to_string())
        } else if method == "POST" {
            let form = decode_form(&String::from_utf8_lossy(body));
            conf.posts.lock().unwrap().push(form.clone());
            let ok = form.get("grant_type").map(String::as_str) == Some("refresh_token")
                && form.get("refresh_token") == Some(&conf.refresh_token)
                && form.get("client_id").is_some_and(|c| !c.is_empty());
            match (ok, form.get("scope")) {
                (true, Some(scope)) => (
                    200,
                    format!(
                        r#"{{"access_token":"{}","expires_in":300}}"#,
                        jwt(conf, std::slice::from_ref(scope))
                    ),
                ),
                _ => (401, r#"{"error":"invalid_grant"}"#.to_string()),
            }
        } else if req.header("authorization") == Some(conf.basic.as_str()) {
            let scopes: Vec<String> = query
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .filter(|(k, _)| *k == "scope")
                .map(|(_, v)| url_decode(v))
                .collect();
            (
                200,
                format!(r#"{{"token":"{}","expires_in":300}}"#, jwt(conf, &scopes)),
            )
        } else {
            (401, r#"{"error":"unauthorized"}"#.to_string())
        };
        let reason = if status == 200 { "OK" } else { "Unauthorized" };
        let resp = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{json}",
            json.len()
        );
        if w.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

/// A JWT the registry accepts for `scopes` (`repository:NAME:ACTIONS`), RS256.
fn jwt(conf: &Conf, scopes: &[String]) -> String {
    let der = std::fs::read(conf.dir.join("cert.der")).unwrap();
    let header = format!(
        r#"{{"alg":"RS256","typ":"JWT","x5c":["{}"]}}"#,
        b64(&der, false)
    );
    let access: Vec<String> = scopes
        .iter()
        .filter_map(|s| {
            let mut p = s.splitn(3, ':');
            let (typ, name, actions) = (p.next()?, p.next()?, p.next()?);
            let actions: Vec<String> = actions.split(',').map(|a| format!("\"{a}\"")).collect();
            Some(format!(
                r#"{{"type":"{typ}","name":"{name}","actions":[{}]}}"#,
                actions.join(",")
            ))
        })
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = format!(
        r#"{{"iss":"{ISSUER}","sub":"crust","aud":"{SERVICE}","exp":{},"nbf":{},"iat":{now},"jti":"{now}-{}","access":[{}]}}"#,
        now + 300,
        now - 60,
        rand_id(),
        access.join(",")
    );
    let input = format!(
        "{}.{}",
        b64(header.as_bytes(), true),
        b64(claims.as_bytes(), true)
    );
    let tmp = conf.dir.join(format!("input-{}", rand_id()));
    std::fs::write(&tmp, &input).unwrap();
    let out = run(Command::new("openssl")
        .args(["dgst", "-sha256", "-binary", "-sign"])
        .arg(conf.dir.join("key.pem"))
        .arg(&tmp));
    let _ = std::fs::remove_file(&tmp);
    assert!(out.status.success(), "openssl dgst -sign failed");
    format!("{input}.{}", b64(&out.stdout, true))
}

fn rand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

/// Base64, standard (`url`: the URL alphabet without padding, as JWS wants).
fn b64(data: &[u8], url: bool) -> String {
    let alphabet: &[u8] = if url {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(alphabet[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else if !url {
                out.push('=');
            }
        }
    }
    out
}

fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let h = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(h, 16).unwrap_or(b'?'));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn decode_form(s: &str) -> BTreeMap<String, String> {
    s.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (url_decode(k), url_decode(v)))
        .collect()
}
