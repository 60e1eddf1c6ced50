//! The picture of a run: locks per second over time, with the faults marked, as a plain SVG file (text written
//! here: no drawing library).

use std::fmt::Write as _;

use serde::Serialize;

/// One second of the run: when it ended (from the demo's start) and the locks completed in it, in all processes.
#[derive(Clone, Copy, Debug, Serialize)]
pub(super) struct Second {
    pub(super) at_ms: u64,
    pub(super) locks: u64,
}

/// A fault on the time line: when, and its short name ("node 2 killed").
#[derive(Clone, Debug)]
pub(super) struct Mark {
    pub(super) at_ms: u64,
    pub(super) label: String,
}

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 320.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 44.0;

/// Escapes text for an SVG text node or attribute.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round step for an axis from 0 to `max`: 1, 2 or 5 times a power of ten, about five ticks.
fn step(max: f64) -> f64 {
    let rough = (max / 5.0).max(1.0);
    let power = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= rough)
        .unwrap_or(power * 10.0)
}

/// The SVG of `seconds` with `marks`, titled `title`: time (s since the demo's start) across, locks per second up.
pub(super) fn svg(title: &str, seconds: &[Second], marks: &[Mark]) -> String {
    let end_ms = seconds
        .iter()
        .map(|s| s.at_ms)
        .chain(marks.iter().map(|m| m.at_ms))
        .max()
        .unwrap_or(1000)
        .max(1000);
    let x_max = (end_ms as f64 / 1000.0).ceil();
    let top = seconds.iter().map(|s| s.locks).max().unwrap_or(0).max(1) as f64;
    let y_step = step(top);
    let y_max = (top / y_step).ceil() * y_step;
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |ms: u64| LEFT + plot_w * (ms as f64 / 1000.0) / x_max;
    let y = |v: f64| TOP + plot_h * (1.0 - v / y_max);
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
        escape(title)
    );
    // Axes, grid and ticks.
    let mut v = 0.0;
    while v <= y_max + f64::EPSILON {
        let yy = y(v);
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            yy + 4.0
        );
        v += y_step;
    }
    let x_step = step(x_max);
    let mut t = 0.0;
    while t <= x_max + f64::EPSILON {
        let xx = x((t * 1000.0) as u64);
        let _ = writeln!(
            out,
            "<text x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{t}s</text>",
            TOP + plot_h + 16.0
        );
        t += x_step;
    }
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\
         <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{:.1}\" stroke=\"black\"/>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">time since the demo started</text>\n\
         <text x=\"14\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">locks per second</text>",
        TOP + plot_h,
        WIDTH - RIGHT,
        TOP + plot_h,
        TOP + plot_h,
        LEFT + plot_w / 2.0,
        HEIGHT - 8.0,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
    );
    // The faults: a dashed line each, labelled at the top, staggered so that close ones stay readable.
    for (i, m) in marks.iter().enumerate() {
        let xx = x(m.at_ms);
        let label_y = TOP + 12.0 + 14.0 * (i % 2) as f64;
        let _ = writeln!(
            out,
            "<line class=\"mark\" x1=\"{xx:.1}\" y1=\"{TOP}\" x2=\"{xx:.1}\" y2=\"{:.1}\" stroke=\"#c00\" \
             stroke-dasharray=\"4 3\"/><text x=\"{:.1}\" y=\"{label_y:.1}\" fill=\"#c00\">{}</text>",
            TOP + plot_h,
            xx + 3.0,
            escape(&m.label)
        );
    }
    // Locks per second, a point at the end of each second.
    let points: Vec<String> = seconds
        .iter()
        .map(|s| format!("{:.1},{:.1}", x(s.at_ms), y(s.locks as f64)))
        .collect();
    let _ = writeln!(
        out,
        "<polyline class=\"locks\" fill=\"none\" stroke=\"rgb(31,95,191)\" stroke-width=\"2\" points=\"{}\"/>",
        points.join(" ")
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round() {
        assert_eq!(step(3.0), 1.0);
        assert_eq!(step(47.0), 10.0);
        assert_eq!(step(120.0), 50.0);
        assert_eq!(step(16.0), 5.0);
    }

    #[test]
    fn the_picture_has_a_point_per_second_and_a_line_per_fault() {
        let seconds: Vec<Second> = (1..=4)
            .map(|i| Second {
                at_ms: i * 1000,
                locks: 10 * i,
            })
            .collect();
        let marks = [Mark {
            at_ms: 2500,
            label: "node 2 killed <&>".into(),
        }];
        let svg = svg("demo", &seconds, &marks);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("class=\"mark\"").count(), 1);
        assert!(svg.contains("node 2 killed &lt;&amp;&gt;"));
        let points = svg
            .split("points=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap();
        assert_eq!(points.split(' ').count(), 4);
    }
}
