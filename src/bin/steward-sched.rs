use clap::Parser;
use steward::cli::sched::SchedArgs;

fn main() {
    let args = SchedArgs::parse();
    steward::daemon::init_logging();
    match steward::cli::sched::run(args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("steward-sched: {e}");
            std::process::exit(1);
        }
    }
}
