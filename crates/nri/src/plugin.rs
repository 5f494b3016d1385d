//! A plugin's first steps, the same for every plugin: reach the runtime (the socket
//! it was started with as a pre-installed plugin, else the path given, else NRI's
//! default socket) and register under a name and index.

use std::os::fd::FromRawFd;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::api::{Empty, RegisterPluginRequest, TtrpcResponse, RUNTIME_SERVICE};
use crate::wire::{self, Conn, Incoming};

/// Where a runtime listens for external plugins unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";

/// Connects (fd `NRI_PLUGIN_SOCKET` when the runtime started this plugin, else
/// `socket`, else [`DEFAULT_SOCKET`]) and registers as `NRI_PLUGIN_NAME`/`NRI_PLUGIN_IDX`
/// (the runtime's names for a pre-installed plugin) or `name`/`idx`. The runtime's
/// calls (Configure first) come on the receiver; registration runs beside them,
/// since the runtime configures a plugin before it answers the registration. A
/// refused registration ends the process with 1.
pub async fn connect(
    socket: Option<&str>,
    name: &str,
    idx: &str,
) -> std::io::Result<(Arc<Conn>, mpsc::UnboundedReceiver<Incoming>)> {
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
        Err(_) => tokio::net::UnixStream::connect(socket.unwrap_or(DEFAULT_SOCKET)).await?,
    };
    let name = std::env::var("NRI_PLUGIN_NAME").unwrap_or_else(|_| name.into());
    let idx = std::env::var("NRI_PLUGIN_IDX").unwrap_or_else(|_| idx.into());
    let (conn, calls) = Conn::start_plugin(stream);
    let register = RegisterPluginRequest {
        plugin_name: name.clone(),
        plugin_idx: idx,
        nri_version: "v0.12.1".into(),
    };
    let c = conn.clone();
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
    Ok((conn, calls))
}

/// Answers the runtime's calls until it shuts the plugin down or goes away: `answer`
/// gets each call's method and payload; a method it has no answer for (`None`: the
/// events the plugin did not ask for, Synchronize with nothing to change) is answered
/// with an empty message, which every NRI response decodes from.
pub async fn serve(
    mut calls: mpsc::UnboundedReceiver<Incoming>,
    mut answer: impl FnMut(&str, &[u8]) -> Option<TtrpcResponse>,
) {
    while let Some(call) = calls.recv().await {
        let method = call.request.method.as_str();
        let reply = answer(method, &call.request.payload).unwrap_or_else(|| wire::ok(&Empty {}));
        let _ = call.reply.send(reply);
        if method == "Shutdown" {
            break;
        }
    }
}
