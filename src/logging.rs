//! Log setup: tracing to stdout, as text for people or JSON for machines.

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::cli::LogFormat;

/// Logs go to stdout. `RUST_LOG` overrides the default: our own lines at info
/// and the libraries' at warn, so the lesson is not drowned in HTTP chatter.
/// Three library sources are quieter still, because we report the same
/// problem ourselves, in one line with the cause and what happens next:
/// kube-client's HTTP trace layer (an error line per failed request), its
/// client (a Debug dump of a response it cannot parse; and, for a watch whose
/// connection breaks, "eof in poll: Custom { kind: UnexpectedEof ... }", which
/// [`LibraryLines`] turns into our own line) and kube-runtime's watcher (a
/// Debug dump of every 403 at warn).
///
/// Each line is written to stdout by the task that logs it, in one write (Rust's
/// stdout is line-buffered, also into a pipe), so a line is out before the
/// worker takes its next key. A slow reader of stdout slows the workers: that is
/// the back-pressure we want, since the queue de-duplicates the keys that wait
/// meanwhile and no line is ever dropped. The probes and the signals still
/// answer: they live on a thread of their own (signals.rs). But a worker that
/// stays blocked on its write for longer than `--stuck-after` is stuck, and
/// /healthz says so (503), as it should: nothing is being logged. (A
/// background writer thread, as `tracing-appender` offers, costs a thread
/// wake-up and two context switches per line: bench/profile.md measured what
/// such a thread costs during a burst.)
pub const DEFAULT_FILTER: &str = "warn,demo_controller=info,kube_client::client=off,kube_runtime::watcher=error";

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    // Colours only for a terminal: in a pipe or a log file they are noise.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let fmt = tracing_subscriber::fmt::layer().with_target(false).with_ansi(colours).with_writer(std::io::stdout);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    };
    tracing_subscriber::registry().with(fmt.with_filter(filter)).with(LibraryLines).init();
}

/// Turns the library lines we know into ours. kube-client ends a watch stream
/// quietly when its connection breaks, logging only a warning of its own
/// ("eof in poll", or "timeout in poll" when our read timeout fired): the
/// watcher then resumes the watch, and without this layer we would not know
/// the watch had been down at all. Each such line becomes one line of ours
/// (see [`crate::wire::watch_interrupted`]). On protobuf our own watcher
/// sees the broken connection and logs the same line (wire.rs), so
/// a restart reads the same on both wires.
struct LibraryLines;

impl<S: Subscriber> Layer<S> for LibraryLines {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() != Level::WARN || meta.target() != "kube_client::client" {
            return;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if message.0.starts_with("eof in poll") {
            crate::wire::watch_interrupted(crate::wire::Interruption::ClosedMidStream, None);
        } else if message.0.starts_with("timeout in poll") {
            crate::wire::watch_interrupted(crate::wire::Interruption::Silent, None);
        }
    }
}

/// The `message` field of an event, as text.
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}
