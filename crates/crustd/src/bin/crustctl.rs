//! `crustctl`: a small CRI client for operators and the demo, shaped after `crictl`
//! (`version`, `info`, `runp`, `pods`, `inspectp`, `stopp`, `rmp`, `create`, `start`,
//! `ps`, `inspect`, `logs`, `exec`, `stop`, `rm`, `pull`, `images`). It talks to any CRI
//! runtime's unix socket, not only crustd's.

use clap::{Parser, Subcommand};
use cri_api::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "crustctl",
    version,
    about = "A small CRI client (crictl-style)"
)]
struct Cli {
    /// The runtime's socket: a path or `unix:///path`.
    #[arg(
        short = 'r',
        long,
        default_value = "unix:///run/crust/crust.sock",
        global = true
    )]
    runtime_endpoint: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runtime name and versions.
    Version,
    /// Runtime and network readiness, with the runtime's verbose info.
    Info,
    /// Run a pod sandbox from a crictl-style JSON pod config; prints its id.
    Runp {
        file: PathBuf,
        #[arg(long, default_value = "")]
        runtime: String,
    },
    /// List pod sandboxes.
    Pods {
        #[arg(long)]
        id: Option<String>,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        namespace: Option<String>,
        /// `ready` or `notready`.
        #[arg(long)]
        state: Option<String>,
        /// `key=value`, repeatable.
        #[arg(long)]
        label: Vec<String>,
        /// Ids only.
        #[arg(short, long)]
        quiet: bool,
    },
    /// A pod sandbox's status and verbose info, as JSON.
    Inspectp { id: String },
    /// Stop pod sandboxes.
    Stopp { ids: Vec<String> },
    /// Remove pod sandboxes.
    Rmp { ids: Vec<String> },
    /// Create a container in a pod from crictl-style JSON container and pod configs;
    /// prints its id.
    Create {
        pod: String,
        container_config: PathBuf,
        pod_config: PathBuf,
    },
    /// Start containers.
    Start { ids: Vec<String> },
    /// List containers (all states with `-a`, else running ones).
    Ps {
        #[arg(short, long)]
        all: bool,
        #[arg(short, long)]
        pod: Option<String>,
        #[arg(short, long)]
        quiet: bool,
    },
    /// A container's status and verbose info, as JSON.
    Inspect { id: String },
    /// A container's log (the CRI log file, with the stream and time prefix removed).
    Logs { id: String },
    /// Run a command in a running container and print its output (ExecSync).
    Exec {
        id: String,
        #[arg(long, default_value_t = 0)]
        timeout: i64,
        #[arg(trailing_var_arg = true, required = true)]
        cmd: Vec<String>,
    },
    /// Stop containers.
    Stop {
        ids: Vec<String>,
        #[arg(short, long, default_value_t = 10)]
        timeout: i64,
    },
    /// Remove containers.
    Rm { ids: Vec<String> },
    /// Pull an image.
    Pull { image: String },
    /// List images.
    Images {
        #[arg(short, long)]
        quiet: bool,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crustctl: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

type R<T> = Result<T, String>;

fn status_err(what: &str) -> impl Fn(tonic::Status) -> String + '_ {
    move |s| format!("{what}: {} ({:?})", s.message(), s.code())
}

async fn run(cli: Cli) -> R<()> {
    let path = cli
        .runtime_endpoint
        .trim_start_matches("unix://")
        .to_string();
    let ch = connect_unix(&path)
        .await
        .map_err(|e| format!("connecting to {path}: {e}"))?;
    let mut c = RuntimeServiceClient::new(ch);
    match cli.cmd {
        Cmd::Version => cmd_version(&mut c).await,
        Cmd::Info => cmd_info(&mut c).await,
        Cmd::Runp { file, runtime } => cmd_runp(&mut c, file, runtime).await,
        Cmd::Pods {
            id,
            name,
            namespace,
            state,
            label,
            quiet,
        } => cmd_pods(&mut c, id, name, namespace, state, label, quiet).await,
        Cmd::Inspectp { id } => cmd_inspectp(&mut c, id).await,
        Cmd::Stopp { ids } => cmd_stopp(&mut c, ids).await,
        Cmd::Rmp { ids } => cmd_rmp(&mut c, ids).await,
        Cmd::Create {
            pod,
            container_config,
            pod_config: pod_file,
        } => cmd_create(&mut c, pod, container_config, pod_file).await,
        Cmd::Start { ids } => cmd_start(&mut c, ids).await,
        Cmd::Ps { all, pod, quiet } => cmd_ps(&mut c, all, pod, quiet).await,
        Cmd::Inspect { id } => cmd_inspect(&mut c, id).await,
        Cmd::Logs { id } => cmd_logs(&mut c, id).await,
        Cmd::Exec { id, timeout, cmd } => cmd_exec(&mut c, id, timeout, cmd).await,
        Cmd::Stop { ids, timeout } => cmd_stop(&mut c, ids, timeout).await,
        Cmd::Rm { ids } => cmd_rm(&mut c, ids).await,
        Cmd::Pull { image } => cmd_pull(&path, image).await,
        Cmd::Images { quiet } => cmd_images(&path, quiet).await,
    }
}

type Rt = RuntimeServiceClient<tonic::transport::Channel>;

/// `crustctl version`.
async fn cmd_version(c: &mut Rt) -> R<()> {
    let v = c
        .version(VersionRequest::default())
        .await
        .map_err(status_err("Version"))?
        .into_inner();
    println!("Version:  {}", v.version);
    println!("RuntimeName:  {}", v.runtime_name);
    println!("RuntimeVersion:  {}", v.runtime_version);
    println!("RuntimeApiVersion:  {}", v.runtime_api_version);
    Ok(())
}

/// `crustctl info`.
async fn cmd_info(c: &mut Rt) -> R<()> {
    let s = c
        .status(StatusRequest { verbose: true })
        .await
        .map_err(status_err("Status"))?
        .into_inner();
    let conds: Vec<Value> = s
        .status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .map(|c| json!({"type": c.r#type, "status": c.status, "reason": c.reason, "message": c.message}))
        .collect();
    let info: HashMap<String, Value> = s
        .info
        .into_iter()
        .map(|(k, v)| (k, serde_json::from_str(&v).unwrap_or(Value::String(v))))
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({"status": {"conditions": conds}, "info": info}))
            .unwrap()
    );
    Ok(())
}

/// `crustctl runp`.
async fn cmd_runp(c: &mut Rt, file: PathBuf, runtime: String) -> R<()> {
    let text =
        std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let cfg = pod_config(&v)?;
    let id = c
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(cfg),
            runtime_handler: runtime,
        })
        .await
        .map_err(status_err("RunPodSandbox"))?
        .into_inner()
        .pod_sandbox_id;
    println!("{id}");
    Ok(())
}

/// `crustctl pods`.
async fn cmd_pods(
    c: &mut Rt,
    id: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    state: Option<String>,
    label: Vec<String>,
    quiet: bool,
) -> R<()> {
    let state = match state.as_deref() {
        None => None,
        Some("ready") => Some(PodSandboxState::SandboxReady),
        Some("notready") => Some(PodSandboxState::SandboxNotready),
        Some(s) => return Err(format!("--state: {s:?} is not ready or notready")),
    };
    let mut selector = HashMap::new();
    for l in label {
        let (k, v) = l
            .split_once('=')
            .ok_or_else(|| format!("--label {l:?}: expected key=value"))?;
        selector.insert(k.to_string(), v.to_string());
    }
    let filter = PodSandboxFilter {
        id: id.unwrap_or_default(),
        state: state.map(|s| PodSandboxStateValue { state: s as i32 }),
        label_selector: selector,
    };
    let items = c
        .list_pod_sandbox(ListPodSandboxRequest {
            filter: Some(filter),
        })
        .await
        .map_err(status_err("ListPodSandbox"))?
        .into_inner()
        .items;
    if !quiet {
        println!(
            "{:<13} {:<20} {:<10} {:<25} {:<16} ATTEMPT",
            "POD ID", "CREATED", "STATE", "NAME", "NAMESPACE"
        );
    }
    for p in items {
        let md = p.metadata.unwrap_or_default();
        if name.as_ref().is_some_and(|n| !md.name.contains(n.as_str()))
            || namespace.as_ref().is_some_and(|n| &md.namespace != n)
        {
            continue;
        }
        if quiet {
            println!("{}", p.id);
            continue;
        }
        let st = if p.state == PodSandboxState::SandboxReady as i32 {
            "Ready"
        } else {
            "NotReady"
        };
        println!(
            "{:<13} {:<20} {:<10} {:<25} {:<16} {}",
            &p.id[..p.id.len().min(13)],
            p.created_at / 1_000_000_000,
            st,
            md.name,
            md.namespace,
            md.attempt
        );
    }
    Ok(())
}

/// `crustctl inspectp`.
async fn cmd_inspectp(c: &mut Rt, id: String) -> R<()> {
    let r = c
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: id,
            verbose: true,
        })
        .await
        .map_err(status_err("PodSandboxStatus"))?
        .into_inner();
    let s = r.status.unwrap_or_default();
    let md = s.metadata.unwrap_or_default();
    let net = s.network.unwrap_or_default();
    let status = json!({
        "id": s.id,
        "metadata": {"name": md.name, "uid": md.uid, "namespace": md.namespace, "attempt": md.attempt},
        "state": PodSandboxState::try_from(s.state).map(|x| x.as_str_name()).unwrap_or("?"),
        "createdAt": s.created_at,
        "network": {"ip": net.ip, "additionalIps": net.additional_ips.iter().map(|i| json!({"ip": i.ip})).collect::<Vec<_>>()},
        "labels": s.labels,
        "annotations": s.annotations,
        "runtimeHandler": s.runtime_handler,
    });
    let mut out = json!({"status": status});
    for (k, v) in r.info {
        out[k] = serde_json::from_str(&v).unwrap_or(Value::String(v));
    }
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
    Ok(())
}

/// `crustctl stopp`.
async fn cmd_stopp(c: &mut Rt, ids: Vec<String>) -> R<()> {
    for id in ids {
        c.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await
        .map_err(status_err("StopPodSandbox"))?;
        println!("Stopped sandbox {id}");
    }
    Ok(())
}

/// `crustctl rmp`.
async fn cmd_rmp(c: &mut Rt, ids: Vec<String>) -> R<()> {
    for id in ids {
        c.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.clone(),
        })
        .await
        .map_err(status_err("RemovePodSandbox"))?;
        println!("Removed sandbox {id}");
    }
    Ok(())
}

/// `crustctl create`.
async fn cmd_create(
    c: &mut Rt,
    pod: String,
    container_config: PathBuf,
    pod_file: PathBuf,
) -> R<()> {
    let read = |p: &PathBuf| -> R<Value> {
        let text =
            std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
    };
    let cfg = container_config_of(&read(&container_config)?)?;
    let sandbox_config = pod_config(&read(&pod_file)?)?;
    let id = c
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod,
            config: Some(cfg),
            sandbox_config: Some(sandbox_config),
        })
        .await
        .map_err(status_err("CreateContainer"))?
        .into_inner()
        .container_id;
    println!("{id}");
    Ok(())
}

/// `crustctl start`.
async fn cmd_start(c: &mut Rt, ids: Vec<String>) -> R<()> {
    for id in ids {
        c.start_container(StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .map_err(status_err("StartContainer"))?;
        println!("{id}");
    }
    Ok(())
}

/// `crustctl ps`.
async fn cmd_ps(c: &mut Rt, all: bool, pod: Option<String>, quiet: bool) -> R<()> {
    let filter = ContainerFilter {
        pod_sandbox_id: pod.unwrap_or_default(),
        state: (!all).then_some(ContainerStateValue {
            state: ContainerState::ContainerRunning as i32,
        }),
        ..Default::default()
    };
    let list = c
        .list_containers(ListContainersRequest {
            filter: Some(filter),
        })
        .await
        .map_err(status_err("ListContainers"))?
        .into_inner()
        .containers;
    if !quiet {
        println!(
            "{:<15} {:<28} {:<18} {:<20} POD",
            "CONTAINER", "IMAGE", "STATE", "NAME"
        );
    }
    for ct in list {
        if quiet {
            println!("{}", ct.id);
            continue;
        }
        let state = ContainerState::try_from(ct.state)
            .map(|s| s.as_str_name().trim_start_matches("CONTAINER_").to_string())
            .unwrap_or_default();
        println!(
            "{:<15} {:<28} {:<18} {:<20} {}",
            &ct.id[..ct.id.len().min(13)],
            ct.image.map(|i| i.image).unwrap_or_default(),
            state,
            ct.metadata.map(|m| m.name).unwrap_or_default(),
            &ct.pod_sandbox_id[..ct.pod_sandbox_id.len().min(13)],
        );
    }
    Ok(())
}

/// `crustctl inspect`.
async fn cmd_inspect(c: &mut Rt, id: String) -> R<()> {
    let r = c
        .container_status(ContainerStatusRequest {
            container_id: id,
            verbose: true,
        })
        .await
        .map_err(status_err("ContainerStatus"))?
        .into_inner();
    let st = r.status.unwrap_or_default();
    let mut out = json!({"status": {
        "id": st.id,
        "metadata": st.metadata.map(|m| json!({"name": m.name, "attempt": m.attempt})),
        "state": ContainerState::try_from(st.state).map(|s| s.as_str_name()).unwrap_or("?"),
        "createdAt": st.created_at,
        "startedAt": st.started_at,
        "finishedAt": st.finished_at,
        "exitCode": st.exit_code,
        "image": st.image.map(|i| i.image),
        "imageRef": st.image_ref,
        "reason": st.reason,
        "message": st.message,
        "labels": st.labels,
        "annotations": st.annotations,
        "logPath": st.log_path,
    }});
    for (k, v) in r.info {
        out[k] = serde_json::from_str(&v).unwrap_or(Value::String(v));
    }
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
    Ok(())
}

/// `crustctl logs`.
async fn cmd_logs(c: &mut Rt, id: String) -> R<()> {
    let st = c
        .container_status(ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .map_err(status_err("ContainerStatus"))?
        .into_inner()
        .status
        .unwrap_or_default();
    if st.log_path.is_empty() {
        return Err(format!("container {id} has no log path"));
    }
    let text = std::fs::read_to_string(&st.log_path)
        .map_err(|e| format!("reading {}: {e}", st.log_path))?;
    // `<time> <stream> <P|F> <text>`: partials join the next record's text.
    let mut out = String::new();
    for line in text.lines() {
        let mut it = line.splitn(4, ' ');
        let (_, _, tag, body) = (it.next(), it.next(), it.next(), it.next());
        out.push_str(body.unwrap_or(""));
        if tag != Some("P") {
            out.push('\n');
        }
    }
    print!("{out}");
    Ok(())
}

/// `crustctl exec`.
async fn cmd_exec(c: &mut Rt, id: String, timeout: i64, cmd: Vec<String>) -> R<()> {
    let r = c
        .exec_sync(ExecSyncRequest {
            container_id: id,
            cmd,
            timeout,
        })
        .await
        .map_err(status_err("ExecSync"))?
        .into_inner();
    use std::io::Write;
    let _ = std::io::stdout().write_all(&r.stdout);
    let _ = std::io::stderr().write_all(&r.stderr);
    if r.exit_code != 0 {
        return Err(format!("command exited with {}", r.exit_code));
    }
    Ok(())
}

/// `crustctl stop`.
async fn cmd_stop(c: &mut Rt, ids: Vec<String>, timeout: i64) -> R<()> {
    for id in ids {
        c.stop_container(StopContainerRequest {
            container_id: id.clone(),
            timeout,
        })
        .await
        .map_err(status_err("StopContainer"))?;
        println!("{id}");
    }
    Ok(())
}

/// `crustctl rm`.
async fn cmd_rm(c: &mut Rt, ids: Vec<String>) -> R<()> {
    for id in ids {
        c.remove_container(RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .map_err(status_err("RemoveContainer"))?;
        println!("{id}");
    }
    Ok(())
}

/// `crustctl pull`.
async fn cmd_pull(path: &str, image: String) -> R<()> {
    let ch = connect_unix(&path)
        .await
        .map_err(|e| format!("connecting to {path}: {e}"))?;
    let r = ImageServiceClient::new(ch)
        .pull_image(PullImageRequest {
            image: Some(ImageSpec {
                image: image.clone(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .map_err(status_err("PullImage"))?
        .into_inner();
    println!("Image is up to date for {}", r.image_ref);
    Ok(())
}

/// `crustctl images`.
async fn cmd_images(path: &str, quiet: bool) -> R<()> {
    let ch = connect_unix(&path)
        .await
        .map_err(|e| format!("connecting to {path}: {e}"))?;
    let list = ImageServiceClient::new(ch)
        .list_images(ListImagesRequest { filter: None })
        .await
        .map_err(status_err("ListImages"))?
        .into_inner()
        .images;
    if !quiet {
        println!("{:<50} {:<15} SIZE", "IMAGE", "IMAGE ID");
    }
    for i in list {
        let short =
            i.id.trim_start_matches("sha256:")
                .chars()
                .take(13)
                .collect::<String>();
        if quiet {
            println!("{}", i.id);
            continue;
        }
        let name = i
            .repo_tags
            .first()
            .or(i.repo_digests.first())
            .cloned()
            .unwrap_or_default();
        println!("{:<50} {:<15} {}", name, short, i.size);
    }
    Ok(())
}

/// A crictl-style container config.
fn container_config_of(v: &Value) -> R<ContainerConfig> {
    let md = get(v, "metadata").cloned().unwrap_or(Value::Null);
    let mut cfg = ContainerConfig {
        metadata: (!md.is_null()).then(|| ContainerMetadata {
            name: s(&md, "name"),
            attempt: get(&md, "attempt").and_then(Value::as_u64).unwrap_or(0) as u32,
        }),
        image: get(v, "image").map(|i| ImageSpec {
            image: s(i, "image"),
            ..Default::default()
        }),
        command: strings(v, "command"),
        args: strings(v, "args"),
        working_dir: s(v, "working_dir"),
        envs: get(v, "envs")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|e| KeyValue {
                        key: s(e, "key"),
                        value: s(e, "value"),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        labels: map(v, "labels"),
        annotations: map(v, "annotations"),
        log_path: s(v, "log_path"),
        stdin: get(v, "stdin").and_then(Value::as_bool).unwrap_or(false),
        stdin_once: get(v, "stdin_once")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        tty: get(v, "tty").and_then(Value::as_bool).unwrap_or(false),
        ..Default::default()
    };
    if let Some(ms) = get(v, "mounts").and_then(Value::as_array) {
        for m in ms {
            cfg.mounts.push(Mount {
                container_path: s(m, "container_path"),
                host_path: s(m, "host_path"),
                readonly: get(m, "readonly").and_then(Value::as_bool).unwrap_or(false),
                propagation: enum_val(get(m, "propagation"), |n| {
                    MountPropagation::from_str_name(n).map(|p| p as i32)
                })?,
                ..Default::default()
            });
        }
    }
    if let Some(l) = get(v, "linux") {
        let mut linux = LinuxContainerConfig::default();
        if let Some(r) = get(l, "resources") {
            let i = |k: &str| get(r, k).and_then(Value::as_i64).unwrap_or(0);
            linux.resources = Some(LinuxContainerResources {
                cpu_period: i("cpu_period"),
                cpu_quota: i("cpu_quota"),
                cpu_shares: i("cpu_shares"),
                memory_limit_in_bytes: i("memory_limit_in_bytes"),
                oom_score_adj: i("oom_score_adj"),
                cpuset_cpus: s(r, "cpuset_cpus"),
                cpuset_mems: s(r, "cpuset_mems"),
                ..Default::default()
            });
        }
        if let Some(sc) = get(l, "security_context") {
            let mut ctx = LinuxContainerSecurityContext {
                privileged: get(sc, "privileged")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                readonly_rootfs: get(sc, "readonly_rootfs")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                run_as_username: s(sc, "run_as_username"),
                no_new_privs: get(sc, "no_new_privs")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                ..Default::default()
            };
            if let Some(u) = get(sc, "run_as_user")
                .and_then(|u| get(u, "value").or(Some(u)))
                .and_then(Value::as_i64)
            {
                ctx.run_as_user = Some(Int64Value { value: u });
            }
            if let Some(caps) = get(sc, "capabilities") {
                ctx.capabilities = Some(Capability {
                    add_capabilities: strings(caps, "add_capabilities"),
                    drop_capabilities: strings(caps, "drop_capabilities"),
                    ..Default::default()
                });
            }
            linux.security_context = Some(ctx);
        }
        cfg.linux = Some(linux);
    }
    Ok(cfg)
}

/// A key in snake_case or the camelCase protobuf JSON uses.
fn get<'a>(v: &'a Value, snake: &str) -> Option<&'a Value> {
    v.get(snake).or_else(|| {
        let mut camel = String::new();
        let mut up = false;
        for ch in snake.chars() {
            if ch == '_' {
                up = true;
            } else if up {
                camel.extend(ch.to_uppercase());
                up = false;
            } else {
                camel.push(ch);
            }
        }
        v.get(&camel)
    })
}

fn s(v: &Value, k: &str) -> String {
    get(v, k).and_then(Value::as_str).unwrap_or("").to_string()
}

fn strings(v: &Value, k: &str) -> Vec<String> {
    get(v, k)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn map(v: &Value, k: &str) -> HashMap<String, String> {
    get(v, k)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str()
                            .map(String::from)
                            .unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// An enum given as its number or its name.
fn enum_val(v: Option<&Value>, from_name: impl Fn(&str) -> Option<i32>) -> R<i32> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(|n| n as i32)
            .ok_or_else(|| format!("bad enum value {n}")),
        Some(Value::String(s)) => from_name(s).ok_or_else(|| format!("unknown enum value {s:?}")),
        Some(other) => Err(format!("bad enum value {other}")),
    }
}

/// A crictl-style pod config (protobuf JSON names, snake or camel case).
fn pod_config(v: &Value) -> R<PodSandboxConfig> {
    let md = get(v, "metadata").cloned().unwrap_or(Value::Null);
    let mut cfg = PodSandboxConfig {
        metadata: (!md.is_null()).then(|| PodSandboxMetadata {
            name: s(&md, "name"),
            uid: s(&md, "uid"),
            namespace: s(&md, "namespace"),
            attempt: get(&md, "attempt").and_then(Value::as_u64).unwrap_or(0) as u32,
        }),
        hostname: s(v, "hostname"),
        log_directory: s(v, "log_directory"),
        labels: map(v, "labels"),
        annotations: map(v, "annotations"),
        ..Default::default()
    };
    if let Some(d) = get(v, "dns_config") {
        cfg.dns_config = Some(DnsConfig {
            servers: strings(d, "servers"),
            searches: strings(d, "searches"),
            options: strings(d, "options"),
        });
    }
    if let Some(ports) = get(v, "port_mappings").and_then(Value::as_array) {
        for p in ports {
            cfg.port_mappings.push(PortMapping {
                protocol: enum_val(get(p, "protocol"), |n| {
                    Protocol::from_str_name(n).map(|p| p as i32)
                })?,
                container_port: get(p, "container_port")
                    .and_then(Value::as_i64)
                    .unwrap_or(0) as i32,
                host_port: get(p, "host_port").and_then(Value::as_i64).unwrap_or(0) as i32,
                host_ip: s(p, "host_ip"),
            });
        }
    }
    if let Some(l) = get(v, "linux") {
        let mut linux = LinuxPodSandboxConfig {
            cgroup_parent: s(l, "cgroup_parent"),
            sysctls: map(l, "sysctls"),
            ..Default::default()
        };
        if let Some(sc) = get(l, "security_context") {
            let mut ctx = LinuxSandboxSecurityContext::default();
            if let Some(ns) = get(sc, "namespace_options") {
                let mode = |k: &str| {
                    enum_val(get(ns, k), |n| {
                        NamespaceMode::from_str_name(n).map(|m| m as i32)
                    })
                };
                ctx.namespace_options = Some(NamespaceOption {
                    network: mode("network")?,
                    pid: mode("pid")?,
                    ipc: mode("ipc")?,
                    target_id: s(ns, "target_id"),
                    userns_options: None,
                });
            }
            ctx.privileged = get(sc, "privileged")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            linux.security_context = Some(ctx);
        }
        cfg.linux = Some(linux);
    }
    Ok(cfg)
}
