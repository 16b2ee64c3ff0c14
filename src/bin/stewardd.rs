use clap::Parser;
use steward::cli::daemon::DaemonArgs;
use steward::config::Config;

fn main() {
    steward::daemon::memory::use_one_arena();
    let args = DaemonArgs::parse();
    steward::daemon::init_logging();
    let mut config = match Config::load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stewardd: {e}");
            std::process::exit(2);
        }
    };
    if let Some(dir) = args.state_dir {
        config.state_dir = dir;
    }
    if let Some(socket) = args.socket {
        config.socket = socket;
    }
    match steward::daemon::run(config, args.config.as_deref()) {
        Ok(steward::daemon::Ending::Stopped) => {}
        Ok(steward::daemon::Ending::Restart) => {
            eprintln!("stewardd: restart in place failed: {}", steward::daemon::reexec());
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("stewardd: {e}");
            std::process::exit(if e.is_configuration() { 2 } else { 1 });
        }
    }
}
