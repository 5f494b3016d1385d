//! A command under `script`, which gives it a terminal (kubectl asks for a tty only when
//! its stdin is one), with the terminal's output collected as it comes. `script` runs
//! the command with `/bin/sh` whatever `$SHELL` says, so every machine runs it alike;
//! commands `exec` their last step, so the client is in the terminal's foreground
//! process group (one in a background group is stopped by the terminal when it reads).

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Terminal {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<Mutex<Vec<u8>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Terminal {
    /// `script -q -e -c CMD`: its exit code is the command's.
    pub fn spawn(cmd: &str) -> Terminal {
        let mut child = Command::new("script")
            .args(["-q", "-e", "-c", cmd, "/dev/null"])
            .env("SHELL", "/bin/sh")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script (bsdutils) runs");
        let out = Arc::new(Mutex::new(Vec::new()));
        let mut stdout = child.stdout.take().unwrap();
        let sink = out.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stdout.read(&mut buf) {
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            stdin: child.stdin.take(),
            child,
            out,
            reader,
        }
    }

    pub fn output(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().unwrap()).into_owned()
    }

    /// Waits (a minute at most) until the terminal has shown `text`.
    pub fn wait_for(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.output().contains(text) {
            assert!(
                Instant::now() < deadline,
                "the terminal never showed {text:?} ({}): {}",
                self.state(),
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the command still runs, or how it ended, without reaping it: what a
    /// check that waited in vain says (lost output, or a command that never got its input).
    fn state(&self) -> String {
        // SAFETY: waitid(2) on our own child with WNOWAIT leaves it to be reaped later;
        // `info` is a valid siginfo_t to fill.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                self.child.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            if r == 0 && info.si_pid() != 0 {
                format!("the command has exited with status {}", info.si_status())
            } else {
                "the command still runs".into()
            }
        }
    }

    /// Types `input`.
    pub fn type_in(&mut self, input: &[u8]) {
        let stdin = self.stdin.as_mut().expect("input not closed");
        stdin.write_all(input).unwrap();
        stdin.flush().unwrap();
    }

    /// Ends the input: `script` then sends the terminal's end-of-file once what was
    /// typed has been read.
    pub fn close_input(&mut self) {
        self.stdin = None;
    }

    /// Closes the terminal window: `script` passes SIGTERM on to the command.
    pub fn hang_up(&self) {
        // SAFETY: kill(2) on a child we have not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }

    /// Waits (a minute at most) for the command to end: its exit code, the terminal's
    /// output, `script`'s own stderr.
    pub fn finish(mut self) -> (Option<i32>, String, String) {
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the command never ended: {}", self.output());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = Vec::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_end(&mut err);
        }
        let out = self.out.clone();
        self.reader.join().unwrap();
        let text = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
        (
            status.code(),
            text,
            String::from_utf8_lossy(&err).into_owned(),
        )
    }
}

/// `c` as one shell command line (its env, program and single-quoted arguments).
pub fn shell_words(c: &Command) -> String {
    let mut parts = vec![];
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            parts.push(format!("{}='{}'", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    parts.push(c.get_program().to_string_lossy().into_owned());
    parts.extend(c.get_args().map(|a| format!("'{}'", a.to_string_lossy())));
    if parts.len() > 1 {
        format!("env {}", parts.join(" "))
    } else {
        parts.join(" ")
    }
}
