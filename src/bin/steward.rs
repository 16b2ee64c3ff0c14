use clap::Parser;
use steward::cli::steward::{run, Cli};

fn main() {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("steward: {e:#}");
            std::process::exit(steward::cli::steward::exit::INVALID);
        }
    }
}
