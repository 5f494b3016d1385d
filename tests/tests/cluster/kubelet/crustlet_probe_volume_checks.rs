//! The crustlet's gRPC probes and Memory emptyDirs, on its node and on the containerd one
//! (and the gRPC probes beside the real kubelet's, on the same pod).
//!
//! A gRPC probe needs a server of `grpc.health.v1.Health` and the suite's image is a
//! static busybox: the test runs the server itself, in the nodes' network namespace on
//! every address, and the pods are hostNetwork pods, whose IP (the one a probe is sent
//! to) is their node's. The pod runs only `sleep`; what is checked is what the node
//! agent makes of the server's answers, which the check changes as it goes.

use super::crustlet_checks::{
    condition, delete_timed, get, gone_from_crustd, pod, pod_on, run_pod, wait_log, wait_pod,
    Crustlet,
};
use super::{apply, ok, running, status_of, wait_for, T};
use crust_e2e::cluster::{Cluster, CRUSTLET_NODE, NODE};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---- a gRPC health server -------------------------------------------------------------

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

const SERVING: i32 = 1;
const NOT_SERVING: i32 = 2;

type Statuses = Arc<Mutex<HashMap<String, i32>>>;

/// `grpc.health.v1.Health/Check` with a status per service name (set by the check); a
/// name it does not know gets NOT_FOUND "unknown service", as grpc-go's server answers.
#[derive(Clone)]
struct Health(Statuses);

impl tonic::server::NamedService for Health {
    const NAME: &'static str = "grpc.health.v1.Health";
}

impl tonic::server::UnaryService<HealthCheckRequest> for Health {
    type Response = HealthCheckResponse;
    type Future = tonic::codegen::BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
    fn call(&mut self, req: tonic::Request<HealthCheckRequest>) -> Self::Future {
        let status = self.0.lock().unwrap().get(&req.get_ref().service).copied();
        Box::pin(async move {
            match status {
                Some(status) => Ok(tonic::Response::new(HealthCheckResponse { status })),
                None => Err(tonic::Status::not_found("unknown service")),
            }
        })
    }
}

type HttpBody = tonic::body::Body;

impl tonic::codegen::Service<tonic::codegen::http::Request<HttpBody>> for Health {
    type Response = tonic::codegen::http::Response<HttpBody>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: tonic::codegen::http::Request<HttpBody>) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            if req.uri().path() != "/grpc.health.v1.Health/Check" {
                return Ok(tonic::Status::unimplemented("").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(me, req).await)
        })
    }
}

/// The server, on a port of every address of the nodes' network namespace, until dropped.
struct HealthServer {
    port: u16,
    statuses: Statuses,
    _rt: tokio::runtime::Runtime,
}

impl HealthServer {
    fn start(c: &Cluster) -> HealthServer {
        let listener = bind_in_node(c);
        let port = listener.local_addr().unwrap().port();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let statuses = Statuses::default();
        let svc = Health(statuses.clone());
        rt.spawn(async move {
            let l = tokio::net::TcpListener::from_std(listener).unwrap();
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(l))
                .await
        });
        HealthServer {
            port,
            statuses,
            _rt: rt,
        }
    }

    fn set(&self, service: &str, status: Option<i32>) {
        let mut m = self.statuses.lock().unwrap();
        match status {
            Some(s) => m.insert(service.to_string(), s),
            None => m.remove(service),
        };
    }
}

/// A listener on a free port of every address of the nodes' network namespace (made
/// on a thread of its own that enters it; the socket stays in that namespace).
fn bind_in_node(c: &Cluster) -> std::net::TcpListener {
    let node = c.node.path();
    std::thread::spawn(move || {
        crust_e2e::enter_netns(&node);
        let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        l.set_nonblocking(true).unwrap();
        l
    })
    .join()
    .unwrap()
}

/// The messages of the `reason` events of pod `name` in `ns`, oldest first.
fn event_messages(c: &Cluster, ns: &str, name: &str, reason: &str) -> Vec<String> {
    let sel = format!("involvedObject.name={name},reason={reason}");
    crate::events(c, ns, &sel)
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

pub(crate) fn wait_event(c: &Crustlet, name: &str, reason: &str, message: &str) {
    wait_for(
        &format!("a {reason} event of {name}: {message:?}"),
        T,
        |last| {
            let m = event_messages(c, c.ns, name, reason);
            *last = format!("{m:#?}");
            m.iter().any(|x| x == message).then_some(())
        },
    );
}

fn ready(p: &Value) -> bool {
    status_of(p, "main").is_some_and(|s| s["ready"] == true)
        && condition(p, "Ready").is_some_and(|c| c["status"] == "True")
}

fn not_ready(p: &Value) -> bool {
    running(p)
        && status_of(p, "main").is_some_and(|s| s["ready"] == false)
        && condition(p, "Ready").is_some_and(|c| c["status"] == "False")
}

// ---- gRPC probes ----------------------------------------------------------------------

pub fn crustlet_grpc_probes(c: &Cluster) {
    grpc_probes(&Crustlet::on_crustd(c))
}

pub fn containerd_grpc_probes(c: &Cluster) {
    grpc_probes(&Crustlet::on_containerd(c))
}

/// Readiness follows the server's status of its service (NOT_SERVING, then SERVING,
/// then a name it no longer knows); a liveness probe whose service stops serving
/// restarts the container. The Unhealthy events say what the kubelet says.
fn grpc_probes(c: &Crustlet) {
    let h = HealthServer::start(c);
    h.set("ready", Some(NOT_SERVING));
    h.set("live", Some(SERVING));
    let name = "grpc-probes";
    apply(
        c,
        pod(c, name, "exec sleep 3600", |p| {
            p["spec"]["hostNetwork"] = json!(true);
            let ctr = &mut p["spec"]["containers"][0];
            ctr["readinessProbe"] =
                json!({"grpc": {"port": h.port, "service": "ready"}, "periodSeconds": 1});
            ctr["livenessProbe"] = json!({
                "grpc": {"port": h.port, "service": "live"},
                "periodSeconds": 1,
                "failureThreshold": 2,
            });
        }),
    );
    wait_pod(c, name, "running, not ready", T, not_ready);
    wait_event(
        c,
        name,
        "Unhealthy",
        r#"Readiness probe failed: service unhealthy (responded with "NOT_SERVING")"#,
    );
    h.set("ready", Some(SERVING));
    let p = wait_pod(c, name, "ready", T, ready);
    assert_eq!(status_of(&p, "main").unwrap()["restartCount"], 0, "{p:#}");

    // A service the server does not know is a failure too.
    h.set("ready", None);
    wait_pod(c, name, "not ready again", T, not_ready);
    wait_event(
        c,
        name,
        "Unhealthy",
        "Readiness probe failed: error: health rpc probe failed: rpc error: code = NotFound desc = unknown service",
    );

    // Liveness: NOT_SERVING twice, and the container is killed and started again.
    h.set("live", Some(NOT_SERVING));
    let p = wait_pod(
        c,
        name,
        "restarted by its liveness probe",
        Duration::from_secs(90),
        |p| status_of(p, "main").is_some_and(|s| s["restartCount"].as_u64() >= Some(1)),
    );
    assert!(
        status_of(&p, "main").unwrap()["lastState"]["terminated"].is_object(),
        "{p:#}"
    );
    wait_event(
        c,
        name,
        "Unhealthy",
        r#"Liveness probe failed: service unhealthy (responded with "NOT_SERVING")"#,
    );
    wait_event(
        c,
        name,
        "Killing",
        "Container main failed liveness probe, will be restarted",
    );
    // The probes end with the pod, before the server does.
    delete_timed(c, name);
    gone_from_crustd(c, name);
}

/// The same gRPC probes on the kubelet's node and on the crustlet's: a readiness probe
/// of a service that is NOT_SERVING and a liveness probe of a port nothing listens on
/// (with a failure threshold it does not reach) give the same Unhealthy messages, the
/// node's IP aside, and the same readiness.
pub fn crustlet_grpc_probe_same_as_kubelet(c: &Cluster) {
    let c = &Crustlet::on_crustd(c);
    let h = HealthServer::start(c);
    h.set("down", Some(NOT_SERVING));
    let closed = bind_in_node(c).local_addr().unwrap().port();
    let nodes = [(NODE, "k"), (CRUSTLET_NODE, "c")];
    for (n, tag) in nodes {
        apply(
            c,
            pod_on(c, n, &format!("grpc-cmp-{tag}"), "exec sleep 3600", |p| {
                p["spec"]["hostNetwork"] = json!(true);
                let ctr = &mut p["spec"]["containers"][0];
                ctr["readinessProbe"] =
                    json!({"grpc": {"port": h.port, "service": "down"}, "periodSeconds": 1});
                ctr["livenessProbe"] = json!({
                    "grpc": {"port": closed},
                    "periodSeconds": 2,
                    "failureThreshold": 1000,
                });
            }),
        );
    }
    let mut seen = vec![];
    for (_, tag) in nodes {
        let name = format!("grpc-cmp-{tag}");
        let p = wait_pod(
            c,
            &name,
            "running, not ready",
            Duration::from_secs(90),
            not_ready,
        );
        // A hostNetwork pod's IP is its node's: the address the probes go to.
        let ip = p["status"]["podIP"].as_str().unwrap_or("?").to_string();
        let messages = wait_for(&format!("both Unhealthy events of {name}"), T, |last| {
            let mut m: Vec<String> = event_messages(c, c.ns, &name, "Unhealthy")
                .into_iter()
                .map(|m| m.replace(ip.as_str(), "<node-ip>"))
                // A health RPC that overran its 1 s on a loaded machine is load, not
                // behaviour (either node may log it; CI met it on the crustlet's).
                .filter(|m| !m.contains("health rpc did not complete within"))
                .collect();
            m.sort();
            m.dedup();
            *last = format!("{m:#?}");
            (m.iter().any(|x| x.starts_with("Liveness"))
                && m.iter().any(|x| x.starts_with("Readiness")))
            .then_some(m)
        });
        seen.push((
            name,
            messages,
            status_of(&p, "main").unwrap()["restartCount"].clone(),
        ));
    }
    let (k, c_) = (&seen[0], &seen[1]);
    assert_eq!(
        k.1, c_.1,
        "Unhealthy messages: kubelet {k:#?}, crustlet {c_:#?}"
    );
    assert_eq!(k.2, c_.2, "restart counts");
    for (_, tag) in nodes {
        delete_timed(c, &format!("grpc-cmp-{tag}"));
    }
}

// ---- Memory emptyDirs -----------------------------------------------------------------

pub fn crustlet_memory_empty_dir(c: &Cluster) {
    memory_empty_dir(&Crustlet::on_crustd(c))
}

pub fn containerd_memory_empty_dir(c: &Cluster) {
    memory_empty_dir(&Crustlet::on_containerd(c))
}

/// The `size=` of the tmpfs at `at` in /proc/mounts lines, in bytes.
fn tmpfs_size(log: &str, at: &str) -> Option<u64> {
    let line = log
        .lines()
        .find(|l| l.starts_with(&format!("mount-{at}: ")))?;
    let mut f = line.split_whitespace().skip(1);
    let (_, point, fstype, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
    if point != format!("/v/{at}") || fstype != "tmpfs" {
        return None;
    }
    let k = opts.split(',').find_map(|o| o.strip_prefix("size="))?;
    Some(k.strip_suffix('k')?.parse::<u64>().ok()? << 10)
}

/// A quantity of memory as a Node's status has it (`123456Ki`, `2Gi`, `1000`), in bytes.
fn bytes(q: &str) -> u64 {
    for (suffix, shift) in [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)] {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<u64>().unwrap() << shift;
        }
    }
    q.parse().unwrap()
}

/// The node's mount table (the cluster's mount namespace, where the node agents and
/// runtimes live) lines that name `uid`.
fn node_mounts_of(c: &Cluster, uid: &str) -> Vec<String> {
    let mut cmd = c.node_cmd("cat");
    cmd.arg("/proc/self/mountinfo");
    ok(cmd)
        .lines()
        .filter(|l| l.contains(uid))
        .map(str::to_string)
        .collect()
}

/// Memory emptyDirs are tmpfs mounts as big as the kubelet makes them: the sizeLimit
/// below the pod's memory limit, the pod's limit when the sizeLimit is above it or
/// unset, the node's allocatable memory for a pod without limits; full, they refuse
/// more; a disk emptyDir with a sizeLimit stays on disk. One mount each on the node,
/// still one after the minute's refresh of the volumes, none once the pods are deleted.
fn memory_empty_dir(c: &Crustlet) {
    let script = "for d in small lim over disk; do echo \"mount-$d: $(grep \" /v/$d \" /proc/mounts)\"; done; \
                  df -k /v/small | tail -n 1 | sed 's/^/df-small: /'; \
                  dd if=/dev/zero of=/v/small/fill bs=1M count=16 2>/dev/null; echo \"dd-exit=$?\"; \
                  echo \"filled=$(du -k /v/small/fill | cut -f1)\"; echo done; exec sleep 3600";
    let volumes = json!([
        {"name": "small", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}},
        {"name": "lim", "emptyDir": {"medium": "Memory"}},
        {"name": "over", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        {"name": "disk", "emptyDir": {"sizeLimit": "8Mi"}},
    ]);
    let mounts: Vec<Value> = ["small", "lim", "over", "disk"]
        .iter()
        .map(|v| json!({"name": v, "mountPath": format!("/v/{v}")}))
        .collect();
    let limited = run_pod(
        c,
        pod(c, "memvol", script, |p| {
            p["spec"]["volumes"] = volumes.clone();
            p["spec"]["containers"][0]["volumeMounts"] = json!(mounts);
            p["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "64Mi"}});
        }),
    );
    // Its volumes were set up before it ran.
    let set_up = std::time::Instant::now();
    let free_script =
        "echo \"mount-lim: $(grep ' /v/lim ' /proc/mounts)\"; echo done; exec sleep 3600";
    let free = run_pod(
        c,
        pod(c, "memvol-free", free_script, |p| {
            p["spec"]["volumes"] = json!([{"name": "lim", "emptyDir": {"medium": "Memory"}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "lim", "mountPath": "/v/lim"}]);
        }),
    );

    let log = wait_log(c, &limited, "main", "done");
    assert_eq!(tmpfs_size(&log, "small"), Some(8 << 20), "{log}");
    assert_eq!(tmpfs_size(&log, "lim"), Some(64 << 20), "{log}");
    assert_eq!(tmpfs_size(&log, "over"), Some(64 << 20), "{log}");
    assert_ne!(tmpfs_size(&log, "disk"), Some(8 << 20), "{log}");
    let df: Vec<&str> = log
        .lines()
        .find_map(|l| l.strip_prefix("df-small: "))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(df.get(1), Some(&"8192"), "1K-blocks: {log}");
    assert!(
        log.contains("dd-exit=1"),
        "writing past the size succeeded: {log}"
    );
    let filled: u64 = log
        .lines()
        .find_map(|l| l.strip_prefix("filled="))
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        (8000..=8192).contains(&filled),
        "{filled} KiB written: {log}"
    );

    let log = wait_log(c, &free, "main", "done");
    let node = get(c, "node", c.node).unwrap();
    let alloc = bytes(node["status"]["allocatable"]["memory"].as_str().unwrap());
    let size = tmpfs_size(&log, "lim").unwrap_or_else(|| panic!("{log}"));
    // The kernel rounds the size up to whole pages.
    assert!(
        size >= alloc && size - alloc < 4096,
        "tmpfs of {size} bytes, allocatable {alloc}: {log}"
    );

    // On the node: one tmpfs per Memory volume, at its folder under the pod's.
    let uid = limited["metadata"]["uid"].as_str().unwrap().to_string();
    let free_uid = free["metadata"]["uid"].as_str().unwrap().to_string();
    let on_node = node_mounts_of(c, &uid);
    for v in ["small", "lim", "over"] {
        let at = format!("/pods/{uid}/volumes/kubernetes.io~empty-dir/{v} ");
        let n = on_node.iter().filter(|l| l.contains(&at)).count();
        assert_eq!(n, 1, "{v}: {on_node:#?}");
    }
    assert!(
        !on_node
            .iter()
            .any(|l| l.contains("kubernetes.io~empty-dir/disk ")),
        "{on_node:#?}"
    );

    // The volumes are set up again every minute (as by a restarted crustlet adopting
    // the pod): each tmpfs stays, with what the container wrote, not mounted over.
    std::thread::sleep(Duration::from_secs(66).saturating_sub(set_up.elapsed()));
    let again = node_mounts_of(c, &uid);
    let small = again
        .iter()
        .find(|l| l.contains("kubernetes.io~empty-dir/small "))
        .and_then(|l| l.split(' ').nth(4))
        .unwrap_or_else(|| panic!("{again:#?}"));
    for v in ["small", "lim", "over"] {
        let at = format!("/pods/{uid}/volumes/kubernetes.io~empty-dir/{v} ");
        let n = again.iter().filter(|l| l.contains(&at)).count();
        assert_eq!(n, 1, "{v} after a minute: {again:#?}");
    }
    let mut stat = c.node_cmd("stat");
    stat.args(["-c", "%s"]).arg(format!("{small}/fill"));
    assert_eq!(
        ok(stat).trim(),
        (filled << 10).to_string(),
        "what the pod wrote"
    );

    delete_timed(c, "memvol");
    delete_timed(c, "memvol-free");
    for u in [&uid, &free_uid] {
        wait_for("the pod's mounts to go from the node", T, |last| {
            let m = node_mounts_of(c, u);
            *last = format!("{m:#?}");
            m.is_empty().then_some(())
        });
    }
}
