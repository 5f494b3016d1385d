//! A real OCI distribution registry (Debian's `docker-registry`) for one test, on
//! 127.0.0.1 (of the host, or of a node namespace the test made) with a temp storage
//! dir, optionally behind htpasswd auth; and `skopeo` to push OCI layouts into it.
//! Dropping it kills the registry and removes its storage.

use crate::{enter_netns, run, Netns, TempDir};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Registry {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub dir: TempDir,
    pub creds: Option<(String, String)>,
    /// The network namespace it listens in, if not the host's.
    netns: Option<std::path::PathBuf>,
    child: Child,
}

/// A port nobody on the host's loopback listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Registry {
    pub fn start() -> Registry {
        Self::start_with(None, None)
    }

    /// With `creds`, the registry wants HTTP basic auth (htpasswd, bcrypt). With `node`,
    /// it runs inside that network namespace (where a crustd under test can reach it).
    pub fn start_with(creds: Option<(&str, &str)>, node: Option<&Netns>) -> Registry {
        Self::start_opts(creds, node, false, None)
    }

    /// Behind token authentication by `tokens` (on the host's loopback); skopeo pushes
    /// with `pusher`'s basic credentials, which the token server takes.
    pub fn start_token(
        tokens: &crate::token_server::TokenServer,
        pusher: (&str, &str),
    ) -> Registry {
        Self::start_opts(Some(pusher), None, false, Some(tokens))
    }

    /// Serving HTTPS with a certificate for 127.0.0.1 from a throwaway CA, `ca.pem` in
    /// [`Registry::ca`].
    pub fn start_tls() -> Registry {
        Self::start_opts(None, None, true, None)
    }

    /// The CA of a TLS registry.
    pub fn ca(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn start_opts(
        creds: Option<(&str, &str)>,
        node: Option<&Netns>,
        tls: bool,
        tokens: Option<&crate::token_server::TokenServer>,
    ) -> Registry {
        let dir = TempDir::new("reg");
        // Free where it will listen: a node namespace's crustd has its streaming server
        // on a port of that namespace's loopback, which the host's may well have free
        // (the registry then failed to bind, and skopeo talked to crustd).
        let port = match node {
            None => free_port(),
            Some(ns) => {
                let p = ns.path();
                std::thread::scope(|s| {
                    s.spawn(|| {
                        enter_netns(&p);
                        free_port()
                    })
                    .join()
                    .unwrap()
                })
            }
        };
        let addr = format!("127.0.0.1:{port}");
        let mut auth = String::new();
        if let Some(t) = tokens {
            auth = format!(
                "auth:\n  token:\n    realm: {}\n    service: {}\n    issuer: {}\n    rootcertbundle: {}\n",
                t.realm(),
                crate::token_server::SERVICE,
                crate::token_server::ISSUER,
                t.cert().display()
            );
        } else if let Some((u, p)) = creds {
            let out = run(Command::new("htpasswd").args(["-Bbn", u, p]));
            assert!(
                out.status.success(),
                "htpasswd: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::write(dir.path().join("htpasswd"), &out.stdout).unwrap();
            auth = format!(
                "auth:\n  htpasswd:\n    realm: crust-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            );
        }
        let mut tls_conf = String::new();
        if tls {
            make_certs(dir.path());
            tls_conf = format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.path().join("cert.pem").display(),
                dir.path().join("key.pem").display()
            );
        }
        // In a namespace of the test's own it listens on every address: other
        // namespaces routed there (a fleet's nodes) pull from it too.
        let listen = match node {
            Some(_) => format!("0.0.0.0:{port}"),
            None => addr.clone(),
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {listen}\n{tls_conf}{auth}",
            dir.path().join("data").display()
        );
        let conf = dir.path().join("config.yml");
        std::fs::write(&conf, config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let mut cmd = Command::new("docker-registry");
        cmd.arg("serve")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = match node {
            None => cmd.spawn().expect("spawning docker-registry"),
            Some(ns) => {
                let p = ns.path();
                std::thread::scope(|s| {
                    s.spawn(|| {
                        enter_netns(&p);
                        cmd.spawn().expect("spawning docker-registry")
                    })
                    .join()
                    .unwrap()
                })
            }
        };
        let mut r = Registry {
            addr,
            dir,
            creds: creds.map(|(u, p)| (u.to_string(), p.to_string())),
            netns: node.map(|n| n.path()),
            child,
        };
        r.wait_ready(node);
        r
    }

    fn wait_ready(&mut self, node: Option<&Netns>) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let up = match node {
                None => std::net::TcpStream::connect(&self.addr).is_ok(),
                Some(ns) => {
                    let (p, addr) = (ns.path(), &self.addr);
                    std::thread::scope(|s| {
                        s.spawn(|| {
                            enter_netns(&p);
                            std::net::TcpStream::connect(addr).is_ok()
                        })
                        .join()
                        .unwrap()
                    })
                }
            };
            if up {
                return;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("docker-registry exited with {st}: {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "registry not up in 20 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Where the registry keeps a blob (to corrupt it in a test).
    pub fn blob_file(&self, digest: &str) -> std::path::PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// `addr/repo` as an image reference prefix.
    pub fn name(&self, repo_tag: &str) -> String {
        format!("{}/{repo_tag}", self.addr)
    }

    /// Pushes the image `ref_name` of the OCI layout `layout` (every platform) as
    /// `repo_tag` with skopeo, over plain HTTP.
    pub fn push(&self, layout: &Path, ref_name: &str, repo_tag: &str) {
        self.push_args(layout, ref_name, repo_tag, &["--preserve-digests"])
    }

    /// [`Registry::push`] with more `skopeo copy` flags, e.g. `--format v2s2` to store
    /// Docker schema 2 manifests and media types.
    pub fn push_args(&self, layout: &Path, ref_name: &str, repo_tag: &str, args: &[&str]) {
        let mut cmd = match &self.netns {
            None => Command::new("skopeo"),
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", ns.display())).arg("skopeo");
                c
            }
        };
        cmd.args(["copy", "--quiet", "--all", "--dest-tls-verify=false"])
            .args(args);
        if let Some((u, p)) = &self.creds {
            cmd.arg(format!("--dest-creds={u}:{p}"));
        }
        cmd.arg(format!("oci:{}:{ref_name}", layout.display()))
            .arg(format!("docker://{}", self.name(repo_tag)));
        let out = run(&mut cmd);
        assert!(
            out.status.success(),
            "skopeo push of {repo_tag} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA (`ca.pem`) and a server certificate for IP 127.0.0.1 (`cert.pem`, `key.pem`).
fn make_certs(dir: &Path) {
    let d = dir.display();
    let script = format!(
        "set -e; cd {d}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=crust-test-ca 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout key.pem -out req.csr -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\nkeyUsage=digitalSignature\\nextendedKeyUsage=serverAuth\\n' > ext.cnf
openssl x509 -req -in req.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 2 -extfile ext.cnf 2>/dev/null"
    );
    let out = run(Command::new("sh").args(["-c", &script]));
    assert!(
        out.status.success(),
        "making certificates: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
