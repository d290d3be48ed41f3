//! The controller: wires informer -> queue -> workers, in the shape of
//! kubernetes/sample-controller (`Run`, `runWorker`, `processNextWorkItem`,
//! `syncHandler`), so a Go controller author finds each piece where expected.

use crate::wire::Wire;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pod::ApiPod;
use kube::Api;
use kube::runtime::watcher;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::faults::Faults;
use crate::informer::{self, Cache};
use crate::key::Key;
use crate::queue::Queue;
use crate::worker::Worker;
use crate::{metrics, probes};

/// A key that fails this many syncs in a row is dropped (`maxRetries` in
/// client-go's workqueue example and in kubewatch; sample-controller has no
/// limit and retries with backoff forever). Without a limit one broken key
/// would be retried forever.
pub const MAX_ATTEMPTS: u32 = 5;

/// How long shutdown waits for the workers to drain the queue before it gives
/// up on what is left. Kubernetes kills a pod 30 s after SIGTERM by default;
/// exiting well before that keeps our last log line ours.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How a run ended, for the exit code (see main.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every key queued or waiting for a retry at the shutdown was synced.
    Drained,
    /// `left` keys were not synced: the drain hit [`DRAIN_TIMEOUT`], or their
    /// last sync failed and shutdown left no time for another.
    Unsynced { left: usize },
}

pub struct Settings {
    pub workers: usize,
    /// Every `resync`, every key in the cache (not the server) is queued
    /// again (`None`: never). See [`Controller::resync`].
    pub resync: Option<Duration>,
    pub skip_existing: bool,
    /// The format the informer reads pods in (`--wire`; see wire.rs).
    pub wire: Wire,
    /// The media type protobuf is asked for under (None: the real one; the
    /// fault seam's `protobuf-accept` sets another).
    pub protobuf_accept: Option<String>,
    /// The test seam (see faults.rs); empty in normal runs, and then no
    /// layer is put around the syncs.
    pub faults: Faults,
}

pub struct Controller {
    /// The test seam's layer around every sync, when DEMO_CONTROLLER_FAULTS
    /// asks for one (faults.rs); `None` in normal runs.
    faults: Option<Faults>,
    /// Keys whose sync failed during the drain: no retry comes after a
    /// shutdown, so each is a key left unsynced (see [`Stopped`]).
    failed_in_drain: std::sync::atomic::AtomicUsize,
    api: Api<ApiPod>,
    watch: watcher::Config,
    cache: Arc<Cache>,
    queue: Arc<Queue<Key>>,
    worker: Worker,
    settings: Settings,
}

impl Controller {
    pub fn new(api: Api<ApiPod>, watch: watcher::Config, settings: Settings) -> Arc<Controller> {
        Controller::with_gate(api, watch, settings, crate::leader::Gate::leading())
    }

    /// A controller whose lines pass `gate` (`--leader-elect`: see leader.rs).
    pub fn with_gate(
        api: Api<ApiPod>,
        watch: watcher::Config,
        mut settings: Settings,
        gate: Arc<crate::leader::Gate>,
    ) -> Arc<Controller> {
        let cache = Cache::new();
        let faults = Some(std::mem::take(&mut settings.faults)).filter(Faults::wraps_syncs);
        let selector = watch.label_selector.is_some().then(|| api.clone());
        let mut worker = Worker::new(cache.clone(), settings.skip_existing, selector);
        worker.gate = gate;
        let failed_in_drain = Default::default();
        Arc::new(Controller { faults, failed_in_drain, api, watch, cache, queue: Queue::new("pods"), worker, settings })
    }

    /// The work queue, for the probes and the metrics.
    pub fn queue(&self) -> Arc<Queue<Key>> {
        self.queue.clone()
    }

    /// The watch as the elector sees it: its position, whether it is down,
    /// what its last list bounds (see catchup.rs).
    pub fn watch(&self) -> crate::catchup::Watch {
        crate::catchup::Watch::new(self.cache.clone())
    }

    /// Resolves once the cache holds the first list (the WaitForCacheSync
    /// of step 2 below), for the elector: a replica runs for the lease only
    /// warm, so a cold one (a rollout's new pod) never leads with nothing
    /// listed yet. Returns the newest resourceVersion among the pods cached
    /// then (see `Elector::run`). Never resolves if the informer is gone
    /// (then `run` returns, which ends the program).
    pub async fn synced(&self) -> Option<u64> {
        self.cache.synced().await;
        // Once, at start-up: O(pods), under a read lock the workers share.
        self.cache.newest_version()
    }

    // ANCHOR: run
    /// Runs until `shutdown` is cancelled, then drains and says how that went.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Stopped {
        // 1. Start the informer. Nothing is listed or watched until its future
        //    is polled, so it gets a task of its own.
        let informer = tokio::spawn(informer::run(
            self.api.clone(),
            self.watch.clone(),
            self.settings.wire,
            self.settings.protobuf_accept.clone(),
            self.cache.clone(),
            self.queue.clone(),
            shutdown.clone(),
        ));

        // 2. WaitForCacheSync. In client-go this gate keeps workers from
        //    reading a half-filled cache. Here the informer queues no key
        //    before the first InitDone, when the store swaps in the whole
        //    list at once (see informer.rs), so a worker started early would
        //    only wait in `get`: the log would be the same. What the gate
        //    guards in this design: readiness (/readyz turns 200 here, not
        //    before), the resync timer (started after it, so no tick reads an
        //    empty store and "resyncs" 0 pods), and the start-up lines in
        //    order (`cache synced` with the pod count, then `workers started`).
        //    It waits forever if the list keeps failing; the informer logs
        //    why at every retry, so the wait is never silent.
        info!("waiting for the first list of pods (cache sync)");
        let started = Instant::now();
        tokio::select! {
            _ = self.cache.synced() => {}
            _ = shutdown.cancelled() => {
                let _ = informer.await;
                info!(left = 0, "shutdown complete (before the cache synced)");
                return Stopped::Drained;
            }
        }
        info!(pods = self.cache.first_list_len(), elapsed_ms = started.elapsed().as_millis() as u64, "cache synced");
        probes::synced();

        // 3. The resync timer and the workers. With --leader-elect the
        //    workers first wait until this replica leads or knows the
        //    leader's mark (`decided`, at once without it): see leader.rs.
        tokio::select! {
            biased;
            () = self.worker.gate.decided() => {}
            () = shutdown.cancelled() => {
                // A replica that neither led nor knew a mark: no line to write.
                let _ = informer.await;
                info!(left = 0, "shutdown complete (before the workers started)");
                return Stopped::Drained;
            }
        }
        if let Some(period) = self.settings.resync {
            tokio::spawn(self.clone().resync(period, shutdown.clone()));
        }
        let mut workers = JoinSet::new();
        for _ in 0..self.settings.workers {
            workers.spawn(self.clone().run_worker());
        }
        info!(workers = self.settings.workers, "workers started");

        // 4. Shutdown: stop the watch first (no new keys), then close the
        //    queue and let the workers finish what it holds. Keys waiting for
        //    a retry get their last try now (`shut_down` queues them).
        shutdown.cancelled().await;
        probes::shutting_down();
        let _ = informer.await;
        self.queue.shut_down();
        let queued = self.queue.len();
        info!(queued, "shutting down: watch stopped, draining the queue");
        let drained = tokio::time::timeout(DRAIN_TIMEOUT, async { while workers.join_next().await.is_some() {} }).await;
        let failed = self.failed_in_drain.load(std::sync::atomic::Ordering::SeqCst);
        if drained.is_err() {
            // Stop the workers at their next await. That is never between two
            // lines of one key (worker.sync awaits only before its first
            // line), and it means no line follows this last one.
            workers.shutdown().await;
            let left = self.queue.len() + self.queue.in_flight().len() + failed;
            self.worker.gate.left_unsynced(); // its mark is not exact: no release
            warn!(left, "shutdown complete: drain timed out, the rest is dropped");
            Stopped::Unsynced { left }
        } else if failed > 0 {
            self.worker.gate.left_unsynced();
            warn!(left = failed, "shutdown complete: {failed} key(s) failed their last sync and were not retried");
            Stopped::Unsynced { left: failed }
        } else {
            info!(left = 0, "shutdown complete");
            Stopped::Drained
        }
    }
    // ANCHOR_END: run

    /// The resync period: queue every key of the *cache* again.
    ///
    /// A resync never asks the server: it re-reads the local cache, so it
    /// cannot catch a change the watch missed (that is the relist's job, when
    /// the watch fails or expires; see informer.rs). It exists for
    /// controllers whose actions on the outside world can drift or fail
    /// (a load balancer someone edited by hand, a cloud call that half
    /// succeeded): every period each object is synced again and its outside
    /// state re-checked. This logger acts on nothing outside, so here it
    /// shows the level-driven worker at work: the worker compares
    /// resourceVersions, and an unchanged pod logs nothing.
    async fn resync(self: Arc<Self>, period: Duration, shutdown: CancellationToken) {
        let mut ticker = resync_timer(period);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let keys = self.cache.keys();
            debug!(pods = keys.len(), "resync: queueing every cached pod");
            metrics::resynced();
            self.queue.add_all(keys);
        }
    }

    /// runWorker: process keys until the queue is shut down and empty.
    ///
    /// Between keys it gives the runtime a chance to run something else. On
    /// one thread, a worker with a long queue would otherwise never let the
    /// watch have a turn: `get` is ready at once while keys wait, and a sync
    /// usually has nothing to wait for (it reads the cache and writes a line;
    /// only a pod that left `--selector` makes it ask the server, with one
    /// LIST, and a stdout nobody reads blocks its line), so nothing else would
    /// run until the queue is empty. `consume_budget` counts against tokio's cooperative
    /// budget and yields once it is spent (every 128 keys or so), so the
    /// turn comes within milliseconds without paying for a yield per key.
    async fn run_worker(self: Arc<Self>) {
        let _running = probes::worker_running(); // for /healthz, until we return
        while self.process_next_work_item().await {
            tokio::task::consume_budget().await;
        }
    }

    // ANCHOR: process
    /// processNextWorkItem: take one key, sync it, and tell the queue how it
    /// went. Every path ends in `done`, or the key would be stuck forever.
    ///
    /// The retry path (backoff, `forget`, [`MAX_ATTEMPTS`]) only ever runs
    /// when a sync fails. In this logger nothing can make one fail but the
    /// test seam (faults.rs): reading the cache and writing a line do not
    /// fail. A real controller's sync calls the outside world (creates a
    /// Deployment, calls a cloud API) and fails for passing reasons; there the
    /// retry with a growing backoff is what makes it converge, and the limit
    /// stops one key that can never succeed from being retried forever.
    async fn process_next_work_item(&self) -> bool {
        let Some(key) = self.queue.get().await else {
            return false;
        };
        match self.sync_handler(&key).await {
            // Forget: the key's failure count starts over next time.
            Ok(()) => self.queue.forget(&key),
            Err(err) if self.queue.is_shutting_down() => {
                // No retry comes after a shutdown: the key stays unsynced.
                self.failed_in_drain.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                error!(%key, "sync of {key} failed during shutdown, not retried: {err}");
                self.queue.forget(&key);
            }
            Err(err) => {
                let attempts = self.queue.num_requeues(&key) + 1;
                if attempts < MAX_ATTEMPTS {
                    warn!(%key, attempts, "sync failed, retrying with backoff: {err}");
                    self.queue.add_rate_limited(key.clone());
                } else {
                    error!(%key, attempts, "dropping {key} from the queue after {attempts} failed syncs: {err}");
                    self.queue.forget(&key);
                    // What the cache held for its next sync (a deleted pod's
                    // final state, the initial-list mark) goes with it.
                    self.cache.release(&key);
                }
            }
        }
        self.queue.done(&key);
        true
    }
    // ANCHOR_END: process

    /// syncHandler: the worker's sync of one key (worker.rs). When the test
    /// seam is on, its layer wraps the call from outside (faults.rs).
    async fn sync_handler(&self, key: &Key) -> Result<(), SyncError> {
        // With --leader-elect, the mark follows the syncs that succeed (the
        // low watermark: see leader.rs, `Gate::synced`).
        let started = self.worker.gate.sync_started();
        let sync = async {
            self.worker.sync(key).await;
            Ok(())
        };
        let synced = match &self.faults {
            Some(faults) => faults.around(key, sync).await,
            None => sync.await,
        };
        if synced.is_ok() {
            self.worker.gate.synced(key, started);
        }
        synced
    }
}

/// Why a sync failed; the controller decides what to do about it (retry with
/// backoff, or drop). The worker's own sync cannot fail, so here only the
/// test seam makes one, standing in for what fails in a real controller's
/// sync: a call to the API or another system.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The test seam made it fail (see faults.rs).
    #[error(transparent)]
    Injected(#[from] crate::faults::Injected),
}

/// The resync timer: its first tick one period after start, then every
/// period. After a long pause (a stopped process, Ctrl-Z or SIGSTOP, or a
/// starved runtime; a suspended machine's monotonic clock stops too, so its
/// sleep misses no tick) the missed ticks are not fired in a burst: one
/// resync runs, and
/// the next is a full period after it (tokio's `MissedTickBehavior::Delay`;
/// the default, `Burst`, would queue every pod once per missed period).
pub fn resync_timer(period: Duration) -> tokio::time::Interval {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test(start_paused = true)]
    async fn a_resync_after_a_long_pause_fires_once_not_in_a_burst() {
        let period = Duration::from_secs(60);
        let mut ticker = resync_timer(period);
        assert!(ticker.tick().now_or_never().is_none(), "no tick at start");
        // Ten periods pass while nothing polls the timer (a paused process).
        tokio::time::advance(period * 10 + Duration::from_secs(1)).await;
        assert!(ticker.tick().now_or_never().is_some(), "one resync after the pause");
        assert!(ticker.tick().now_or_never().is_none(), "and no burst of the nine others");
        // The next is a full period after the late one.
        tokio::time::advance(period - Duration::from_millis(1)).await;
        assert!(ticker.tick().now_or_never().is_none());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(ticker.tick().now_or_never().is_some());
    }
}
