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
    /// Host directories it shares with whoever mounts them (seed 003 Static volumes): none may
    /// be, hold or lie in an instance's own directories, nor Steward's.
    pub shared: Vec<(String, PathBuf)>,
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
    let mut shared = Vec::new();
    for (i, v) in spec.spec.template.spec.volumes.iter().enumerate() {
        let Some(rendered) = r.volumes().iter().find(|r| r.name == v.name) else { continue };
        if matches!(rendered.content, crate::spec::pod::VolumeContent::Static { .. }) {
            shared.push((format!("spec.template.spec.volumes[{i}].source.target"), rendered.host_path.clone()));
        }
    }
    Some(InstancePaths { id: r.id, run_dir: r.run_dir, claimed, shared })
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
    for (a, b) in [(x, y), (y, x)] {
        if let Some(why) = shared_clash(a, b) {
            return Some(why);
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

/// Why `a`'s shared host directories cannot be, if one is, holds or lies in one of `b`'s own.
fn shared_clash(a: &InstancePaths, b: &InstancePaths) -> Option<String> {
    let run = ("run directory".to_string(), b.run_dir.clone());
    for (field, p) in &a.shared {
        for (bf, q) in b.claimed.iter().chain(std::iter::once(&run)) {
            if let Some(rel) = relation(p, q) {
                return Some(format!(
                    "{field}: {} (a Static volume of instance {}) {rel} instance {}'s {} {}; a host directory \
                     shared by mounts must be no instance's own",
                    p.display(),
                    a.id,
                    b.id,
                    short(bf),
                    q.display()
                ));
            }
        }
    }
    None
}

/// The first clash between two of `mine` or between one of `mine` and one of `others` (clashes
/// among `others` are not this apply's), as [`clash`] words it. Every directory sorted once, a
/// path's ancestors come right before it: n log n where checking every pair was n² (2,000
/// instances spent a fifth of their start comparing paths).
pub fn first_clash(mine: &[InstancePaths], others: &[InstancePaths]) -> Option<String> {
    let instance = |n: usize| if n < mine.len() { &mine[n] } else { &others[n - mine.len()] };
    let mut all: Vec<(&Path, usize)> = Vec::new();
    for (n, x) in mine.iter().chain(others).enumerate() {
        all.push((&x.run_dir, n));
        all.extend(x.claimed.iter().chain(&x.shared).map(|(_, p)| (p.as_path(), n)));
    }
    all.sort_by(|a, b| a.0.cmp(b.0));
    // The paths holding the current one, outermost first.
    let mut open: Vec<(&Path, usize)> = Vec::new();
    for &(p, n) in &all {
        while open.last().is_some_and(|(top, _)| !p.starts_with(top)) {
            open.pop();
        }
        for &(_, m) in &open {
            if m == n || (m >= mine.len() && n >= mine.len()) {
                continue;
            }
            // As the pairwise check had them: one of mine first, the earlier of two of mine.
            let (x, y) = if m < n { (m, n) } else { (n, m) };
            if let Some(why) = clash(instance(x), instance(y)) {
                return Some(why);
            }
        }
        open.push((p, n));
    }
    None
}

/// Why instance `x` cannot be, if a directory of its is, holds or lies in one of Steward's own
/// (a Static volume's also: in a root, the volume root but for the named ones' place, or its own
/// instance's directories).
pub fn own_clash(x: &InstancePaths, own: &[(String, PathBuf)], roots: &Roots) -> Option<String> {
    let named = roots.volume_root.join(&x.id.namespace).join(crate::spec::render::pod::STATIC_DIR);
    for (field, p) in x.shared.iter().filter(|(_, p)| !p.starts_with(&named)) {
        let keys = [
            ("work_base_dir", &roots.work_base_dir),
            ("run_base_dir", &roots.run_base_dir),
            ("volume_root", &roots.volume_root),
        ];
        for (key, dir) in keys.into_iter().chain(own.iter().map(|(k, d)| (k.as_str(), d))) {
            if let Some(rel) = relation(p, dir) {
                return Some(format!(
                    "{field}: {} (a Static volume of instance {}) {rel} Steward's own {key} {}",
                    p.display(),
                    x.id,
                    dir.display()
                ));
            }
        }
    }
    if let Some(why) = shared_clash(x, x) {
        return Some(why);
    }
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

#[cfg(test)]
mod first_clash_tests {
    use super::*;

    fn inst(index: u32, run: &str, claimed: &[&str]) -> InstancePaths {
        InstancePaths {
            id: InstanceId { namespace: "t".into(), name: "a".into(), index },
            run_dir: PathBuf::from(run),
            claimed: claimed
                .iter()
                .map(|p| ("spec.template.spec.processes[0].workPath".to_string(), PathBuf::from(p)))
                .collect(),
            shared: Vec::new(),
        }
    }

    /// Instance `index` of app `a` mounting Static volumes at `shared`.
    fn sharing(index: u32, shared: &[&str]) -> InstancePaths {
        let mut x = inst(index, &format!("/run/t.a.{index}"), &[]);
        x.shared =
            shared.iter().map(|p| ("spec.template.spec.volumes[0].source.target".to_string(), p.into())).collect();
        x
    }

    #[test]
    fn a_static_volume_is_shared_by_its_mounts_and_no_instances_own() {
        // Every ordinal mounting one host directory, and another app's too: no clash.
        let mine = vec![sharing(0, &["/srv/data"]), sharing(1, &["/srv/data"]), sharing(2, &["/srv/data"])];
        assert!(first_clash(&mine, &[sharing(9, &["/srv/data/sub"])]).is_none());
        // One that holds, is or lies in another instance's directory: refused, both ways.
        let theirs = inst(7, "/run/o", &["/srv/data/work"]);
        let why = first_clash(&mine, std::slice::from_ref(&theirs)).expect("holds a workPath");
        assert!(
            why.contains("volumes[0].source.target: /srv/data") && why.contains("holds instance t/a/7's workPath"),
            "{why}"
        );
        assert!(first_clash(&[sharing(0, &["/run/o/x"])], &[inst(7, "/run/o", &[])]).is_some(), "in a run dir");
        assert!(first_clash(&[inst(7, "/run/o", &["/srv/data"])], &mine).is_some(), "a workPath that is one");
        // Its own instance's run directory too (own_clash).
        let roots = Roots { work_base_dir: "/work".into(), run_base_dir: "/run".into(), volume_root: "/vol".into() };
        let own = sharing(0, &["/run/t.a.0/in"]);
        assert!(own_clash(&own, &[], &roots).is_some_and(|w| w.contains("run_base_dir")));
        let named = sharing(0, &["/vol/t/.static/data"]);
        assert!(own_clash(&named, &[], &roots).is_none(), "a named one is in the volume root's place for them");
        assert!(own_clash(&sharing(0, &["/vol/t/a/0"]), &[], &roots).is_some_and(|w| w.contains("volume_root")));
    }

    /// The pairwise rule it replaces, for comparison.
    fn pairwise(mine: &[InstancePaths], others: &[InstancePaths]) -> bool {
        let among = mine.iter().enumerate().any(|(i, x)| mine[i + 1..].iter().any(|y| clash(x, y).is_some()));
        among || mine.iter().any(|x| others.iter().any(|y| clash(x, y).is_some()))
    }

    #[test]
    fn finds_what_checking_every_pair_finds() {
        let own =
            |i: u32| inst(i, &format!("/run/t.a.{i}"), &[&format!("/work/t.a.{i}"), &format!("/work/t.a.{i}/pid")]);
        let mine: Vec<_> = (0..50).map(own).collect();
        assert!(first_clash(&mine, &[]).is_none(), "each in its own directories");
        // A name that merely begins like another's is not inside it.
        let prefix = vec![inst(0, "/run/x", &["/work/ab"]), inst(1, "/run/y", &["/work/abc"])];
        assert!(first_clash(&prefix, &[]).is_none() && !pairwise(&prefix, &[]));
        let cases: Vec<(Vec<InstancePaths>, Vec<InstancePaths>)> = vec![
            (vec![own(0), inst(1, "/run/t.a.1", &["/work/t.a.0/deeper"])], vec![]),
            (vec![own(0), inst(1, "/run/t.a.1", &["/work"])], vec![]),
            (vec![own(0)], vec![inst(7, "/run/o", &["/run/t.a.0/x"])]),
            (vec![own(0)], vec![inst(7, "/run/o", &["/elsewhere"]), inst(8, "/run/p", &["/elsewhere/in"])]),
            (vec![inst(3, "/run/t.a.3", &["/run/o/inside"])], vec![inst(7, "/run/o", &[])]),
        ];
        for (mine, others) in &cases {
            assert_eq!(first_clash(mine, others).is_some(), pairwise(mine, others), "{:?}", first_clash(mine, others));
        }
        let why = first_clash(&cases[0].0, &[]).unwrap();
        assert!(why.contains("/work/t.a.0/deeper") && why.contains("holds"), "{why}");
        assert!(first_clash(&cases[3].0, &cases[3].1).is_none(), "a clash among the others is not this apply's");
    }
}
