//! Tiny inline-SVG charts for the offline HTML reports. No scripts, no fonts, no
//! external references: every chart is a self-contained `<svg>` element.

use std::fmt::Write;

/// Colours of successive series (colour-blind-friendly Okabe-Ito palette).
pub const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000",
];

/// Escape text for HTML and SVG (`& < > " '`).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// One named line of a [`line_chart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Legend text.
    pub name: String,
    /// (x, y) points; non-finite points are skipped, `None` breaks the line.
    pub points: Vec<(f64, Option<f64>)>,
}

/// Round `max` up to a "nice" axis maximum (1, 2, 2.5 or 5 times a power of ten).
pub fn nice_max(max: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if max <= m * p {
            return m * p;
        }
    }
    10.0 * p
}

/// Like [`nice_max`] but in binary units, so byte axes read 10, 20, 30, 40 GiB
/// rather than 9.3, 18.6 GiB.
pub fn nice_max_bytes(max: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let mut unit = 1.0;
    while max / unit >= 1024.0 {
        unit *= 1024.0;
    }
    nice_max(max / unit) * unit
}

const W: f64 = 720.0;
const H: f64 = 240.0;
const L: f64 = 78.0;
const R: f64 = 12.0;
const T: f64 = 12.0;
const B: f64 = 30.0;

/// A line chart with a y axis from 0, 5 gridlines, an x axis labelled by
/// `x_fmt` and a legend. `y_max` fixes the axis (e.g. GPU total memory).
pub fn line_chart(
    lines: &[Line],
    x_fmt: &dyn Fn(f64) -> String,
    y_fmt: &dyn Fn(f64) -> String,
    y_max: Option<f64>,
) -> String {
    let pts = lines
        .iter()
        .flat_map(|l| l.points.iter())
        .filter_map(|&(x, y)| y.map(|y| (x, y)))
        .filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut ymax) = (f64::MAX, f64::MIN, 0.0f64);
    let mut any = false;
    for (x, y) in pts {
        any = true;
        x0 = x0.min(x);
        x1 = x1.max(x);
        ymax = ymax.max(y);
    }
    let legend_h = 18.0 * lines.len().div_ceil(3) as f64;
    let total_h = H + legend_h;
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {total_h}" width="{W}" height="{total_h}" role="img">"#
    );
    if !any {
        let _ = write!(
            o,
            r##"<text x="{}" y="{}" text-anchor="middle" fill="#666">no data</text></svg>"##,
            W / 2.0,
            H / 2.0
        );
        return o;
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let ymax = y_max.filter(|m| *m > 0.0).unwrap_or_else(|| nice_max(ymax));
    let px = |x: f64| L + (x - x0) / (x1 - x0) * (W - L - R);
    let py = |y: f64| T + (1.0 - (y / ymax).clamp(0.0, 1.05)) * (H - T - B);
    for i in 0..=4 {
        let v = ymax * f64::from(i) / 4.0;
        let y = py(v);
        let _ = write!(
            o,
            r##"<line x1="{L}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end" font-size="11" fill="#444">{}</text>"##,
            W - R,
            L - 6.0,
            y + 4.0,
            esc(&y_fmt(v))
        );
    }
    for (x, anchor, label) in x_ticks(x0, x1, &px, x_fmt) {
        let _ = write!(
            o,
            r##"<text x="{x:.1}" y="{}" text-anchor="{anchor}" font-size="11" fill="#444">{}</text>"##,
            H - 10.0,
            esc(&label)
        );
    }
    let _ = write!(
        o,
        r##"<line x1="{L}" x2="{L}" y1="{T}" y2="{}" stroke="#888"/>"##,
        H - B
    );
    for (i, l) in lines.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let mut seg = String::new();
        let flush = |seg: &mut String, o: &mut String| {
            if !seg.is_empty() {
                let _ = write!(
                    o,
                    r#"<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{}"><title>{}</title></polyline>"#,
                    seg.trim_end(),
                    esc(&l.name)
                );
                seg.clear();
            }
        };
        for &(x, y) in &l.points {
            match y {
                Some(y) if x.is_finite() && y.is_finite() => {
                    let _ = write!(seg, "{:.1},{:.1} ", px(x), py(y));
                }
                _ => flush(&mut seg, &mut o),
            }
        }
        flush(&mut seg, &mut o);
        let lx = 10.0 + (i % 3) as f64 * 236.0;
        let ly = H + 14.0 + (i / 3) as f64 * 18.0;
        let name: String = l.name.chars().take(34).collect();
        let _ = write!(
            o,
            r##"<rect x="{lx}" y="{}" width="12" height="4" fill="{colour}"/><text x="{}" y="{ly}" font-size="11" fill="#222">{}</text>"##,
            ly - 5.0,
            lx + 16.0,
            esc(&name)
        );
    }
    o.push_str("</svg>");
    o
}

/// Width of a label at font-size 11, generously (system-ui averages under 6 px a character).
fn label_w(s: &str) -> f64 {
    s.chars().count() as f64 * 6.4
}

/// The x-axis labels: as many evenly spaced ticks (5, 4, 3 or 2) as fit without two labels
/// overlapping (the first anchored at its start, the last at its end); labels longer than 30
/// characters, or than half the axis with two ticks, are cut with "…".
fn x_ticks(
    x0: f64,
    x1: f64,
    px: &dyn Fn(f64) -> f64,
    x_fmt: &dyn Fn(f64) -> String,
) -> Vec<(f64, &'static str, String)> {
    let cut = |s: String, max: usize| -> String {
        if s.chars().count() <= max {
            s
        } else {
            let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
            t.push('…');
            t
        }
    };
    let half = (((W - L - R) / 2.0 - 8.0) / 6.4) as usize;
    for n in (1..=4u32).rev() {
        let max = if n == 1 { half.min(30) } else { 30 };
        let ticks: Vec<(f64, &'static str, String)> = (0..=n)
            .map(|i| {
                let v = x0 + (x1 - x0) * f64::from(i) / f64::from(n);
                let anchor = if i == 0 {
                    "start"
                } else if i == n {
                    "end"
                } else {
                    "middle"
                };
                (px(v), anchor, cut(x_fmt(v), max))
            })
            .collect();
        let span = |(x, a, l): &(f64, &str, String)| {
            let w = label_w(l);
            match *a {
                "start" => (*x, x + w),
                "end" => (x - w, *x),
                _ => (x - w / 2.0, x + w / 2.0),
            }
        };
        let fits = ticks
            .windows(2)
            .all(|p| span(&p[0]).1 + 8.0 <= span(&p[1]).0);
        if fits || n == 1 {
            return ticks;
        }
    }
    Vec::new()
}

/// Horizontal bars, one per `(label, value)`, scaled to the largest value
/// (or to `max` when given). Negative and non-finite values draw as empty.
pub fn bar_chart(items: &[(String, f64)], fmt: &dyn Fn(f64) -> String, max: Option<f64>) -> String {
    let row = 22.0;
    let h = (items.len() as f64 * row + 8.0).max(30.0);
    // Room for the longest label at ~6.6 px per character, within bounds.
    let longest = items.iter().map(|i| i.0.chars().count()).max().unwrap_or(0);
    let label_w = (longest.min(56) as f64 * 6.6 + 12.0).clamp(80.0, 390.0);
    let vmax = max
        .filter(|m| *m > 0.0)
        .unwrap_or_else(|| {
            items
                .iter()
                .map(|i| i.1)
                .filter(|v| v.is_finite())
                .fold(0.0, f64::max)
        })
        .max(f64::MIN_POSITIVE);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img">"#
    );
    for (i, (label, v)) in items.iter().enumerate() {
        let y = 4.0 + i as f64 * row;
        let v_ok = if v.is_finite() && *v > 0.0 { *v } else { 0.0 };
        let bw = (v_ok / vmax).min(1.0) * (W - label_w - 110.0);
        let colour = PALETTE[i % PALETTE.len()];
        let short: String = if label.chars().count() > 56 {
            label.chars().take(55).chain(['…']).collect()
        } else {
            label.clone()
        };
        let _ = write!(
            o,
            r##"<text x="{}" y="{:.1}" text-anchor="end" font-size="12" fill="#222">{}</text><rect x="{label_w}" y="{y:.1}" width="{bw:.1}" height="{}" fill="{colour}"><title>{}: {}</title></rect><text x="{:.1}" y="{:.1}" font-size="12" fill="#222">{}</text>"##,
            label_w - 6.0,
            y + 14.0,
            esc(&short),
            row - 6.0,
            esc(label),
            esc(&fmt(*v)),
            label_w + bw + 6.0,
            y + 14.0,
            esc(&fmt(*v))
        );
    }
    o.push_str("</svg>");
    o
}
