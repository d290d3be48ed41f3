//! Watch pods in protobuf and keep them in kube's reflector store: the part of
//! any kube-rs program that would call `watcher(api, config)` for pods.
//!
//! ```sh
//! cargo run -p kube-pod-protobuf --example watch_pods -- [NAMESPACE]
//! ```
//!
//! It uses the current kubeconfig context (or the in-cluster config), prints a
//! line for every pod applied or deleted and one when the list is in, and
//! stops at Ctrl-C. A server that will not answer in protobuf is read as
//! JSON, with kube's own watcher, from then on: the same kinds of events into
//! the same store, but the pods it holds from then on are whole, every field
//! JSON has, where pods read in protobuf hold only the kept fields.

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Api, Client, ResourceExt};
use kube_pod_protobuf::watch::{self as protobuf, Options};

#[tokio::main]
async fn main() -> Result<(), kube::Error> {
    let client = Client::try_default().await?;
    let namespace = std::env::args().nth(1);
    let api: Api<Pod> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let config = watcher::Config::default();

    // In place of kube's `watcher(api, config)`: the protobuf watcher, whose
    // pods hold only the kept fields (see the crate's README). Both streams
    // get kube's default backoff: after an error, the next poll waits a
    // while (inside `events.next()`, so Ctrl-C still stops it at once).
    // It resets on every `Ok`, and the watcher yields `Init` before each
    // list attempt, so a list that keeps failing never gets past its first,
    // shortest wait: a program that wants more writes its own backoff.
    let mut events: BoxStream<'static, watcher::Result<Event<Pod>>> =
        protobuf::watcher(client, namespace.as_deref(), config.clone(), Options::default()).default_backoff().boxed();
    let mut on_protobuf = true;

    // The store, fed by hand rather than by `reflector(writer, stream)`, so
    // that the stream can be swapped for kube's if protobuf is refused.
    let (store, mut writer) = reflector::store::<Pod>();
    loop {
        let next = tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            next = events.next() => next,
        };
        match next {
            Some(Ok(event)) => {
                writer.apply_watcher_event(&event);
                match &event {
                    Event::InitApply(pod) | Event::Apply(pod) => println!("applied {}", describe(pod)),
                    Event::Delete(pod) => println!("deleted {}", describe(pod)),
                    Event::InitDone => println!("listed: {} pods in the store", store.state().len()),
                    Event::Init => {}
                }
            }
            Some(Err(error)) if on_protobuf && protobuf::refusal(&error).is_some() => {
                eprintln!("protobuf refused ({error}): reading pods as JSON instead");
                events = watcher::watcher(api.clone(), config.clone()).default_backoff().boxed();
                on_protobuf = false;
            }
            Some(Err(error)) => {
                // A watcher error is never fatal: the next poll retries (a
                // relist, a resumed watch), after the backoff.
                eprintln!("watch error: {error}; retrying");
            }
            None => return Ok(()),
        }
    }
}

/// `namespace/name phase on node`, from the kept fields.
fn describe(pod: &Pod) -> String {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("-");
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("-");
    format!("{}/{} {phase} on {node}", pod.namespace().unwrap_or_default(), pod.name_any())
}
