//! Command-line flags. Every flag is checked here, before anything connects,
//! so a typo costs one clear line instead of a confusing failure later.

use crate::probes::Serve;
use crate::wire::Wire;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Watches pods and logs onAdd, onUpdate and onDelete for each change: a
/// small Kubernetes controller to learn from (watch -> cache -> work queue ->
/// worker).
#[derive(Parser, Debug)]
#[command(name = "demo-controller", version, max_term_width = 100)]
pub struct Args {
    /// Watch pods in this namespace only [default: all namespaces]
    #[arg(short = 'n', long, value_name = "NS", value_parser = parse_namespace)]
    pub namespace: Option<String>,

    /// Watch only pods whose labels match this selector (e.g. app=web,tier!=db)
    #[arg(short = 'l', long, value_name = "SELECTOR", value_parser = parse_selector)]
    pub selector: Option<String>,

    /// Queue every pod of the local cache again this often (at least 1s, e.g.
    /// 30s, 5m, 1h; 0 disables). It never asks the server, so it cannot catch
    /// a change the watch missed (relists do); it is for controllers whose
    /// actions on the outside world can drift. Pods that did not change log
    /// nothing
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_resync)]
    pub resync: Duration,

    /// Number of workers taking keys from the queue concurrently (1-64)
    #[arg(long, value_name = "N", default_value_t = 2, allow_hyphen_values = true, value_parser = parse_workers)]
    pub workers: usize,

    /// Do not log onAdd for the pods that already exist at start-up
    #[arg(long)]
    pub skip_existing: bool,

    /// List pods with paged LIST requests, never a streaming list (a watch
    /// that sends the existing pods first: used by default for the first list,
    /// with paged LIST where the server refuses it or cuts it short, or where
    /// protobuf falls back to json; relists are always paged)
    #[arg(long)]
    pub paged_list: bool,

    /// The format pods are read in: protobuf, the API server's own (smaller, and cheaper
    /// for the server to encode), or json. Where the server refuses protobuf, or an answer
    /// comes back in another format (a proxy that rewrites it): json, with one warning
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = Wire::Protobuf, env = "DEMO_CONTROLLER_WIRE")]
    pub wire: Wire,

    /// Log format: text for people, json (one object per line) for machines
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Path to a kubeconfig file [default: $KUBECONFIG, in-cluster config in a pod, else ~/.kube/config]
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use [default: its current-context]
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// /healthz fails when a worker is stuck on one key for longer than this
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_stuck_after)]
    pub stuck_after: Duration,

    /// Serve /readyz and /healthz on this address (0 turns them off) [default: 127.0.0.1:8081, or 0.0.0.0:8081
    /// in a pod]
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    pub probe_addr: Option<Listen>,

    /// Serve Prometheus /metrics on this address (0 turns it off) [default: 127.0.0.1:8080, or 0.0.0.0:8080 in
    /// a pod]
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    pub metrics_addr: Option<Listen>,

    /// Run as one of several replicas: only the holder of a Lease logs; the others keep their cache
    /// synced and take over where it stopped
    #[arg(long, help_heading = "Leader election")]
    pub leader_elect: bool,

    /// How long a standby waits after the leader's last renew before it takes the lease
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_period, help_heading = "Leader election")]
    pub leader_elect_lease_duration: Duration,

    /// The leader stops logging when no renew succeeded for this long (less than the lease duration)
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_period, help_heading = "Leader election")]
    pub leader_elect_renew_deadline: Duration,

    /// How often candidates try to take the lease and the leader renews it (renew deadline > 1.2 x this)
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_period, help_heading = "Leader election")]
    pub leader_elect_retry_period: Duration,

    /// The name of the Lease
    #[arg(long, value_name = "NAME", default_value = "demo-controller", value_parser = parse_lease_name, help_heading = "Leader election")]
    pub leader_elect_resource_name: String,

    /// The namespace of the Lease [default: the pod's own namespace in a pod, else default]
    #[arg(long, value_name = "NS", value_parser = parse_namespace, help_heading = "Leader election")]
    pub leader_elect_resource_namespace: Option<String>,
}

/// Whether we run in a pod: the kubelet sets this variable in every
/// container (the same test client-go's in-cluster config makes).
fn in_a_pod() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// The default address of a server on `port`: every address in a pod (the
/// kubelet probes the pod's IP), loopback elsewhere (a laptop's probes and
/// metrics are nobody else's business, and a LAN should not see them).
fn default_serve(flag: Option<Listen>, port: u16) -> Serve {
    match flag {
        Some(Listen(addr)) => Serve { addr, busy_is_fatal: true },
        None if in_a_pod() => Serve { addr: Some(([0, 0, 0, 0], port).into()), busy_is_fatal: true },
        None => Serve { addr: Some(([127, 0, 0, 1], port).into()), busy_is_fatal: false },
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl Args {
    /// Where to serve /readyz and /healthz (see [`Serve`]).
    pub fn probes(&self) -> Serve {
        default_serve(self.probe_addr, 8081)
    }

    /// Where to serve /metrics (see [`Serve`]).
    pub fn metrics(&self) -> Serve {
        default_serve(self.metrics_addr, 8080)
    }

    /// The election's timings, checked as client-go checks them.
    pub fn leader_timings(&self) -> Result<crate::leader::Timings, String> {
        crate::leader::Timings {
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        }
        .check()
    }

    /// The Lease's namespace: the flag, else the pod's own (its service
    /// account's namespace file), else `default`.
    pub fn lease_namespace(&self) -> String {
        const IN_A_POD: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
        self.leader_elect_resource_namespace
            .clone()
            .or_else(|| in_a_pod().then(|| std::fs::read_to_string(IN_A_POD).ok()).flatten())
            .map(|ns| ns.trim().to_string())
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".into())
    }

    /// Parses the command line. `--help` and `--version` print and exit 0; a
    /// bad flag prints one line with the fix and exits 2 (the usual code for
    /// a usage error), never a panic.
    pub fn parse_or_exit() -> Args {
        let args = Args::try_parse().unwrap_or_else(|err| {
            use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
            if matches!(err.kind(), DisplayHelp | DisplayVersion) {
                err.exit();
            }
            // clap's first line names the problem; its tips and usage follow
            // on more lines, which we replace by a pointer to --help.
            let rendered = err.to_string();
            let first = rendered.lines().next().unwrap_or("error: invalid arguments");
            eprintln!("{first} (see demo-controller --help)");
            std::process::exit(2);
        });
        // Checked even without --leader-elect, as Kubernetes' components do:
        // a bad value is caught before the day it is used.
        if let Err(err) = args.leader_timings() {
            eprintln!("error: {err} (see demo-controller --help)");
            std::process::exit(2);
        }
        args
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|_| "expected a duration such as 30s, 5m or 1h (0 disables)".to_string())
}

/// The shortest resync period that makes sense. Below it, every cached pod
/// would be queued again many times a second: a busy loop, not a resync.
pub const MIN_RESYNC: Duration = Duration::from_secs(1);

fn parse_resync(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if !d.is_zero() && d < MIN_RESYNC => Err(
            "a resync below 1s would queue every pod again many times a second: use at least 1s, or 0 to turn it off"
                .to_string(),
        ),
        d => Ok(d),
    }
}

/// A duration above zero, for the leader election's timings.
fn parse_period(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err("expected a duration above zero such as 2s, 10s or 15s".to_string()),
    }
}

fn parse_stuck_after(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => {
            Err("0 would report every busy worker as stuck: use a duration such as 60s".to_string())
        }
        Ok(d) => Ok(d),
        Err(_) => Err("expected a duration such as 30s, 60s or 5m".to_string()),
    }
}

fn parse_workers(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ 1..=64) => Ok(n),
        _ => Err("expected a whole number from 1 to 64".to_string()),
    }
}

/// A namespace name is a DNS label (RFC 1123): lower-case letters, digits and
/// '-', starting and ending with a letter or digit, at most 63 characters.
fn parse_namespace(s: &str) -> Result<String, String> {
    let valid = !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if valid {
        Ok(s.to_string())
    } else {
        Err("a namespace is a DNS label: lower-case letters, digits and '-', at most 63 characters".to_string())
    }
}

/// A Lease's name is a DNS subdomain (RFC 1123): DNS labels joined by '.',
/// at most 253 characters.
fn parse_lease_name(s: &str) -> Result<String, String> {
    if s.len() <= 253 && s.split('.').all(|label| parse_namespace(label).is_ok()) {
        Ok(s.to_string())
    } else {
        Err("a lease name is a DNS subdomain: lower-case letters, digits, '-' and '.', at most 253 characters"
            .to_string())
    }
}

/// A light check that catches the common slips before connecting; the API
/// server parses the selector for real at start-up (see client.rs).
fn parse_selector(s: &str) -> Result<String, String> {
    let balanced = s.matches('(').count() == s.matches(')').count();
    if s.trim().is_empty() || !balanced || s.split(',').any(|part| part.trim().is_empty() && !s.contains('(')) {
        return Err("expected a label selector such as app=web, tier!=db or 'env in (prod,staging)'".to_string());
    }
    Ok(s.to_string())
}

/// Where a small HTTP server listens, or `None` when it is turned off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listen(pub Option<std::net::SocketAddr>);

/// `0` turns a server off; anything else must be IP:PORT.
fn parse_addr(s: &str) -> Result<Listen, String> {
    if s == "0" {
        return Ok(Listen(None));
    }
    s.parse()
        .map(|a| Listen(Some(a)))
        .map_err(|_| "expected IP:PORT such as 0.0.0.0:8080, or 0 to turn it off".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Args, String> {
        let argv = std::iter::once("demo-controller").chain(args.iter().copied());
        Args::try_parse_from(argv).map_err(|e| e.to_string().lines().next().unwrap_or_default().to_string())
    }

    #[test]
    fn defaults() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.resync, Duration::from_secs(300));
        assert_eq!(a.workers, 2);
        assert_eq!(a.log_format, LogFormat::Text);
        assert!(a.namespace.is_none() && a.selector.is_none() && !a.skip_existing);
        assert_eq!((a.probe_addr, a.metrics_addr), (None, None));
        // Outside a pod (the test runner is not in one): loopback, and a busy
        // port is not fatal; in a pod, every address, and it is.
        let local = |port: u16| Some(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
        let any = |port: u16| Some(std::net::SocketAddr::from(([0, 0, 0, 0], port)));
        assert_eq!(default_serve(None, 8081), Serve { addr: local(8081), busy_is_fatal: false });
        assert_eq!(a.metrics(), Serve { addr: local(8080), busy_is_fatal: false });
        assert_eq!(default_serve(Some(Listen(any(9))), 8081), Serve { addr: any(9), busy_is_fatal: true });
        assert_eq!(default_serve(Some(Listen(None)), 8081), Serve { addr: None, busy_is_fatal: true });
    }

    #[test]
    fn every_flag_parses() {
        let a = parse(&[
            "-n",
            "kube-system",
            "-l",
            "app=web",
            "--resync",
            "30s",
            "--workers",
            "4",
            "--skip-existing",
            "--log-format",
            "json",
            "--kubeconfig",
            "/k",
            "--context",
            "c",
            "--probe-addr",
            "0",
            "--metrics-addr",
            "127.0.0.1:9000",
            "--stuck-after",
            "90s",
        ])
        .unwrap();
        assert_eq!(a.namespace.as_deref(), Some("kube-system"));
        assert_eq!(a.selector.as_deref(), Some("app=web"));
        assert_eq!(a.resync, Duration::from_secs(30));
        assert_eq!(a.workers, 4);
        assert!(a.skip_existing);
        assert_eq!(a.log_format, LogFormat::Json);
        assert_eq!(a.probe_addr, Some(Listen(None)));
        assert_eq!(a.stuck_after, Duration::from_secs(90));
        assert_eq!(a.metrics_addr, Some(Listen(Some("127.0.0.1:9000".parse().unwrap()))));
        assert_eq!(parse(&["--resync", "0"]).unwrap().resync, Duration::ZERO);
        let a = parse(&["--leader-elect", "--leader-elect-resource-namespace", "ops"]).unwrap();
        assert!(a.leader_elect);
        let s = Duration::from_secs;
        let t = a.leader_timings().unwrap();
        assert_eq!((t.lease_duration, t.renew_deadline, t.retry_period), (s(15), s(10), s(2)), "client-go's defaults");
        assert_eq!((a.leader_elect_resource_name.as_str(), a.lease_namespace().as_str()), ("demo-controller", "ops"));
        assert_eq!(parse(&[]).unwrap().lease_namespace(), "default", "outside a pod");
    }

    #[test]
    fn bad_values_name_the_flag_and_the_fix() {
        assert_eq!(
            parse(&["--resync", "soon"]).unwrap_err(),
            "error: invalid value 'soon' for '--resync <DURATION>': expected a duration such as 30s, 5m or 1h (0 disables)"
        );
        assert_eq!(
            parse(&["--workers", "-1"]).unwrap_err(),
            "error: invalid value '-1' for '--workers <N>': expected a whole number from 1 to 64"
        );
        assert_eq!(
            parse(&["-n", "Bad_NS"]).unwrap_err(),
            "error: invalid value 'Bad_NS' for '--namespace <NS>': a namespace is a DNS label: lower-case letters, digits and '-', at most 63 characters"
        );
        assert_eq!(parse(&["--frobnicate"]).unwrap_err(), "error: unexpected argument '--frobnicate' found");
        assert!(parse(&["-l", "app in (a,b"]).unwrap_err().contains("expected a label selector"));
        assert_eq!(
            parse(&["--resync", "500ms"]).unwrap_err(),
            "error: invalid value '500ms' for '--resync <DURATION>': a resync below 1s would queue every pod again many times a second: use at least 1s, or 0 to turn it off"
        );
        assert_eq!(parse(&["--resync", "1s"]).unwrap().resync, MIN_RESYNC);
        assert_eq!(
            parse(&["--stuck-after", "0"]).unwrap_err(),
            "error: invalid value '0' for '--stuck-after <DURATION>': 0 would report every busy worker as stuck: use a duration such as 60s"
        );
        assert!(
            parse(&["--log-format", "xml"]).unwrap_err().contains("invalid value 'xml' for '--log-format <FORMAT>'")
        );
    }

    #[test]
    fn help_documents_every_flag() {
        // Every flag clap knows, not a list kept by hand: a new flag without
        // help text fails here.
        let mut command = Args::command();
        let help = command.render_long_help().to_string();
        let mut flags = 0;
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            flags += 1;
            assert!(help.contains(&format!("--{long}")), "--help lacks --{long}");
            let words = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default();
            assert!(!words.trim().is_empty(), "--{long} has no help text");
        }
        assert!(flags >= 20, "only {flags} flags found");
        for builtin in ["--help", "--version"] {
            assert!(help.contains(builtin), "--help lacks {builtin}");
        }
    }
}
