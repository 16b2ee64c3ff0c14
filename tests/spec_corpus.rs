//! The spec corpus: every file under tests/specs/valid must validate; every file under
//! tests/specs/invalid must produce exactly the error list in its `.errors` twin.
//! Set STEWARD_BLESS=1 to (re)write the `.errors` files from the current output, then review them.

use std::path::{Path, PathBuf};
use steward::config::Config;
use steward::spec;

fn corpus(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs").join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("json" | "toml")))
        .collect();
    files.sort();
    files
}

fn error_lines(file: &Path) -> Vec<String> {
    match spec::load_file(file, &Config::default().roots()) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn valid_specs_validate() {
    let files = corpus("valid");
    assert!(files.len() >= 4, "the valid corpus is missing");
    for file in files {
        let errors = error_lines(&file);
        assert!(errors.is_empty(), "{} should be valid:\n  {}", file.display(), errors.join("\n  "));
    }
}

#[test]
fn invalid_specs_report_exactly_their_errors() {
    let bless = std::env::var_os("STEWARD_BLESS").is_some();
    let files = corpus("invalid");
    assert!(files.len() >= 20, "the invalid corpus is missing");
    let mut failures = Vec::new();
    for file in files {
        let got = error_lines(&file);
        assert!(!got.is_empty(), "{} should be invalid but validated", file.display());
        let expected_file = file.with_extension("errors");
        if bless {
            std::fs::write(&expected_file, got.join("\n") + "\n").unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_file)
            .unwrap_or_else(|e| panic!("{}: {e} (run with STEWARD_BLESS=1)", expected_file.display()));
        let expected: Vec<&str> = expected.lines().filter(|l| !l.trim().is_empty()).collect();
        if got != expected {
            failures.push(format!(
                "{}\n  expected:\n    {}\n  got:\n    {}",
                file.display(),
                expected.join("\n    "),
                got.join("\n    ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_errors_file_has_its_spec() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs/invalid");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) == Some("errors") {
            let has_spec = ["json", "toml"].iter().any(|ext| path.with_extension(ext).exists());
            assert!(has_spec, "{} has no spec beside it", path.display());
        }
    }
}
