//! Signals, heard on a thread of their own.
//!
//! Everything else runs on one thread (see main.rs), and that thread can be
//! stuck for a while: a worker writing a log line into a full pipe blocks it
//! until someone reads, and a long synchronous step holds it too. A signal
//! must still be heard then, and a second Ctrl-C must still end the process at
//! once. So a second, tiny runtime runs on its own OS thread (the "side"
//! thread): it listens for SIGINT and SIGTERM, and it also serves the probes
//! and metrics (probes.rs), which the kubelet must get answers from whatever
//! the workers are doing.
//!
//! The side thread writes to stdout only on its way out and when a probe or
//! metrics listener it already announced fails to start serving (a warning,
//! probes.rs): a write could block it exactly like the main thread, so it
//! never writes in the course of answering a probe or a signal.
//!
//! - The first signal is handed to the main thread, which logs it and starts
//!   the graceful shutdown (in order with its other lines).
//! - A second signal ends the process from the side thread: one last line,
//!   written while holding stdout so that no other line can follow it, then
//!   exit with 128 + the signal's number, even if the main thread is stuck.

use std::io::Write;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// A signal we act on: its name for the log, its number for the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signal {
    pub name: &'static str,
    pub number: u8,
}

impl Signal {
    /// The exit code of a process that a signal ended: 128 + its number, the
    /// shell's convention (130 for SIGINT, 143 for SIGTERM).
    pub fn exit_code(self) -> u8 {
        128 + self.number
    }
}

/// The side runtime: a current-thread tokio runtime on a thread of its own.
/// Dropping the handle does not stop it; it lives as long as the process.
pub fn side_thread() -> std::io::Result<Handle> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name("signals-and-probes".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
    Ok(handle)
}

/// Installs the SIGINT and SIGTERM handlers on the side thread. The first
/// signal comes back through the returned receiver; a second one exits the
/// process from there (see the module comment). The handlers are installed
/// before this returns, so no signal falls between start-up and them.
pub fn listen(side: &Handle) -> oneshot::Receiver<Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    let (first_tx, first_rx) = oneshot::channel();
    let _in_the_runtime = side.enter(); // signal() registers with the side runtime's driver
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        warn!("cannot install signal handlers: stop demo-controller with SIGKILL");
        return first_rx; // its sender is dropped: no signal will come
    };
    side.spawn(async move {
        let mut next = async || {
            tokio::select! {
                _ = int.recv() => Signal { name: "SIGINT", number: 2 },
                _ = term.recv() => Signal { name: "SIGTERM", number: 15 },
            }
        };
        let _ = first_tx.send(next().await);
        exit_at_once(next().await);
    });
    first_rx
}

/// The main thread's half: waits for the first signal, logs it and cancels
/// `shutdown`. Returns the signal, or never if none comes.
pub async fn first(signal: oneshot::Receiver<Signal>, shutdown: CancellationToken) -> Signal {
    let Ok(signal) = signal.await else { return std::future::pending().await };
    info!(signal = signal.name, "received {}: shutting down (send it again to exit at once)", signal.name);
    shutdown.cancel();
    signal
}

/// A second signal: the last line, then exit with 128 + its number.
///
/// The line is written by a thread that takes stdout's lock first and never
/// gives it back, so no line of the main thread can come after it. If stdout
/// itself is blocked (nobody reads the pipe), the line cannot be written; we
/// exit anyway after a short wait, since that is what the user asked for.
fn exit_at_once(signal: Signal) -> ! {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let _ = std::thread::Builder::new().name("last-line".into()).spawn(move || {
        let mut stdout = std::io::stdout().lock();
        warn!(signal = signal.name, "received {} again: exiting at once", signal.name);
        let _ = stdout.flush();
        let _ = done_tx.send(());
        // Hold the lock until the process ends.
        loop {
            std::thread::park();
        }
    });
    let _ = done_rx.recv_timeout(Duration::from_millis(500));
    std::process::exit(i32::from(signal.exit_code()))
}
