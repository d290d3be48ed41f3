//! results.svg, drawn with plotters: RSS per pod and time to cache synced
//! against N for every peer, and the burst-lag distribution at the largest N.

use std::path::Path;

use plotters::prelude::*;

use crate::peers::{FLOORS, LOGGERS, Peer};
use crate::report::{Results, SizeRow, thousands};

type Error = Box<dyn std::error::Error>;

fn colour(peer: Peer) -> RGBColor {
    match peer {
        Peer::Demo => RGBColor(206, 90, 26),
        Peer::DemoPaged => RGBColor(240, 160, 60),
        Peer::DemoJson => RGBColor(150, 60, 20),
        Peer::DemoPagedJson => RGBColor(200, 130, 90),
        Peer::GoWatchList => RGBColor(0, 130, 180),
        Peer::GoPaged => RGBColor(110, 200, 230),
        Peer::KubeRs => RGBColor(120, 60, 160),
        Peer::DemoPair => RGBColor(230, 120, 60),
        Peer::FloorList => RGBColor(90, 90, 90),
        Peer::FloorStream => RGBColor(160, 160, 160),
        Peer::FloorListProtobuf => RGBColor(40, 40, 40),
        Peer::FloorStreamProtobuf => RGBColor(120, 120, 120),
    }
}

const FONT: (&str, u32) = ("sans-serif", 15);

/// One line of a chart: its legend label, its colour and its (x, y) points.
type Line<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

pub fn draw(r: &Results, path: &Path) -> Result<(), Error> {
    let root = SVGBackend::new(path, (1500, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 3));
    let sizes: Vec<f64> = r.rows.iter().map(|row| row.n as f64).collect();
    let (lo, hi) = (sizes.iter().copied().fold(f64::MAX, f64::min), sizes.iter().copied().fold(0.0, f64::max));
    let x_range = (lo / 1.5)..(hi * 1.5);

    // A line per peer that has values, labelled and coloured as that peer.
    let series = |get: &dyn Fn(&SizeRow, Peer) -> Option<f64>, peers: &[Peer]| -> Vec<Line> {
        peers
            .iter()
            .map(|&p| {
                let points = r.rows.iter().filter_map(|row| Some((row.n as f64, get(row, p)?))).collect::<Vec<_>>();
                (p.label(), colour(p), points)
            })
            .filter(|(_, _, points)| !points.is_empty())
            .collect()
    };
    // 1. RSS per pod against N, and the kept fields' bytes.
    let mut lines = series(&|row, p| r.rss_per_pod(row, p), &LOGGERS);
    lines.push(("floor: bytes of the kept fields", BLACK, sizes.iter().map(|&n| (n, r.pod.kept as f64)).collect()));
    against_n(&panels[0], "RSS per pod (bytes) against N", "bytes per pod", x_range.clone(), &lines)?;

    // 2. Time to cache synced against N, floors included.
    let peers: Vec<Peer> = FLOORS.iter().chain(&LOGGERS).copied().collect();
    let lines = series(&|row, p| row.m.get(&p).map(|m| m.sync_ms), &peers);
    against_n(&panels[1], "Time to cache synced (ms) against N", "ms", x_range, &lines)?;

    // 3. The burst-lag distribution at the largest N: lag against percentile.
    if let Some(row) = r.rows.last() {
        let mut curves: Vec<(String, RGBColor, &[f64])> = LOGGERS
            .iter()
            .filter_map(|&p| {
                row.m.get(&p).filter(|m| !m.lags.is_empty()).map(|m| (p.label().into(), colour(p), &m.lags[..]))
            })
            .collect();
        if let Some(m) = row.m.get(&Peer::Demo).filter(|m| !m.floor_lags.is_empty()) {
            curves.push(("bare watch (beside demo-controller)".into(), BLACK, &m.floor_lags[..]));
        }
        let top = curves.iter().flat_map(|(_, _, l)| l.last().copied()).fold(1.0, f64::max);
        let bottom = curves.iter().flat_map(|(_, _, l)| l.first().copied()).fold(0.0, f64::min);
        let mut chart = ChartBuilder::on(&panels[2])
            .caption(format!("Burst lag at N = {}: distribution", crate::report::thousands(row.n)), ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..100.0, bottom..top * 1.1)?;
        chart.configure_mesh().x_desc("percentile of the burst's pods").y_desc("lag (ms)").label_style(FONT).draw()?;
        for (name, c, lags) in curves {
            let n = lags.len() as f64;
            let points: Vec<(f64, f64)> =
                lags.iter().enumerate().map(|(i, &v)| (100.0 * (i as f64 + 1.0) / n, v)).collect();
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(FONT)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// One panel of values against N (a log scale): a line per series, then the legend.
fn against_n(
    panel: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    y_desc: &str,
    x_range: std::ops::Range<f64>,
    lines: &[Line],
) -> Result<(), Error> {
    let top = lines.iter().flat_map(|(_, _, points)| points.iter().map(|p| p.1)).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(panel)
        .caption(caption, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range.log_scale(), 0.0..top * 1.15)?;
    chart
        .configure_mesh()
        .x_desc("pods in the cluster (N)")
        .y_desc(y_desc)
        .x_label_formatter(&|v| thousands(v.round() as usize))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(FONT)
        .draw()?;
    for (name, c, points) in lines {
        line(&mut chart, points, *c, name)?;
    }
    legend(&mut chart)
}

fn line<'a, X: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    points: &[(f64, f64)],
    c: RGBColor,
    name: &str,
) -> Result<(), Error> {
    chart
        .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
    Ok(())
}

fn legend<'a, X: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
) -> Result<(), Error> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(FONT)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cluster::PodSize;
    use crate::measure::Measurement;

    /// Draws made-up results and checks that every panel, peer and floor is in the SVG.
    #[test]
    fn the_plot_has_every_panel_peer_and_floor() {
        let peers: Vec<Peer> = FLOORS.iter().chain(&LOGGERS).copied().collect();
        let rows = [1_000, 10_000]
            .into_iter()
            .map(|n| SizeRow {
                n,
                pair: None,
                m: peers
                    .iter()
                    .enumerate()
                    .map(|(i, &p)| {
                        let lags: Vec<f64> = (1..=100).map(|l| l as f64 + i as f64).collect();
                        let m = Measurement {
                            sync_ms: n as f64 / 10.0 + i as f64,
                            steady_mib: 10.0 + n as f64 * (i + 1) as f64 / 1e5,
                            floor_lags: lags.clone(),
                            lags,
                            ..Measurement::default()
                        };
                        (p, m)
                    })
                    .collect(),
            })
            .collect();
        let base_mib: BTreeMap<Peer, f64> = LOGGERS.iter().map(|&p| (p, 10.0)).collect();
        let pod = PodSize { json: 5514, json_without_managed_fields: 3324, kept: 193 };
        let results = Results { rows, base_mib, pod, demo_streams: true, available: peers.clone(), burst: 100 };
        // A directory made afresh (create_dir fails on a name someone else
        // took first), so the SVG is never written through a path prepared
        // by another user.
        let dir = (0u32..100)
            .map(|i| {
                use std::hash::{BuildHasher, Hasher};
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_u32(std::process::id() ^ i);
                std::env::temp_dir().join(format!("bench-plot-test.{:016x}", h.finish()))
            })
            .find(|d| std::fs::create_dir(d).is_ok())
            .expect("a fresh directory");
        let path = dir.join("plot.svg");
        draw(&results, &path).expect("draw");
        let svg = std::fs::read_to_string(&path).expect("read the SVG");
        let _ = std::fs::remove_dir_all(&dir);
        for text in [
            "RSS per pod (bytes) against N",
            "Time to cache synced (ms) against N",
            "Burst lag at N = 10,000: distribution",
            "floor: bytes of the kept fields",
            "bare watch (beside demo-controller)",
        ]
        .into_iter()
        .chain(peers.iter().map(|p| p.label()))
        {
            assert!(svg.contains(&text.replace('>', "&gt;")), "the plot lacks {text:?}");
        }
    }
}
