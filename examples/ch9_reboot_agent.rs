// ANCHOR: whole
//! Chapter 9, the agent: one on every node. It reboots its own node when the
//! controller (examples/ch9_reboot_controller.rs) says so.
//!
//! ```sh
//! cargo run --example ch9_reboot_agent -- --node node-1
//! ```
//!
//! The agent and the controller never talk to each other. They talk through
//! three annotations on the Node object:
//!
//! - `reboot-needed`: a person wants this node rebooted (kubectl annotate);
//! - `reboot-now`: the controller says "reboot now";
//! - `reboot-in-progress`: the agent says "I am rebooting".
//!
//! In a cluster the agent runs as a DaemonSet, one pod on every node. The pod
//! learns its node's name from the downward API: `NODE_NAME`.

use std::process::ExitCode;

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher, watcher::Event};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

const NOW: &str = "demo.example.com/reboot-now";
const IN_PROGRESS: &str = "demo.example.com/reboot-in-progress";

#[derive(Parser)]
struct Args {
    /// The node this agent reboots (in a pod, NODE_NAME comes from the downward API)
    #[arg(long, env = "NODE_NAME")]
    node: String,
    /// The command that reboots the node, run with `sh -c`, with NODE set to the node's name. The default is a
    /// harmless stand-in that says what it would do and takes 3 seconds
    #[arg(long, default_value = "echo \"stand-in: would reboot $NODE now\"; sleep 3")]
    reboot_command: String,
}

/// What this agent knows of the reboot command.
#[derive(Clone, Copy, PartialEq)]
enum Command {
    /// It has not run it since it started.
    NotRun,
    Running,
    /// It exited with status 0: once the node is Ready, the reboot is over.
    Finished,
    /// It failed. `reboot-in-progress` stays, so the controller counts the
    /// node unavailable and reboots no other: a person must look at it.
    Failed,
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

// ANCHOR: run
async fn run(args: Args) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(Client::try_default().await?);
    println!("chapter 9 agent: node {} reboots when {NOW} appears", args.node);
    // A watch on one object: the field selector leaves every other Node out.
    let config = watcher::Config::default().fields(&format!("metadata.name={}", args.node));
    let mut events = std::pin::pin!(watcher(api.clone(), config).default_backoff());
    let (finished, mut command_ended) = tokio::sync::mpsc::unbounded_channel();
    let mut agent = Agent { api, args, command: Command::NotRun, finished, expected: None };
    let mut node = None;
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(Event::Apply(n))) => {
                    // Our last write is in once the watch shows its resourceVersion.
                    if agent.expected.is_some() && agent.expected == n.metadata.resource_version {
                        agent.expected = None;
                    }
                    node = Some(n);
                }
                // A (re)list: the step comes at its end, from the node as
                // the server holds it now, newer than any write of ours.
                Some(Ok(Event::Init)) => (node, agent.expected) = (None, None),
                Some(Ok(Event::InitApply(n))) => {
                    node = Some(n);
                    continue;
                }
                Some(Ok(Event::InitDone)) => {}
                Some(Ok(Event::Delete(_))) => node = None,
                Some(Err(err)) => println!("watch error (the watcher retries): {err}"),
                None => return Ok(()),
            },
            Some(command) = command_ended.recv() => agent.command = command,
        }
        // Older events than our own write would show a state we already
        // changed: decide again once the watch shows the write.
        if let (Some(n), None) = (&node, &agent.expected) {
            agent.step(n.clone()).await;
        }
    }
}
// ANCHOR_END: run

struct Agent {
    api: Api<Node>,
    args: Args,
    command: Command,
    /// The command tells the loop here that it ended, and how.
    finished: UnboundedSender<Command>,
    /// The resourceVersion of our last write, until the watch shows it.
    expected: Option<String>,
}

impl Agent {
    // ANCHOR: step
    /// One step toward what the annotations ask, decided from the node as it
    /// is now (level-based), whatever change woke us up.
    async fn step(&mut self, mut node: Node) {
        loop {
            let in_progress = node.annotations().get(IN_PROGRESS).cloned();
            // The kubelet writes a new boot ID at every boot of the machine.
            let boot_id = node.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.boot_id.clone());
            let boot_id = boot_id.unwrap_or_default();
            let (change, said): (Value, String) = match (in_progress, self.command) {
                // Told to reboot: take it. One write sets reboot-in-progress
                // (with the boot ID) and removes reboot-now.
                (None, _) if node.annotations().contains_key(NOW) => {
                    (json!({ NOW: null, IN_PROGRESS: boot_id }), "took reboot-now: set reboot-in-progress".into())
                }
                // A reboot this agent did not start: it started before us.
                // Then a step again: a node already Ready sends no change.
                (Some(id), Command::NotRun) => {
                    self.resume(&id, &boot_id);
                    continue;
                }
                (Some(_), Command::Finished) if ready(&node) => {
                    let said = "the node is Ready and the reboot command finished: removed reboot-in-progress".into();
                    (json!({ IN_PROGRESS: null }), said)
                }
                _ => return,
            };
            // The precondition: the server applies the patch only if the node
            // still has the resourceVersion we decided from; else 409 Conflict.
            let rv = node.resource_version();
            let patch = json!({ "metadata": { "resourceVersion": rv, "annotations": change } });
            match self.api.patch(&self.args.node, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(written) => {
                    println!("{said}");
                    self.expected = written.metadata.resource_version;
                    if change.get(IN_PROGRESS).is_some_and(Value::is_null) {
                        self.command = Command::NotRun;
                    } else {
                        self.start();
                    }
                    return;
                }
                Err(kube::Error::Api(status)) if status.is_conflict() => {
                    println!("conflict: the node changed since we read it; reading it again");
                    match self.api.get(&self.args.node).await {
                        Ok(fresh) => node = fresh,
                        Err(err) => return println!("cannot read the node: {err}; trying at its next change"),
                    }
                }
                Err(err) => return println!("cannot write the node: {err}; trying at its next change"),
            }
        }
    }

    /// The agent found `reboot-in-progress` when it started: it was stopped
    /// during a reboot. If the boot ID is the one the annotation holds, the
    /// machine did not reboot, and the command runs again. Else it rebooted,
    /// and only the wait for Ready is left.
    fn resume(&mut self, id: &str, boot_id: &str) {
        if id == boot_id {
            println!("resuming: reboot-in-progress is set and the node has not rebooted (same boot ID)");
            self.start();
        } else {
            println!("resuming: reboot-in-progress is set and the node has rebooted (new boot ID)");
            self.command = Command::Finished;
        }
    }
    // ANCHOR_END: step

    // ANCHOR: command
    /// Runs the reboot command on a thread of its own. It tells the loop when
    /// it ended. A real reboot ends this agent first: the node goes down.
    fn start(&mut self) {
        println!("running the reboot command: sh -c '{}'", self.args.reboot_command);
        self.command = Command::Running;
        let mut command = std::process::Command::new("sh");
        command.args(["-c", &self.args.reboot_command]).env("NODE", &self.args.node);
        let finished = self.finished.clone();
        tokio::task::spawn_blocking(move || {
            let ended = match command.status() {
                Ok(status) if status.success() => Command::Finished,
                Ok(status) => {
                    println!("the reboot command failed: {status}");
                    Command::Failed
                }
                Err(err) => {
                    println!("cannot run the reboot command: {err}");
                    Command::Failed
                }
            };
            match ended {
                Command::Finished => println!("the reboot command finished"),
                _ => println!("reboot-in-progress stays: a person must look at the node and remove it"),
            }
            _ = finished.send(ended);
        });
    }
    // ANCHOR_END: command
}

/// Ready as the kubelet reports it: the condition `Ready` is `True`.
fn ready(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}
// ANCHOR_END: whole
