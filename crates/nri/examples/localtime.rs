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

use nri::api::*;
use nri::wire;
use prost::Message;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let socket = std::env::args().nth(1);
    let (_conn, calls) = nri::plugin::connect(socket.as_deref(), "localtime", "10").await?;
    let mut zone = "/etc/localtime".to_string();
    nri::plugin::serve(calls, |method, payload| match method {
        "Configure" => {
            let req = ConfigureRequest::decode(payload).unwrap_or_default();
            if !req.config.trim().is_empty() {
                zone = req.config.trim().to_string();
            }
            eprintln!(
                "localtime: configured by {} {}: containers get {zone}",
                req.runtime_name, req.runtime_version
            );
            Some(wire::ok(&ConfigureResponse {
                events: Event::CreateContainer.bit(),
            }))
        }
        "CreateContainer" => Some(wire::ok(&CreateContainerResponse {
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
        })),
        _ => None,
    })
    .await;
    Ok(())
}
