// ANCHOR: whole
//! Chapter 9, the controller: one for the whole cluster. It decides which
//! node reboots next, so that at most `--max-unavailable` nodes are down at
//! once (a rolling reboot).
//!
//! ```sh
//! cargo run --example ch9_reboot_controller -- --max-unavailable 1
//! cargo run --example ch9_reboot_controller -- --pitfall mutate-cache   # the talk's first bug
//! cargo run --example ch9_reboot_controller -- --pitfall no-sync-wait   # the talk's second bug
//! ```
//!
//! It watches every Node into a cache of its own. At each change it counts
//! the unavailable nodes in that cache: not Ready, `reboot-in-progress`, or
//! `reboot-now` that no agent took yet. While fewer than `--max-unavailable`,
//! it moves one node from `reboot-needed` to `reboot-now`. The agent on that
//! node (examples/ch9_reboot_agent.rs) does the rest.

use std::collections::HashMap;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher, watcher::Event};
use kube::{Api, Client, ResourceExt};

const NEEDED: &str = "demo.example.com/reboot-needed";
const NOW: &str = "demo.example.com/reboot-now";
const IN_PROGRESS: &str = "demo.example.com/reboot-in-progress";

#[derive(Parser)]
struct Args {
    /// At most this many nodes unavailable at once: not Ready, rebooting, or told to reboot
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    max_unavailable: u16,
    /// Only the Nodes with these labels, e.g. `pool=blue` [default: every Node]
    #[arg(short = 'l', long)]
    selector: Option<String>,
    /// Put one of the talk's two bugs back, to see what it does
    #[arg(long, value_enum)]
    pitfall: Option<Pitfall>,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Pitfall {
    /// Change the cached Node in place before the write: a failed write leaves the cache saying what the server
    /// never stored
    MutateCache,
    /// Act on each Node as the first list brings it in, before the cache holds the whole list
    NoSyncWait,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

struct Controller {
    api: Api<Node>,
    args: Args,
    /// The cache: every Node by name, as the watch last showed it. A
    /// HashMap, as client-go's cache is: each process walks it in an order
    /// of its own.
    cache: HashMap<String, Node>,
    /// Our last write (node, resourceVersion), until the watch shows it.
    expected: Option<(String, String)>,
    /// The last `waiting:` line, to print each one once.
    said: String,
}

// ANCHOR: run
async fn run(args: Args) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(Client::try_default().await?);
    let config = watcher::Config::default();
    let config = if let Some(labels) = &args.selector { config.labels(labels) } else { config };
    let mut events = std::pin::pin!(watcher(api.clone(), config).default_backoff());
    println!("chapter 9 controller: reboot-needed -> reboot-now, at most {} unavailable", args.max_unavailable);
    let early = args.pitfall == Some(Pitfall::NoSyncWait);
    let mut ctl = Controller { api, args, cache: HashMap::new(), expected: None, said: String::new() };
    // A (re)list is gathered apart, and replaces the cache once complete.
    let (mut listing, mut synced) = (HashMap::new(), false);
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(node)) if !early => _ = listing.insert(node.name_any(), node),
            Ok(Event::InitDone) => {
                if !early {
                    ctl.cache = std::mem::take(&mut listing);
                }
                if synced {
                    // A relist: the cache is the server's state now.
                    ctl.expected = None;
                } else {
                    println!("cache synced (nodes: {})", ctl.cache.len());
                    synced = true;
                }
            }
            // With the pitfall, a listed node goes straight into the cache.
            Ok(Event::Apply(node) | Event::InitApply(node)) => {
                let rv = node.resource_version().unwrap_or_default();
                if ctl.expected.as_ref().is_some_and(|(name, v)| *name == node.name_any() && *v == rv) {
                    ctl.expected = None;
                }
                ctl.cache.insert(node.name_any(), node);
            }
            Ok(Event::Delete(node)) => _ = ctl.cache.remove(&node.name_any()),
            Err(err) => println!("watch error (the watcher retries): {err}"),
        }
        // Nothing is decided before the cache holds the whole list (unless
        // the pitfall is on), nor before it holds our last write: an older
        // state would not count the node we just told to reboot.
        if (synced || early) && ctl.expected.is_none() {
            ctl.sync().await;
        }
    }
    Ok(())
}
// ANCHOR_END: run

impl Controller {
    // ANCHOR: sync
    /// Counts the unavailable nodes and, while fewer than the maximum, tells
    /// one more node to reboot.
    async fn sync(&mut self) {
        let mut down: Vec<&str> = self.cache.values().filter(|n| unavailable(n)).map(name).collect();
        if down.len() >= usize::from(self.args.max_unavailable) {
            down.sort();
            let said = format!("waiting: unavailable {} of at most {}", down.join(", "), self.args.max_unavailable);
            if said != std::mem::replace(&mut self.said, said.clone()) {
                println!("{said}");
            }
            return;
        }
        // The first node the cache holds that needs a reboot and is up.
        let next = self.cache.values().find(|n| n.annotations().contains_key(NEEDED) && !unavailable(n));
        let Some(next) = next.map(ResourceExt::name_any) else { return };
        let count = down.len();
        // The right way: a deep copy, changed and written. The cache keeps
        // what the server holds until the watch brings the change.
        let mut copy = self.cache[&next].clone();
        let node = match self.args.pitfall {
            Some(Pitfall::MutateCache) => self.cache.get_mut(&next).unwrap_or(&mut copy),
            _ => &mut copy,
        };
        node.annotations_mut().remove(NEEDED);
        node.annotations_mut().insert(NOW.into(), "true".into());
        // A replace sends the cached resourceVersion: if the node changed
        // since, the server answers 409 Conflict and changes nothing.
        match self.api.replace(&next, &PostParams::default(), node).await {
            Ok(written) => {
                println!("reboot-now: {next} (unavailable before: {count} of at most {})", self.args.max_unavailable);
                self.expected = Some((next, written.resource_version().unwrap_or_default()));
                self.said.clear();
            }
            // The watch brings the newer node, and that change syncs again.
            Err(kube::Error::Api(s)) if s.is_conflict() => println!("conflict: {next} changed since the cache saw it"),
            Err(kube::Error::Api(s)) => println!("cannot tell {next} to reboot: {} {}", s.code, s.reason),
            Err(err) => println!("cannot tell {next} to reboot: {err}"),
        }
    }
    // ANCHOR_END: sync
}

/// Unavailable: not Ready, rebooting, or told to reboot.
fn unavailable(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    let ready = conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
    !ready || node.annotations().contains_key(IN_PROGRESS) || node.annotations().contains_key(NOW)
}

fn name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}
// ANCHOR_END: whole
