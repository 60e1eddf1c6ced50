//! The report's pictures, as small hand-written SVG: a line chart (latency CDFs, logarithmic x axis) and a
//! grouped bar chart (linear or logarithmic y axis, with an optional horizontal reference line). No dependency:
//! the SVG is text, and these two shapes are all the report needs.

use std::fmt::Write as _;

const W: f64 = 860.0;
const H: f64 = 460.0;
/// Plot area: left, top, right, bottom margins.
const ML: f64 = 80.0;
const MT: f64 = 46.0;
const MR: f64 = 200.0;
const MB: f64 = 62.0;

/// One colour per client, the same in every picture.
pub fn colour(name: &str) -> &'static str {
    match name {
        n if n.starts_with("muxlock/per-thread") || n.starts_with("muxlock, 8 managers") => {
            "#7fb3e6"
        }
        n if n.starts_with("muxlock") => "#1f5fa8",
        n if n.starts_with("rslock") => "#d9822b",
        n if n.starts_with("redlock") => "#b23a48",
        n if n.starts_with("redis-rs/quorum") => "#3a9a5b",
        n if n.starts_with("redis-rs/single") => "#7a7a7a",
        _ => "#6b4c9a",
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn open(title: &str, subtitle: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{ML}" y="20" font-size="15" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{ML}" y="36" fill="#555">{}</text>"##,
        esc(subtitle)
    );
    s
}

fn legend(s: &mut String, names: &[&str]) {
    let x = W - MR + 16.0;
    for (i, name) in names.iter().enumerate() {
        let y = MT + 10.0 + 20.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{}" width="14" height="10" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            y - 9.0,
            colour(name),
            x + 20.0,
            y,
            esc(name)
        );
    }
}

/// Ticks at 1, 2, 5 × powers of ten inside `[lo, hi]` (both > 0).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut p = 10f64.powf(lo.log10().floor());
    while p <= hi * 1.0001 {
        for m in [1.0, 2.0, 5.0] {
            let t = p * m;
            if t >= lo * 0.9999 && t <= hi * 1.0001 {
                ticks.push(t);
            }
        }
        p *= 10.0;
    }
    ticks
}

/// About 6 round ticks from 0 to `hi`.
fn linear_ticks(hi: f64) -> Vec<f64> {
    if hi <= 0.0 {
        return vec![0.0];
    }
    let raw = hi / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    (0..=((hi / step).ceil() as usize))
        .map(|i| i as f64 * step)
        .collect()
}

/// `1234` → `1.2k`, `0.5` → `0.5`.
fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map_or(s.clone(), str::to_string)
}

/// Cumulative distributions: each series is `(name, points)` with points `(value, percent)`, value > 0, drawn on
/// a logarithmic x axis.
pub fn cdf(
    title: &str,
    subtitle: &str,
    x_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let mut s = open(title, subtitle);
    let values = series.iter().flat_map(|(_, p)| p.iter().map(|(v, _)| *v));
    let lo = values.clone().fold(f64::INFINITY, f64::min).max(1e-9);
    let hi = values.fold(0.0, f64::max).max(lo * 10.0);
    let (lo, hi) = (
        10f64.powf(lo.log10().floor()),
        10f64.powf(hi.log10().ceil()),
    );
    let (pw, ph) = (W - ML - MR, H - MT - MB);
    let x = |v: f64| ML + pw * (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10());
    let y = |p: f64| MT + ph * (1.0 - p / 100.0);
    for t in log_ticks(lo, hi) {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{MT}" x2="{0:.1}" y2="{1}" stroke="#e4e4e4"/><text x="{0:.1}" y="{2}" text-anchor="middle">{3}</text>"##,
            x(t),
            MT + ph,
            MT + ph + 16.0,
            short(t)
        );
    }
    for p in [0.0, 25.0, 50.0, 75.0, 90.0, 100.0] {
        let _ = writeln!(
            s,
            r##"<line x1="{ML}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#e4e4e4"/><text x="{2}" y="{3:.1}" text-anchor="end">{p}</text>"##,
            y(p),
            ML + pw,
            ML - 6.0,
            y(p) + 4.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        ML + pw / 2.0,
        H - 20.0,
        esc(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">percent of calls at or below</text>"#,
        MT + ph / 2.0,
        MT + ph / 2.0
    );
    for (name, points) in series {
        let path: Vec<String> = points
            .iter()
            .map(|(v, p)| format!("{:.1},{:.1}", x(*v), y(*p)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            colour(name),
            path.join(" ")
        );
    }
    let names: Vec<&str> = series.iter().map(|(n, _)| n.as_str()).collect();
    legend(&mut s, &names);
    s.push_str("</svg>\n");
    s
}

/// Grouped bars: `groups` along x, one bar per series in each group (`None`: not measured, no bar). `log`: a
/// logarithmic y axis. `line`: a horizontal reference line `(value, label)`.
pub fn bars(
    title: &str,
    subtitle: &str,
    y_label: &str,
    groups: &[String],
    series: &[(String, Vec<Option<f64>>)],
    log: bool,
    line: Option<(f64, String)>,
) -> String {
    let mut s = open(title, subtitle);
    let values: Vec<f64> = series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().copied())
        .chain(line.iter().map(|l| l.0))
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let top = values.iter().copied().fold(0.0, f64::max).max(1e-9);
    let bottom = values.iter().copied().fold(f64::INFINITY, f64::min);
    let (pw, ph) = (W - ML - MR, H - MT - MB);
    let (lo, hi, ticks) = if log {
        let lo = 10f64.powf(bottom.min(top).log10().floor() - 0.0);
        let hi = 10f64.powf(top.log10().ceil());
        (lo, hi, log_ticks(lo, hi))
    } else {
        let ticks = linear_ticks(top * 1.05);
        (0.0, *ticks.last().unwrap_or(&top), ticks)
    };
    let y = |v: f64| {
        let f = if log {
            (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10())
        } else {
            v / hi
        };
        MT + ph * (1.0 - f)
    };
    for t in ticks {
        let _ = writeln!(
            s,
            r##"<line x1="{ML}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#e4e4e4"/><text x="{2}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            y(t),
            ML + pw,
            ML - 6.0,
            y(t) + 4.0,
            short(t)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">{}</text>"#,
        MT + ph / 2.0,
        MT + ph / 2.0,
        esc(y_label)
    );
    let gw = pw / groups.len().max(1) as f64;
    let bw = (gw * 0.8) / series.len().max(1) as f64;
    for (g, label) in groups.iter().enumerate() {
        let gx = ML + gw * g as f64 + gw * 0.1;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            ML + gw * (g as f64 + 0.5),
            MT + ph + 18.0,
            esc(label)
        );
        for (k, (name, v)) in series.iter().enumerate() {
            let Some(v) = v.get(g).copied().flatten().filter(|v| v.is_finite()) else {
                continue;
            };
            let (x0, y0) = (gx + bw * k as f64, y(v));
            let _ = writeln!(
                s,
                r#"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                (bw - 2.0).max(1.0),
                (MT + ph - y0).max(0.0),
                colour(name),
                esc(name),
                short(v)
            );
        }
    }
    if let Some((v, label)) = line {
        let _ = writeln!(
            s,
            r##"<line x1="{ML}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#000" stroke-dasharray="6 4"/><text x="{1}" y="{2:.1}" text-anchor="end">{3}</text>"##,
            y(v),
            ML + pw,
            y(v) - 5.0,
            esc(&label)
        );
    }
    let _ = writeln!(
        s,
        r##"<line x1="{ML}" y1="{0}" x2="{1}" y2="{0}" stroke="#000"/>"##,
        MT + ph,
        ML + pw
    );
    let names: Vec<&str> = series.iter().map(|(n, _)| n.as_str()).collect();
    legend(&mut s, &names);
    s.push_str("</svg>\n");
    s
}
