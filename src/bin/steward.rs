use clap::Parser;
use steward::cli::steward::{run, Cli};

fn main() {
    // Like other Unix tools, end quietly when the reader goes away (`steward ls | head`).
    // SAFETY: restoring the default disposition of one signal before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("steward: {e:#}");
            std::process::exit(steward::cli::steward::exit::INVALID);
        }
    }
}
