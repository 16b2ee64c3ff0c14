//! The man pages under man/ are what `steward man` generates from the clap definitions (plus the
//! hand-written section 5 pages), so the committed pages, and the packages that install them
//! from man/, never drift from the binaries. After changing the CLI:
//! `steward man man --date $(date +%F)` (see docs/packaging.md).

use std::collections::BTreeSet;
use std::path::Path;

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

#[test]
fn the_committed_pages_are_what_steward_man_generates() {
    let man = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    // The committed pages' date, read back: only the content may not differ.
    let top = std::fs::read_to_string(man.join("steward.1")).expect("man/steward.1 is committed");
    let date = top
        .lines()
        .find_map(|l| l.strip_prefix(".TH steward 1 "))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("man/steward.1 has a .TH line with a date")
        .to_string();
    let generated = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_steward"))
        .args(["man", generated.path().to_str().unwrap(), "--date", &date])
        .output()
        .unwrap();
    assert!(out.status.success(), "steward man: {}", String::from_utf8_lossy(&out.stderr));

    let made = names(generated.path());
    let hand_written: BTreeSet<String> = ["steward-spec.5", "stewardd.toml.5"].map(String::from).into();
    let committed: BTreeSet<String> = names(&man).difference(&hand_written).cloned().collect();
    assert_eq!(made, committed, "man/ holds exactly the generated pages and the hand-written ones");
    for page in ["stewardd.8", "steward.1", "steward-sched.1", "steward-logs.1"] {
        assert!(made.contains(page), "{page} is generated");
    }
    let stale: Vec<&String> = made
        .iter()
        .filter(|p| std::fs::read(generated.path().join(p)).unwrap() != std::fs::read(man.join(p)).unwrap())
        .collect();
    assert!(
        stale.is_empty(),
        "man/ pages differ from what `steward man` generates: {stale:?}; run `steward man man --date {date}` \
         (or today's date) and commit them"
    );
}
