//! Prometheus metrics, in the OpenMetrics text format, with client-go's
//! workqueue metric names and meanings (so existing dashboards work) plus the
//! logger's own.
//!
//! prometheus-client writes OpenMetrics 1.0 text (counter families named
//! without `_total`, samples with it, a final `# EOF`), so /metrics says so
//! in its content type ([`CONTENT_TYPE`]). Prometheus picks its parser by that
//! header: served as the classic `text/plain; version=0.0.4`, the counters'
//! `# TYPE workqueue_adds counter` would not match their `workqueue_adds_total`
//! samples, and they would be scraped as untyped.
//!
//! The metrics live in one process-wide registry, like client-go's global
//! metrics provider: any module records with a one-line call, and the lesson
//! code does not have to pass a handle around.

use std::sync::LazyLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

struct Metrics {
    registry: Registry,
    // client-go workqueue metrics, labelled name="<queue name>".
    depth: Family<Labels, Gauge>,
    adds: Family<Labels, Counter>,
    retries: Family<Labels, Counter>,
    queue_duration: Family<Labels, Histogram, fn() -> Histogram>,
    work_duration: Family<Labels, Histogram, fn() -> Histogram>,
    unfinished_work: Family<Labels, FloatGauge>,
    longest_running: Family<Labels, FloatGauge>,
    // The logger's own.
    events: Family<Labels, Counter>,
    /// The three usual kinds' series, held to count a line without a lookup.
    event_kinds: Vec<(&'static str, Counter)>,
    watch_errors: Counter,
    relists: Counter,
    resyncs: Counter,
    cache_pods: Gauge,
    /// client-go's leader election gauge: 1 while leading, by lease name.
    leader: Family<Labels, Gauge>,
    /// Lines a standby kept and dropped at the bound (leader.rs).
    kept_dropped: Counter,
}

/// client-go's buckets for both durations: ten buckets from 10 ns to 10 s,
/// one per decade.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 10))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::default();
    let m = Metrics {
        depth: Family::default(),
        adds: Family::default(),
        retries: Family::default(),
        queue_duration: Family::new_with_constructor(duration_histogram),
        work_duration: Family::new_with_constructor(duration_histogram),
        unfinished_work: Family::default(),
        longest_running: Family::default(),
        events: Family::default(),
        event_kinds: Vec::new(),
        watch_errors: Counter::default(),
        relists: Counter::default(),
        resyncs: Counter::default(),
        cache_pods: Gauge::default(),
        leader: Family::default(),
        kept_dropped: Counter::default(),
        registry: Registry::default(),
    };
    registry.register("workqueue_depth", "Current depth of workqueue", m.depth.clone());
    registry.register("workqueue_adds", "Total number of adds handled by workqueue", m.adds.clone());
    registry.register("workqueue_retries", "Total number of retries handled by workqueue", m.retries.clone());
    registry.register(
        "workqueue_queue_duration_seconds",
        "How long in seconds an item stays in workqueue before being requested",
        m.queue_duration.clone(),
    );
    registry.register(
        "workqueue_work_duration_seconds",
        "How long in seconds processing an item from workqueue takes",
        m.work_duration.clone(),
    );
    registry.register(
        "workqueue_unfinished_work_seconds",
        "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
        m.unfinished_work.clone(),
    );
    registry.register(
        "workqueue_longest_running_processor_seconds",
        "How many seconds has the longest running processor for workqueue been running",
        m.longest_running.clone(),
    );
    registry.register(
        "demo_controller_events",
        "Log lines written, by kind (onAdd, onUpdate, onDelete)",
        m.events.clone(),
    );
    registry.register("demo_controller_watch_errors", "Watch or list errors (each is retried)", m.watch_errors.clone());
    registry.register(
        "demo_controller_relists",
        "Full lists completed (the first one and every relist)",
        m.relists.clone(),
    );
    registry.register("demo_controller_resyncs", "Resync periods that re-queued every cached pod", m.resyncs.clone());
    registry.register("demo_controller_cache_pods", "Pods in the informer's cache", m.cache_pods.clone());
    registry.register(
        "leader_election_master_status",
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
        m.leader.clone(),
    );
    registry.register(
        "demo_controller_kept_lines_dropped",
        "Lines a standby kept for a takeover and dropped at the bound of what it keeps (lost if it takes over before the leader's mark passes them)",
        m.kept_dropped.clone(),
    );
    let event_kinds = ["onAdd", "onUpdate", "onDelete"]
        .into_iter()
        .map(|kind| (kind, m.events.get_or_create(&vec![("kind", kind.to_string())]).clone()))
        .collect();
    Metrics { registry, event_kinds, ..m }
});

fn name(queue: &str) -> Labels {
    vec![("name", queue.to_string())]
}

/// The work queue's measurements, recorded by queue.rs. It holds the series
/// of its own queue (cheap `Arc` handles), so recording is an atomic add, not
/// a label lookup, on every queue operation.
#[derive(Clone)]
pub struct QueueMetrics {
    depth: Gauge,
    adds: Counter,
    retries: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    unfinished_work: FloatGauge,
    longest_running: FloatGauge,
}

impl QueueMetrics {
    /// Creates every series of the queue at zero, so a dashboard sees them
    /// before the first retry, say, rather than a gap.
    pub fn new(queue: &str) -> QueueMetrics {
        let labels = name(queue);
        QueueMetrics {
            depth: METRICS.depth.get_or_create(&labels).clone(),
            adds: METRICS.adds.get_or_create(&labels).clone(),
            retries: METRICS.retries.get_or_create(&labels).clone(),
            queue_duration: METRICS.queue_duration.get_or_create(&labels).clone(),
            work_duration: METRICS.work_duration.get_or_create(&labels).clone(),
            unfinished_work: METRICS.unfinished_work.get_or_create(&labels).clone(),
            longest_running: METRICS.longest_running.get_or_create(&labels).clone(),
        }
    }
    pub fn added(&self, depth: usize) {
        self.adds.inc();
        self.depth.set(depth as i64);
    }
    pub fn started(&self, waited: Duration, depth: usize) {
        self.queue_duration.observe(waited.as_secs_f64());
        self.depth.set(depth as i64);
    }
    pub fn finished(&self, worked: Duration) {
        self.work_duration.observe(worked.as_secs_f64());
    }
    pub fn retried(&self) {
        self.retries.inc();
    }
    /// `running`: how long each key in progress has been held.
    pub fn in_flight(&self, running: &[Duration]) {
        // A fold from +0.0: an empty float `sum()` is -0.0, which would print as such.
        let total = running.iter().map(Duration::as_secs_f64).fold(0.0, |a, b| a + b);
        let longest = running.iter().max().copied().unwrap_or_default().as_secs_f64();
        self.unfinished_work.set(total);
        self.longest_running.set(longest);
    }
}

/// Counts one log line of `kind` (onAdd, onUpdate or onDelete).
pub fn event_logged(kind: &'static str) {
    match METRICS.event_kinds.iter().find(|(k, _)| *k == kind) {
        Some((_, counter)) => counter.inc(),
        None => METRICS.events.get_or_create(&vec![("kind", kind.to_string())]).inc(),
    };
}
pub fn watch_error() {
    METRICS.watch_errors.inc();
}
pub fn relisted() {
    METRICS.relists.inc();
}
pub fn resynced() {
    METRICS.resyncs.inc();
}
/// With `--leader-elect`: 1 while we hold the lease `name`, else 0.
pub fn leader(name: &str, leading: bool) {
    METRICS.leader.get_or_create(&vec![("name", name.to_string())]).set(i64::from(leading));
}
/// With `--leader-elect`: a kept line was dropped at the bound.
pub fn kept_line_dropped() {
    METRICS.kept_dropped.inc();
}
pub fn cache_pods(n: usize) {
    METRICS.cache_pods.set(n as i64);
}

/// The content type of what [`render`] writes: OpenMetrics text 1.0.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The whole registry in the OpenMetrics text format ([`CONTENT_TYPE`]).
pub fn render() -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &METRICS.registry);
    out
}

#[cfg(test)]
pub mod tests {
    /// The value of one sample line of `render()`, e.g.
    /// `sample("workqueue_adds_total{name=\"q\"}")`.
    pub fn sample(series: &str) -> Option<f64> {
        super::render().lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn counters_render_with_client_go_names() {
        let q = super::QueueMetrics::new("render-test");
        q.added(3);
        q.retried();
        let text = super::render();
        assert!(text.contains("# TYPE workqueue_adds counter"), "{text}");
        assert_eq!(sample("workqueue_adds_total{name=\"render-test\"}"), Some(1.0));
        assert_eq!(sample("workqueue_retries_total{name=\"render-test\"}"), Some(1.0));
        assert_eq!(sample("workqueue_depth{name=\"render-test\"}"), Some(3.0));
    }

    /// What Prometheus does with a page served as OpenMetrics: parse it with
    /// a strict OpenMetrics parser (families, types, suffixes, `# EOF`).
    #[test]
    fn the_page_is_valid_openmetrics() {
        use openmetrics_parser::{OpenMetricsType, OpenMetricsValue, openmetrics::parse_openmetrics};
        let q = super::QueueMetrics::new("openmetrics-test");
        q.added(1);
        q.started(std::time::Duration::from_millis(3), 0);
        super::event_logged("onAdd");
        let page = super::render();
        assert!(page.ends_with("# EOF\n"), "{page}");
        // The control: the parser is strict (a page cut before `# EOF` fails).
        assert!(parse_openmetrics(page.trim_end_matches("# EOF\n")).is_err());
        let parsed = parse_openmetrics(&page).unwrap_or_else(|e| panic!("not OpenMetrics: {e:?}\n{page}"));
        let family = |name: &str| parsed.families.get(name).unwrap_or_else(|| panic!("no family {name} in\n{page}"));
        assert_eq!(family("workqueue_adds").family_type, OpenMetricsType::Counter);
        assert_eq!(family("workqueue_depth").family_type, OpenMetricsType::Gauge);
        assert_eq!(family("workqueue_queue_duration_seconds").family_type, OpenMetricsType::Histogram);
        assert_eq!(family("demo_controller_events").family_type, OpenMetricsType::Counter);
        let adds =
            family("workqueue_adds").get_sample_by_label_values(&["openmetrics-test".to_string()]).expect("our series");
        match &adds.value {
            OpenMetricsValue::Counter(c) => assert_eq!(c.value.as_f64(), 1.0),
            other => panic!("not a counter: {other:?}"),
        }
        let waited = family("workqueue_queue_duration_seconds")
            .get_sample_by_label_values(&["openmetrics-test".to_string()])
            .expect("our series");
        match &waited.value {
            OpenMetricsValue::Histogram(h) => {
                assert_eq!(h.count, Some(1));
                // 3 ms falls in the bucket up to 0.01 s, not in the one up to 0.001 s.
                let le = |bound: f64| h.buckets.iter().find(|b| (b.upper_bound - bound).abs() < 1e-12).unwrap();
                assert_eq!((le(0.001).count.as_f64(), le(0.01).count.as_f64()), (0.0, 1.0));
            }
            other => panic!("not a histogram: {other:?}"),
        }
    }
}
