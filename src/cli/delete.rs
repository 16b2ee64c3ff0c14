//! `steward delete`: instances (namespace/name/index, or --all), or whole apps
//! (namespace/name) with their specs, waiting up to the timeout for each.

use super::act::{first_failure, reason};
use super::commands::{ends_the_command, exit_code, state_word, targets};
use super::steward::{exit, DeleteTargets, Output};
use crate::client::{parse_instance_id, Client, ClientError};

pub(super) async fn delete(client: &Client, t: DeleteTargets, output: Output) -> Result<i32, ClientError> {
    if let Some(apps) = t.apps() {
        return delete_apps(client, &apps, t.timeout, t.force, output).await;
    }
    if t.ids.iter().any(|i| parse_instance_id(i).is_err()) {
        crate::esay!("steward: name instances (namespace/name/index) or apps (namespace/name), not both");
        return Ok(exit::USAGE);
    }
    let t = t.instances();
    let ids = targets(client, &t).await?;
    let timeout = (t.timeout > 0.0).then_some(t.timeout);
    let mut code = exit::OK;
    let mut deleted = Vec::new();
    for id in ids {
        match client.delete_finished(&id, timeout).await {
            Ok(true) => {
                if output == Output::Text {
                    crate::say!("{id}: deleted");
                }
                deleted.push(id.to_string());
            }
            Ok(false) if timeout.is_none() => {
                if output == Output::Text {
                    crate::say!("{id}: deleting");
                }
                deleted.push(id.to_string());
            }
            Ok(false) => {
                // Still stopping: the instance's own state and message say why.
                let now = match client.status(&id).await {
                    Ok(s) => format!(": still {}{}", state_word(&s.state), reason(&s)),
                    Err(_) => String::new(),
                };
                crate::esay!("steward: {id}: delete did not finish in {} s{now}", t.timeout);
                code = first_failure(code, exit::FAILED);
            }
            Err(e) if ends_the_command(&e) => return Err(e),
            // Listed a moment ago (--all), gone since (its own delete completed): as asked.
            Err(ClientError::Api { status: 404, .. }) if t.all => {
                if output == Output::Text {
                    crate::say!("{id}: already gone");
                }
            }
            Err(e) => {
                crate::esay!("steward: {id}: {e}");
                code = first_failure(code, exit_code(&e));
            }
        }
    }
    if output == Output::Json {
        println!("{}", serde_json::to_string(&crate::protocol::Deleted { deleted }).unwrap_or_default());
    }
    Ok(code)
}

/// `steward delete NAMESPACE/NAME...`: every instance of each app, then its spec.
async fn delete_apps(
    client: &Client,
    apps: &[(String, String)],
    timeout: f64,
    force: bool,
    output: Output,
) -> Result<i32, ClientError> {
    let timeout = (timeout > 0.0).then_some(timeout);
    let mut code = exit::OK;
    let mut deleted = Vec::new();
    for (namespace, name) in apps {
        let app = format!("{namespace}/{name}");
        match client.delete_app_with(namespace, name, timeout, force).await {
            Ok(Some(ids)) => {
                if output == Output::Text {
                    match ids.is_empty() {
                        true => crate::say!("{app}: deleted (it had no instance here)"),
                        false => crate::say!("{app}: deleted with {}", ids.join(", ")),
                    }
                }
                deleted.extend(ids);
            }
            Ok(None) if timeout.is_none() => {
                if output == Output::Text {
                    crate::say!("{app}: deleting");
                }
            }
            Ok(None) => {
                crate::esay!("steward: {app}: delete did not finish in {} s", timeout.unwrap_or_default());
                code = first_failure(code, exit::FAILED);
            }
            Err(e) if ends_the_command(&e) => return Err(e),
            Err(ClientError::Api { status: 404, .. }) => {
                crate::esay!("steward: no app {app}");
                code = first_failure(code, exit::NOT_FOUND);
            }
            Err(e) => {
                crate::esay!("steward: {app}: {e}");
                code = first_failure(code, exit_code(&e));
            }
        }
    }
    if output == Output::Json {
        println!("{}", serde_json::to_string(&crate::protocol::Deleted { deleted }).unwrap_or_default());
    }
    Ok(code)
}
