//! The wire: every body the API sends or takes, the journal's event bodies, and what
//! steward-sched prints and journals, typed once. The API, the client, the CLI and the
//! scheduler plugin read and write only these; docs/openapi.json documents them and
//! tests/openapi.rs checks each variant's serde output against its schema.
//!
//! The JSON is the contract: field names, their spelling and their order are what the daemon
//! has always sent, so a type here may gain optional fields but never rename one.
//!
//! This module depends only on the data it carries (spec ids and limits, the runtime's exit
//! status and container info, health results), never on the supervisor or the API.

pub mod bodies;
pub mod endpoints;
pub mod event;
pub mod job;
pub mod node;
pub mod rollout;
pub mod sched;
pub mod sched_answers;
pub mod sched_api;
pub mod sched_records;
pub mod state;
pub mod status;

pub use crate::health::Health;
pub use crate::runtime::docker::ContainerInfo;
pub use bodies::{
    Applied, Deleted, ErrorBody, ErrorResponse, HealthBody, KeptVolume, LogLine, ValuesBody, ValuesList, ValuesSummary,
    VolumeList,
};
pub use endpoints::{AppEndpoints, Endpoint, EndpointsList, OrdinalNames, PodNames, ServiceEntry};
pub use event::{
    ContainerExited, DaemonEvent, Event, EventBody, FileCopied, HealthChanged, Heartbeat, ImagePulled, InstanceChange,
    InstanceEvent, NoDetail, OomKilled, ReadyChanged, RestartedBy, RolloutSteps, SpecUpdated, StreamLine, Transition,
};
pub use job::{CronBody, CronExecution, CronList, CronStatus, JobBody, JobList, JobPhase, JobRun, JobStatus, RunPhase};
pub use node::{
    AppOnNode, DesiredMark, DesiredOutcome, HostDesired, InstanceOnNode, JournalBounds, NodeDocument, PortRange,
    PortsDocument, ResourcesDocument,
};
pub use rollout::{
    RevisionInfo, RevisionList, RevisionSpec, Rollout, RolloutBody, RolloutPhase, RolloutProgress, ScaleIn,
    ScaleInPhase, UndoRequest,
};
pub use sched::{DeployCause, DesiredChange, NodeItem, NodeLine, NodeState, SchedEvent, SchedLine, WatchLine};
pub use sched_api::{
    AppDetail, ConfigValue, Constraint, CopiedOnNode, CordonRequest, Cursors, DependencyRequest, DeployRequest,
    Deployed, DrainRequest, DriftRequest, EngineRun, EngineRunBody, HookRunRequest, InstanceRequest,
    MaintenanceRequest, Removed, RunFound, RunsListing, ScaleRequest, UrlRequest, Whoami, NOTES_HEADER,
    UNREACHABLE_HEADER,
};
pub use state::{ExitStatus, Kind, State, StopGoal};
pub use status::{InstanceList, InstanceStatus, Usage};
