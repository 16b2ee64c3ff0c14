//! Network configurations: `*.conflist` (a list of plugins) and `*.conf` / `*.json` (one
//! plugin, read as a list of one), found by their `name` in the configuration directory, the
//! files taken in name order as libcni does (the first of a name wins).

use super::CniError;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A network: its name, version, and each plugin's configuration as written.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkList {
    pub name: String,
    pub cni_version: String,
    pub plugins: Vec<Value>,
    /// The file it came from.
    pub path: PathBuf,
}

impl NetworkList {
    /// Network `name` in `dir`.
    pub fn find(dir: &Path, name: &str) -> Result<NetworkList, CniError> {
        let mut found = Vec::new();
        for path in config_files(dir)? {
            let list = NetworkList::read(&path)?;
            if list.name == name {
                return Ok(list);
            }
            found.push(list.name);
        }
        Err(CniError::NoNetwork {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            found: if found.is_empty() { "none".into() } else { found.join(", ") },
        })
    }

    /// Every network of `dir` (the first file of each name), in file-name order.
    pub fn all(dir: &Path) -> Result<Vec<NetworkList>, CniError> {
        let mut out: Vec<NetworkList> = Vec::new();
        for path in config_files(dir)? {
            let list = NetworkList::read(&path)?;
            if !out.iter().any(|n| n.name == list.name) {
                out.push(list);
            }
        }
        Ok(out)
    }

    /// Network `name` in `dir`, or with no name the first configuration there (libcni's
    /// default network).
    pub fn find_or_first(dir: &Path, name: Option<&str>) -> Result<NetworkList, CniError> {
        match name {
            Some(name) => NetworkList::find(dir, name),
            None => NetworkList::all(dir)?.into_iter().next().ok_or_else(|| CniError::NoNetwork {
                name: "(the first)".into(),
                dir: dir.to_path_buf(),
                found: "none".into(),
            }),
        }
    }

    /// Reads one configuration file.
    pub fn read(path: &Path) -> Result<NetworkList, CniError> {
        let err = |message: String| CniError::Config { path: path.to_path_buf(), message };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let doc: Value = serde_json::from_str(&text).map_err(|e| err(format!("not JSON: {e}")))?;
        let field = |key: &str| doc.get(key).and_then(Value::as_str).map(String::from);
        let name = field("name").filter(|n| !n.is_empty()).ok_or_else(|| err("`name` is required".into()))?;
        let cni_version = field("cniVersion").unwrap_or_else(|| "0.4.0".into());
        let plugins = if path.extension().is_some_and(|e| e == "conflist") {
            let plugins = doc.get("plugins").and_then(Value::as_array).cloned().unwrap_or_default();
            if plugins.is_empty() {
                return Err(err("`plugins` must list at least one plugin".into()));
            }
            plugins
        } else {
            vec![doc.clone()]
        };
        for (i, p) in plugins.iter().enumerate() {
            if p.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err(err(format!("plugins[{i}].type is required")));
            }
        }
        Ok(NetworkList { name, cni_version, plugins, path: path.to_path_buf() })
    }

    /// Plugin `i`'s stdin: its configuration with the network's name and version.
    pub(super) fn plugin_conf(&self, i: usize, prev_result: Option<&Value>) -> Value {
        let mut conf = self.plugins[i].clone();
        conf["name"] = Value::String(self.name.clone());
        conf["cniVersion"] = Value::String(self.cni_version.clone());
        if let Some(prev) = prev_result {
            conf["prevResult"] = prev.clone();
        }
        conf
    }

    pub(super) fn plugin_type(&self, i: usize) -> &str {
        self.plugins[i].get("type").and_then(Value::as_str).unwrap_or_default()
    }
}

/// The configuration files of `dir`, in name order.
fn config_files(dir: &Path) -> Result<Vec<PathBuf>, CniError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| CniError::Config { path: dir.to_path_buf(), message: format!("cannot list it: {e}") })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "conf" || e == "conflist" || e == "json"))
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_single_plugins_are_found_by_name_and_mistakes_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("10-pods.conflist"),
            r#"{"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "bridge"}, {"type": "portmap"}]}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("20-one.conf"), r#"{"cniVersion": "0.4.0", "name": "one", "type": "ptp"}"#)
            .unwrap();
        let pods = NetworkList::find(dir.path(), "pods").unwrap();
        assert_eq!((pods.plugins.len(), pods.plugin_type(1)), (2, "portmap"));
        let conf = pods.plugin_conf(0, Some(&serde_json::json!({"ips": []})));
        assert_eq!((conf["name"].as_str(), conf["cniVersion"].as_str()), (Some("pods"), Some("1.0.0")));
        assert!(conf.get("prevResult").is_some());
        assert_eq!(NetworkList::find(dir.path(), "one").unwrap().plugin_type(0), "ptp");
        let e = NetworkList::find(dir.path(), "nope").unwrap_err().to_string();
        assert!(e.contains("no CNI network \"nope\"") && e.contains("found: pods, one"), "{e}");
        std::fs::write(dir.path().join("05-bad.conflist"), r#"{"name": "bad", "plugins": [{}]}"#).unwrap();
        let e = NetworkList::find(dir.path(), "pods").unwrap_err().to_string();
        assert!(e.contains("05-bad.conflist") && e.contains("plugins[0].type is required"), "{e}");
    }
}
