//! The directories an instance claims, and the rule that keeps them apart (issue 14): a
//! workload owns its workPath, its pidfile's directory and its outputDirs; the daemon works as
//! root in every instance's run directory. If one instance's directory were, held or lay in
//! another's (or one of Steward's own), its workload could plant symlinks or hard links where
//! the daemon reads and writes for someone else.

use crate::spec::{InstanceId, ProcessSpec, RenderContext, Roots};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub struct InstancePaths {
    pub id: InstanceId,
    pub run_dir: PathBuf,
    /// What its workload owns: (field path in the spec, path).
    pub claimed: Vec<(String, PathBuf)>,
}

/// The paths of instance `index` of `spec`, rendered with its ports (placeholders for a new
/// instance; paths rarely use ports). None if it does not render (validation said why).
pub fn of(
    spec: &ProcessSpec,
    index: u32,
    roots: &Roots,
    ports: Option<BTreeMap<String, u16>>,
) -> Option<InstancePaths> {
    let ports = ports.unwrap_or_else(|| spec.placeholder_ports());
    let ctx = RenderContext { roots, host_ip: "127.0.0.1".into(), allocated_ports: &ports };
    let r = crate::spec::render::render_any_index(spec, index, &ctx).ok()?;
    let mut claimed = Vec::new();
    for (i, p) in r.processes.iter().enumerate() {
        let at = format!("spec.template.spec.processes[{i}]");
        claimed.push((format!("{at}.workPath"), p.work_path.clone()));
        if let Some(f) = &p.pid_file {
            claimed.push((format!("{at}.pidFile"), f.clone()));
        }
        for (u, uri) in p.uris.iter().enumerate() {
            claimed.push((format!("{at}.uris[{u}].outputDir"), uri.output_dir.clone()));
        }
    }
    Some(InstancePaths { id: r.id, run_dir: r.run_dir, claimed })
}

/// How `a` relates to `b`, if they overlap: "is", "falls inside" or "holds".
fn relation(a: &Path, b: &Path) -> Option<&'static str> {
    if a == b {
        Some("is")
    } else if a.starts_with(b) {
        Some("falls inside")
    } else if b.starts_with(a) {
        Some("holds")
    } else {
        None
    }
}

fn short(field: &str) -> &str {
    field.rsplit('.').next().unwrap_or(field)
}

/// Why instance `x` (being applied) and instance `y` cannot both be, if they clash.
pub fn clash(x: &InstancePaths, y: &InstancePaths) -> Option<String> {
    for (field, p) in &x.claimed {
        if let Some(rel) = relation(p, &y.run_dir) {
            return Some(format!(
                "{field}: {} (instance {}) {rel} instance {}'s run directory {}; each instance's directories must be its own",
                p.display(),
                x.id,
                y.id,
                y.run_dir.display()
            ));
        }
        for (yf, q) in &y.claimed {
            if let Some(rel) = relation(p, q) {
                return Some(format!(
                    "{field}: {} (instance {}) {rel} instance {}'s {} {}; each instance's directories must be its own",
                    p.display(),
                    x.id,
                    y.id,
                    short(yf),
                    q.display()
                ));
            }
        }
    }
    for (yf, q) in &y.claimed {
        if let Some(rel) = relation(q, &x.run_dir) {
            return Some(format!(
                "spec: instance {}'s {} {} {rel} the run directory {} of instance {}; each instance's directories must be its own",
                y.id,
                short(yf),
                q.display(),
                x.run_dir.display(),
                x.id
            ));
        }
    }
    None
}

/// Why instance `x` cannot be, if a directory of its is, holds or lies in one of Steward's own.
pub fn own_clash(x: &InstancePaths, own: &[(String, PathBuf)]) -> Option<String> {
    let run = ("its run directory".to_string(), x.run_dir.clone());
    for (field, p) in x.claimed.iter().chain(std::iter::once(&run)) {
        for (key, dir) in own {
            if let Some(rel) = relation(p, dir) {
                return Some(format!(
                    "{field}: {} (instance {}) {rel} Steward's own {key} {}",
                    p.display(),
                    x.id,
                    dir.display()
                ));
            }
        }
    }
    None
}
