//! The picture, drawn by the bench from the run's own figures (`plotters`, DejaVu Sans embedded): on the left
//! the uncontended acquire + release latency of every alternative as a CDF (log time axis); on the right the
//! kill scenario as a timeline: for each alternative, a mark for every 50 ms in which some worker was granted a
//! lock, from 0.5 s before the kill to the end, with the moment the server was back.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::scenarios::faults::Fault;
use crate::scenarios::{faults, handoff, latency, throughput};

/// Everything one run measured.
#[derive(Default)]
pub struct Report {
    pub latency: Vec<latency::Row>,
    pub throughput: Vec<throughput::Row>,
    pub handoff: Vec<handoff::Row>,
    pub faults: Vec<faults::Row>,
}

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(174, 199, 232),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(255, 187, 120),
    RGBColor(44, 160, 44),
    RGBColor(152, 223, 138),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Draws the picture into `path` (PNG).
pub fn draw(report: &Report, path: &Path) -> Result<(), String> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "the embedded font did not load".to_owned())?;
    let root = BitMapBackend::new(path, (1500, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (left, right) = root.split_horizontally(700);
    cdf(report, &left)?;
    timeline(report, &right)?;
    root.present().map_err(err)?;
    Ok(())
}

fn cdf(
    report: &Report,
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
) -> Result<(), String> {
    let rows: Vec<&latency::Row> = report
        .latency
        .iter()
        .filter(|r| !r.cycle.is_empty())
        .collect();
    if rows.is_empty() {
        return area
            .titled("uncontended latency: not run", ("sans-serif", 20))
            .map(|_| ())
            .map_err(err);
    }
    let lo = rows.iter().map(|r| r.cycle.min()).min().unwrap_or(1).max(1) as f64 / 1000.0;
    let hi = rows
        .iter()
        .map(|r| r.cycle.value_at_quantile(0.999))
        .max()
        .unwrap_or(1) as f64
        / 1000.0;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Uncontended acquire + release (one client)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((lo * 0.8..hi * 1.2).log_scale(), 0.0..1.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("µs, log scale (to p99.9)")
        .y_desc("fraction of calls")
        .draw()
        .map_err(err)?;
    for (i, r) in rows.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let n = r.cycle.len() as f64;
        let mut seen = 0u64;
        let mut points = Vec::new();
        for v in r.cycle.iter_recorded() {
            seen += v.count_at_value();
            let x = v.value_iterated_to() as f64 / 1000.0;
            if x > hi * 1.2 {
                break;
            }
            points.push((x.max(lo * 0.8), seen as f64 / n));
        }
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(r.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    Ok(())
}

fn timeline(
    report: &Report,
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
) -> Result<(), String> {
    let rows: Vec<&faults::Row> = report
        .faults
        .iter()
        .filter(|r| r.fault == Fault::Kill)
        .collect();
    if rows.is_empty() {
        return area
            .titled("kill scenario: not run", ("sans-serif", 20))
            .map(|_| ())
            .map_err(err);
    }
    let end = rows
        .iter()
        .map(|r| (r.end_at - r.fault_at) as f64 / 1e9)
        .fold(1.0, f64::max);
    let n = rows.len();
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Kill: 50 ms slots in which some worker got a lock (| = server back)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(250)
        .build_cartesian_2d(-0.5..end, -0.5..(n as f64 - 0.5))
        .map_err(err)?;
    let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("seconds since the server (or one node) was killed")
        .y_labels(n)
        .y_label_formatter(&|y| {
            let i = (n as f64 - 1.0 - y).round();
            if (y - y.round()).abs() < 0.01 && i >= 0.0 && (i as usize) < n {
                names[i as usize].clone()
            } else {
                String::new()
            }
        })
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    for (i, r) in rows.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        let color = COLORS[i % COLORS.len()];
        let mut slots: Vec<i64> = r
            .grants_ms
            .iter()
            .filter(|&&ms| ms >= -500.0)
            .map(|&ms| (ms / 50.0).floor() as i64)
            .collect();
        slots.dedup();
        chart
            .draw_series(slots.into_iter().map(|s| {
                let x = s as f64 * 0.05;
                Rectangle::new([(x, y - 0.3), (x + 0.045, y + 0.3)], color.filled())
            }))
            .map_err(err)?;
        let back = (r.back_at - r.fault_at) as f64 / 1e9;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(back, y - 0.45), (back, y + 0.45)],
                BLACK.stroke_width(3),
            )))
            .map_err(err)?;
    }
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, -0.5), (0.0, n as f64 - 0.5)],
            RED.stroke_width(1),
        )))
        .map_err(err)?;
    Ok(())
}
