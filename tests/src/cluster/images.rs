//! The cluster's registry, on the node's loopback: the suite's busybox image, crust's
//! pause as containerd's sandbox image, `registry.k8s.io` mirrored for every runtime, and
//! Kubernetes' e2e images pushed on request.

use super::process::{run_timeout, s};
use super::Cluster;
use crate::registry::Registry;
use crate::which;
use std::path::Path;
use std::time::Duration;

/// The applets of the suite's busybox image.
const APPLETS: &[&str] = &[
    "sh", "echo", "cat", "ls", "sleep", "true", "false", "test", "httpd", "nc", "tar", "head",
    "tail", "tr", "wc", "grep", "touch", "rm", "mkdir", "date", "id", "kill", "stty", "tty", "env",
    "hostname", "seq", "dd", "mv", "cp", "find", "ps", "readlink", "wget",
];

impl Cluster {
    /// The cluster's registry, `127.0.0.1:PORT` in its namespace (listening on every
    /// address there).
    pub fn registry_addr(&self) -> String {
        self.registry
            .lock()
            .unwrap()
            .as_ref()
            .map(|r| r.addr.clone())
            .unwrap_or_default()
    }

    /// The registry on the node's loopback, with the suite's busybox image.
    pub(super) fn start_registry(&mut self) {
        use image::layout::{
            write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage,
        };
        let reg = Registry::start_with(None, Some(&self.node));
        let bb = which("busybox").expect("busybox");
        let mut l = LayerBuilder::new()
            .dir("bin", 0o755)
            .file_from("bin/busybox", &bb, 0o755)
            .dir("etc", 0o755)
            .file(
                "etc/passwd",
                b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
                0o644,
            )
            .file("etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644)
            .dir("tmp", 0o1777)
            .dir("www", 0o755)
            .file("www/index.html", b"hello from crust\n", 0o644);
        for a in APPLETS {
            l = l.symlink(&format!("bin/{a}"), "busybox");
        }
        let mut img = LayoutImage::new(vec![(l.finish(), Compression::Gzip)]);
        img.config.cmd = vec!["/bin/sh".into()];
        img.config.env = vec!["PATH=/bin".into()];
        let layout = self.path("layout");
        write_oci_layout(
            &layout,
            &[LayoutEntry {
                ref_name: Some("img".into()),
                image_name: None,
                platforms: vec![img],
            }],
        );
        reg.push(&layout, "img", "e2e/busybox:1");
        // The same image under a second name, for checks that change a pod's image.
        reg.push(&layout, "img", "e2e/busybox:2");
        self.image = reg.name("e2e/busybox:1");
        // containerd's sandbox image (it would pull registry.k8s.io/pause): crust's
        // static pause binary as `/pause`.
        let l = LayerBuilder::new().file("pause", container::pause::BINARY, 0o755);
        let mut img = LayoutImage::new(vec![(l.finish(), Compression::Gzip)]);
        img.config.entrypoint = vec!["/pause".into()];
        let layout = self.path("layout-pause");
        write_oci_layout(
            &layout,
            &[LayoutEntry {
                ref_name: Some("pause".into()),
                image_name: None,
                platforms: vec![img],
            }],
        );
        reg.push(&layout, "pause", "e2e/pause:1");
        self.pause_image = reg.name("e2e/pause:1");
        // An image no pod runs, for checks of image garbage collection.
        let l = LayerBuilder::new().file("spare", b"an image no pod runs\n", 0o644);
        let layout = self.path("layout-spare");
        write_oci_layout(
            &layout,
            &[LayoutEntry {
                ref_name: Some("spare".into()),
                image_name: None,
                platforms: vec![LayoutImage::new(vec![(l.finish(), Compression::Gzip)])],
            }],
        );
        reg.push(&layout, "spare", "e2e/spare:1");
        self.spare_image = reg.name("e2e/spare:1");
        // `registry.k8s.io` mirrored by the registry, for every runtime of the cluster:
        // Kubernetes' e2e images (pushed by [`Cluster::push_e2e_images`]) pull by their
        // upstream names.
        for certs in ["certs.d", "ctrd-certs.d"] {
            let hosts = self.path(certs).join("registry.k8s.io");
            std::fs::create_dir_all(&hosts).unwrap();
            std::fs::write(
                hosts.join("hosts.toml"),
                format!(
                    "server = \"https://registry.k8s.io\"\n\n[host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
                    reg.addr
                ),
            )
            .unwrap();
        }
        *self.registry.lock().unwrap() = Some(reg);
    }

    /// Pushes the offline stand-ins of Kubernetes' e2e images to the cluster's registry
    /// at their upstream paths (`registry.k8s.io` is mirrored there), with the `install`
    /// script of `tools` (../shared/tools/kubernetes-e2e-v1.28.7), which also unpacks
    /// its binaries into `bin_dir`.
    pub fn push_e2e_images(&self, tools: &Path, bin_dir: &Path) {
        let addr = self.registry.lock().unwrap().as_ref().unwrap().addr.clone();
        let out = run_timeout(
            self.net_cmd(tools.join("install")).arg(bin_dir).arg(&addr),
            Duration::from_secs(600),
        );
        assert!(
            out.status.success(),
            "pushing the e2e images: {}{}",
            s(&out.stdout),
            s(&out.stderr)
        );
    }
}
