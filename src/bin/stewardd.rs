use clap::Parser;
use steward::cli::daemon::DaemonArgs;

fn main() {
    let _args = DaemonArgs::parse();
    eprintln!("stewardd: the supervisor is not built yet (issue 3); see `stewardd --help`");
    std::process::exit(1);
}
