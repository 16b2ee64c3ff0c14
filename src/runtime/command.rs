//! How a command line is run. Seed 000's commands are shell command lines (`sh -c`), but most
//! start commands are one plain program with arguments (`exec sleep 1000`, `./gamesvr -c a.conf`).
//! Those are executed directly: the same process the shell would end up exec'ing, without a
//! shell in between (one exec instead of two: about a millisecond per start).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Characters that make a word mean something to the shell beyond its letters.
const SHELL_SYNTAX: &[char] =
    &['$', '`', '\\', '"', '\'', '|', '&', ';', '<', '>', '(', ')', '{', '}', '*', '?', '[', ']', '\n', '\r'];

/// Names the shell runs itself (builtins and keywords) whose program of the same name, if any,
/// behaves differently or not at all in the same way (`echo -e`, `exit 1`, `cd`, `if`).
const SHELL_OWN: &[&str] = &[
    ".", ":", "[", "alias", "bg", "break", "case", "cd", "command", "continue", "do", "done", "echo", "elif", "else",
    "esac", "eval", "exec", "exit", "export", "false", "fc", "fg", "fi", "for", "getopts", "hash", "if", "in", "jobs",
    "kill", "local", "printf", "pwd", "read", "readonly", "return", "set", "shift", "source", "test", "then", "times",
    "trap", "true", "type", "ulimit", "umask", "unalias", "unset", "until", "wait", "while",
];

/// The argv a command line means when it is one plain program call (`exec` allowed in front),
/// with the program resolved in `path` (a `PATH` value) or given with a `/`. None when the shell
/// is needed: any quoting, expansion, redirection, operator, assignment, comment or builtin, or
/// a program that cannot be found (the shell then reports it as it always did, exit 127).
pub fn direct_argv(command: &str, path: &str, cwd: &Path) -> Option<Vec<String>> {
    if command.contains(SHELL_SYNTAX) {
        return None;
    }
    let mut words: Vec<&str> = command.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
    if words.first() == Some(&"exec") {
        words.remove(0);
    }
    let program = *words.first()?;
    if program.contains('=') || SHELL_OWN.contains(&program) {
        return None;
    }
    if words.iter().any(|w| w.starts_with('~') || w.starts_with('#')) {
        return None;
    }
    let resolved = resolve(program, path, cwd)?;
    let mut argv = vec![resolved.to_string_lossy().into_owned()];
    argv.extend(words[1..].iter().map(|w| w.to_string()));
    Some(argv)
}

/// `program` as exec would find it: relative to `cwd` when it has a `/`, else the first
/// executable file of that name in `path`.
fn resolve(program: &str, path: &str, cwd: &Path) -> Option<PathBuf> {
    let executable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let p = cwd.join(program);
        return executable(&p).then_some(p);
    }
    path.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(program)).find(|p| executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/usr/bin:/bin";

    fn argv(cmd: &str) -> Option<Vec<String>> {
        direct_argv(cmd, PATH, Path::new("/"))
    }

    #[test]
    fn plain_program_calls_run_directly() {
        let sleep = resolve("sleep", PATH, Path::new("/")).unwrap().to_string_lossy().into_owned();
        assert_eq!(argv("exec sleep 1000"), Some(vec![sleep.clone(), "1000".into()]));
        assert_eq!(argv("  sleep\t1000 "), Some(vec![sleep.clone(), "1000".into()]));
        assert_eq!(argv("sleep --x=1 a-b"), Some(vec![sleep, "--x=1".into(), "a-b".into()]));
        assert_eq!(argv("bin/sh -e"), Some(vec!["/bin/sh".into(), "-e".into()]));
    }

    #[test]
    fn anything_the_shell_interprets_goes_through_the_shell() {
        for cmd in [
            "sleep $T",
            "sleep 1; sleep 2",
            "sleep 1 && true",
            "sleep 1 > out",
            "sleep 1 &",
            "sleep '1'",
            "sleep \"1\"",
            "sleep `echo 1`",
            "sleep *",
            "A=1 sleep 1",
            "sleep ~/x",
            "sleep 1 # why",
            "exit 1",
            "echo -e x",
            "cd /tmp",
            "exec",
            "",
            "no-such-program-anywhere 1",
            "./not-here",
            "sleep 1\nsleep 2",
        ] {
            assert_eq!(argv(cmd), None, "{cmd:?}");
        }
    }
}
