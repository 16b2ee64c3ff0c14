//! A script run as a user runs it in a terminal: in a pseudo-terminal made by util-linux
//! `script`, so Ctrl-C typed into it is the line discipline's SIGINT to its whole foreground
//! process group. What it shows is kept as it arrives.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// `bash SCRIPT` (relative to the repository) in a pseudo-terminal, with `env` set and
/// `env_remove` unset: the child, its screen so far (kept up to date by the returned thread).
pub fn run(
    script: &str,
    env: &[(&str, &std::path::Path)],
    env_remove: &[&str],
) -> (Child, Arc<Mutex<String>>, std::thread::JoinHandle<()>) {
    let mut command = Command::new("script");
    // `script` runs the command with $SHELL -c; a dash there (SHELL unset or /bin/sh, as in
    // CI) would itself take the terminal's SIGINT and die of it after the script's clean exit.
    // `exec` leaves the script alone in the terminal, as it is under a user's interactive shell.
    command
        .args(["-qfec", &format!("exec bash {script}"), "/dev/null"])
        .env("SHELL", "/bin/bash")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    for key in env_remove {
        command.env_remove(key);
    }
    let mut child = command.spawn().expect("util-linux script");
    let screen = Arc::new(Mutex::new(String::new()));
    let reader = {
        let (mut out, screen) = (child.stdout.take().unwrap(), screen.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                screen.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    (child, screen, reader)
}
