//! `steward cp` into a process instance (seed 001's local file): the file goes below one of the
//! instance's workPaths — the confinement every path of a process spec has — written as the
//! daemon writes secret files (by descriptor, never through a symlink, atomically), owned by
//! the process's user unless another is asked for.

use crate::protocol::FileCopied;
use crate::spec::RenderedInstance;
use crate::supervisor::instance::FileCopy;
use crate::supervisor::values::resolve_owner;
use std::path::PathBuf;

/// Writes `file` for `rendered`'s process (`file.target`, else the first).
pub(super) fn copy_in(rendered: &RenderedInstance, file: &FileCopy) -> Result<FileCopied, String> {
    let process = match &file.target {
        Some(name) => rendered.processes.iter().find(|p| &p.proc_name == name).ok_or_else(|| {
            let names: Vec<&str> = rendered.processes.iter().map(|p| p.proc_name.as_str()).collect();
            format!("no process {name:?} in the instance (it has {})", names.join(", "))
        })?,
        None => rendered.processes.first().ok_or("the instance has no process")?,
    };
    let roots: Vec<&PathBuf> = rendered.processes.iter().map(|p| &p.work_path).collect();
    let path = crate::spec::render::confine(&file.path, Some(&process.work_path), &roots).map_err(|why| {
        let dirs: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        format!("path {:?} {why}; a file goes into the instance's own workPath ({})", file.path, dirs.join(", "))
    })?;
    let root = roots.iter().find(|r| path.starts_with(r)).copied().unwrap_or(&process.work_path);
    if path == *root {
        return Err(format!("path {:?} is the workPath itself, not a file in it", file.path));
    }
    let owner = file.user.clone().unwrap_or_else(|| process.user.clone());
    let (uid, gid) = resolve_owner(&owner)?;
    // The workPath is there (the instance runs): one that is not, or is a symlink the workload
    // planted in its place, is refused before anything is made.
    crate::safefs::open_workload_dir(root, None).map_err(|e| format!("cannot write into {}: {e}", root.display()))?;
    if let Some(dir) = path.parent().filter(|d| d != root) {
        crate::safefs::create_dirs(root, dir, uid, gid).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    crate::safefs::replace_file(&path, &file.data, file.mode(), uid, gid).map_err(|e| e.to_string())?;
    Ok(FileCopied {
        path: path.display().to_string(),
        bytes: file.data.len() as u64,
        container: None,
        owner: format!("{uid}:{gid}"),
        mode: format!("{:04o}", file.mode()),
    })
}
