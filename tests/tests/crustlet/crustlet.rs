//! The crustlet without an apiserver: static pods from a folder of manifests, run on a
//! crustd (its own node namespace, crust's bridge, the busybox image in its store) and
//! checked through CRI, as a kubelet's static pods are.

use cri_api::*;
use crust_e2e::cri::{import_busybox, Client};
use crust_e2e::crustd::Crustd;
use crust_e2e::{bin, require_root, TempDir};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NODE: &str = "n1";

struct Crustlet {
    child: Child,
    /// Flags added to every start of this crustlet.
    extra: Vec<String>,
    manifests: TempDir,
    root: TempDir,
    logs: TempDir,
    socket: String,
    /// The read-only HTTP port (`/pods`) of the running process; each start has its own.
    port: u16,
}

impl Crustlet {
    fn start(d: &Crustd) -> Crustlet {
        Crustlet::start_with(d, &[])
    }

    fn start_with(d: &Crustd, extra: &[&str]) -> Crustlet {
        let mut c = Crustlet {
            child: Command::new("true").spawn().unwrap(),
            extra: extra.iter().map(|a| a.to_string()).collect(),
            manifests: TempDir::new("cm"),
            root: TempDir::new("cr"),
            logs: TempDir::new("cp"),
            socket: d.socket.display().to_string(),
            port: 0,
        };
        c.spawn();
        c
    }

    fn spawn(&mut self) {
        let _ = self.child.wait();
        let log = std::fs::File::create(self.root.path().join("crustlet.log")).unwrap();
        self.port = crust_e2e::registry::free_port();
        self.child = Command::new(bin("crustlet"))
            .args([
                "--pod-manifest-path",
                &self.manifests.path().display().to_string(),
            ])
            .args(["--hostname-override", NODE])
            .args([
                "--container-runtime-endpoint",
                &format!("unix://{}", self.socket),
            ])
            .args([
                "--root-dir",
                &self.root.path().join("root").display().to_string(),
            ])
            .args(["--pod-logs-dir", &self.logs.path().display().to_string()])
            // No HTTPS server (it would take the host's port 10250); `/pods` on the
            // loopback shows what this process's workers last synced.
            .args(["--address", "127.0.0.1", "--port", "0"])
            .args(["--read-only-port", &self.port.to_string()])
            .args(["--v", "4"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting crustlet");
    }

    fn stop(&mut self) {
        crust_e2e::signal_child(&mut self.child, libc::SIGTERM);
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "crustlet exited {status} on SIGTERM:\n{}",
            self.log()
        );
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("crustlet.log")).unwrap_or_default()
    }

    /// The status this process's worker last reported for static pod `pod` (`/pods` of
    /// the read-only port), once it has synced it; None before (or while the server
    /// does not answer yet).
    fn synced_status(&self, pod: &str) -> Option<serde_json::Value> {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"GET /pods HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .ok()?;
        let mut resp = String::new();
        c.read_to_string(&mut resp).ok()?;
        let (head, body) = resp.split_once("\r\n\r\n")?;
        assert!(head.starts_with("HTTP/1.0 200"), "/pods: {resp}");
        let pods: serde_json::Value = serde_json::from_str(body).unwrap();
        pods["items"]
            .as_array()?
            .iter()
            .find(|p| p["metadata"]["name"] == format!("{pod}-{NODE}"))
            .map(|p| p["status"].clone())
    }

    fn manifest(&self, name: &str, yaml: &str) {
        std::fs::write(self.manifests.path().join(format!("{name}.yaml")), yaml).unwrap();
    }
}

impl Drop for Crustlet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn root() -> bool {
    require_root(&["ip", "nsenter", "nft", "busybox"])
}

/// The pod's sandboxes (by its static name) and their containers: name → (id, attempt,
/// state, exit code), newest attempt last.
async fn pod_state(
    c: &mut Client,
    pod: &str,
) -> (
    Vec<PodSandbox>,
    HashMap<String, Vec<(String, u32, i32, i32)>>,
) {
    let sandboxes = c
        .list_pod_sandbox(ListPodSandboxRequest {
            filter: Some(PodSandboxFilter {
                label_selector: HashMap::from([(
                    "io.kubernetes.pod.name".to_string(),
                    format!("{pod}-{NODE}"),
                )]),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .items;
    let mut out: HashMap<String, Vec<(String, u32, i32, i32)>> = HashMap::new();
    for s in &sandboxes {
        let list = c
            .list_containers(ListContainersRequest {
                filter: Some(ContainerFilter {
                    pod_sandbox_id: s.id.clone(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .containers;
        for k in list {
            let st = match c
                .container_status(ContainerStatusRequest {
                    container_id: k.id.clone(),
                    verbose: false,
                })
                .await
            {
                Ok(r) => r.into_inner().status.unwrap(),
                // Removed by the crustlet between the list and this call (a CI run
                // met it): no longer there.
                Err(s) if s.code() == tonic::Code::NotFound => continue,
                Err(s) => panic!("ContainerStatus {}: {s}", k.id),
            };
            let m = k.metadata.unwrap();
            out.entry(m.name)
                .or_default()
                .push((k.id, m.attempt, st.state, st.exit_code));
        }
    }
    for v in out.values_mut() {
        v.sort_by_key(|x| x.1);
    }
    (sandboxes, out)
}

async fn wait_until<T>(
    what: &str,
    cl: &Crustlet,
    limit: Duration,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out waiting for {what}; crustlet log:\n{}",
            cl.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn log_of(logs: &Path, pod: &str, container: &str, attempt: u32) -> String {
    let dir = std::fs::read_dir(logs)
        .unwrap()
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("default_{pod}-{NODE}_"))
        })
        .map(|e| e.path());
    dir.and_then(|d| std::fs::read_to_string(d.join(container).join(format!("{attempt}.log"))).ok())
        .unwrap_or_default()
}

const RUNNING: i32 = ContainerState::ContainerRunning as i32;
const EXITED: i32 = ContainerState::ContainerExited as i32;

/// A static pod with an init container, an emptyDir they share, environment with
/// `$(VAR)` references and the downward API runs in order; its logs are where the
/// kubelet puts them; a restart of the crustlet adopts it; removing the manifest stops
/// and removes it.
#[tokio::test]
async fn static_pod_init_volumes_env_adoption_and_removal() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    import_busybox(&d);
    let mut c = d.client().await;
    let mut cl = Crustlet::start(&d);
    cl.manifest(
        "web",
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  volumes:
  - name: shared
    emptyDir: {}
  initContainers:
  - name: init
    image: busybox:e2e
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo from-init > /shared/marker"]
    volumeMounts: [{name: shared, mountPath: /shared}]
  containers:
  - name: main
    image: busybox:e2e
    imagePullPolicy: IfNotPresent
    env:
    - {name: GREETING, value: hello}
    - {name: MESSAGE, value: "$(GREETING) world $$(GREETING)"}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    command: ["sh", "-c", "cat /shared/marker; echo $MESSAGE; echo pod=$POD_NAME; exec sleep 1000"]
    volumeMounts: [{name: shared, mountPath: /shared}]
"#,
    );
    let (sandboxes, containers) = wait_until(
        "the static pod to run",
        &cl,
        Duration::from_secs(60),
        async || {
            let (s, k) = pod_state(&mut c, "web").await;
            let running = k
                .get("main")
                .and_then(|v| v.last())
                .is_some_and(|x| x.2 == RUNNING);
            running.then_some((s, k))
        },
    )
    .await;
    assert_eq!(sandboxes.len(), 1);
    let sb = &sandboxes[0];
    assert_eq!(sb.labels["io.kubernetes.pod.namespace"], "default");
    assert_eq!(sb.labels["app"], "web");
    assert_eq!(sb.annotations["kubernetes.io/config.source"], "file");
    let init = &containers["init"];
    assert_eq!(
        (init.len(), init[0].2, init[0].3),
        (1, EXITED, 0),
        "the init container ran once, to exit 0"
    );
    let log = wait_until(
        "the main container's log",
        &cl,
        Duration::from_secs(20),
        async || {
            let l = log_of(cl.logs.path(), "web", "main", 0);
            l.contains("pod=").then_some(l)
        },
    )
    .await;
    assert!(
        log.contains("from-init"),
        "the init container's file is in the shared emptyDir: {log}"
    );
    assert!(
        log.contains("hello world $(GREETING)"),
        "env references expanded, $$ escaped: {log}"
    );
    assert!(
        log.contains(&format!("pod=web-{NODE}")),
        "downward API: {log}"
    );

    // A crustlet restart adopts the pod: same sandbox, the container not restarted.
    // The new process reports the pod's status at the end of its first sync, after it
    // decided what to start: that report is what is waited for, not a while.
    let main_id = containers["main"][0].0.clone();
    cl.stop();
    cl.spawn();
    let st = wait_until(
        "the new crustlet to sync the pod",
        &cl,
        Duration::from_secs(30),
        async || cl.synced_status("web"),
    )
    .await;
    let main = st["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|s| s["name"] == "main"))
        .unwrap_or_else(|| panic!("no status of main: {st}"));
    assert!(
        main["containerID"]
            .as_str()
            .is_some_and(|id| id.ends_with(&format!("://{main_id}"))),
        "the adopted container: {main}"
    );
    assert_eq!(main["restartCount"], 0, "{main}");
    assert!(main["state"]["running"].is_object(), "{main}");
    let (s2, k2) = pod_state(&mut c, "web").await;
    assert_eq!(s2.iter().map(|s| &s.id).collect::<Vec<_>>(), [&sb.id]);
    assert_eq!(
        k2["main"].len(),
        1,
        "not restarted: {:?}\n{}",
        k2["main"],
        cl.log()
    );
    assert_eq!(
        (k2["main"][0].0.as_str(), k2["main"][0].2),
        (main_id.as_str(), RUNNING)
    );

    std::fs::remove_file(cl.manifests.path().join("web.yaml")).unwrap();
    wait_until(
        "the pod to be removed",
        &cl,
        Duration::from_secs(60),
        async || pod_state(&mut c, "web").await.0.is_empty().then_some(()),
    )
    .await;
}

/// restartPolicy OnFailure: a container that fails once is restarted (attempt 1) and,
/// once it exits 0, left alone; Never leaves a failed container exited.
#[tokio::test]
async fn static_pod_restart_policies() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    import_busybox(&d);
    let mut c = d.client().await;
    let cl = Crustlet::start(&d);
    let pod = |name: &str, policy: &str| {
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  restartPolicy: {policy}
  volumes: [{{name: state, emptyDir: {{}}}}]
  containers:
  - name: flaky
    image: busybox:e2e
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "if [ -e /state/ran ]; then echo second; exit 0; fi; touch /state/ran; echo first; exit 3"]
    volumeMounts: [{{name: state, mountPath: /state}}]
"#
        )
    };
    cl.manifest("onfailure", &pod("onfailure", "OnFailure"));
    cl.manifest("never", &pod("never", "Never"));
    // The back-off after the first failure is 10 s.
    let k = wait_until(
        "the OnFailure container's second run to exit 0",
        &cl,
        Duration::from_secs(60),
        async || {
            let (_, k) = pod_state(&mut c, "onfailure").await;
            let done = k
                .get("flaky")
                .is_some_and(|v| v.len() == 2 && v[1].2 == EXITED);
            done.then_some(k)
        },
    )
    .await;
    let v = &k["flaky"];
    assert_eq!((v[0].1, v[0].3, v[1].1, v[1].3), (0, 3, 1, 0), "{v:?}");
    // Nothing more happens to either: the crustlet has them finished (a finished pod's
    // worker only stops its sandbox), Succeeded and Failed.
    for (pod, phase) in [("onfailure", "Succeeded"), ("never", "Failed")] {
        wait_until(
            &format!("{pod} to be {phase}"),
            &cl,
            Duration::from_secs(30),
            async || cl.synced_status(pod).filter(|s| s["phase"] == phase),
        )
        .await;
    }
    let (_, never) = pod_state(&mut c, "never").await;
    let n = &never["flaky"];
    assert_eq!(n.len(), 1, "Never does not restart: {n:?}");
    assert_eq!((n[0].2, n[0].3), (EXITED, 3));
    assert_eq!(pod_state(&mut c, "onfailure").await.1["flaky"].len(), 2);
}

/// The conformance test "should report termination message if TerminationMessagePath
/// is set as non-root user and at a non-default path": a container running as uid 1000
/// writes its message at `/tmp/dev/termination-log`, a folder the image does not have.
/// The crustlet's host file must be writable by that user (0666 whatever the umask, as
/// the kubelet makes it) and crustd makes the mount target's folders; the container
/// exits 0 and the message is there. Its `echo -n` output, which no newline ends, is a
/// partial (`P`) record, as containerd writes it.
#[tokio::test]
async fn termination_message_as_non_root_at_a_non_default_path() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    import_busybox(&d);
    let mut c = d.client().await;
    let cl = Crustlet::start(&d);
    cl.manifest(
        "term",
        r#"
apiVersion: v1
kind: Pod
metadata: {name: term}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox:e2e
    imagePullPolicy: IfNotPresent
    securityContext: {runAsUser: 1000}
    terminationMessagePath: /tmp/dev/termination-log
    command: ["sh", "-c", "echo -n DONE > /tmp/dev/termination-log && echo -n DONE"]
"#,
    );
    let main = wait_until(
        "the container to exit",
        &cl,
        Duration::from_secs(60),
        async || {
            let (_, k) = pod_state(&mut c, "term").await;
            k.get("main")
                .and_then(|v| v.last())
                .filter(|x| x.2 == EXITED)
                .cloned()
        },
    )
    .await;
    let log = log_of(cl.logs.path(), "term", "main", 0);
    assert_eq!(main.3, 0, "exit code; container log: {log:?}");
    let pods = cl.root.path().join("root/pods");
    let term = std::fs::read_dir(&pods)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("containers/main/0-termination-log"))
        .find(|p| p.exists())
        .expect("the termination message file");
    assert_eq!(std::fs::read_to_string(&term).unwrap(), "DONE");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&term).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666, "{}", term.display());
    assert!(log.ends_with(" stdout P DONE\n"), "{log:?}");
}

/// The id of static pod `pod`'s running container `main`, once it runs.
async fn running_main(c: &mut Client, pod: &str) -> Option<String> {
    let (_, k) = pod_state(c, pod).await;
    k.get("main")?
        .iter()
        .find(|x| x.2 == RUNNING)
        .map(|x| x.0.clone())
}

/// Whether file `path` exists in container `id` (ExecSync of the shell's `test -e`:
/// the image has no `test` applet).
async fn exists_in(c: &mut Client, id: &str, path: &str) -> bool {
    let cmd = format!("test -e {path}");
    crust_e2e::cri::exec_sync(c, id, &["sh", "-c", &cmd], 10)
        .await
        .is_ok_and(|r| r.exit_code == 0)
}

/// With one pod started at a time (`--max-parallel-pod-starts=1`), a pod whose
/// postStart hook runs long does not hold up the next: the slot is given back while the
/// hook runs, as it is during an image pull. Held, the second pod would wait the
/// hook's two minutes.
#[tokio::test]
async fn a_long_post_start_hook_does_not_hold_the_start_slot() {
    if !root() {
        return;
    }
    let d = Crustd::start();
    import_busybox(&d);
    let mut c = d.client().await;
    let cl = Crustlet::start_with(&d, &["--max-parallel-pod-starts=1"]);
    let pod = |name: &str, grace: u32, hook: &str| {
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: main
    image: busybox:e2e
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
{hook}"#
        )
    };
    // The hook may run as long as the grace period.
    let hook = r#"    lifecycle:
      postStart:
        exec: {command: ["sh", "-c", "touch /tmp/hook-began; sleep 120; touch /tmp/hook-ended"]}
"#;
    cl.manifest("hooked", &pod("hooked", 150, hook));
    // The hook runs before the second pod comes.
    let hooked = wait_until(
        "the hooked pod's postStart hook to begin",
        &cl,
        Duration::from_secs(60),
        async || {
            let id = running_main(&mut c, "hooked").await?;
            exists_in(&mut c, &id, "/tmp/hook-began")
                .await
                .then_some(id)
        },
    )
    .await;
    cl.manifest("next", &pod("next", 1, ""));
    wait_until(
        "the second pod's container to run while the first's hook does",
        &cl,
        Duration::from_secs(60),
        async || running_main(&mut c, "next").await,
    )
    .await;
    assert!(
        !exists_in(&mut c, &hooked, "/tmp/hook-ended").await,
        "the hook had ended: the second pod may have waited for it"
    );
}
