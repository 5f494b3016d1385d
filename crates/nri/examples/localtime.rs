//! A tiny NRI plugin: every container gets the node's time zone. It bind-mounts the
//! node's `/etc/localtime` (or the zoneinfo file its configuration names) read-only at
//! the container's `/etc/localtime` and sets `TZ=:/etc/localtime`, so `date` and every
//! libc in the container speak the node's local time without an image of its own.
//!
//! Run it against a runtime's NRI socket (`localtime [SOCKET]`, default
//! `/var/run/nri/nri.sock`), or install it as a pre-installed plugin
//! (`/opt/nri/plugins/10-localtime`; its configuration, `/etc/nri/conf.d/10-localtime.conf`,
//! is one line, the zoneinfo file, e.g. `/usr/share/zoneinfo/Europe/Paris`): the runtime
//! starts it with its socket as fd 3 (`NRI_PLUGIN_SOCKET=3`).

use std::os::fd::FromRawFd;

use nri::api::*;
use nri::wire::{self, Conn};
use prost::Message;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let stream = match std::env::var("NRI_PLUGIN_SOCKET") {
        Ok(fd) => {
            let fd: i32 = fd
                .parse()
                .map_err(|_| std::io::Error::other("NRI_PLUGIN_SOCKET is not an fd"))?;
            // SAFETY: the runtime handed this fd to us, to be ours alone.
            let s = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
            s.set_nonblocking(true)?;
            tokio::net::UnixStream::from_std(s)?
        }
        Err(_) => {
            let path = std::env::args()
                .nth(1)
                .unwrap_or_else(|| "/var/run/nri/nri.sock".into());
            tokio::net::UnixStream::connect(&path).await?
        }
    };
    let name = std::env::var("NRI_PLUGIN_NAME").unwrap_or_else(|_| "localtime".into());
    let idx = std::env::var("NRI_PLUGIN_IDX").unwrap_or_else(|_| "10".into());
    let (conn, mut calls) = Conn::start_plugin(stream);
    let register = RegisterPluginRequest {
        plugin_name: name.clone(),
        plugin_idx: idx,
        nri_version: "v0.12.1".into(),
    };
    let c = conn.clone();
    // Registered while the runtime's calls are answered below (it configures us as
    // soon as we are registered).
    tokio::spawn(async move {
        if let Err(e) = c
            .call::<_, Empty>(
                RUNTIME_SERVICE,
                "RegisterPlugin",
                &register,
                std::time::Duration::from_secs(5),
            )
            .await
        {
            eprintln!("{name}: registering: {e}");
            std::process::exit(1);
        }
    });
    let mut zone = "/etc/localtime".to_string();
    while let Some(call) = calls.recv().await {
        let answer = match call.request.method.as_str() {
            "Configure" => {
                let req =
                    ConfigureRequest::decode(call.request.payload.as_slice()).unwrap_or_default();
                if !req.config.trim().is_empty() {
                    zone = req.config.trim().to_string();
                }
                eprintln!(
                    "localtime: configured by {} {}: containers get {zone}",
                    req.runtime_name, req.runtime_version
                );
                wire::ok(&ConfigureResponse {
                    events: Event::CreateContainer.bit(),
                })
            }
            "Synchronize" => wire::ok(&SynchronizeResponse::default()),
            "CreateContainer" => wire::ok(&CreateContainerResponse {
                adjust: Some(ContainerAdjustment {
                    mounts: vec![Mount {
                        destination: "/etc/localtime".into(),
                        r#type: "bind".into(),
                        source: zone.clone(),
                        options: vec!["rbind".into(), "ro".into()],
                    }],
                    env: vec![KeyValue {
                        key: "TZ".into(),
                        value: ":/etc/localtime".into(),
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            "Shutdown" => {
                let _ = call.reply.send(wire::ok(&Empty {}));
                break;
            }
            _ => wire::ok(&Empty {}),
        };
        let _ = call.reply.send(answer);
    }
    Ok(())
}
