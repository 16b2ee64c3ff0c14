//! `steward secret` and `steward configmap`: create (from literals and files), ls, rm; and
//! `steward volume`: ls, rm.

use super::steward::{exit, Output, ValuesCommand, VolumeCommand};
use crate::client::{Client, ClientError};

fn split_store_id(id: &str) -> Option<(&str, &str)> {
    id.split_once('/').filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
}

pub(super) async fn values(
    client: &Client,
    kind: &str,
    cmd: ValuesCommand,
    output: Output,
) -> Result<i32, ClientError> {
    match cmd {
        ValuesCommand::Create { id, literals, files } => {
            let Some((namespace, name)) = split_store_id(&id) else {
                crate::esay!("steward: {id:?} is not namespace/name");
                return Ok(exit::INVALID);
            };
            let mut data = std::collections::BTreeMap::new();
            data.extend(literals);
            for (key, path) in files {
                match std::fs::read_to_string(&path) {
                    Ok(text) => {
                        data.insert(key, text);
                    }
                    Err(e) => {
                        crate::esay!("steward: cannot read {path} for key {key}: {e}");
                        return Ok(exit::INVALID);
                    }
                }
            }
            let summary = client.put_values(kind, namespace, name, &data).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string(&summary).unwrap_or_default()),
                Output::Text => crate::say!("{id}: {} key(s) stored", data.len()),
            }
        }
        ValuesCommand::Ls { namespace } => {
            let list = client.list_values(kind, namespace.as_deref()).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default()),
                Output::Text => {
                    crate::say!("NAMESPACE  NAME  KEYS");
                    for item in &list {
                        crate::say!("{}  {}  {}", item.namespace, item.name, item.keys.join(","));
                    }
                }
            }
        }
        ValuesCommand::Rm { id } => {
            let Some((namespace, name)) = split_store_id(&id) else {
                crate::esay!("steward: {id:?} is not namespace/name");
                return Ok(exit::INVALID);
            };
            client.delete_values(kind, namespace, name).await?;
            match output {
                Output::Json => {
                    /// `rm -o json`: what was removed.
                    #[derive(serde::Serialize)]
                    struct Removed<'a> {
                        namespace: &'a str,
                        name: &'a str,
                        removed: bool,
                    }
                    let removed = Removed { namespace, name, removed: true };
                    println!("{}", serde_json::to_string(&removed).unwrap_or_default())
                }
                Output::Text => crate::say!("{id}: removed"),
            }
        }
    }
    Ok(exit::OK)
}

pub(super) async fn volumes(client: &Client, cmd: VolumeCommand, output: Output) -> Result<i32, ClientError> {
    match cmd {
        VolumeCommand::Ls { namespace } => {
            let list = client.volumes(namespace.as_deref()).await?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&list).unwrap_or_default()),
                Output::Text => {
                    crate::say!("NAMESPACE  NAME  ORDINAL  VOLUME  BYTES  IN USE BY  PATH");
                    for v in &list {
                        let user = v.instance.as_deref().unwrap_or("-");
                        crate::say!(
                            "{}  {}  {}  {}  {}  {user}  {}",
                            v.namespace,
                            v.name,
                            v.ordinal,
                            v.volume,
                            v.bytes,
                            v.path
                        );
                    }
                }
            }
        }
        VolumeCommand::Rm { instance, volume } => {
            let Ok(id) = crate::client::parse_instance_id(&instance) else {
                crate::esay!("steward: {instance:?} is not namespace/name/index");
                return Ok(exit::INVALID);
            };
            client.delete_volume(&id, &volume).await?;
            match output {
                Output::Json => {
                    println!("{}", serde_json::json!({"instance": instance, "volume": volume, "removed": true}))
                }
                Output::Text => crate::say!("{instance}: volume {volume} removed"),
            }
        }
    }
    Ok(exit::OK)
}
