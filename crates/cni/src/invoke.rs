//! Running a plugin binary: find it on `CNI_PATH`, feed it configuration on stdin with
//! `CNI_*` variables, and read its result or error. Used by plugins that delegate to
//! IPAM and by the runtime side.

use crate::error::{code, CniError, CniResult};
use crate::result::AddResult;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command as Proc, Stdio};

/// The variables of one invocation besides `CNI_COMMAND`.
#[derive(Debug, Clone, Default)]
pub struct InvokeEnv {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub args: String,
    pub path: Vec<PathBuf>,
}

/// Finds `name` in `dirs`; a missing plugin is a configuration error naming where it looked.
pub fn find_plugin(name: &str, dirs: &[PathBuf]) -> CniResult<PathBuf> {
    if name.is_empty() || name.contains('/') {
        return Err(CniError::config(format!("invalid plugin name {name:?}")));
    }
    for d in dirs {
        let p = d.join(name);
        if is_executable(&p) {
            return Ok(p);
        }
    }
    Err(CniError::config(format!(
        "failed to find plugin {name:?} in path {:?}",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
    )))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runs a plugin and returns its stdout; a non-zero exit becomes the error it printed
/// (or an error quoting its stderr when it printed no JSON).
pub fn exec(plugin: &Path, command: &str, env: &InvokeEnv, stdin: &[u8]) -> CniResult<Vec<u8>> {
    let path =
        std::env::join_paths(&env.path).map_err(|e| CniError::env(format!("CNI_PATH: {e}")))?;
    let mut cmd = Proc::new(plugin);
    cmd.env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", &env.container_id)
        .env("CNI_NETNS", &env.netns)
        .env("CNI_IFNAME", &env.ifname)
        .env("CNI_ARGS", &env.args)
        .env("CNI_PATH", path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // ETXTBSY: another thread of this process forked while a plugin file was open for
    // writing (being installed next to us); the copy holds it until its own exec, a
    // moment later. Worth a few short retries, never a failed pod.
    let mut tries = 0;
    let mut child = loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 20 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            r => {
                break r.map_err(|e| {
                    CniError::io(format!("failed to run plugin {}: {e}", plugin.display()))
                })?
            }
        }
    };
    // Write on a thread so a plugin that prints before reading all of stdin cannot deadlock us.
    let mut pipe = child.stdin.take().expect("stdin is piped");
    let input = stdin.to_vec();
    let write = move || {
        let _ = pipe.write_all(&input);
    };
    // Where no thread can be had (a pid limit), written in turn: a config is far
    // smaller than a pipe holds, so only a plugin that answers megabytes unasked
    // could block on it.
    let writer = match std::thread::Builder::new().spawn(write) {
        Ok(h) => Some(h),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(CniError::io(format!(
                "failed to start a thread to feed plugin {}: {e}",
                plugin.display()
            )));
        }
    };
    let out = child.wait_with_output().map_err(|e| {
        CniError::io(format!(
            "failed to wait for plugin {}: {e}",
            plugin.display()
        ))
    })?;
    if let Some(w) = writer {
        let _ = w.join();
    }
    if out.status.success() {
        return Ok(out.stdout);
    }
    let name = plugin
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Ok(mut e) = serde_json::from_slice::<CniError>(&out.stdout) {
        e.msg = format!("plugin {name} {command}: {}", e.msg);
        return Err(e);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    Err(CniError::new(
        code::INTERNAL,
        format!(
            "plugin {name} {command} failed ({}): {}{}",
            out.status,
            stdout.trim(),
            stderr.trim()
        ),
    ))
}

/// ADD through another plugin (IPAM delegation): the same stdin, the result decoded.
pub fn delegate_add(name: &str, env: &InvokeEnv, stdin: &[u8]) -> CniResult<AddResult> {
    let p = find_plugin(name, &env.path)?;
    let out = exec(&p, "ADD", env, stdin)?;
    AddResult::from_slice(&out)
}

/// Any verb without a result (DEL, CHECK, STATUS, GC) through another plugin.
pub fn delegate(name: &str, command: &str, env: &InvokeEnv, stdin: &[u8]) -> CniResult<()> {
    let p = find_plugin(name, &env.path)?;
    exec(&p, command, env, stdin).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "cni-invoke-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn finds_runs_and_decodes() {
        let d = tmp();
        script(
            &d,
            "echoer",
            r#"cat >/dev/null; echo '{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.7/24"}]}'"#,
        );
        let env = InvokeEnv {
            path: vec![PathBuf::from("/nonexistent"), d.clone()],
            ..Default::default()
        };
        let r = delegate_add("echoer", &env, b"{}").unwrap();
        assert_eq!(r.ips[0].address.to_string(), "10.0.0.7/24");
        assert_eq!(
            find_plugin("missing", &env.path).unwrap_err().code,
            code::INVALID_NETWORK_CONFIG
        );
        assert_eq!(
            find_plugin("../x", &env.path).unwrap_err().code,
            code::INVALID_NETWORK_CONFIG
        );
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn passes_the_plugins_error_on() {
        let d = tmp();
        script(
            &d,
            "failer",
            r#"echo "{\"code\":11,\"msg\":\"range full $CNI_COMMAND $CNI_IFNAME\"}"; exit 1"#,
        );
        script(&d, "crasher", "echo boom >&2; exit 3");
        let env = InvokeEnv {
            path: vec![d.clone()],
            ifname: "eth9".into(),
            ..Default::default()
        };
        let e = delegate("failer", "DEL", &env, b"{}").unwrap_err();
        assert_eq!(e.code, 11);
        assert!(e.msg.contains("range full DEL eth9"), "{}", e.msg);
        let e = delegate("crasher", "ADD", &env, b"{}").unwrap_err();
        assert_eq!(e.code, code::INTERNAL);
        assert!(e.msg.contains("boom"));
        std::fs::remove_dir_all(d).unwrap();
    }
}
