//! `steward rollout history|undo`: an app's revisions, and going back to one.

use super::steward::{Output, RolloutCommand};
use crate::client::{Client, ClientError};

pub(super) async fn run(client: &Client, cmd: RolloutCommand, output: Output) -> Result<i32, ClientError> {
    match cmd {
        RolloutCommand::History { app } => {
            let (namespace, name) = app.split_once('/').expect("clap checked namespace/name");
            let list = client.revisions(namespace, name).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default()),
                Output::Text => {
                    println!("{:<9} {:<16}  {:<24}  APPLIED BY", "REVISION", "HASH", "CREATED");
                    for r in &list.revisions {
                        let mark = if r.current { "*" } else { " " };
                        let created = crate::clock::rfc3339_utc(r.created_ms);
                        println!("{mark}{:<8} {:<16}  {:<24}  {}", r.revision, r.hash, created, r.applied_by);
                    }
                }
            }
        }
        RolloutCommand::Undo { app, to_revision } => {
            let (namespace, name) = app.split_once('/').expect("clap checked namespace/name");
            let applied = client.undo(namespace, name, to_revision).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&applied).unwrap_or_default()),
                Output::Text if applied.unchanged => println!("{app}: already runs that revision's spec"),
                Output::Text => {
                    println!(
                        "{app}: revision {} applied; {} instance(s) move to it",
                        applied.revision,
                        applied.changed.len()
                    )
                }
            }
        }
    }
    Ok(0)
}
