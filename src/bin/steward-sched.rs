use clap::Parser;
use steward::cli::sched::SchedArgs;

fn main() {
    let args = SchedArgs::parse();
    eprintln!("steward-sched: {:?} is not built yet (issue 8)", args.command);
    std::process::exit(1);
}
