use clap::Parser;
use steward::cli::daemon::DaemonArgs;
use steward::config::Config;

fn main() {
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
    if let Err(e) = steward::daemon::run(config, args.config.as_deref()) {
        eprintln!("stewardd: {e}");
        std::process::exit(1);
    }
}
