//! cpuset / NUMA placement of a container by seed 001's rules:
//! - no binding asked for (`cpuSet`), or more cpus than the machine has: no cpuset;
//! - one NUMA node: cpus chosen at random from it, no cpuset-mems;
//! - several: one node chosen at random among those with enough cpus, cpus at random from it,
//!   cpuset-mems set to that node;
//! - no single node has enough cpus (the request would span every node): no cpuset, as
//!   spanning NUMA nodes is not supported.

use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: u32,
    pub cpus: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Topology {
    pub nodes: Vec<Node>,
}

impl Topology {
    /// Reads `<root>/node<N>/cpulist` (root: `/sys/devices/system/node`). Without a readable
    /// node tree (no NUMA support), one node holding every online cpu.
    pub fn read(root: &Path) -> Topology {
        let mut nodes = Vec::new();
        for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let Some(id) = name.strip_prefix("node").and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Ok(text) = std::fs::read_to_string(entry.path().join("cpulist")) else { continue };
            let cpus = parse_cpulist(&text);
            if !cpus.is_empty() {
                nodes.push(Node { id, cpus });
            }
        }
        nodes.sort_by_key(|n| n.id);
        if nodes.is_empty() {
            let n = std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1);
            nodes.push(Node { id: 0, cpus: (0..n).collect() });
        }
        Topology { nodes }
    }

    pub fn cpu_count(&self) -> usize {
        self.nodes.iter().map(|n| n.cpus.len()).sum()
    }
}

/// `0-3,6,8-9` → [0, 1, 2, 3, 6, 8, 9]. Malformed parts are skipped.
pub fn parse_cpulist(text: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    cpus.extend(a..=b);
                }
            }
            None => cpus.extend(part.parse::<u32>().ok()),
        }
    }
    cpus
}

/// Where a container is pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub cpus: Vec<u32>,
    /// The NUMA node for cpuset-mems (None on a single-node machine).
    pub mems: Option<u32>,
}

impl Placement {
    /// docker's `--cpuset-cpus` text: `1,3,4`.
    pub fn cpus_text(&self) -> String {
        self.cpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    }
}

/// Seed 001's placement of a container wanting `cores` cpus (rounded up); `random_below(n)`
/// picks in 0..n. None: no cpuset at all.
pub fn place(
    topology: &Topology,
    cores: f64,
    bind: bool,
    random_below: &mut dyn FnMut(usize) -> usize,
) -> Option<Placement> {
    if !bind || cores <= 0.0 {
        return None;
    }
    let need = cores.ceil() as usize;
    if need > topology.cpu_count() {
        return None;
    }
    let fitting: Vec<&Node> = topology.nodes.iter().filter(|n| n.cpus.len() >= need).collect();
    if fitting.is_empty() {
        return None;
    }
    let node = fitting[random_below(fitting.len())];
    // A random choice of `need` cpus: a partial Fisher-Yates shuffle.
    let mut pool = node.cpus.clone();
    for i in 0..need {
        let j = i + random_below(pool.len() - i);
        pool.swap(i, j);
    }
    let mut cpus = pool[..need].to_vec();
    cpus.sort_unstable();
    let mems = (topology.nodes.len() > 1).then_some(node.id);
    Some(Placement { cpus, mems })
}

/// A random number in 0..n from the clock and a counter (placement needs spread, not secrecy).
pub fn random_below(n: usize) -> usize {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut x = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ nanos;
    // splitmix64 finalizer
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x % n.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture `/sys/devices/system/node` tree.
    fn fixture(nodes: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (i, cpulist) in nodes.iter().enumerate() {
            let node = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(&node).unwrap();
            std::fs::write(node.join("cpulist"), format!("{cpulist}\n")).unwrap();
        }
        // Files that are not nodes are ignored.
        std::fs::write(dir.path().join("online"), "0-1\n").unwrap();
        std::fs::create_dir_all(dir.path().join("power")).unwrap();
        dir
    }

    #[test]
    fn cpulists_parse() {
        assert_eq!(parse_cpulist("0-3,6,8-9\n"), vec![0, 1, 2, 3, 6, 8, 9]);
        assert_eq!(parse_cpulist(""), Vec::<u32>::new());
        assert_eq!(parse_cpulist("4"), vec![4]);
    }

    #[test]
    fn topology_is_read_from_the_node_tree() {
        let dir = fixture(&["0-3", "4-7"]);
        let t = Topology::read(dir.path());
        assert_eq!(t.nodes, vec![Node { id: 0, cpus: vec![0, 1, 2, 3] }, Node { id: 1, cpus: vec![4, 5, 6, 7] }]);
        assert_eq!(t.cpu_count(), 8);
        // No tree at all: one node with the online cpus.
        let none = Topology::read(&dir.path().join("missing"));
        assert_eq!(none.nodes.len(), 1);
    }

    #[test]
    fn placement_follows_seed_001() {
        let two = Topology::read(fixture(&["0-3", "4-7"]).path());
        let mut first = |_n: usize| 0;
        // Not asked for, or more than the machine has: nothing.
        assert_eq!(place(&two, 2.0, false, &mut first), None);
        assert_eq!(place(&two, 9.0, true, &mut first), None);
        // Would span both nodes (no node has 6 cpus): nothing.
        assert_eq!(place(&two, 6.0, true, &mut first), None);
        // Fits in one node: that node's cpus, and its memory.
        let p = place(&two, 1.5, true, &mut first).unwrap();
        assert_eq!(p.cpus.len(), 2);
        assert_eq!(p.mems, Some(0));
        assert!(p.cpus.iter().all(|c| *c < 4), "{p:?}");
        let mut last = |n: usize| n - 1;
        let p = place(&two, 3.0, true, &mut last).unwrap();
        assert_eq!(p.mems, Some(1));
        assert!(p.cpus.iter().all(|c| (4..8).contains(c)), "{p:?}");
        assert_eq!(p.cpus_text().split(',').count(), 3);
        // One node: cpus, but no cpuset-mems.
        let one = Topology::read(fixture(&["0-7"]).path());
        let p = place(&one, 2.0, true, &mut first).unwrap();
        assert_eq!(p.mems, None);
        assert_eq!(p.cpus.len(), 2);
    }

    #[test]
    fn random_placement_stays_in_one_node_and_spreads() {
        let t = Topology::read(fixture(&["0-3", "4-7", "8-9"]).path());
        let mut seen_nodes = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let p = place(&t, 3.0, true, &mut random_below).unwrap();
            let node = p.mems.unwrap();
            // Node 2 has only 2 cpus: never chosen for 3.
            assert_ne!(node, 2);
            let cpus = &t.nodes[node as usize].cpus;
            assert!(p.cpus.iter().all(|c| cpus.contains(c)), "{p:?}");
            let distinct: std::collections::BTreeSet<_> = p.cpus.iter().collect();
            assert_eq!(distinct.len(), 3);
            seen_nodes.insert(node);
        }
        assert_eq!(seen_nodes.len(), 2, "both fitting nodes get chosen");
    }
}
