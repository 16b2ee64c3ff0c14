//! Man pages generated from the clap definitions (`steward man man --date D`, committed under
//! man/ and packaged from there; tests/man_pages.rs fails when they drift): stewardd(8), steward(1) with one page per subcommand (steward-apply(1),
//! ...) and steward-sched(1). What clap does not know (exit status, files, environment, see also)
//! is added here as roff. stewardd.toml(5) and steward-spec(5) are written by hand under man/.

use clap::CommandFactory;
use std::io::Write;
use std::path::{Path, PathBuf};

const MANUAL: &str = "Steward Manual";

/// Writes every generated page into `dir` (created if missing); returns their paths.
pub fn write_pages(dir: &Path, date: &str) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    written.push(write_page(dir, date, super::daemon::DaemonArgs::command(), "8", STEWARDD_EXTRA)?);
    written.push(write_page(dir, date, super::sched::SchedArgs::command(), "1", SCHED_EXTRA)?);
    let mut steward = super::steward::Cli::command().disable_help_subcommand(true);
    steward.build();
    write_tree(dir, date, &steward, STEWARD_EXTRA, &mut written)?;
    Ok(written)
}

/// One page for `cmd` and, recursively, one for each visible subcommand; the subcommands' pages
/// point back to the top page for exit codes and files.
fn write_tree(
    dir: &Path,
    date: &str,
    cmd: &clap::Command,
    extra: &str,
    written: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_tree(dir, date, sub, SUBCOMMAND_EXTRA, written)?;
    }
    written.push(write_page(dir, date, cmd.clone(), "1", extra)?);
    Ok(())
}

fn write_page(dir: &Path, date: &str, cmd: clap::Command, section: &str, extra: &str) -> std::io::Result<PathBuf> {
    let man = clap_mangen::Man::new(cmd)
        .section(section)
        .date(date)
        .manual(MANUAL)
        .source(format!("Steward {}", env!("CARGO_PKG_VERSION")));
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page)?;
    page.extend_from_slice(extra.as_bytes());
    std::fs::File::create(&path)?.write_all(&page)?;
    Ok(path)
}

const STEWARDD_EXTRA: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Stopped by SIGTERM or SIGINT. The instances keep running; the next stewardd re\-adopts them.
.TP
\fB1\fR
A runtime failure: the store could not be opened, the socket is held by another stewardd.
.TP
\fB2\fR
The configuration file is invalid (the unit does not restart on this status).
.SH SIGNALS
.TP
\fBSIGTERM\fR, \fBSIGINT\fR
Stop the daemon only; every instance keeps running. Requests under way get up to 5 seconds to
finish, blocking work up to 1 second more, then the store closes: stewardd exits within about
6 seconds, and at once (under 0.1 second) when idle.
.TP
\fBSIGHUP\fR
Re\-read the configuration: access rules and node labels and attributes apply at once, other
changes are logged as waiting for a restart.
.TP
\fBSIGUSR2\fR
Restart in place: shut down like SIGTERM, then execute the daemon's binary again (its current
file, e.g. a new version installed by a package upgrade) with the same arguments and environment
and the same process ID. The new daemon re\-adopts every instance. Package upgrades use this.
Under systemd it is a reload of the unit (RELOADING=1, then READY=1).
.SH ENVIRONMENT
.TP
\fBSTEWARD_CONFIG\fR
Configuration file, as \fB\-\-config\fR.
.TP
\fBSTEWARD_LOG\fR
Log filter (\fBinfo\fR by default), e.g. \fBdebug\fR or \fBsteward::supervisor=debug\fR.
Logs go to the journal when systemd runs stewardd, to standard error otherwise (with colour
codes only when it is a terminal).
.SH FILES
.TP
\fI/etc/steward/stewardd.toml\fR
The configuration, see \fBstewardd.toml\fR(5).
.TP
\fI/run/steward/stewardd.sock\fR
The local API socket used by \fBsteward\fR(1).
.TP
\fI/var/lib/steward/state\fR
The durable store: instance records and the event journal.
.TP
\fI/var/lib/steward/work\fR, \fI/var/lib/steward/run\fR
Instances' work directories, and their run directories (pidfiles, logs).
.TP
\fI/usr/lib/systemd/system/stewardd.service\fR
The systemd unit.
.SH "SEE ALSO"
\fBsteward\fR(1), \fBsteward\-sched\fR(1), \fBstewardd.toml\fR(5), \fBsteward\-spec\fR(5),
\fBsystemctl\fR(1)
"#;

const STEWARD_EXTRA: &str = r#".SH "EXIT STATUS"
The same codes for every command; a command given several instances does each and exits with
the first failure's code.
.TP
\fB0\fR
Success.
.TP
\fB1\fR
A spec or request was invalid (every mistake is printed, with its field).
.TP
\fB2\fR
Bad command\-line usage: an unknown command or option, a malformed instance id, no target,
\fB\-o json\fR where it cannot apply (\fBcompletions\fR).
.TP
\fB3\fR
stewardd could not be reached (\fBlogs\fR then still shows the log files, and says so), or with
\fB\-\-remote\fR its certificate did not verify against \fB\-\-ca\fR.
.TP
\fB4\fR
No such instance, secret or configmap.
.TP
\fB5\fR
The caller may not do this (only root and the socket group may change things; over
\fB\-\-remote\fR, only a write token), or a remote daemon refused the token.
.TP
\fB6\fR
stewardd could not carry the request out. With a wait (\fBapply \-\-wait\fR; \fBstart\fR,
\fBstop\fR, \fBrestart\fR with their default \fB\-\-timeout\fR) the instance failed or did not
get there in time; its reason (the status message) is printed.
.SH ENVIRONMENT
.TP
\fBSTEWARD_CONFIG\fR
stewardd's configuration file, as \fB\-\-config\fR.
.TP
\fBSTEWARD_SOCKET\fR
stewardd's API socket, as \fB\-\-socket\fR.
.TP
\fBSTEWARD_REMOTE\fR, \fBSTEWARD_TOKEN_FILE\fR, \fBSTEWARD_CA\fR
A remote stewardd's listener, the file holding its bearer token and the CA that signed its
certificate, as \fB\-\-remote\fR, \fB\-\-token\-file\fR and \fB\-\-ca\fR. Every command that
talks to stewardd then talks to that one; \fBvalidate\fR and \fBrender\fR still use this
host's configuration.
.SH FILES
.TP
\fI/etc/steward/stewardd.toml\fR
Where the socket, the work and run roots and the host IP are read from.
.TP
\fI/run/steward/stewardd.sock\fR
stewardd's API socket.
.TP
\fI/usr/share/doc/steward/examples\fR
Example specs.
.SH EXAMPLES
.EX
steward apply \-f /usr/share/doc/steward/examples/ticker.toml \-\-wait
steward ls
steward logs demo/ticker/0 \-f
steward \-\-remote https://10.0.0.5:7443 \-\-ca ca.pem \-\-token\-file op.token ls
steward completions bash > /etc/bash_completion.d/steward
.EE
.SH "SEE ALSO"
\fBstewardd\fR(8), \fBsteward\-sched\fR(1), \fBstewardd.toml\fR(5), \fBsteward\-spec\fR(5)
"#;

const SUBCOMMAND_EXTRA: &str = r#".SH "SEE ALSO"
\fBsteward\fR(1) for the global options, exit status and files; \fBsteward\-spec\fR(5)
"#;

const SCHED_EXTRA: &str = r#".SH FILES
.TP
\fI/etc/steward/cluster.toml\fR
The cluster: every stewardd's address, token and CA.
.SH "SEE ALSO"
\fBstewardd\fR(8), \fBsteward\fR(1), \fBsteward\-spec\fR(5)
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43, item 10: help texts say what a command does, not which issue asked for it.
    #[test]
    fn help_texts_name_no_issue_numbers() {
        fn texts(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            for t in [cmd.get_about(), cmd.get_long_about()].into_iter().flatten() {
                out.push(format!("{path}: {t}"));
            }
            for a in cmd.get_arguments() {
                for t in [a.get_help(), a.get_long_help()].into_iter().flatten() {
                    out.push(format!("{path} --{}: {t}", a.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                texts(sub, &path, out);
            }
        }
        let mut all = Vec::new();
        texts(&super::super::daemon::DaemonArgs::command(), "", &mut all);
        texts(&super::super::sched::SchedArgs::command(), "", &mut all);
        texts(&super::super::steward::Cli::command(), "", &mut all);
        let issue = regex::Regex::new(r"(?i)\bissues? *#?\d").unwrap();
        let named: Vec<&String> = all.iter().filter(|t| issue.is_match(t)).collect();
        assert!(named.is_empty(), "{named:#?}");
    }

    #[test]
    fn every_binary_and_visible_subcommand_gets_a_dated_page_with_the_added_sections() {
        let dir = tempfile::tempdir().unwrap();
        let pages = write_pages(dir.path(), "2026-01-02").unwrap();
        let names: Vec<String> = pages.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        for want in ["stewardd.8", "steward.1", "steward-sched.1", "steward-apply.1", "steward-secret-create.1"] {
            assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
        }
        // Hidden subcommands (this generator itself) and clap's help get no page.
        assert!(!names.iter().any(|n| n == "steward-man.1" || n == "steward-help.1"), "{names:?}");
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        let daemon = read("stewardd.8");
        assert!(daemon.contains(".TH stewardd 8 2026-01-02"), "{daemon}");
        assert!(daemon.contains("SIGUSR2") && daemon.contains("\\-\\-state\\-dir"), "{daemon}");
        let cli = read("steward.1");
        assert!(cli.contains(".SH \"EXIT STATUS\"") && cli.contains("STEWARD_SOCKET"), "{cli}");
        assert!(read("steward-apply.1").contains("\\-\\-wait"));
    }
}
