//! Before a launch: the instance rendered for this run (and kept for the run's stop, restart,
//! reload and checks), its run directory, the workload's own setup, and its packages fetched.

use super::messages::{next_interrupt, Command, Reply};
use super::workload::Workload;
use super::{cx, Actor};
use crate::runtime::process::ResolvedUser;
use crate::spec::{self, RenderContext, RenderedInstance};
use std::sync::Arc;
use std::time::Duration;

impl<W: Workload> Actor<W> {
    /// Everything before launching: render, the run directory, then the workload's setup
    /// (users, directories, secrets, cgroup).
    pub(super) fn stage(&mut self) -> Result<Arc<RenderedInstance>, String> {
        // This start runs the spec as it is now, whatever comes of it.
        self.rec.run_generation = self.spec.generation;
        self.rec.run_revision = self.spec.revision;
        self.rec.ports = if self.spec.spec.on_cni(self.shared.cni_mode) {
            // Its ports are its own address's (what `steward ls` lists, and PORT_<name>).
            self.spec.spec.cni_ports()
        } else {
            self.shared.ports.lock().expect("ports lock").ports_of(&self.rec.key())
        };
        let unchanged = self
            .rendered_from
            .as_ref()
            .is_some_and(|(spec, ports)| Arc::ptr_eq(spec, &self.spec) && *ports == self.rec.ports);
        let rendered = match self.rendered.clone().filter(|_| unchanged) {
            Some(r) => r,
            None => {
                let r = Arc::new(self.render()?);
                self.rendered = Some(r.clone());
                self.rendered_from = Some((self.spec.clone(), self.rec.ports.clone()));
                r
            }
        };
        // Logs and position files go there as root: it must be the daemon's (not, say, a
        // directory another instance's workload made and owns). Made at the first start only.
        let run_dir = match crate::safefs::open_daemon_dir(&rendered.run_dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::safefs::create_dirs_under(&self.shared.root_dirs.run, &rendered.run_dir, 0, 0)
                    .map_err(|e| format!("cannot create {}: {e}", rendered.run_dir.display()))?;
                crate::safefs::open_daemon_dir(&rendered.run_dir)
            }
            opened => opened,
        };
        let run_dir = run_dir.map_err(|e| format!("run directory {e}"))?;
        self.workload.prepare(&mut cx!(self), &rendered, run_dir)?;
        Ok(rendered)
    }

    /// Fetches every uri of every process into its outputDir (seed 000), reporting bytes so far
    /// in the status message. A stop or restart request interrupts it (dropping a fetch is safe).
    pub(super) async fn fetch_packages(
        &mut self,
        rendered: &RenderedInstance,
    ) -> Result<Option<(Command, Option<Reply>)>, String> {
        if !W::FETCHES_PACKAGES {
            return Ok(None);
        }
        for p in &rendered.processes {
            if p.uris.is_empty() {
                continue;
            }
            let user = ResolvedUser::lookup(&p.user)?;
            for uri in &p.uris {
                let counted = std::sync::atomic::AtomicU64::new(0);
                let (journal, counters) = (&self.journal, &self.shared.counters);
                let progress = |bytes: u64, total: Option<u64>| {
                    let before = counted.swap(bytes, std::sync::atomic::Ordering::Relaxed);
                    counters.fetch_bytes.fetch_add(bytes.saturating_sub(before), std::sync::atomic::Ordering::Relaxed);
                    let of = total.map(|t| format!(" of {t}")).unwrap_or_default();
                    journal.show_progress(format!("fetching {}: {bytes}{of} bytes", uri.value));
                };
                let fetch = self.shared.fetcher.fetch(uri, &user, &progress);
                let result = tokio::select! {
                    r = fetch => r,
                    interrupt = next_interrupt(&mut self.rx, &self.marks) => return Ok(Some(interrupt)),
                };
                match result {
                    Ok(f) => {
                        tracing::info!(instance = %self.rec.id, "fetched {} ({} bytes, sha256 {})", uri.value, f.bytes, f.sha256)
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
        Ok(None)
    }

    /// Whether staging downloads anything (then it is long, and Staging is committed first).
    pub(super) fn needs_fetch(&self) -> bool {
        W::FETCHES_PACKAGES && self.spec.spec.spec.template.spec.processes.iter().any(|p| !p.uris.is_empty())
    }

    /// The rendering of the current run (see `rendered`), made now if there is none yet.
    pub(super) fn rendered(&mut self) -> Result<Arc<RenderedInstance>, String> {
        if let Some(r) = &self.rendered {
            return Ok(r.clone());
        }
        let r = Arc::new(self.render()?);
        self.rendered = Some(r.clone());
        Ok(r)
    }

    /// Makes sure the current run's rendering is at hand for the workload (see `rendered`);
    /// a spec that no longer renders leaves it out, and the workload does without.
    pub(super) fn ensure_rendered(&mut self) {
        let _ = self.rendered();
    }

    /// The stop's grace period of what runs (its rendering; the spec's if it cannot render).
    pub(super) fn kill_grace(&mut self) -> Duration {
        let secs = match self.rendered() {
            Ok(r) => r.kill_grace_period_secs,
            Err(_) => self.spec.spec.kill_policy.grace_period,
        };
        Duration::from_secs(secs)
    }

    /// Renders the spec as it is now, for this instance (a start does; see `rendered`).
    fn render(&self) -> Result<RenderedInstance, String> {
        let ctx = RenderContext {
            roots: &self.shared.roots,
            host_ip: self.shared.host_ip.clone(),
            allocated_ports: &self.rec.ports,
        };
        // Any index: a rollout's surge instances have ids from spec.instance up (the apply and
        // the rollout decide which ids exist).
        spec::render::render_any_index(&self.spec.spec, self.rec.id.index, &ctx).map_err(|e| e.to_string())
    }

    /// Holds a place among the launches in progress (see `Shared::launches`) unless it has one.
    pub(super) async fn take_launch_place(&mut self) {
        if self.launch_permit.is_some() {
            return;
        }
        self.launch_permit = match self.shared.launches.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                // Waiting our turn may take a while: what happened so far must show meanwhile.
                self.flush_unjournaled().await;
                self.shared.launches.clone().acquire_owned().await.ok()
            }
        };
    }
}
