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
//! `--pitfall keep-logging` makes the leader ignore its renew deadline.
//! Pause it (Ctrl-Z, or SIGSTOP) longer than the lease while the other takes
//! over, resume it, and both log the same pods.

use std::{hash::BuildHasher, hash::RandomState, process::ExitCode, sync::Arc, time::Duration, time::Instant};

use futures::StreamExt;
use k8s_openapi::{api::coordination::v1::Lease, api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::MicroTime};
use kube::runtime::{WatchStreamExt, reflector, reflector::ObjectRef, watcher, watcher::Event};
use kube::{Api, Client, ResourceExt, api::PostParams};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// The Lease both replicas run for, in the namespace of the pods.
const LEASE: &str = "ch6-two-replicas";
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
    let (client, ns) = (Client::try_default().await?, &args.namespace);
    let lease_duration = Duration::from_secs(args.lease_duration as u64);
    // HOSTNAME is the pod's name in a pod. The random suffix tells apart two
    // replicas on one machine, and a restarted replica from its old self.
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "replica".into());
    let me = format!("{host}_{:08x}", RandomState::new().hash_one(std::process::id()) as u32);
    println!("chapter 6: {me} runs for the lease {ns}/{LEASE}; only its holder logs");
    // The pitfall: a renew deadline a day away, so the lines never stop.
    let logs_for = if args.pitfall.is_some() { Duration::from_secs(86_400) } else { lease_duration * 2 / 3 };
    let (store, writer) = reflector::store();
    let ctl = Arc::new(Controller { store, renewed: tokio::sync::watch::Sender::new(None), logs_for });
    let (api, seen) = (Api::namespaced(client.clone(), ns), (None, Instant::now()));
    let mut elector = Elector { api, me, lease_duration, seen, holder: String::new(), held: None };

    let (queue, keys) = tokio::sync::mpsc::unbounded_channel();
    let watch = tokio::spawn(ctl.clone().watch(Api::namespaced(client, ns), writer, queue));
    ctl.store.wait_until_ready().await?;
    println!("cache synced (pods: {})", ctl.store.len());
    // Only a warm replica runs for the lease. Its first try comes before the
    // worker starts: a leader logs the first list, a standby takes it in.
    elector.try_once(&ctl).await;
    let worker = tokio::spawn(ctl.clone().run_worker(keys));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    println!("worker started");

    let name = tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
        // Lost. client-go's OnStoppedLeading: exit, and come back as a standby.
        () = elector.run(&ctl) => return Ok(ExitCode::FAILURE),
    };
    // Shutdown: stop the watch, drain the queue, give the lease up. The drain
    // is short; one that outlasted the renew deadline would write no more
    // lines (it never renews), and log nothing twice.
    watch.abort();
    println!("received {name}: watch stopped, draining the queue");
    worker.await?;
    elector.release(&ctl).await.unwrap_or_else(|err| println!("cannot release the lease, it will expire: {err}"));
    println!("shutdown complete");
    Ok(ExitCode::SUCCESS)
}
// ANCHOR_END: run

/// Chapter 4's controller, compact: a plain channel stands in for the
/// de-duplicating queue (a key sent twice is synced twice, and the second
/// sync finds nothing changed). And whether this replica leads.
struct Controller {
    store: reflector::Store<Pod>,
    /// When the last renew that succeeded started (None: never led).
    renewed: tokio::sync::watch::Sender<Option<Instant>>,
    /// How long a renew lets us log: the renew deadline.
    logs_for: Duration,
}

// ANCHOR: worker
impl Controller {
    /// Since the last renew. The worker asks at each line, not only the
    /// elector when it wakes up: a paused process resumes them in any order.
    fn leads(&self) -> bool {
        self.renewed.borrow().is_some_and(|at| at.elapsed() < self.logs_for)
    }

    /// Queue the key of each change, and every key of a list once the store
    /// holds it (InitDone). Sending fails only once the worker is gone.
    async fn watch(self: Arc<Self>, api: Api<Pod>, writer: reflector::store::Writer<Pod>, queue: UnboundedSender<Key>) {
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff().reflect(writer));
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Apply(pod) | Event::Delete(pod)) => _ = queue.send(Key::from_obj(&pod)),
                Ok(Event::InitDone) => self.store.state().iter().for_each(|pod| _ = queue.send(Key::from_obj(pod))),
                Ok(_) => {}
                Err(err) => println!("watch error (the watcher retries): {err}"),
            }
        }
    }

    /// The worker. For each key: compare the pod in the cache with the
    /// resourceVersion it had at its last sync (`synced`), and log the
    /// difference. A standby does what the leader does, but writes no line.
    async fn run_worker(self: Arc<Self>, mut keys: UnboundedReceiver<Key>) {
        let mut synced = std::collections::HashMap::new();
        while let Some(key) = keys.recv().await {
            let now = self.store.get(&key).map(|pod| pod.resource_version().unwrap_or_default());
            let last = if let Some(v) = &now { synced.insert(key.clone(), v.clone()) } else { synced.remove(&key) };
            let line = match (last, now) {
                // A standby takes the change in, as the leader does: no line.
                _ if !self.leads() => continue,
                (None, Some(_)) => "onAdd",
                (Some(_), None) => "onDelete",
                (Some(last), Some(now)) if last != now => "onUpdate",
                _ => continue,
            };
            println!("{line}: {}/{}", key.namespace.as_deref().unwrap_or_default(), key.name);
        }
    }
}
// ANCHOR_END: worker

/// One candidate for the Lease: client-go's LeaderElector, small.
struct Elector {
    api: Api<Lease>,
    me: String,
    lease_duration: Duration,
    /// The Lease's resourceVersion when we last saw it change, and when.
    seen: (Option<String>, Instant),
    /// The holder we last saw, to say once whom we stand by for.
    holder: String,
    /// The Lease as we last wrote it, to give it up.
    held: Option<Lease>,
}

impl Elector {
    // ANCHOR: try
    /// client-go's tryAcquireOrRenew: read the Lease, then create it, renew
    /// it, take it, or leave it to its holder.
    async fn try_acquire_or_renew(&mut self, ctl: &Controller) -> kube::Result<()> {
        // No Lease yet: an empty one, without a resourceVersion, to create.
        let (started, mut lease) = (Instant::now(), self.api.get_opt(LEASE).await?.unwrap_or_default());
        let mut spec = lease.spec.take().unwrap_or_default();
        let holder = spec.holder_identity.take().unwrap_or_default();
        // Expiry is measured on our own clock, since we last saw the Lease
        // change: the clocks of two machines are never compared.
        let version = lease.resource_version();
        let since = if self.seen.0 == version { self.seen.1 } else { started };
        self.seen = (version.clone(), since);
        let expired = since.elapsed().as_secs_f64() >= f64::from(spec.lease_duration_seconds.unwrap_or(0));
        let how = match holder.as_str() {
            _ if version.is_none() => "created the lease".to_string(),
            "" => "the lease was released".into(),
            holder if holder == self.me => String::new(),
            holder if expired => format!("the lease of {holder} expired"),
            holder => {
                if holder != std::mem::replace(&mut self.holder, holder.into()) {
                    println!("standing by: {holder} leads");
                }
                return Ok(());
            }
        };
        // The renew time changes at every renew: a write that changes nothing
        // keeps the resourceVersion, and the standby would see it expire.
        spec.holder_identity = Some(self.me.clone());
        spec.lease_duration_seconds = Some(self.lease_duration.as_secs() as i32);
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        (lease.metadata.name, lease.spec) = (Some(LEASE.into()), Some(spec));
        // Written with the resourceVersion we read: if another candidate
        // wrote since, the API server answers 409 Conflict, and it wins.
        let (api, pp) = (&self.api, PostParams::default());
        let put = if version.is_none() { api.create(&pp, &lease).await } else { api.replace(LEASE, &pp, &lease).await };
        match put {
            Err(kube::Error::Api(status)) if status.code == 409 => return Ok(()),
            written => self.held = Some(written?),
        }
        if !how.is_empty() {
            println!("became leader: {how}");
        }
        // From before the read: the others count from when they saw it.
        ctl.renewed.send_replace(Some(started));
        Ok(())
    }
    // ANCHOR_END: try

    // ANCHOR: loop
    /// Every retry period, a try. Returns once no renew succeeded within the
    /// renew deadline.
    async fn run(&mut self, ctl: &Controller) {
        let mut ticker = tokio::time::interval(self.lease_duration * 2 / 15);
        loop {
            ticker.tick().await;
            if !ctl.leads() && ctl.renewed.borrow().is_some() {
                return println!("lost the lease: no renew within the renew deadline, exiting (exit code 1)");
            }
            self.try_once(ctl).await;
        }
    }

    /// A try that hangs is given up at the renew deadline.
    async fn try_once(&mut self, ctl: &Controller) {
        let tried = tokio::time::timeout(self.lease_duration * 2 / 3, self.try_acquire_or_renew(ctl)).await;
        if let Err(err) = tried.unwrap_or_else(|late| Err(kube::Error::Service(late.into()))) {
            println!("cannot reach the lease (retrying): {err}");
        }
    }

    /// After the drain: give the lease up, so that the standby takes it at
    /// its next try, not a lease duration later.
    async fn release(&mut self, ctl: &Controller) -> kube::Result<()> {
        let Some(mut lease) = self.held.take().filter(|_| ctl.leads()) else { return Ok(()) };
        lease.spec.get_or_insert_default().holder_identity = None;
        self.api.replace(LEASE, &PostParams::default(), &lease).await?;
        println!("released the lease");
        Ok(())
    }
    // ANCHOR_END: loop
}
