//! The control plane: the cluster's PKI (a CA, the apiserver's certificate, service
//! account keys, a token and a kubeconfig per user), etcd, kube-apiserver (which a check
//! may stop and start again), kube-controller-manager and kube-scheduler, all in the
//! node network namespace.

use super::process::{run_timeout, s, wait_for};
use super::{Cluster, CONTAINERD_NODE, CRUSTLET_NODE, KUBELET_CLIENT, NODE};
use crate::run;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

impl Cluster {
    /// A CA, the API server's certificate and its client certificate to the nodes,
    /// service-account keys, a token per user and a kubeconfig for the admin (kubectl,
    /// controllers; `system:masters`) and for each node (`system:node:<name>` in
    /// `system:nodes`, as the Node authorizer wants them).
    pub(super) fn pki(&self) {
        let ip = &self.ip;
        let svc = format!("10.{}.128.1", self.subnet);
        let script = format!(
            "set -e; cd {}
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=crust-test-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver 2>/dev/null
printf 'subjectAltName=IP:{ip},IP:127.0.0.1,IP:{svc},DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > ext.cnf
openssl x509 -req -in apiserver.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out apiserver.pem -days 2 -extfile ext.cnf 2>/dev/null
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null",
            self.path("pki").display()
        );
        let out = run(Command::new("sh").args(["-c", &script]));
        assert!(out.status.success(), "making the PKI: {}", s(&out.stderr));
        // How the apiserver authenticates to the nodes' servers (kubectl logs, exec,
        // port-forward): bound to `system:kubelet-api-admin` once the apiserver is up.
        self.client_cert("kubelet-client", KUBELET_CLIENT, &[]);
        std::fs::write(
            self.path("pki/tokens.csv"),
            format!(
                "admin-token,admin,admin,\"system:masters\"\nkubelet-token,system:node:{NODE},kubelet,\"system:nodes\"\ncrustlet-token,system:node:{CRUSTLET_NODE},crustlet,\"system:nodes\"\nctrdlet-token,system:node:{CONTAINERD_NODE},ctrdlet,\"system:nodes\"\n"
            ),
        )
        .unwrap();
        for user in ["admin", "kubelet", "crustlet", "ctrdlet"] {
            std::fs::write(
                self.path(&format!("{user}.kubeconfig")),
                format!(
                    "apiVersion: v1
kind: Config
clusters:
- name: crust
  cluster:
    server: https://{ip}:6443
    certificate-authority: {}
users:
- name: {user}
  user:
    token: {user}-token
contexts:
- name: crust
  context:
    cluster: crust
    user: {user}
current-context: crust
",
                    self.path("pki/ca.pem").display()
                ),
            )
            .unwrap();
        }
    }

    /// A client certificate signed by the cluster's CA for `user` in `groups` (its CN
    /// and O): `pki/<name>.pem` and `pki/<name>.key`, returned in that order.
    pub fn client_cert(&self, name: &str, user: &str, groups: &[&str]) -> (PathBuf, PathBuf) {
        let subj: String = std::iter::once(format!("/CN={user}"))
            .chain(groups.iter().map(|g| format!("/O={g}")))
            .collect();
        let script = format!(
            "set -e; cd {dir}
openssl req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr -subj '{subj}' 2>/dev/null
printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth\\n' > {name}.cnf
openssl x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -set_serial 0x$(openssl rand -hex 8) -out {name}.pem -days 2 -extfile {name}.cnf 2>/dev/null",
            dir = self.path("pki").display()
        );
        let out = run(Command::new("sh").args(["-c", &script]));
        assert!(
            out.status.success(),
            "making the client certificate {name}: {}",
            s(&out.stderr)
        );
        (
            self.path(&format!("pki/{name}.pem")),
            self.path(&format!("pki/{name}.key")),
        )
    }

    pub(super) fn start_control_plane(&mut self) {
        let base = self.dir.path().to_path_buf();
        let p = |r: &str| base.join(r).display().to_string();
        let mut etcd = self.net_cmd(&self.bins.etcd);
        etcd.arg("--data-dir").arg(p("etcd")).args([
            "--listen-client-urls=http://127.0.0.1:2379",
            "--advertise-client-urls=http://127.0.0.1:2379",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=default=http://127.0.0.1:2380",
            "--unsafe-no-fsync",
        ]);
        let child = self.spawn_logged(etcd, "etcd");
        self.control.lock().unwrap().push(child);

        self.start_apiserver();
        // The apiserver's own requests to the nodes' servers (logs, exec, proxy).
        let out = run_timeout(
            &mut self.kubectl(&[
                "create",
                "clusterrolebinding",
                KUBELET_CLIENT,
                "--clusterrole=system:kubelet-api-admin",
                &format!("--user={KUBELET_CLIENT}"),
            ]),
            Duration::from_secs(20),
        );
        assert!(
            out.status.success(),
            "binding {KUBELET_CLIENT}: {}",
            s(&out.stderr)
        );

        let mut cm = self.net_cmd(&self.bins.controller_manager);
        cm.arg(format!("--kubeconfig={}", p("admin.kubeconfig")))
            .arg(format!(
                "--service-account-private-key-file={}",
                p("pki/sa.key")
            ))
            .arg(format!("--root-ca-file={}", p("pki/ca.pem")))
            .args([
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials",
            ]);
        if !self.opts.control_plane_only {
            // No cloud, no node CIDRs (crust's CNI config has the pod subnet).
            cm.arg("--controllers=*,-nodeipam,-cloud-node-lifecycle,-service,-route");
        } else {
            // The fleet's nodes take their pod ranges from their Nodes, as on kubeadm
            // clusters.
            cm.arg("--controllers=*,-cloud-node-lifecycle,-service,-route")
                .arg("--allocate-node-cidrs=true")
                .arg(format!("--cluster-cidr=10.{}.0.0/17", self.subnet))
                .arg("--node-cidr-mask-size=24");
        }
        let child = self.spawn_logged(cm, "kube-controller-manager");
        self.control.lock().unwrap().push(child);
        // Pods are refused until their namespace's service account exists, and their
        // token volumes need the root CA's config map.
        wait_for(
            "the default service account",
            Duration::from_secs(60),
            |last| {
                let out = run_timeout(
                    &mut self.kubectl(&[
                        "get",
                        "serviceaccount/default",
                        "configmap/kube-root-ca.crt",
                    ]),
                    Duration::from_secs(10),
                );
                *last = s(&out.stderr);
                out.status.success().then_some(())
            },
        );

        let mut sched = self.net_cmd(&self.bins.scheduler);
        sched
            .arg(format!("--kubeconfig={}", p("admin.kubeconfig")))
            .args(["--leader-elect=false", "--secure-port=0"])
            // It refuses to place a pod with a sidecar without the gate.
            .arg("--feature-gates=SidecarContainers=true");
        let child = self.spawn_logged(sched, "kube-scheduler");
        self.control.lock().unwrap().push(child);
    }

    /// kube-apiserver's command line (the same on every start).
    fn apiserver_cmd(&self) -> Command {
        let p = |r: &str| self.path(r).display().to_string();
        let mut api = self.net_cmd(&self.bins.apiserver);
        api.args([
            "--etcd-servers=http://127.0.0.1:2379",
            "--bind-address=0.0.0.0",
            "--secure-port=6443",
            // As kubeadm: nodes get what the Node authorizer gives them, the rest what
            // RBAC does (the admin token is in system:masters).
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            // As kubeadm runs it: privileged pods are the node's business (node
            // conformance has specs with them).
            "--allow-privileged=true",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--enable-priority-and-fairness=false",
            // Sidecar init containers (restartPolicy Always), alpha in v1.28: without
            // the gate the apiserver drops the field.
            "--feature-gates=SidecarContainers=true",
            // The node's name resolves nowhere: dial the kubelet at its node IP.
            "--kubelet-preferred-address-types=InternalIP",
        ])
        .arg(format!("--advertise-address={}", self.ip))
        .arg(format!(
            "--service-cluster-ip-range=10.{}.128.0/24",
            self.subnet
        ))
        .arg(format!("--tls-cert-file={}", p("pki/apiserver.pem")))
        .arg(format!("--tls-private-key-file={}", p("pki/apiserver.key")))
        .arg(format!("--client-ca-file={}", p("pki/ca.pem")))
        .arg(format!("--token-auth-file={}", p("pki/tokens.csv")))
        .arg(format!("--service-account-key-file={}", p("pki/sa.pub")))
        .arg(format!(
            "--service-account-signing-key-file={}",
            p("pki/sa.key")
        ))
        .arg(format!("--cert-dir={}", p("pki")))
        .arg(format!(
            "--kubelet-client-certificate={}",
            p("pki/kubelet-client.pem")
        ))
        .arg(format!(
            "--kubelet-client-key={}",
            p("pki/kubelet-client.key")
        ));
        if self.opts.control_plane_only {
            // A control plane on no node (a fleet's control namespace, as a hosted
            // control plane) has no kube-proxy to turn a webhook Service's ClusterIP
            // into a pod: the apiserver dials the Service's endpoints itself, for
            // admission and conversion webhooks and aggregated APIs alike.
            api.arg("--enable-aggregator-routing=true");
        }
        api
    }

    /// Starts kube-apiserver (on etcd's data: what it had is still there) and waits
    /// until it is ready.
    pub fn start_apiserver(&self) {
        let mut guard = self.apiserver.lock().unwrap();
        assert!(guard.is_none(), "kube-apiserver already running");
        *guard = Some(self.spawn_logged(self.apiserver_cmd(), "kube-apiserver"));
        drop(guard);
        wait_for(
            "the API server to be ready",
            Duration::from_secs(90),
            |last| {
                let out = run_timeout(
                    &mut self.kubectl(&["get", "--raw", "/readyz"]),
                    Duration::from_secs(10),
                );
                *last = format!("{}{}", s(&out.stdout), s(&out.stderr));
                out.status.success().then_some(())
            },
        );
    }

    /// SIGKILL to kube-apiserver, as an outage: every client's connection ends and new
    /// ones are refused until [`Cluster::start_apiserver`].
    pub fn stop_apiserver(&self) {
        if let Some(mut c) = self.apiserver.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
