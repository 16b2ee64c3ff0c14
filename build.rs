//! Builds the pod network holder (src/runtime/docker/pause.c): a static program of a few
//! hundred bytes, without libc, that stewardd imports as the `steward-pause` image when a pod
//! first needs one. `cc` is the C compiler rustc links with, so it is where Steward builds.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "src/runtime/docker/pause.c";
    println!("cargo:rerun-if-changed={source}");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("pause");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-static", "-nostdlib", "-Os", "-fno-stack-protector", "-fno-asynchronous-unwind-tables"])
        .args(["-Wl,--build-id=none", "-s", "-o"])
        .arg(&out)
        .arg(source)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc} to build {source}: {e}"));
    assert!(status.success(), "{cc} could not build {source}");
}
