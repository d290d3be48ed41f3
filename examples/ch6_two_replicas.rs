//! Chapter 6: two replicas, one Lease.
//!
//! ```sh
//! cargo run --example ch6_two_replicas -- -n default    # in two terminals
//! cargo run --example ch6_two_replicas -- -n default --pitfall keep-logging
//! ```
//!
//! Two copies of chapter 4's controller would log every event twice. So both
//! copies run the controller (watch, cache, queue, worker), and a small
//! elector on a coordination.k8s.io/v1 Lease decides which one writes the
//! lines: the holder of the Lease, the leader. The other is a warm standby.
//! Its cache is synced and its worker takes every change in, without a line.
//!
//! What a new leader logs: the changes its worker takes after it leads, and
//! nothing before. It does not log again the pods it took in while it stood
//! by. A change made while no replica leads is logged by none. The full
//! program's `--leader-elect` closes that gap with a mark on the Lease (the
//! book's appendix: "Two replicas in production: the warm standby").
//!
//! A Lease deleted by hand is, to each replica, still what it last read. The
//! leader makes it again at its next try, and goes on leading. A standby
//! takes it only once it has seen it missing for a lease duration.
//!
//! `--pitfall keep-logging` makes the leader ignore its renew deadline.
//! Pause it (Ctrl-Z, or SIGSTOP) longer than the lease while the other takes
//! over, resume it, and both log the same pods.

use std::time::{Duration, Instant};
use std::{collections::HashMap, hash::BuildHasher, hash::RandomState, process::ExitCode, sync::Arc};

use futures::StreamExt;
use k8s_openapi::api::{coordination::v1::Lease, coordination::v1::LeaseSpec, core::v1::Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher, watcher::Event};
use kube::{Api, Client, ResourceExt, api::PostParams};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// The Lease both replicas run for, in the namespace of the pods.
const LEASE_NAME: &str = "ch6-two-replicas";

/// A pod's key on the queue: kube's reference to it, its namespace and name.
type Key = ObjectRef<Pod>;

#[derive(clap::Parser)]
struct Args {
    /// The namespace of the pods and of the Lease
    #[arg(short, long)]
    namespace: String,
    /// A standby takes the lease once it saw it unchanged this many seconds. The renew deadline is 2/3 of it, the
    /// retry period 2/15 (client-go's 15s, 10s and 2s)
    #[arg(long, default_value_t = 15, value_name = "SECONDS", value_parser = clap::value_parser!(i32).range(1..))]
    lease_duration: i32,
    /// keep-logging: the leader keeps logging after its renew deadline (a classic mistake, on purpose)
    #[arg(long, value_parser = ["keep-logging"])]
    pitfall: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    run(clap::Parser::parse()).await.unwrap_or_else(|err| {
        eprintln!("error: {err}");
        ExitCode::FAILURE
    })
}

// ANCHOR: run
async fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let client = Client::try_default().await?;
    let ns = &args.namespace;
    // HOSTNAME is the pod's name in a pod. The random suffix tells apart two
    // replicas on one machine, and a restarted replica from its old self.
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "replica".into());
    let me = format!("{host}_{:08x}", RandomState::new().hash_one(std::process::id()) as u32);
    println!("chapter 6: {me} runs for the lease {ns}/{LEASE_NAME}; only its holder logs");

    // At least 1 (the flag's parser checks it), so the cast keeps the value.
    let lease_duration = Duration::from_secs(args.lease_duration as u64);
    // A renew lets us log until the renew deadline, 2/3 of the lease duration
    // (client-go's 10 s of 15 s). The pitfall: a day, so the lines never stop.
    let logs_for = if args.pitfall.is_some() { Duration::from_secs(86_400) } else { lease_duration * 2 / 3 };
    let leadership = Arc::new(Leadership { last_renew: Default::default(), logs_for });
    let mut elector = Elector::new(Api::namespaced(client.clone(), ns), me, lease_duration, leadership.clone());

    let (store, writer) = reflector::store();
    let (queue, keys) = unbounded_channel();
    let watch = tokio::spawn(watch_pods(Api::namespaced(client, ns), writer, store.clone(), queue));
    store.wait_until_ready().await?;
    println!("cache synced (pods: {})", store.len());
    // Only a warm replica runs for the lease. Its first try comes before the
    // worker starts: a leader logs the first list, a standby takes it in.
    elector.try_once().await;
    let worker = tokio::spawn(run_worker(store, keys, leadership));
    println!("worker started");

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let signal_name = tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = sigterm.recv() => "SIGTERM",
        // Lost: client-go's OnStoppedLeading. Exit, and come back as a standby.
        () = elector.run() => return Ok(ExitCode::FAILURE),
    };
    // Stop the watch, drain the queue, give the lease up. The drain is short.
    // One that outlasted the renew deadline would write no more lines (it
    // never renews), and so would log nothing twice.
    watch.abort();
    println!("received {signal_name}: watch stopped, draining the queue");
    worker.await?;
    elector.release().await.unwrap_or_else(|err| println!("cannot release the lease, it will expire: {err}"));
    println!("shutdown complete");
    Ok(ExitCode::SUCCESS)
}
// ANCHOR_END: run

/// Whether this replica leads. The elector writes it, the worker reads it.
struct Leadership {
    /// When the last renew that succeeded started (None: never led). A watch
    /// channel serves as a cell both tasks share: it has no lock to poison.
    last_renew: tokio::sync::watch::Sender<Option<Instant>>,
    /// How long a renew lets us lead: the renew deadline.
    logs_for: Duration,
}

impl Leadership {
    /// Whether the last renew is younger than the renew deadline. The worker
    /// asks before each line, not only the elector when it wakes up: a paused
    /// process resumes them in any order.
    fn leads(&self) -> bool {
        self.last_renew.borrow().is_some_and(|at| at.elapsed() < self.logs_for)
    }
}

// ANCHOR: worker
/// The watch: the key of each change goes on the queue, and every key of a
/// list once the store holds it (InitDone). A send fails only once the
/// worker is gone.
async fn watch_pods(api: Api<Pod>, writer: Writer<Pod>, store: Store<Pod>, queue: UnboundedSender<Key>) {
    let events = watcher::watcher(api, watcher::Config::default()).default_backoff().reflect(writer);
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Apply(pod) | Event::Delete(pod)) => _ = queue.send(Key::from_obj(&pod)),
            Ok(Event::InitDone) => store.state().iter().for_each(|pod| _ = queue.send(Key::from_obj(pod))),
            Ok(_) => {}
            Err(err) => println!("watch error (the watcher retries): {err}"),
        }
    }
}

/// The worker. A plain channel stands in for chapter 4's queue: a key sent
/// twice is synced twice, and the second sync finds nothing changed. Both
/// replicas sync every key; only the leader prints the line.
async fn run_worker(store: Store<Pod>, mut keys: UnboundedReceiver<Key>, leadership: Arc<Leadership>) {
    // Each pod's resourceVersion at its last sync.
    let mut synced = HashMap::new();
    while let Some(key) = keys.recv().await {
        let Some(change) = sync(&store, &mut synced, &key) else { continue };
        if leadership.leads() {
            println!("{change}: {}/{}", key.namespace.as_deref().unwrap_or_default(), key.name);
        }
    }
}

/// Chapter 4's sync handler: compare the pod in the cache with the version
/// it had at its last sync, and name the change (None: nothing changed).
fn sync(store: &Store<Pod>, synced: &mut HashMap<Key, String>, key: &Key) -> Option<&'static str> {
    let now = store.get(key).map(|pod| pod.resource_version().unwrap_or_default());
    let last = if let Some(version) = &now { synced.insert(key.clone(), version.clone()) } else { synced.remove(key) };
    match (last, now) {
        (None, Some(_)) => Some("onAdd"),
        (Some(_), None) => Some("onDelete"),
        (Some(last), Some(now)) if last != now => Some("onUpdate"),
        _ => None,
    }
}
// ANCHOR_END: worker

/// One candidate for the Lease: client-go's LeaderElector, small.
struct Elector {
    api: Api<Lease>,
    me: String,
    lease_duration: Duration,
    leadership: Arc<Leadership>,
    /// The Lease's spec as we last read or wrote it. It stands in for a
    /// Lease that was deleted: that one is still its holder's, until we have
    /// seen it missing for a lease duration.
    spec: LeaseSpec,
    /// Its resourceVersion then (None: no Lease, so a write creates it).
    version: Option<String>,
    /// Since when we have seen that version, on our own clock.
    since: Instant,
}

impl Elector {
    fn new(api: Api<Lease>, me: String, lease_duration: Duration, leadership: Arc<Leadership>) -> Self {
        Self { api, me, lease_duration, leadership, spec: LeaseSpec::default(), version: None, since: Instant::now() }
    }

    // ANCHOR: try
    /// client-go's tryAcquireOrRenew: read the Lease, decide, and write it if
    /// it is ours to write.
    async fn try_acquire_or_renew(&mut self) -> kube::Result<()> {
        let started = Instant::now();
        let lease = self.api.get_opt(LEASE_NAME).await?;
        self.observe(lease, started);
        let Some(line) = self.decide() else { return Ok(()) };
        match self.write(Some(self.me.clone())).await {
            // Another candidate wrote since we read (409), or the Lease was
            // deleted (404): the next try reads it again.
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => return Ok(()),
            written => self.observe(Some(written?), started),
        }
        if !line.is_empty() {
            println!("{line}");
        }
        // From before the read: the others count from when they saw it.
        self.leadership.last_renew.send_replace(Some(started));
        Ok(())
    }

    /// Remember what we read (client-go's observed record), and say whom we
    /// stand by for when the holder changes (its OnNewLeader). Expiry is
    /// measured on our own clock, from when we first saw this version: the
    /// clocks of two machines are never compared. A missing Lease keeps the
    /// spec we had.
    fn observe(&mut self, lease: Option<Lease>, now: Instant) {
        let version = lease.as_ref().and_then(|lease| lease.resource_version());
        if version != self.version {
            (self.version, self.since) = (version, now);
        }
        let Some(spec) = lease.map(|lease| lease.spec.unwrap_or_default()) else { return };
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        if spec.holder_identity != self.spec.holder_identity && !holder.is_empty() && holder != self.me {
            println!("standing by: {holder} leads");
        }
        self.spec = spec;
    }

    /// Whether to write the Lease now, and the line to print once that
    /// succeeded (empty for a plain renew). None: stand by.
    fn decide(&self) -> Option<String> {
        let missing = self.version.is_none();
        let holder = self.spec.holder_identity.as_deref().unwrap_or_default();
        let expired = self.since.elapsed().as_secs_f64() >= f64::from(self.spec.lease_duration_seconds.unwrap_or(0));
        match holder {
            "" if missing => Some("became leader: created the lease".into()),
            "" => Some("became leader: the lease was released".into()),
            me if me == self.me && missing => Some("the lease was deleted: made it again, still leading".into()),
            me if me == self.me => Some(String::new()),
            holder if expired => Some(format!("became leader: the lease of {holder} expired")),
            _ => None,
        }
    }

    /// Write the Lease with `holder` in it. It carries the resourceVersion we
    /// read: if another candidate wrote since, the API server answers 409
    /// Conflict (or 409 AlreadyExists, to a create).
    async fn write(&self, holder: Option<String>) -> kube::Result<Lease> {
        let mut lease = Lease { spec: Some(self.spec.clone()), ..Lease::default() };
        lease.metadata.name = Some(LEASE_NAME.into());
        lease.metadata.resource_version = self.version.clone();
        let spec = lease.spec.get_or_insert_default();
        spec.holder_identity = holder;
        // It fits: it came from the flag's i32.
        spec.lease_duration_seconds = Some(self.lease_duration.as_secs() as i32);
        // A new renew time at every write: a write that changed nothing would
        // keep the resourceVersion, and the standby would see the Lease expire.
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        match self.version {
            None => self.api.create(&PostParams::default(), &lease).await,
            Some(_) => self.api.replace(LEASE_NAME, &PostParams::default(), &lease).await,
        }
    }
    // ANCHOR_END: try

    // ANCHOR: loop
    /// Every retry period, a try. Returns once no renew succeeded within the
    /// renew deadline.
    async fn run(&mut self) {
        // The retry period: 2/15 of the lease duration (client-go's 2 s of 15 s).
        let mut ticker = tokio::time::interval(self.lease_duration * 2 / 15);
        loop {
            ticker.tick().await;
            // Led once, and no longer.
            if self.leadership.last_renew.borrow().is_some() && !self.leadership.leads() {
                println!("lost the lease: no renew within the renew deadline, exiting (exit code 1)");
                return;
            }
            self.try_once().await;
        }
    }

    /// One try. A try that hangs is given up at the renew deadline.
    async fn try_once(&mut self) {
        match tokio::time::timeout(self.lease_duration * 2 / 3, self.try_acquire_or_renew()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => println!("cannot reach the lease (retrying): {err}"),
            Err(_) => println!("cannot reach the lease (retrying): no answer within the renew deadline"),
        }
    }

    /// After the drain: give the lease up (clear its holder), so that the
    /// standby takes it at its next try, not a lease duration later. Only a
    /// Lease we hold: past the renew deadline it may be another's.
    async fn release(&mut self) -> kube::Result<()> {
        if self.leadership.leads() {
            self.write(None).await?;
            println!("released the lease");
        }
        Ok(())
    }
    // ANCHOR_END: loop
}
