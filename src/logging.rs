//! Log setup: tracing to stdout, as text for people or JSON for machines.

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Logs go to stdout. `RUST_LOG` overrides the default: our own lines at info
/// and the libraries' at warn, so the lesson is not drowned in HTTP chatter.
/// Two library sources are quieter still, because we log the same problem
/// ourselves, in one line with the fix: kube-client's HTTP trace layer (an
/// error line per failed request) and kube-runtime's watcher (a Debug dump of
/// every 403 at warn).
///
/// Each line is written to stdout by the task that logs it, in one write (Rust's
/// stdout is line-buffered, also into a pipe), so a line is out before the
/// worker takes its next key. A slow reader of stdout slows the workers: that is
/// the back-pressure we want, since the queue de-duplicates the keys that wait
/// meanwhile and no line is ever dropped. (A background writer thread, as
/// `tracing-appender` offers, costs a thread wake-up and two context switches
/// per line: bench/profile.md found such a thread at 14 % of a burst's CPU.)
pub const DEFAULT_FILTER: &str =
    "warn,demo_controller=info,kube_client::client::builder=off,kube_runtime::watcher=error";

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    // Colours only for a terminal: in a pipe or a log file they are noise.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(colours)
        .with_writer(std::io::stdout);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
