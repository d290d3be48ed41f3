//! The peers: the loggers compared, and the bare clients that measure the floors.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Everything `make bench` runs, in the order it runs them at each N.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Peer {
    /// bench-floor list: paged LIST as JSON, bytes thrown away.
    FloorList,
    /// bench-floor stream: streaming list as JSON, bytes thrown away.
    FloorStream,
    /// bench-floor list-protobuf: paged LIST as protobuf, bytes thrown away.
    FloorListProtobuf,
    /// bench-floor stream-protobuf: streaming list as protobuf, bytes thrown away.
    FloorStreamProtobuf,
    /// demo-controller with its defaults.
    Demo,
    /// demo-controller --paged-list (when the binary has the flag).
    DemoPaged,
    /// demo-controller --wire json: its default list mode, pods as JSON
    /// (when the binary has --wire; its default is then protobuf).
    DemoJson,
    /// demo-controller --paged-list --wire json.
    DemoPagedJson,
    /// The client-go logger, WatchListClient on (client-go's default).
    GoWatchList,
    /// The client-go logger, KUBE_FEATURE_WatchListClient=false.
    GoPaged,
    /// The kube-rs idiomatic logger.
    KubeRs,
    /// Two demo-controllers with --leader-elect, a leader and its warm
    /// standby: measured together (pair.rs), a table of their own.
    DemoPair,
}

pub const LOGGERS: [Peer; 7] =
    [Peer::Demo, Peer::DemoPaged, Peer::DemoJson, Peer::DemoPagedJson, Peer::GoWatchList, Peer::GoPaged, Peer::KubeRs];
/// Every peer, in the order a run measures them at each N.
pub const ALL: [Peer; 12] = [
    Peer::FloorList,
    Peer::FloorStream,
    Peer::FloorListProtobuf,
    Peer::FloorStreamProtobuf,
    Peer::Demo,
    Peer::DemoPaged,
    Peer::DemoJson,
    Peer::DemoPagedJson,
    Peer::GoWatchList,
    Peer::GoPaged,
    Peer::KubeRs,
    Peer::DemoPair,
];
pub const FLOORS: [Peer; 4] = [Peer::FloorList, Peer::FloorStream, Peer::FloorListProtobuf, Peer::FloorStreamProtobuf];

impl Peer {
    /// The column header in results.md and the plot legend.
    pub fn label(self) -> &'static str {
        match self {
            Peer::FloorList => "floor: bare paged LIST, JSON",
            Peer::FloorStream => "floor: bare streaming list, JSON",
            Peer::FloorListProtobuf => "floor: bare paged LIST, protobuf",
            Peer::FloorStreamProtobuf => "floor: bare streaming list, protobuf",
            Peer::Demo => "demo-controller",
            Peer::DemoPaged => "demo-controller --paged-list",
            Peer::DemoJson => "demo-controller --wire json",
            Peer::DemoPagedJson => "demo-controller --paged-list --wire json",
            Peer::GoWatchList => "client-go (WatchList on)",
            Peer::GoPaged => "client-go (WatchList off)",
            Peer::KubeRs => "kube-rs idiomatic",
            Peer::DemoPair => "demo-controller --leader-elect, two replicas",
        }
    }

    /// For file names.
    pub fn slug(self) -> &'static str {
        match self {
            Peer::FloorList => "floor-list",
            Peer::FloorStream => "floor-stream",
            Peer::FloorListProtobuf => "floor-list-protobuf",
            Peer::FloorStreamProtobuf => "floor-stream-protobuf",
            Peer::Demo => "demo-controller",
            Peer::DemoPaged => "demo-controller-paged",
            Peer::DemoJson => "demo-controller-json",
            Peer::DemoPagedJson => "demo-controller-paged-json",
            Peer::GoWatchList => "client-go-watchlist",
            Peer::GoPaged => "client-go-paged",
            Peer::KubeRs => "kube-rs",
            Peer::DemoPair => "demo-controller-two-replicas",
        }
    }

    pub fn is_logger(self) -> bool {
        LOGGERS.contains(&self)
    }

    /// Whether it reads pods as protobuf: demo-controller by default,
    /// client-go always (its clientset asks for protobuf), and the protobuf
    /// floors; the others read JSON. A sync time is read against the floor
    /// of the same wire.
    pub fn protobuf(self) -> bool {
        matches!(
            self,
            Peer::Demo
                | Peer::DemoPaged
                | Peer::DemoPair
                | Peer::GoWatchList
                | Peer::GoPaged
                | Peer::FloorListProtobuf
                | Peer::FloorStreamProtobuf
        )
    }

    /// Whether it has a resync period (kube-rs has none; the floors do not cache).
    pub fn has_resync(self) -> bool {
        matches!(
            self,
            Peer::Demo
                | Peer::DemoPaged
                | Peer::DemoJson
                | Peer::DemoPagedJson
                | Peer::GoWatchList
                | Peer::GoPaged
                | Peer::DemoPair
        )
    }
}

/// The binaries, and which peers this run has.
pub struct Binaries {
    pub demo: PathBuf,
    pub kube_rs: PathBuf,
    pub floor: PathBuf,
    pub go: Option<PathBuf>,
    /// demo-controller accepts --paged-list (found in its --help).
    pub demo_paged: bool,
    /// demo-controller accepts --wire (protobuf by default, json on request).
    pub demo_wire: bool,
    /// demo-controller accepts --leader-elect.
    pub demo_leader_elect: bool,
}

impl Binaries {
    pub fn new(demo: PathBuf, kube_rs: PathBuf, floor: PathBuf, go: Option<PathBuf>) -> Binaries {
        for path in [&demo, &kube_rs, &floor].into_iter().chain(go.as_ref()) {
            assert!(path.is_file(), "{} does not exist: build it first (bench/run.sh does)", path.display());
        }
        let help = Command::new(&demo).arg("--help").output().expect("run demo-controller --help");
        let help = String::from_utf8_lossy(&help.stdout);
        let (demo_paged, demo_wire) = (help.contains("--paged-list"), help.contains("--wire"));
        let demo_leader_elect = help.contains("--leader-elect");
        Binaries { demo, kube_rs, floor, go, demo_paged, demo_wire, demo_leader_elect }
    }

    /// The peers this run measures; the others are reported as n/a.
    pub fn available(&self, peer: Peer) -> bool {
        match peer {
            Peer::DemoPaged => self.demo_paged,
            Peer::DemoJson => self.demo_wire,
            Peer::DemoPagedJson => self.demo_wire && self.demo_paged,
            Peer::GoWatchList | Peer::GoPaged => self.go.is_some(),
            Peer::DemoPair => self.demo_leader_elect,
            _ => true,
        }
    }

    /// The command line for `peer`, with the resync period `resync` for those that have one.
    pub fn command(&self, peer: Peer, kubeconfig: &Path, resync: Duration) -> Command {
        let resync = format!("{}s", resync.as_secs());
        let mut cmd = match peer {
            Peer::FloorList | Peer::FloorStream | Peer::FloorListProtobuf | Peer::FloorStreamProtobuf => {
                let mut cmd = Command::new(&self.floor);
                cmd.arg(match peer {
                    Peer::FloorList => "list",
                    Peer::FloorStream => "stream",
                    Peer::FloorListProtobuf => "list-protobuf",
                    _ => "stream-protobuf",
                });
                cmd
            }
            Peer::Demo | Peer::DemoPaged | Peer::DemoJson | Peer::DemoPagedJson | Peer::DemoPair => {
                let mut cmd = Command::new(&self.demo);
                cmd.args(["--probe-addr", "0", "--metrics-addr", "0", "--log-format", "text", "--resync", &resync]);
                if matches!(peer, Peer::DemoPaged | Peer::DemoPagedJson) {
                    cmd.arg("--paged-list");
                }
                if matches!(peer, Peer::DemoJson | Peer::DemoPagedJson) {
                    cmd.args(["--wire", "json"]);
                }
                cmd.env_remove("DEMO_CONTROLLER_WIRE");
                cmd
            }
            Peer::GoWatchList | Peer::GoPaged => {
                let mut cmd = Command::new(self.go.as_ref().expect("the go logger"));
                cmd.args(["--resync", &resync]);
                // On: client-go's own default, so the variable is left unset.
                match peer {
                    Peer::GoPaged => cmd.env("KUBE_FEATURE_WatchListClient", "false"),
                    _ => cmd.env_remove("KUBE_FEATURE_WatchListClient"),
                };
                cmd
            }
            Peer::KubeRs => Command::new(&self.kube_rs),
        };
        // Every peer at its default log level, without colours.
        cmd.arg("--kubeconfig").arg(kubeconfig).env_remove("KUBECONFIG").env_remove("RUST_LOG").env("NO_COLOR", "1");
        cmd
    }

    /// The bare watch that sets the lag floor during a burst.
    pub fn floor_watch(&self, kubeconfig: &Path) -> Command {
        let mut cmd = Command::new(&self.floor);
        cmd.arg("watch").arg("--kubeconfig").arg(kubeconfig).env_remove("KUBECONFIG");
        cmd
    }
}
