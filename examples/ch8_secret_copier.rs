// ANCHOR: whole
//! Chapter 8: an operator. It makes objects, puts them back when someone
//! breaks them, and cleans up after itself.
//!
//! ```sh
//! cargo run --example ch8_secret_copier -- -n SRC
//! cargo run --example ch8_secret_copier -- -n SRC --pitfall cross-namespace-owner   # needs a garbage collector
//! ```
//!
//! Each Secret of namespace SRC labelled `demo.example.com/copy=true` (a
//! source) is copied into every other namespace labelled
//! `demo.example.com/copies=true`: same name, type and data. Each copy is
//! labelled `demo.example.com/copy-of=<the source's uid>`. The uid, not the
//! name, is an object's identity: a source deleted and made again under the
//! same name is another object, and its copies are new ones.
//!
//! The decision is a pure function, `plan`: from the source, the namespaces
//! that ask for copies and the copies of the source's name, it says what to
//! create, update and delete. Everything around it is thin I/O. So the
//! decision is tested without a cluster
//! (`cargo test --example ch8_secret_copier`).

use std::collections::{BTreeMap, HashSet};
use std::{fmt::Debug, process::ExitCode, sync::Arc, sync::Mutex, time::Duration};

use clap::{Parser, ValueEnum};
use futures::stream::{BoxStream, iter};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// A source asks for copies with this label.
const COPY: &str = "demo.example.com/copy";
/// A namespace asks for copies with this label.
const COPIES: &str = "demo.example.com/copies";
/// Each copy names its source's uid with this label.
const COPY_OF: &str = "demo.example.com/copy-of";
/// The finalizer this program puts on each source it copies.
const FINALIZER: &str = "demo.example.com/secret-copier";
/// The field manager its writes are recorded under.
const MANAGER: &str = "ch8-secret-copier";

#[derive(Parser)]
struct Args {
    /// The namespace whose labelled Secrets are copied
    #[arg(short, long)]
    namespace: String,
    /// Put one classic mistake back, to see what it does
    #[arg(long, value_enum)]
    pitfall: Option<Pitfall>,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Pitfall {
    /// Give each copy an ownerReference to its source, in another namespace: the garbage collector treats the owner
    /// as absent and deletes the copy, which the copier makes again, and so on
    CrossNamespaceOwner,
}

struct Context {
    client: Client,
    /// SRC, the namespace of the sources.
    namespace: String,
    pitfall: Option<Pitfall>,
    /// The caches of the namespaces that ask for copies, and of the copies.
    namespaces: Store<Namespace>,
    copies: Store<Secret>,
    /// Lines already printed that must not repeat on every reconcile.
    said: Mutex<HashSet<String>>,
}

impl Context {
    /// Prints `line` the first time only (`key` says what it is about).
    fn say_once(&self, key: String, line: String) {
        if self.said.lock().unwrap_or_else(|e| e.into_inner()).insert(key) {
            println!("{line}");
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Err(err) = run(Args::parse()).await else { return ExitCode::SUCCESS };
    eprintln!("error: {err}");
    ExitCode::FAILURE
}

// ANCHOR: run
async fn run(args: Args) -> Result<(), kube::Error> {
    let client = Client::try_default().await?;
    let src = args.namespace.clone();
    println!("chapter 8: copies the Secrets of {src} labelled {COPY}=true into namespaces labelled {COPIES}=true");
    // Every Secret of SRC, not only the labelled ones: a source that loses
    // its label must still be reconciled, to delete its copies.
    let (sources, source_events) = cache(Api::namespaced(client.clone(), &src), watcher::Config::default(), "sources");
    let asking = watcher::Config::default().labels(&format!("{COPIES}=true"));
    let (namespaces, namespace_events) = cache(Api::all(client.clone()), asking, "namespaces");
    let labelled = watcher::Config::default().labels(COPY_OF);
    let (copies, copy_events) = cache(Api::<Secret>::all(client.clone()), labelled, "copies");
    // sample-controller's handleObject: each change is mapped to the sources
    // it concerns. A namespace concerns every source; a copy, the source of
    // its name. A whole (re)list (`None`) concerns every source.
    let all = sources.clone();
    let every = move || all.state().iter().map(|s| ObjectRef::from_obj(&**s)).collect::<Vec<_>>();
    let (on_relist, on_namespace) = (every.clone(), every.clone()); // one for each stream
    let of_copy = move |c: Secret| vec![ObjectRef::new(&c.name_any()).within(&src)];
    let triggers = futures::stream::select_all([
        source_events.flat_map(move |s| iter(s.map_or_else(&on_relist, |s| vec![ObjectRef::from_obj(&s)]))).boxed(),
        namespace_events.flat_map(move |_: Option<Namespace>| iter(on_namespace())).boxed(),
        copy_events.flat_map(move |c| iter(c.map_or_else(&every, &of_copy))).boxed(),
    ]);
    let (graceful, shutdown) = futures::channel::oneshot::channel::<()>();
    tokio::spawn(on_signal(graceful));
    let ctx = Arc::new(Context {
        client,
        namespace: args.namespace,
        pitfall: args.pitfall,
        namespaces,
        copies,
        said: Default::default(),
    });
    // The Controller reads sources from our cache and reconciles those our
    // triggers name: one at a time per source, once more if named again
    // meanwhile. Its own stream of sources is empty: every trigger comes
    // through `reconcile_on`.
    let results = Controller::for_stream(futures::stream::empty(), sources)
        .reconcile_on(triggers)
        .graceful_shutdown_on(shutdown.map(|_| ()))
        .run(reconcile, error_policy, ctx);
    let mut results = std::pin::pin!(results);
    while let Some(result) = results.next().await {
        // Not these: a source that does not exist (any more), nothing to
        // reconcile; a failed reconcile, which `error_policy` printed.
        if let Err(err @ (controller::Error::QueueError(_) | controller::Error::RunnerError(_))) = result {
            println!("controller error: {err}");
        }
    }
    println!("shutdown complete");
    Ok(())
}

/// A cache kept by a reflector (a watcher whose events are put into a
/// store), and what changed, as a stream: `Some` object added, changed or
/// deleted, `None` for a whole (re)list. A reflector puts each event into
/// its store before it yields it, so the reconcile that follows reads a
/// cache that has seen the change. A relist is put in at its end.
fn cache<K>(api: Api<K>, config: watcher::Config, what: &'static str) -> (Store<K>, BoxStream<'static, Option<K>>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, config).default_backoff().reflect(writer).filter_map(move |event| async move {
        match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => Some(Some(o)),
            Ok(watcher::Event::InitDone) => Some(None),
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => None,
            Err(err) => {
                println!("watch error on the {what} (the watcher retries): {err}");
                None
            }
        }
    });
    (store, events.boxed())
}
// ANCHOR_END: run

// ANCHOR: reconcile
/// Called with a Secret of SRC whenever it, a namespace or one of its
/// copies changed. It never asks what changed: it computes what should be
/// and makes the world match (TGIK's `doSync`).
async fn reconcile(source: Arc<Secret>, ctx: Arc<Context>) -> Result<Action, finalizer::Error<kube::Error>> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let key = format!("{}/{}", ctx.namespace, source.name_any());
    // A line about this version of the source is said once: a reconcile of
    // the same version again (from a cache that has not yet seen our last
    // write) says nothing new.
    let version = format!("{} {}", source.uid().unwrap_or_default(), source.resource_version().unwrap_or_default());
    // Acting before every cache holds its first full list is the classic
    // bug: an empty cache reads as "no copies", "no namespace asks", and the
    // copier would delete or make copies on that false picture. (The
    // Controller waits for the sources' cache; these two are ours to wait
    // for.) An error here means the program is stopping.
    if ctx.namespaces.wait_until_ready().await.is_err() || ctx.copies.wait_until_ready().await.is_err() {
        return Ok(Action::await_change());
    }
    if source.labels().get(COPY).map(String::as_str) != Some("true") {
        if source.finalizers().iter().any(|f| f == FINALIZER) {
            let line = format!("source {key} no longer asks for copies: deleting its copies and its finalizer");
            ctx.say_once(version, line);
            sync(&source, false, &ctx).await.map_err(finalizer::Error::CleanupFailed)?;
            // Our finalizer removed, the others kept. The resourceVersion makes
            // it fail (409) if the Secret changed since: then we try again.
            let rest: Vec<&String> = source.finalizers().iter().filter(|f| *f != FINALIZER).collect();
            let patch =
                serde_json::json!({"metadata": {"finalizers": rest, "resourceVersion": source.resource_version()}});
            let params = PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() };
            api.patch(&source.name_any(), &params, &Patch::Merge(&patch))
                .await
                .map_err(finalizer::Error::RemoveFinalizer)?;
        }
        return Ok(Action::await_change());
    }
    // kube's finalizer helper: it adds the finalizer before anything is
    // copied, and calls Cleanup when the source is being deleted; once
    // Cleanup succeeds it removes the finalizer, and the deletion finishes.
    finalizer(&api, FINALIZER, source, |event| async {
        match event {
            finalizer::Event::Apply(source) => sync(&source, true, &ctx).await,
            finalizer::Event::Cleanup(source) => {
                ctx.say_once(version, format!("source {key} is being deleted: deleting its copies"));
                sync(&source, false, &ctx).await
            }
        }
    })
    .await
}

/// A failed reconcile is tried again (the Controller's queue keeps one
/// pending retry per source). A finalizer patch fails when the source in the
/// cache is older than the one on the server: 409 for a stale
/// resourceVersion, 422 for kube's JSON patch whose test of the finalizers
/// failed, 404 for a source gone already. The cache catches up within
/// moments, so that retry comes soon; any other failure waits 5 s.
fn error_policy(source: Arc<Secret>, err: &finalizer::Error<kube::Error>, ctx: Arc<Context>) -> Action {
    let key = format!("{}/{}", ctx.namespace, source.name_any());
    match err {
        finalizer::Error::AddFinalizer(kube::Error::Api(s))
        | finalizer::Error::RemoveFinalizer(kube::Error::Api(s))
            if [404, 409, 422].contains(&s.code) =>
        {
            println!("stale cache: {key} changed since the cache saw it; retrying");
            Action::requeue(Duration::from_millis(500))
        }
        err => {
            println!("reconcile failed: {key}: {err}; retrying in 5s");
            Action::requeue(Duration::from_secs(5))
        }
    }
}
// ANCHOR_END: reconcile

// ANCHOR: sync
/// Reads the namespaces that ask for copies and the copies of the source's
/// name (from the caches; for clean-up, from the server), asks `plan`, and
/// carries out each step.
async fn sync(source: &Secret, wanted: bool, ctx: &Context) -> Result<Action, kube::Error> {
    let name = source.name_any();
    // A cache holds no order: sorted by namespace, the same world gives the
    // same steps in the same order.
    let mut namespaces: Vec<Namespace> = ctx.namespaces.state().iter().map(|n| (**n).clone()).collect();
    namespaces.sort_by_key(|n| n.name_any());
    let mut copies: Vec<Secret> = if wanted {
        ctx.copies.state().iter().filter(|c| c.name_any() == name).map(|c| (**c).clone()).collect()
    } else {
        // Clean-up asks the server, not the cache: a copy made moments ago
        // may not be in the cache yet, and once our finalizer is gone, no
        // event would bring this source back to delete that copy.
        let ours = ListParams::default().labels(COPY_OF).fields(&format!("metadata.name={name}"));
        Api::<Secret>::all(ctx.client.clone()).list(&ours).await?.items
    };
    copies.sort_by_key(|c| c.namespace());
    let uid = source.uid().unwrap_or_default();
    for step in plan(&ctx.namespace, source, wanted, &namespaces, &copies) {
        match step {
            Step::Create(ns) => {
                let params = PostParams { field_manager: Some(MANAGER.into()), ..Default::default() };
                let api = Api::<Secret>::namespaced(ctx.client.clone(), &ns);
                match api.create(&params, &copy_of(source, &ns, ctx)).await {
                    Ok(_) => println!("created {ns}/{name} (copy of {}/{name})", ctx.namespace),
                    // The cache holds only copies. A Secret of this name is
                    // either our copy, not yet in the cache, or someone
                    // else's: ask the server which.
                    Err(kube::Error::Api(s)) if s.is_already_exists() => {
                        if api.get_opt(&name).await?.is_some_and(|s| !s.labels().contains_key(COPY_OF)) {
                            let line = format!("left alone: {ns}/{name} is a Secret this program did not make");
                            ctx.say_once(format!("{uid} {ns}"), line);
                        }
                    }
                    // A namespace being deleted refuses new objects: 403, cause NamespaceTerminating.
                    Err(kube::Error::Api(s)) if cause(&s, "NamespaceTerminating") => namespace_terminating(ctx, &ns),
                    Err(err) => return Err(err),
                }
            }
            Step::Update { namespace: ns, remove } => {
                // Server-side apply: we send the fields we want, the server
                // merges them and records us as their manager. `force` takes
                // a field back from whoever changed it since. The version of
                // the copy we judged goes with it: if the copy changed since
                // (our cache is behind), the server refuses (409), and that
                // change's event brings another reconcile.
                let mut copy = copy_of(source, &ns, ctx);
                let seen = copies.iter().find(|c| c.namespace().as_deref() == Some(ns.as_str()));
                copy.metadata.resource_version = seen.and_then(|c| c.resource_version());
                let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
                match api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(copy)).await {
                    Ok(_) => {}
                    // Not a conflict of field managers (only without `force`).
                    Err(kube::Error::Api(s)) if s.code == 409 && !cause(&s, "FieldManagerConflict") => continue,
                    Err(err) => return Err(err),
                }
                // A key someone added belongs to them: apply cannot remove
                // it (we never claimed it). A merge patch with null can.
                if !remove.is_empty() {
                    let nulls: serde_json::Map<_, _> =
                        remove.into_iter().map(|k| (k, serde_json::Value::Null)).collect();
                    let params = PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() };
                    api.patch(&name, &params, &Patch::Merge(serde_json::json!({"data": nulls}))).await?;
                }
                println!("put right {ns}/{name} (copy of {}/{name})", ctx.namespace);
            }
            Step::Delete { namespace: ns, why } => {
                match Api::<Secret>::namespaced(ctx.client.clone(), &ns).delete(&name, &DeleteParams::default()).await {
                    Ok(_) => println!("deleted {ns}/{name} ({why})"),
                    Err(kube::Error::Api(s)) if s.is_not_found() => {} // gone already
                    Err(err) => return Err(err),
                }
            }
            Step::Terminating(ns) => namespace_terminating(ctx, &ns),
        }
    }
    Ok(Action::await_change())
}
// ANCHOR_END: sync

fn namespace_terminating(ctx: &Context, ns: &str) {
    ctx.say_once(format!("terminating {ns}"), format!("namespace {ns} is terminating: no copies there"));
}

/// The API server's refusal gives this reason among its causes.
fn cause(status: &kube::core::Status, reason: &str) -> bool {
    status.details.iter().flat_map(|d| &d.causes).any(|c| c.reason == reason)
}

/// The copy of `source` that namespace `ns` should hold.
fn copy_of(source: &Secret, ns: &str, ctx: &Context) -> Secret {
    let uid = source.uid().unwrap_or_default();
    Secret {
        metadata: ObjectMeta {
            name: Some(source.name_any()),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([(COPY_OF.into(), uid)])),
            // The pitfall: an owner in another namespace.
            owner_references: (ctx.pitfall == Some(Pitfall::CrossNamespaceOwner))
                .then(|| source.owner_ref(&()).into_iter().collect()),
            ..Default::default()
        },
        type_: source.type_.clone(),
        data: source.data.clone(),
        ..Default::default()
    }
}

// ANCHOR: plan
/// One thing to do about one namespace. `Update` makes the copy equal its
/// source again, removing the keys it should not have.
#[derive(Debug, PartialEq)]
enum Step {
    Create(String),
    Update { namespace: String, remove: Vec<String> },
    Delete { namespace: String, why: &'static str },
    Terminating(String),
}

/// The decision, with no I/O. `wanted`: the source asks for copies (it is
/// labelled and not being deleted). `namespaces`: those labelled to ask for
/// copies. `copies`: the Secrets of the source's name labelled as copies.
/// Deletes come first, so that a copy of an old uid is gone before the new
/// one is made.
fn plan(src: &str, source: &Secret, wanted: bool, namespaces: &[Namespace], copies: &[Secret]) -> Vec<Step> {
    let uid = source.uid();
    let asks = |ns: &str| wanted && ns != src && namespaces.iter().any(|n| n.name_any() == ns);
    let (mut deletes, mut writes) = (Vec::new(), Vec::new());
    for secret in copies.iter().filter(|s| s.namespace().as_deref() != Some(src)) {
        let ns = secret.namespace().unwrap_or_default();
        match secret.labels().get(COPY_OF) {
            None => {}
            Some(of) if Some(of) != uid.as_ref() => {
                deletes.push(Step::Delete { namespace: ns, why: "a copy of an older source of this name" })
            }
            Some(_) if !wanted => {
                deletes.push(Step::Delete { namespace: ns, why: "its source no longer asks for copies" })
            }
            Some(_) if !asks(&ns) => {
                deletes.push(Step::Delete { namespace: ns, why: "its namespace no longer asks for copies" })
            }
            Some(_) => {
                let data = secret.data.clone().unwrap_or_default();
                let want = source.data.clone().unwrap_or_default();
                if data != want || secret.type_ != source.type_ {
                    let remove = data.keys().filter(|k| !want.contains_key(*k)).cloned().collect();
                    writes.push(Step::Update { namespace: ns, remove });
                }
            }
        }
    }
    for ns in namespaces.iter().filter(|n| asks(&n.name_any())) {
        let name = ns.name_any();
        let has =
            |s: &Secret| s.namespace().as_deref() == Some(name.as_str()) && s.labels().get(COPY_OF) == uid.as_ref();
        if ns.metadata.deletion_timestamp.is_some() {
            writes.retain(|w| !matches!(w, Step::Update { namespace, .. } if *namespace == name));
            writes.push(Step::Terminating(name));
        } else if !copies.iter().any(has) {
            writes.push(Step::Create(name));
        }
    }
    deletes.extend(writes);
    deletes
}
// ANCHOR_END: plan

/// The first SIGINT or SIGTERM starts a graceful shutdown: no new
/// reconciles, and the running ones finish.
async fn on_signal(graceful: futures::channel::oneshot::Sender<()>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else { return };
    let name = tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    };
    println!("received {name}: shutting down");
    let _ = graceful.send(());
}

// ANCHOR: tests
#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn meta(ns: &str, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            labels: Some(labels),
            uid: Some(format!("{ns}-uid")),
            ..Default::default()
        }
    }

    fn secret(ns: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> Secret {
        let data = data.iter().map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v.as_bytes().to_vec()))).collect();
        Secret { metadata: meta(ns, "db", labels), data: Some(data), ..Default::default() }
    }

    fn namespace(name: &str, terminating: bool) -> Namespace {
        let mut ns = Namespace { metadata: meta("", name, &[(COPIES, "true")]), ..Default::default() };
        ns.metadata.namespace = None;
        if terminating {
            ns.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        ns
    }

    fn source() -> Secret {
        secret("src", &[(COPY, "true")], &[("password", "s3cret")])
    }

    #[test]
    fn a_copy_for_each_namespace_that_asks_and_none_in_the_source_namespace() {
        let namespaces = [namespace("a", false), namespace("b", false), namespace("src", false)];
        let steps = plan("src", &source(), true, &namespaces, &[source()]);
        assert_eq!(steps, [Step::Create("a".into()), Step::Create("b".into())]);
    }

    #[test]
    fn a_true_copy_is_left_as_it_is_and_a_changed_or_grown_one_is_put_right() {
        let copy = |data: &[(&str, &str)]| secret("a", &[(COPY_OF, "src-uid")], data);
        let namespaces = [namespace("a", false)];
        assert_eq!(plan("src", &source(), true, &namespaces, &[copy(&[("password", "s3cret")])]), []);
        let changed = plan("src", &source(), true, &namespaces, &[copy(&[("password", "guess")])]);
        assert_eq!(changed, [Step::Update { namespace: "a".into(), remove: vec![] }]);
        let grown = plan("src", &source(), true, &namespaces, &[copy(&[("password", "s3cret"), ("extra", "x")])]);
        assert_eq!(grown, [Step::Update { namespace: "a".into(), remove: vec!["extra".into()] }]);
    }

    #[test]
    fn a_secret_without_the_copy_label_is_never_changed_or_deleted() {
        // Only a create is planned: the server refuses it, as the name is taken.
        let stranger = [secret("a", &[], &[("password", "other")])];
        let namespaces = [namespace("a", false)];
        assert_eq!(plan("src", &source(), true, &namespaces, &stranger), [Step::Create("a".into())]);
        assert_eq!(plan("src", &source(), false, &namespaces, &stranger), []);
        assert_eq!(plan("src", &source(), true, &[], &stranger), []);
    }

    #[test]
    fn copies_no_longer_wanted_or_of_an_old_uid_are_deleted_first() {
        let ours = [secret("a", &[(COPY_OF, "src-uid")], &[("password", "s3cret")])];
        let old = secret("b", &[(COPY_OF, "older-uid")], &[("password", "s3cret")]);
        let namespaces = [namespace("a", false), namespace("b", false)];
        let steps = plan("src", &source(), true, &namespaces, &[ours[0].clone(), old]);
        let why = "a copy of an older source of this name";
        assert_eq!(steps, [Step::Delete { namespace: "b".into(), why }, Step::Create("b".into())]);
        let why = "its source no longer asks for copies";
        assert_eq!(plan("src", &source(), false, &namespaces, &ours), [Step::Delete { namespace: "a".into(), why }]);
        let why = "its namespace no longer asks for copies";
        assert_eq!(plan("src", &source(), true, &[], &ours), [Step::Delete { namespace: "a".into(), why }]);
    }

    #[test]
    fn a_terminating_namespace_gets_nothing_written() {
        let changed = secret("a", &[(COPY_OF, "src-uid")], &[("password", "guess")]);
        let namespaces = [namespace("a", true), namespace("b", true)];
        let steps = plan("src", &source(), true, &namespaces, &[changed]);
        assert_eq!(steps, [Step::Terminating("a".into()), Step::Terminating("b".into())]);
    }
}
// ANCHOR_END: tests
// ANCHOR_END: whole
