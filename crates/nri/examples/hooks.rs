//! An NRI plugin that gives every container the same OCI hooks: a node-wide
//! `poststop` clean-up, a `createRuntime` that wires a device or a network interface
//! into each container, without touching the pod specs or the runtime's config.
//!
//! Its configuration is the `hooks` object of an OCI runtime spec, e.g.
//! `{"createRuntime": [{"path": "/usr/local/bin/setup", "args": ["setup", "--x"]}],
//!   "poststop": [{"path": "/usr/local/bin/cleanup", "timeout": 10}]}`:
//! as a pre-installed plugin (`/opt/nri/plugins/20-hooks`) in
//! `/etc/nri/conf.d/20-hooks.conf`, or run by hand as `hooks SOCKET FILE`.
//! Each hook reads the container's OCI state on stdin (its `id`, `pid`, `bundle`,
//! `annotations`), as the runtime spec says.

use nri::api::*;
use nri::wire;
use prost::Message;

/// The OCI `hooks` object as NRI's messages carry it.
fn parse(text: &str) -> Result<Hooks, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let obj = v
        .as_object()
        .ok_or("the configuration is not a JSON object")?;
    let strings = |h: &serde_json::Value, k: &str| -> Vec<String> {
        h[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut hooks = Hooks::default();
    for (name, list) in obj {
        let into = match name.as_str() {
            "prestart" => &mut hooks.prestart,
            "createRuntime" => &mut hooks.create_runtime,
            "createContainer" => &mut hooks.create_container,
            "startContainer" => &mut hooks.start_container,
            "poststart" => &mut hooks.poststart,
            "poststop" => &mut hooks.poststop,
            other => return Err(format!("{other:?} is not an OCI hook list")),
        };
        for h in list.as_array().ok_or(format!("{name} is not a list"))? {
            let path = h["path"]
                .as_str()
                .ok_or(format!("a {name} hook without a path"))?;
            into.push(Hook {
                path: path.into(),
                args: strings(h, "args"),
                env: strings(h, "env"),
                timeout: h["timeout"].as_i64().map(|value| OptionalInt { value }),
            });
        }
    }
    Ok(hooks)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mut hooks = match args.get(2) {
        Some(f) => parse(&std::fs::read_to_string(f)?).map_err(std::io::Error::other)?,
        None => Hooks::default(),
    };
    let (_conn, calls) =
        nri::plugin::connect(args.get(1).map(|s| s.as_str()), "hooks", "20").await?;
    nri::plugin::serve(calls, |method, payload| match method {
        "Configure" => {
            let req = ConfigureRequest::decode(payload).unwrap_or_default();
            if !req.config.trim().is_empty() {
                match parse(&req.config) {
                    Ok(h) => hooks = h,
                    Err(e) => {
                        eprintln!("hooks: configuration: {e}");
                        std::process::exit(1);
                    }
                }
            }
            Some(wire::ok(&ConfigureResponse {
                events: Event::CreateContainer.bit(),
            }))
        }
        "CreateContainer" => Some(wire::ok(&CreateContainerResponse {
            adjust: Some(ContainerAdjustment {
                hooks: Some(hooks.clone()),
                ..Default::default()
            }),
            ..Default::default()
        })),
        _ => None,
    })
    .await;
    Ok(())
}
