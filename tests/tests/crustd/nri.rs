//! NRI end to end with crust's example plugin (`crates/nri/examples/localtime.rs`: every
//! container gets the node's time zone file at `/etc/localtime` and `TZ`), connected
//! to crustd's socket as an external plugin, then started by crustd itself as a
//! pre-installed plugin with its configuration file; and the `hooks` example, whose
//! OCI hooks crust's executor and crustd run at each point of a container's life.
//! critest's NRI specs (the critest suite) check the protocol's events; this checks
//! that adjustments reach the container.

use cri_api::*;
use crust_e2e::cri::*;
use crust_e2e::crustd::{Crustd, Options};
use crust_e2e::{require_root, TempDir};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// An example plugin, as `cargo test --workspace` (or `cargo build -p nri --examples`)
/// builds it.
fn plugin(name: &str) -> PathBuf {
    let candidates = [
        crust_e2e::bin_dir().join("examples").join(name),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/debug/examples")
            .join(name),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!("no NRI example plugin at {candidates:?}: `cargo build -p nri --examples`")
        })
}

/// Runs `sh -c script` in a new container of `pod` until it exits; its log.
async fn run_in(e: &mut Env, pod: &(String, PodSandboxConfig), name: &str, script: &str) -> String {
    let id = e.create(pod, ctr(name, &["sh", "-c", script])).await;
    e.start(&id).await;
    let s = e.wait_exited(&id).await;
    let log = std::fs::read_to_string(&s.log_path).unwrap_or_default();
    assert_eq!(s.exit_code, 0, "{name}: {log}");
    e.remove(&id).await;
    log
}

const SCRIPT: &str =
    "echo TZ=$TZ; echo size=$(cat /etc/localtime | wc -c); cat /etc/localtime | head -c 16; echo";

fn config(dir: &Path) -> String {
    format!(
        "[nri]\nenable = true\nsocket_path = \"{}\"\nplugin_path = \"{}\"\nplugin_config_path = \"{}\"\n",
        dir.join("nri.sock").display(),
        dir.join("plugins").display(),
        dir.join("conf.d").display()
    )
}

#[tokio::test]
async fn an_nri_plugin_adjusts_containers_external_and_preinstalled() {
    if !require_root(&["ip", "nsenter", "busybox"]) {
        return;
    }
    let plugin = plugin("localtime");
    let dir = TempDir::new("nri");
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    std::fs::create_dir_all(dir.path().join("conf.d")).unwrap();
    let d = Crustd::start_with_config(Options::default(), &config(dir.path()));
    let mut e = Env::with(d).await;
    let pod = e.pod("nri").await;

    // Without a plugin: the image's own (busybox has no /etc/localtime).
    let log = run_in(&mut e, &pod, "before", SCRIPT).await;
    assert!(log.contains("TZ=\n") || log.contains("TZ= "), "{log}");

    // An external plugin: it connects, registers, is configured and synchronized.
    let mut external = std::process::Command::new(&plugin)
        .arg(dir.path().join("nri.sock"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !e.d.log_text().contains("NRI plugin registered") {
        assert!(
            Instant::now() < deadline,
            "the plugin did not register:\n{}",
            e.d.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let host = std::fs::read("/etc/localtime").unwrap();
    let log = run_in(&mut e, &pod, "external", SCRIPT).await;
    assert!(log.contains("TZ=:/etc/localtime"), "{log}");
    assert!(log.contains(&format!("size={}", host.len())), "{log}");
    external.kill().unwrap();
    external.wait().unwrap();
    e.remove_pod(&pod.0).await;

    // Pre-installed: crustd starts `NN-name` of its plugin folder with the socket as
    // fd 3, and hands it `NN-name.conf` (here: another zone file).
    let zone = dir.path().join("zone");
    std::fs::write(&zone, "TZif-crust-test-zone\n").unwrap();
    std::fs::copy(&plugin, dir.path().join("plugins/10-localtime")).unwrap();
    std::fs::write(
        dir.path().join("conf.d/10-localtime.conf"),
        format!("{}\n", zone.display()),
    )
    .unwrap();
    // (SIGKILL: a SIGTERM'd crustd waits for this test's client connection, which
    // this single-threaded test cannot serve while it waits for crustd.)
    e.d.kill9();
    e.d.spawn();
    e.c = e.d.client().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while e.d.log_text().matches("NRI plugin registered").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "the pre-installed plugin did not register:\n{}",
            e.d.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pod = e.pod("nri2").await;
    let log = run_in(&mut e, &pod, "preinstalled", SCRIPT).await;
    assert!(log.contains("TZ=:/etc/localtime"), "{log}");
    assert!(
        log.contains("size=21") && log.contains("TZif-crust-test-"),
        "{log}"
    );
    e.remove_pod(&pod.0).await;
    // A crustd gone takes its plugins along (they see their socket's end).
    e.d.kill9();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !crust_e2e::crustd::pids_running(&dir.path().join("plugins/10-localtime")).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the pre-installed plugin outlived crustd"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for crustd's log to say `n` plugins registered.
async fn registered(e: &Env, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while e.d.log_text().matches("NRI plugin registered").count() < n {
        assert!(
            Instant::now() < deadline,
            "the plugin did not register:\n{}",
            e.d.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A temp dir with crustd's NRI folders, and its `out` folder for what hooks write.
fn hooks_dirs(name: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(name);
    for d in ["plugins", "conf.d", "out"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    let out = dir.path().join("out");
    (dir, out)
}

/// The `hooks` example connected to the crustd of `dir` (see [`config`]), configured
/// with the OCI hooks in `conf`.
fn hooks_plugin(dir: &Path, conf: &Path) -> std::process::Child {
    std::process::Command::new(plugin("hooks"))
        .arg(dir.join("nri.sock"))
        .arg(conf)
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn oci_hooks_from_a_plugin_run_at_each_point_of_a_containers_life() {
    if !require_root(&["ip", "nsenter", "busybox"]) {
        return;
    }
    let (dir, out) = hooks_dirs("nri-hooks");
    // A host hook: its state (stdin) into <out>/<its first argument>.
    let script = dir.path().join("hook.sh");
    crust_e2e::write_executable(
        &script,
        "#!/bin/sh\ncat > \"$OUT/$1\"\necho >> \"$OUT/$1.count\"\n",
    );
    let host = |stage: &str| {
        serde_json::json!({"path": script, "args": ["hook.sh", stage],
            "env": [format!("OUT={}", out.display())], "timeout": 10})
    };
    let hooks = serde_json::json!({
        "createRuntime": [host("createRuntime")],
        "createContainer": [host("createContainer")],
        // The container's own sh, in its root: what it leaves, the command sees.
        "startContainer": [{"path": "/bin/sh", "args": ["sh", "-c", "echo started-by-hook > /tmp/hooked"]}],
        "poststart": [host("poststart")],
        "poststop": [host("poststop")],
    });
    let conf = dir.path().join("hooks.json");
    std::fs::write(&conf, hooks.to_string()).unwrap();

    let spawn_plugin = || hooks_plugin(dir.path(), &conf);
    let d = Crustd::start_with_config(Options::default(), &config(dir.path()));
    let mut e = Env::with(d).await;
    let mut running = spawn_plugin();
    registered(&e, 1).await;
    let pod = e.pod("hooks").await;
    let state = |stage: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(out.join(stage))
            .unwrap_or_else(|e| panic!("the {stage} hook did not run: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{stage}: {e}: {text}"))
    };

    let id = e
        .create(&pod, ctr("hooked", &["sh", "-c", "cat /tmp/hooked"]))
        .await;
    for stage in ["createRuntime", "createContainer"] {
        let st = state(stage);
        assert_eq!(
            (st["id"].as_str(), st["status"].as_str()),
            (Some(id.as_str()), Some("creating"))
        );
        assert!(st["pid"].as_i64().unwrap() > 0, "{stage}: {st}");
    }
    assert!(!out.join("poststart").exists());
    e.start(&id).await;
    let st = state("poststart");
    assert_eq!(st["status"], "running");
    let s = e.wait_exited(&id).await;
    let log = std::fs::read_to_string(&s.log_path).unwrap_or_default();
    assert_eq!(s.exit_code, 0, "{log}");
    assert!(log.contains("started-by-hook"), "{log}");
    // poststop once the container has exited (containerd deletes the task then), and
    // not again at removal.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !out.join("poststop.count").exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let st = state("poststop");
    e.remove(&id).await;
    assert_eq!(
        std::fs::read_to_string(out.join("poststop.count")).unwrap(),
        "\n",
        "poststop ran once"
    );
    assert_eq!(
        (st["id"].as_str(), st["status"].as_str()),
        (Some(id.as_str()), Some("stopped"))
    );
    assert!(st.get("pid").is_none(), "{st}");

    // A hook that fails fails CreateContainer with runc's words, and nothing is left.
    let failing = serde_json::json!({"createRuntime": [
        {"path": "/bin/sh", "args": ["sh", "-c", "echo no-way >&2; exit 2"]}]});
    std::fs::write(&conf, failing.to_string()).unwrap();
    running.kill().unwrap();
    running.wait().unwrap();
    let mut running = spawn_plugin();
    registered(&e, 2).await;
    let before =
        e.c.list_containers(ListContainersRequest::default())
            .await
            .unwrap();
    let err =
        e.c.create_container(CreateContainerRequest {
            pod_sandbox_id: pod.0.clone(),
            config: Some(ctr("refused", &["true"])),
            sandbox_config: Some(pod.1.clone()),
        })
        .await
        .unwrap_err();
    assert!(
        err.message().contains(
            "error running createRuntime hook #0: exit status 2, stdout: , stderr: no-way"
        ),
        "{err:?}"
    );
    let after =
        e.c.list_containers(ListContainersRequest::default())
            .await
            .unwrap();
    assert_eq!(
        before.into_inner().containers.len(),
        after.into_inner().containers.len()
    );

    // A poststart hook that fails fails StartContainer and stops the container.
    let failing = serde_json::json!({"poststart": [
        {"path": "/bin/sh", "args": ["sh", "-c", "echo not-now >&2; exit 5"]}]});
    std::fs::write(&conf, failing.to_string()).unwrap();
    running.kill().unwrap();
    running.wait().unwrap();
    let mut running = spawn_plugin();
    registered(&e, 3).await;
    let id = e.create(&pod, ctr("poststart", &["sleep", "3600"])).await;
    let err =
        e.c.start_container(StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap_err();
    assert!(
        err.message()
            .contains("error running poststart hook #0: exit status 5, stdout: , stderr: not-now"),
        "{err:?}"
    );
    let s = e.wait_exited(&id).await;
    assert_eq!(s.exit_code, 137, "killed: {s:?}");
    e.remove(&id).await;
    running.kill().unwrap();
    running.wait().unwrap();
    e.remove_pod(&pod.0).await;
}

/// `poststop` hooks are in the container's spec, not in crustd's memory: a crustd killed
/// right after writing a spec rolls the cut create back at its restart with the hooks
/// run (runc's rollback runs them too), and a container that exits while crustd is down
/// gets them at the restart, not when it is removed.
#[tokio::test]
async fn poststop_hooks_run_across_a_crustd_that_died() {
    if !require_root(&["ip", "nsenter", "busybox"]) {
        return;
    }
    let (dir, out) = hooks_dirs("nri-stop");
    // Each run: its state (stdin) appended to <out>/states, a line each.
    let script = dir.path().join("hook.sh");
    crust_e2e::write_executable(
        &script,
        "#!/bin/sh\n{ tr -d '\\n'; echo; } >> \"$OUT/states\"\n",
    );
    let conf = dir.path().join("hooks.json");
    let hooks = serde_json::json!({"poststop": [{"path": script,
        "env": [format!("OUT={}", out.display())], "timeout": 10}]});
    std::fs::write(&conf, hooks.to_string()).unwrap();
    let spawn_plugin = || hooks_plugin(dir.path(), &conf);
    let states = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(out.join("states"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    let wait_states = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while states().len() < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        states()
    };

    let opts = Options {
        env: vec![(
            "CRUST_FAILPOINT".into(),
            "create_container.after_spec".into(),
        )],
        ..Default::default()
    };
    let d = Crustd::start_with_config(opts, &config(dir.path()));
    let mut e = Env::with(d).await;
    let mut plugin1 = spawn_plugin();
    registered(&e, 1).await;
    let pod = e.pod("stop").await;

    // Killed right after the spec is written.
    let cut = e.try_create(&pod, ctr("cut", &["true"])).await;
    assert!(cut.is_err(), "the failpoint was not reached");
    e.d.wait_exit(Duration::from_secs(10))
        .expect("crustd still runs after its failpoint");
    plugin1.kill().unwrap();
    plugin1.wait().unwrap();
    e.d.opts.env.clear();
    e.d.spawn();
    e.c = e.d.client().await;
    let seen = wait_states(1);
    assert_eq!(
        seen.len(),
        1,
        "poststop of the rolled-back create: {seen:?}"
    );
    assert_eq!(seen[0]["status"], "stopped", "{seen:?}");
    let listed =
        e.c.list_containers(ListContainersRequest::default())
            .await
            .unwrap()
            .into_inner()
            .containers;
    assert!(
        listed.is_empty(),
        "the cut create was rolled back: {listed:?}"
    );

    // Exits while crustd is down.
    let mut plugin2 = spawn_plugin();
    registered(&e, 2).await;
    let id = e.create(&pod, ctr("brief", &["sleep", "2"])).await;
    e.start(&id).await;
    e.d.kill9();
    plugin2.kill().unwrap();
    plugin2.wait().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(states().len(), 1, "no crustd, no hook");
    e.d.spawn();
    e.c = e.d.client().await;
    let seen = wait_states(2);
    assert_eq!(seen.len(), 2, "poststop after the restart: {seen:?}");
    assert_eq!(
        (seen[1]["id"].as_str(), seen[1]["status"].as_str()),
        (Some(id.as_str()), Some("stopped"))
    );
    e.wait_exited(&id).await;
    e.remove(&id).await;
    assert_eq!(states().len(), 2, "not again at removal");
    e.remove_pod(&pod.0).await;
}
