//! `steward secret` and `steward configmap`: create (from literals and files), ls, rm.

use super::steward::{exit, Output, ValuesCommand};
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
