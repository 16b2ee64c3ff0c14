//! `namespace/name`: the identity of an app, as the daemons' records, steward-sched's store and
//! every command line write it. One type, so the key is made and taken apart in one place.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct AppId {
    pub namespace: String,
    pub name: String,
}

impl AppId {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> AppId {
        AppId { namespace: namespace.into(), name: name.into() }
    }

    /// The app a spec describes.
    pub fn of(spec: &super::ProcessSpec) -> AppId {
        AppId::new(&spec.metadata.namespace, &spec.metadata.name)
    }

    /// A key as stored: `namespace/name`; one without a `/` is a name in no namespace (what
    /// older records may hold), never an error.
    pub fn from_key(key: &str) -> AppId {
        match key.split_once('/') {
            Some((namespace, name)) => AppId::new(namespace, name),
            None => AppId::new("", key),
        }
    }

    /// Instance `index` of this app.
    pub fn instance(&self, index: u32) -> super::InstanceId {
        super::InstanceId { namespace: self.namespace.clone(), name: self.name.clone(), index }
    }
}

impl fmt::Display for AppId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What an operator writes: `namespace/name`, both parts non-empty, no further `/`.
impl std::str::FromStr for AppId {
    type Err = String;

    fn from_str(s: &str) -> Result<AppId, String> {
        match s.split_once('/') {
            Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(AppId::new(namespace, name))
            }
            _ => Err(format!("{s:?} is not namespace/name")),
        }
    }
}

/// Where a message or a wire type holds the key as text.
impl From<&AppId> for String {
    fn from(id: &AppId) -> String {
        id.to_string()
    }
}

impl From<AppId> for String {
    fn from(id: AppId) -> String {
        id.to_string()
    }
}

/// Stored and sent as its key, `namespace/name`, as it always was.
impl Serialize for AppId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AppId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AppId, D::Error> {
        Ok(AppId::from_key(&String::deserialize(d)?))
    }
}

impl super::InstanceId {
    /// The app this instance is of.
    pub fn app(&self) -> AppId {
        AppId::new(&self.namespace, &self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_round_trips_and_a_bad_one_is_named() {
        let id: AppId = "demo/web".parse().unwrap();
        assert_eq!(id, AppId::new("demo", "web"));
        assert_eq!(id.to_string(), "demo/web");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"demo/web\"");
        assert_eq!(serde_json::from_str::<AppId>("\"demo/web\"").unwrap(), id);
        assert_eq!(id.instance(3).app(), id);
        for bad in ["web", "/web", "demo/", "a/b/c"] {
            assert!(bad.parse::<AppId>().unwrap_err().contains(bad), "{bad}");
        }
        assert_eq!(AppId::from_key("web"), AppId::new("", "web"));
    }
}
