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
        let dir = TempDir::new("reg");
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut auth = String::new();
        if let Some((u, p)) = creds {
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
        let config = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n{auth}",
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
