//! demo-controller as a library: the modules of the pod event logger, so the
//! binary (src/main.rs), the tutorial chapters (examples/) and the tests can
//! use the same pieces, the way Go controllers import client-go's workqueue.
//!
//! The path of one pod change, module by module:
//!
//! ```text
//! controller  Run: informer, wait for cache sync, resync, workers,
//!             processNextWorkItem, shutdown
//! informer    watch -> cache (Store) -> `namespace/name` keys
//! queue       the de-duplicating, rate-limited work queue
//! worker      the sync handler: cache vs last synced -> onAdd/onUpdate/onDelete
//! line        the line itself: the change, and how it is written
//! ```
//!
//! Around that core, one concept each: pod (what of a pod we keep and show),
//! text (server text made safe for a line), describe (the words for what
//! changed, as kubectl describe says it), cli
//! (flags), client (kubeconfig and clear errors), leader (leader election
//! and the warm standby), catchup (whether a replica's cache is caught up
//! enough to lead), scope (what a leader's mark was written for, and whose
//! release stamp it is), logging, signals (and the
//! side thread that hears them), probes (/readyz, /healthz), metrics
//! (/metrics), wire (pods in JSON or in protobuf, the API server's own
//! format, read by the workspace's kube-pod-protobuf crate) and faults (the
//! test seam).

pub mod catchup;
pub mod cli;
pub mod client;
pub mod controller;
pub mod describe;
pub mod faults;
pub mod informer;
pub mod key;
pub mod leader;
pub mod line;
pub mod logging;
pub mod metrics;
pub mod pod;
pub mod probes;
pub mod queue;
pub mod scope;
pub mod signals;
pub mod text;
pub mod wire;
pub mod worker;
