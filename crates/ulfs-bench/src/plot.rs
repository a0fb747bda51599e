//! The PNG of each figure: one chart per [`Figure`], drawn from its rows
//! alone so a `results.csv` from an earlier run can be re-plotted.
//!
//! The plots are meant to sit beside the paper's: a title, labelled axes
//! with units, log axes where the catalog says so, one colour per system
//! that every figure agrees on, error bars, a legend and a caption naming
//! the machine (a ratio means little without it). Text is drawn with DejaVu
//! Sans embedded in the binary, so a plot renders the same on a machine
//! without fonts (containers, CI). A plot is a by-product of a run that may
//! have taken an hour: whatever the rows hold, drawing returns an error
//! rather than panicking, and never leaves a half-written PNG behind.

use crate::catalog::{Figure, Shape};
use crate::results::{Row, Unit};
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::register_font;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;
use std::fmt::Display;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 640;
const CAPTION_HEIGHT: u32 = 30;
/// Registered under plotters' default family name, so that any text
/// plotters draws without being told a font (legend, ticks) finds DejaVu.
const FAMILY: &str = "sans-serif";

/// The systems in the order every plot and table lists them, with their
/// colours: the host first (what ulfs is measured against) in warm
/// colours, then ulfs in its modes in blues and teals, then memcpy in grey
/// (it is the physical limit, not a competitor).
const SYSTEMS: [(&str, RGBColor); 12] = [
    ("host-tmpfs", RGBColor(213, 94, 0)),
    ("host-ext4", RGBColor(230, 159, 0)),
    ("ulfs-journal", RGBColor(0, 83, 176)),
    ("ulfs-journal-no-budget", RGBColor(150, 170, 205)),
    ("ulfs-none", RGBColor(86, 170, 233)),
    ("ulfs-preload", RGBColor(0, 140, 110)),
    ("ulfs-preload-none", RGBColor(90, 200, 160)),
    ("ulfs-preload-ext4", RGBColor(0, 90, 70)),
    ("ulfs-fuse", RGBColor(110, 70, 190)),
    // Its own colour: it would take ulfs-fuse's as a variant, and the two
    // are drawn side by side.
    ("ulfs-fuse-writeback", RGBColor(200, 120, 210)),
    ("ulfs-server", RGBColor(30, 40, 110)),
    ("memcpy", RGBColor(128, 128, 128)),
];

/// The listed system `name` is, or extends: "ulfs-preload-journal" is a
/// variant of "ulfs-preload" and should look like it.
fn base(name: &str) -> Option<usize> {
    let mut n = name;
    loop {
        if let Some(i) = SYSTEMS.iter().position(|o| o.0 == n) {
            return Some(i);
        }
        n = &n[..n.rfind('-')?];
    }
}

/// Sort key: listed systems in [`SYSTEMS`] order, a variant right after its base,
/// everything else alphabetically at the end.
fn rank(name: &str) -> (usize, bool, &str) {
    match base(name) {
        Some(i) => (i, SYSTEMS[i].0 != name, name),
        None => (SYSTEMS.len(), true, name),
    }
}

/// Shared with the report so its columns follow the plots' legends.
pub(crate) fn sort_systems(names: &mut [&str]) {
    names.sort_by(|a, b| rank(a).cmp(&rank(b)));
}

pub(crate) fn colour(name: &str) -> RGBColor {
    if let Some(i) = base(name) {
        return SYSTEMS[i].1;
    }
    // FNV-1a rather than std's hasher, whose output may change between
    // Rust releases: a system keeps its colour from run to run.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let hsl = HSLColor((h % 360) as f64 / 360.0, 0.65, 0.42);
    let (r, g, b) = hsl.rgb();
    RGBColor(r, g, b)
}

pub(crate) fn unit_text(unit: Unit) -> &'static str {
    match unit {
        Unit::Us => "µs",
        u => u.as_str(),
    }
}

/// Up to three significant digits, no trailing zeros: tick labels must be
/// short.
fn short(v: f64) -> String {
    let a = v.abs();
    let decimals = if a >= 100.0 || a == 0.0 {
        0
    } else {
        (2 - a.log10().floor() as i32).clamp(0, 12) as usize
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A value axis's label: digits grouped by thousands ("8,000 µs" reads
/// better than "8K µs" once a unit follows), short below 1,000.
fn value_label(v: f64) -> String {
    if v.abs() < 1000.0 {
        return short(v);
    }
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

/// 1, 10, 100, 1K, 10K, 1M; with `binary`, steps of 1024 (64, 1K, 4K, 1M)
/// because byte parameters are powers of two.
fn compact(v: f64, binary: bool) -> String {
    let step = if binary { 1024.0 } else { 1000.0 };
    let mut m = v;
    for suffix in ["", "K", "M", "G", "T"] {
        if m.abs() < step || suffix == "T" {
            return format!("{}{suffix}", short(m));
        }
        m /= step;
    }
    short(v)
}

/// Where an axis runs and how values map onto it, kept apart from the
/// plotters coordinate so drawing code can read it back from the chart.
#[derive(Clone, Copy)]
struct Span {
    log: bool,
    lo: f64,
    hi: f64,
}

impl Span {
    /// Keeps every drawn value on the chart: plotters would map a value
    /// off a log axis to i32::MIN and rasterise a line out to it.
    fn clamp(self, v: f64) -> f64 {
        v.clamp(self.lo, self.hi)
    }

    /// Where `v` falls along the axis, 0 to 1, as drawn.
    fn frac(self, v: f64) -> f64 {
        let v = self.clamp(v);
        if self.log {
            (v / self.lo).ln() / (self.hi / self.lo).ln()
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }
}

/// One axis whose scale (log or linear) is chosen at run time, so one
/// chart-drawing path serves all four combinations the catalog allows,
/// with tick positions and labels we choose ourselves.
struct Axis {
    span: Span,
    scale: Scale,
    ticks: Vec<(f64, String)>,
    light: Vec<f64>,
}

enum Scale {
    Log(LogCoord<f64>),
    Linear(RangedCoordf64),
}

impl Axis {
    fn new(log: bool, lo: f64, hi: f64, ticks: Vec<(f64, String)>, light: Vec<f64>) -> Axis {
        let scale = if log {
            Scale::Log((lo..hi).log_scale().into())
        } else {
            Scale::Linear((lo..hi).into())
        };
        Axis {
            span: Span { log, lo, hi },
            scale,
            ticks,
            light,
        }
    }
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        match &self.scale {
            Scale::Log(c) => c.map(v, limit),
            Scale::Linear(c) => c.map(v, limit),
        }
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        match &self.scale {
            // plotters' own steps (1, 2, 5 x 10^k) suit a linear axis.
            Scale::Linear(c) if self.ticks.is_empty() => c.key_points(hint),
            _ if hint.weight().allow_light_points() => self.light.clone(),
            _ => self.ticks.iter().map(|t| t.0).collect(),
        }
    }

    fn range(&self) -> Range<f64> {
        self.span.lo..self.span.hi
    }
}

impl ValueFormatter<f64> for Axis {
    fn format(v: &f64) -> String {
        value_label(*v)
    }

    fn format_ext(&self, v: &f64) -> String {
        match self.ticks.iter().find(|t| t.0 == *v) {
            Some(t) => t.1.clone(),
            None => value_label(*v),
        }
    }
}

/// The drawn range for data spanning `lo..=hi` (`lo > 0` on a log axis),
/// padded so no marker sits on the frame and widened when it is a point.
fn padded(log: bool, lo: f64, hi: f64, from_zero: bool) -> (f64, f64) {
    if log {
        if hi / lo < 1.0001 {
            return (lo / 3.0, hi * 3.0);
        }
        let pad = ((hi / lo).log10() * 0.06).max(0.08);
        (lo / 10f64.powf(pad), hi * 10f64.powf(pad))
    } else if from_zero && lo >= 0.0 {
        (0.0, if hi > 0.0 { hi * 1.08 } else { 1.0 })
    } else if hi - lo < 1e-9 * hi.abs().max(1.0) {
        let d = (hi.abs() * 0.1).max(1.0);
        (lo - d, hi + d)
    } else {
        let d = (hi - lo) * 0.05;
        (lo - d, hi + d)
    }
}

/// Labelled ticks for a log axis: powers of ten, or 1-2-5 steps when the
/// range holds too few powers of ten to be read; light lines at the other
/// multiples.
fn log_ticks(lo: f64, hi: f64) -> (Vec<(f64, String)>, Vec<f64>) {
    let (e0, e1) = (lo.log10().ceil() as i32, hi.log10().floor() as i32);
    let decades = (e1 - e0 + 1).clamp(0, 40);
    let every = (decades / 8 + 1).max(1);
    let mut bold = Vec::new();
    let mut light = Vec::new();
    for e in (e0 - 1)..=(e0 + decades) {
        for m in 1..=9 {
            let v = f64::from(m) * 10f64.powi(e);
            if v < lo || v > hi {
                continue;
            }
            let is_bold = if decades >= 4 {
                m == 1 && (e - e0) % every == 0
            } else {
                m == 1 || m == 2 || m == 5
            };
            if is_bold {
                bold.push((v, value_label(v)));
            } else if decades <= 6 {
                light.push(v);
            }
        }
    }
    if bold.len() < 2 {
        // Too narrow for 1-2-5: label every multiple instead.
        bold.extend(light.drain(..).map(|v| (v, value_label(v))));
        bold.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    (bold, light)
}

/// One system's points: (x, value, stddev), by ascending x.
struct Series<'a> {
    system: &'a str,
    points: Vec<(f64, f64, f64)>,
}

/// Groups the rows by system in the fixed order, dropping what cannot be
/// drawn (non-finite values, x = 0 on a log axis).
fn series<'a>(rows: &[&'a Row], log_x: bool) -> Vec<Series<'a>> {
    let mut by: BTreeMap<&str, BTreeMap<u64, (f64, f64)>> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.value.is_finite() && !(log_x && r.param == 0))
    {
        let sd = Some(r.stddev.abs())
            .filter(|s| s.is_finite())
            .unwrap_or(0.0);
        let points = by.entry(r.system.as_str()).or_default();
        points.entry(r.param).or_insert((r.value, sd));
    }
    let mut out: Vec<Series> = by
        .into_iter()
        .map(|(system, pts)| Series {
            system,
            points: pts
                .into_iter()
                .map(|(p, (v, sd))| (p as f64, v, sd))
                .collect(),
        })
        .collect();
    out.sort_by(|a, b| rank(a.system).cmp(&rank(b.system)));
    out
}

fn err<E: Display>(e: E) -> String {
    e.to_string()
}

/// Draws `fig` from its rows (all rows have experiment == fig.name; several systems, several params) into a PNG at `path`.
/// `caption` is one line naming the machine (e.g. "2 cores, AMD EPYC 7B13, 24 GiB, Linux 6.1; ulfs 0.1.0, 2026-11-24"), drawn under the plot.
pub fn draw(fig: &Figure, rows: &[&Row], caption: &str, path: &Path) -> Result<(), String> {
    let rows: Vec<&Row> = rows
        .iter()
        .copied()
        .filter(|r| r.experiment == fig.name)
        .collect();
    let Some(first) = rows.first() else {
        return Err(format!("no rows for {}", fig.name));
    };
    let unit = first.unit;
    let log_x = fig.log_x && fig.shape == Shape::Lines;
    let data = series(&rows, log_x);
    if data.is_empty() {
        return Err(format!("no drawable values for {}", fig.name));
    }
    fonts()?;
    // Drawn beside the target and renamed over it: a failed plot leaves
    // the previous PNG (or none), never a partial one.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".plot-")
        .suffix(".png")
        .tempfile_in(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    // plotters has internal `expect`s; a plot is not worth a whole run.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        render(fig, &data, unit, caption, tmp.path())
    }))
    .map_err(|_| format!("plotting {} panicked", fig.name))??;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // tempfile creates 0600; a plot is meant to be read by others.
        let _ = std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644));
    }
    tmp.persist(path)
        .map_err(|e| format!("{}: {}", path.display(), e.error))?;
    Ok(())
}

fn fonts() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        register_font(FAMILY, FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "DejaVu Sans is not a usable font".to_string())?;
        register_font(FAMILY, FontStyle::Bold, dejavu::sans::bold())
            .map_err(|_| "DejaVu Sans Bold is not a usable font".to_string())
    })
    .clone()
}

fn render(
    fig: &Figure,
    data: &[Series],
    unit: Unit,
    caption: &str,
    out: &Path,
) -> Result<(), String> {
    let binary_x = fig.x_label.contains("bytes");
    let (x_axis, y_axis) = axes(fig, data, binary_x);
    let root = BitMapBackend::new(out, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (upper, lower) = root.split_vertically(HEIGHT - CAPTION_HEIGHT);
    let grey = RGBColor(90, 90, 90);
    let caption_style = (FAMILY, 13)
        .into_font()
        .color(&grey)
        .pos(Pos::new(HPos::Center, VPos::Center));
    lower
        .draw_text(
            caption,
            &caption_style,
            ((WIDTH / 2) as i32, (CAPTION_HEIGHT / 2) as i32),
        )
        .map_err(err)?;

    let y_desc = format!("{} ({})", fig.y_label, unit_text(unit));
    let mut chart = ChartBuilder::on(&upper)
        .caption(fig.title, (FAMILY, 22, FontStyle::Bold))
        .margin(12)
        .margin_right(30)
        .x_label_area_size(52)
        .y_label_area_size(84)
        .build_cartesian_2d(x_axis, y_axis)
        .map_err(err)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(fig.x_label)
        .y_desc(y_desc)
        .axis_desc_style((FAMILY, 16))
        .label_style((FAMILY, 14))
        .bold_line_style(RGBColor(214, 214, 214))
        .light_line_style(RGBColor(240, 240, 240))
        .max_light_lines(3);
    if fig.shape == Shape::Bars {
        mesh.disable_x_mesh();
    }
    mesh.draw().map_err(err)?;

    let samples = match fig.shape {
        Shape::Lines => lines(&mut chart, data)?,
        Shape::Bars => bars(&mut chart, data)?,
    };
    let corner = legend_corner(&samples, data.len());
    chart
        .configure_series_labels()
        .position(corner)
        .margin(12)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(150, 150, 150))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Every x any system has, ascending.
fn params(data: &[Series]) -> Vec<f64> {
    let mut ps: Vec<f64> = data
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    ps.sort_by(f64::total_cmp);
    ps.dedup();
    ps
}

/// Both axes for the data: x over the params (categories for bars), y
/// over the values and their error bars.
fn axes(fig: &Figure, data: &[Series], binary_x: bool) -> (Axis, Axis) {
    let params = params(data);
    let x = if fig.shape == Shape::Bars {
        let ticks = params
            .iter()
            .enumerate()
            .map(|(i, p)| match fig.zero_means {
                Some(word) if *p == 0.0 => (i as f64 + 0.5, word.to_string()),
                _ => (i as f64 + 0.5, compact(*p, binary_x)),
            })
            .collect();
        Axis::new(false, 0.0, params.len().max(1) as f64, ticks, Vec::new())
    } else {
        let (lo, hi) = (params[0], params[params.len() - 1]);
        let (lo, hi) = padded(fig.log_x, lo, hi, false);
        // The measured params make the best ticks (64, 512, 4K, ...);
        // thinned when there are too many to read.
        let every = params.len().div_ceil(12);
        let ticks = params.iter().step_by(every);
        let ticks = ticks.map(|p| (*p, compact(*p, binary_x))).collect();
        Axis::new(fig.log_x, lo, hi, ticks, Vec::new())
    };

    let values = data.iter().flat_map(|s| s.points.iter());
    let top = values
        .clone()
        .map(|p| p.1 + p.2)
        .fold(f64::NEG_INFINITY, f64::max);
    let y = if fig.log_y {
        let positive = values
            .flat_map(|p| [p.1, p.1 - p.2])
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        let (lo, hi) = if positive.is_finite() {
            (positive, top.max(positive))
        } else {
            (0.1, 1.0)
        };
        let (mut lo, hi) = padded(true, lo, hi, false);
        if fig.shape == Shape::Bars {
            // A bar's height is read from its base: start a decade below
            // the shortest so it does not shrink to a sliver.
            lo = lo.min(10f64.powf(positive.log10().ceil() - 1.0));
        }
        let (ticks, light) = log_ticks(lo, hi);
        Axis::new(true, lo, hi, ticks, light)
    } else {
        let bottom = values.map(|p| p.1 - p.2).fold(f64::INFINITY, f64::min);
        let (lo, hi) = padded(false, bottom.min(0.0), top.max(0.0), true);
        Axis::new(false, lo, hi, Vec::new(), Vec::new())
    };
    (x, y)
}

type Chart<'a, 'b> = ChartContext<'a, BitMapBackend<'b>, Cartesian2d<Axis, Axis>>;

/// Where data is drawn, as (x, y) fractions of the plotting area, for
/// [`legend_corner`].
type Samples = Vec<(f64, f64)>;

/// Samples the straight stretch from `a` to `b` (fractions of the plot).
fn trace(samples: &mut Samples, a: (f64, f64), b: (f64, f64)) {
    let at = |t: f64| (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
    samples.extend((0..=12).map(|k| at(f64::from(k) / 12.0)));
}

fn lines<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, data: &[Series]) -> Result<Samples, String> {
    let (xa, ya) = spans(chart);
    let mut samples = Samples::new();
    for s in data {
        let c = colour(s.system);
        let style = c.stroke_width(2);
        let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (p.0, ya.clamp(p.1))).collect();
        let fracs: Vec<_> = pts.iter().map(|p| (xa.frac(p.0), ya.frac(p.1))).collect();
        samples.extend(&fracs);
        fracs
            .windows(2)
            .for_each(|w| trace(&mut samples, w[0], w[1]));

        let dashed = s.system == "memcpy";
        let host = s.system.starts_with("host-");
        let drawn = if dashed {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 8, 5, style))
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style))
        };
        let anno = drawn.map_err(err)?.label(s.system);
        let line =
            move |x, y| EmptyElement::at((x, y)) + PathElement::new(vec![(0, 0), (22, 0)], style);
        if host {
            anno.legend(move |(x, y)| line(x, y) + TriangleMarker::new((11, 0), 6, c.filled()));
        } else {
            anno.legend(move |(x, y)| line(x, y) + Circle::new((11, 0), 4, c.filled()));
        }

        let errs = s.points.iter().filter(|p| p.2 > 0.0);
        let errs: Vec<_> = errs
            .map(|p| (p.0, ya.clamp(p.1 - p.2), ya.clamp(p.1 + p.2)))
            .collect();
        error_bars(chart, &errs, c.stroke_width(1), 4)?;
        // Markers tell the host from ulfs even in grey print.
        let marked = if host {
            chart.draw_series(pts.iter().map(|p| TriangleMarker::new(*p, 6, c.filled())))
        } else {
            let r = if dashed { 3 } else { 4 };
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, r, c.filled())))
        };
        marked.map_err(err)?;
    }
    Ok(samples)
}

fn spans(chart: &Chart) -> (Span, Span) {
    let spec = chart.as_coord_spec();
    (spec.x_spec().span, spec.y_spec().span)
}

fn bars<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, data: &[Series]) -> Result<Samples, String> {
    let (_, ya) = spans(chart);
    let base = if ya.log { ya.lo } else { ya.clamp(0.0) };
    let params = params(data);
    let groups = params.len().max(1) as f64;
    let width = 0.8 / data.len().max(1) as f64;
    let mut samples = Samples::new();
    for (j, s) in data.iter().enumerate() {
        let c = colour(s.system);
        let mut rects = Vec::new();
        let mut errs = Vec::new();
        for p in &s.points {
            let Some(i) = params.iter().position(|q| *q == p.0) else {
                continue;
            };
            let x0 = i as f64 + 0.1 + j as f64 * width;
            let x1 = x0 + width * 0.9;
            let top = ya.clamp(p.1);
            rects.push(Rectangle::new([(x0, base), (x1, top)], c.filled()));
            let mid = (x0 + x1) / 2.0 / groups;
            trace(&mut samples, (mid, ya.frac(base)), (mid, ya.frac(top)));
            if p.2 > 0.0 {
                errs.push(((x0 + x1) / 2.0, ya.clamp(p.1 - p.2), ya.clamp(p.1 + p.2)));
            }
        }
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(s.system)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.filled()));
        error_bars(chart, &errs, BLACK.mix(0.7).stroke_width(1), 3)?;
    }
    Ok(samples)
}

/// Error bars, each (x, low, high): a stroke with short caps, drawn by
/// hand so no extra plotters feature is needed.
fn error_bars<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    bars: &[(f64, f64, f64)],
    style: ShapeStyle,
    cap: i32,
) -> Result<(), String> {
    for &(x, lo, hi) in bars {
        let stroke = PathElement::new(vec![(x, lo), (x, hi)], style);
        chart.draw_series([stroke]).map_err(err)?;
        for end in [lo, hi] {
            let tick = PathElement::new(vec![(-cap, 0), (cap, 0)], style);
            chart
                .draw_series([EmptyElement::at((x, end)) + tick])
                .map_err(err)?;
        }
    }
    Ok(())
}

/// The corner whose legend-sized box covers the fewest drawn samples;
/// ties go to upper left, then lower right, as in most papers.
fn legend_corner(samples: &[(f64, f64)], entries: usize) -> SeriesLabelPosition {
    let (w, h) = (0.2, (0.06 + 0.04 * entries as f64).min(0.9));
    let corners = [
        (SeriesLabelPosition::UpperLeft, 0.0, 1.0 - h),
        (SeriesLabelPosition::LowerRight, 1.0 - w, 0.0),
        (SeriesLabelPosition::UpperRight, 1.0 - w, 1.0 - h),
        (SeriesLabelPosition::LowerLeft, 0.0, 0.0),
    ];
    let covered = |x0: f64, y0: f64| {
        samples
            .iter()
            .filter(|(x, y)| *x >= x0 && *x <= x0 + w && *y >= y0 && *y <= y0 + h)
            .count()
    };
    corners
        .into_iter()
        .min_by_key(|(_, x0, y0)| covered(*x0, *y0))
        .map_or(SeriesLabelPosition::UpperLeft, |c| c.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::FIGURES;
    use std::collections::HashSet;

    fn fig(name: &str) -> &'static Figure {
        FIGURES.iter().find(|f| f.name == name).unwrap()
    }

    fn row(exp: &str, system: &str, param: u64, value: f64, stddev: f64) -> Row {
        let (experiment, system, unit) = (exp.into(), system.into(), Unit::Us);
        Row {
            experiment,
            system,
            param,
            value,
            unit,
            stddev,
        }
    }

    /// Three systems over several params: ulfs-none lacks the second
    /// param and is 0 at the first (off a log axis), ulfs-journal has
    /// error bars, and memcpy has only a NaN, which must be skipped.
    fn rows(exp: &str, params: &[u64]) -> Vec<Row> {
        let mut v = vec![row(exp, "memcpy", params[0], f64::NAN, 0.0)];
        for (i, &p) in params.iter().enumerate() {
            let x = p as f64;
            v.push(row(exp, "host-tmpfs", p, x * 2.0, 0.0));
            v.push(row(exp, "ulfs-journal", p, x * 0.1, x * 0.02));
            let none = if i == 0 { 0.0 } else { x * 0.09 };
            v.extend((i != 1).then(|| row(exp, "ulfs-none", p, none, 0.0)));
        }
        v
    }

    /// Draws `name` into a fresh directory and checks the PNG: its size,
    /// real content in each system's colour, and a drawn caption.
    fn check(name: &str, params: &[u64]) {
        let rows = rows(name, params);
        let refs: Vec<&Row> = rows.iter().collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{name}.png"));
        draw(fig(name), &refs, "2 cores, test machine; ulfs 0.1.0", &path).unwrap();
        // Nothing but the PNG is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        let decoder = png::Decoder::new(std::fs::File::open(&path).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (WIDTH, HEIGHT));
        assert_eq!(info.color_type, png::ColorType::Rgb);
        let px: Vec<[u8; 3]> = buf.chunks(3).map(|c| [c[0], c[1], c[2]]).collect();
        let colours: HashSet<[u8; 3]> = px.iter().copied().collect();
        assert!(colours.len() > 10, "{name}: only {} colours", colours.len());
        assert!(colours.contains(&[255, 255, 255]));
        for system in ["ulfs-journal", "host-tmpfs", "ulfs-none"] {
            let RGBColor(r, g, b) = colour(system);
            assert!(colours.contains(&[r, g, b]), "{name}: no {system} colour");
        }
        // Text needs the embedded font: an unregistered one draws nothing.
        let strip = (HEIGHT - CAPTION_HEIGHT) as usize * WIDTH as usize;
        assert!(
            px[strip..].iter().any(|p| *p != [255, 255, 255]),
            "{name}: no caption"
        );
    }

    #[test]
    fn a_lines_figure_draws_every_system_in_its_colour() {
        check(
            "fig6-read-after-write-fresh",
            &[64, 512, 4096, 65536, 1 << 20],
        );
        check("fig11-lseek", &[100, 1000, 10_000, 100_000, 1_000_000]);
        // A linear y axis, which starts at zero.
        check("fsync-loop", &[10, 100, 1000]);
    }

    #[test]
    fn a_bars_figure_draws_every_system_in_its_colour() {
        check("fig9-memory-limit", &[0, 1, 2, 4, 8]);
    }

    #[test]
    fn one_param_still_draws() {
        check("fig11-lseek", &[1000]);
        check("fig9-memory-limit", &[8]);
    }

    #[test]
    fn nothing_to_draw_is_an_error_and_writes_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.png");
        let e = draw(fig("fig12-fstat"), &[], "", &path).unwrap_err();
        assert_eq!(e, "no rows for fig12-fstat");
        let inf = row("fig12-fstat", "ulfs-journal", 10, f64::INFINITY, 0.0);
        assert!(draw(fig("fig12-fstat"), &[&inf], "", &path).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn colours_and_order_are_fixed() {
        assert_eq!(colour("ulfs-preload-journal"), colour("ulfs-preload"));
        assert_ne!(colour("ulfs-journal"), colour("host-tmpfs"));
        assert_ne!(colour("ulfs-fuse-writeback"), colour("ulfs-fuse"));
        assert_eq!(colour("someone-else"), colour("someone-else"));
        assert_ne!(colour("someone-else"), colour("another"));
        let mut names: Vec<&str> = "zeta memcpy ulfs-fuse-writeback ulfs-fuse ulfs-preload-none \
            ulfs-preload-journal ulfs-preload alpha ulfs-none ulfs-journal host-ext4 host-tmpfs"
            .split_whitespace()
            .collect();
        sort_systems(&mut names);
        let want = "host-tmpfs host-ext4 ulfs-journal ulfs-none ulfs-preload \
            ulfs-preload-journal ulfs-preload-none ulfs-fuse ulfs-fuse-writeback memcpy alpha zeta";
        assert_eq!(
            names.join(" "),
            want.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }

    #[test]
    fn tick_labels_are_compact() {
        let fmt = |vs: &[f64], binary| vs.iter().map(|v| compact(*v, binary)).collect::<Vec<_>>();
        let decimal = fmt(&[1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 2.5e6, 0.05], false);
        assert_eq!(
            decimal,
            ["1", "10", "100", "1K", "10K", "100K", "1M", "2.5M", "0.05"]
        );
        let binary = fmt(&[64.0, 1024.0, 4096.0, 65536.0, 1048576.0], true);
        assert_eq!(binary, ["64", "1K", "4K", "64K", "1M"]);
        // A range too narrow for 1-2-5 steps still gets labels.
        assert!(log_ticks(257.0, 470.0).0.len() >= 2);
        assert_eq!(value_label(8000.0), "8,000");
        assert_eq!(value_label(1_234_567.0), "1,234,567");
        assert_eq!(value_label(0.25), "0.25");
        assert_eq!(value_label(500.0), "500");
    }
}
