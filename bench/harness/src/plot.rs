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
        Peer::GoWatchList => RGBColor(0, 130, 180),
        Peer::GoPaged => RGBColor(110, 200, 230),
        Peer::KubeRs => RGBColor(120, 60, 160),
        Peer::FloorList => RGBColor(90, 90, 90),
        Peer::FloorStream => RGBColor(160, 160, 160),
    }
}

const FONT: (&str, u32) = ("sans-serif", 15);

pub fn draw(r: &Results, path: &Path) -> Result<(), Error> {
    let root = SVGBackend::new(path, (1500, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 3));
    let sizes: Vec<f64> = r.rows.iter().map(|row| row.n as f64).collect();
    let (lo, hi) = (sizes.iter().copied().fold(f64::MAX, f64::min), sizes.iter().copied().fold(0.0, f64::max));
    let x_range = (lo / 1.5)..(hi * 1.5);

    // 1. RSS per pod against N, and the kept fields' bytes.
    let series = |get: &dyn Fn(&SizeRow, Peer) -> Option<f64>, peers: &[Peer]| -> Vec<(Peer, Vec<(f64, f64)>)> {
        peers
            .iter()
            .map(|&p| (p, r.rows.iter().filter_map(|row| Some((row.n as f64, get(row, p)?))).collect::<Vec<_>>()))
            .filter(|(_, points)| !points.is_empty())
            .collect()
    };
    let per_pod = series(&|row, p| r.rss_per_pod(row, p), &LOGGERS);
    let kept: Vec<(f64, f64)> = sizes.iter().map(|&n| (n, r.pod.kept as f64)).collect();
    let top = per_pod.iter().flat_map(|(_, s)| s.iter().map(|p| p.1)).fold(r.pod.kept as f64, f64::max);
    let mut chart = ChartBuilder::on(&panels[0])
        .caption("RSS per pod (bytes) against N", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range.clone().log_scale(), 0.0..top * 1.15)?;
    chart
        .configure_mesh()
        .x_desc("pods in the cluster (N)")
        .y_desc("bytes per pod")
        .x_label_formatter(&|v| thousands(v.round() as usize))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(FONT)
        .draw()?;
    for (peer, points) in &per_pod {
        line(&mut chart, points, colour(*peer), peer.label())?;
    }
    line(&mut chart, &kept, BLACK, "floor: bytes of the kept fields")?;
    legend(&mut chart)?;

    // 2. Time to cache synced against N, floors included.
    let peers: Vec<Peer> = FLOORS.iter().chain(&LOGGERS).copied().collect();
    let sync = series(&|row, p| row.m.get(&p).map(|m| m.sync_ms), &peers);
    let top = sync.iter().flat_map(|(_, s)| s.iter().map(|p| p.1)).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&panels[1])
        .caption("Time to cache synced (ms) against N", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range.log_scale(), 0.0..top * 1.15)?;
    chart
        .configure_mesh()
        .x_desc("pods in the cluster (N)")
        .y_desc("ms")
        .x_label_formatter(&|v| thousands(v.round() as usize))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(FONT)
        .draw()?;
    for (peer, points) in &sync {
        line(&mut chart, points, colour(*peer), peer.label())?;
    }
    legend(&mut chart)?;

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
