//! The plots of a report, drawn with `plotters` as SVG (text, inlined in the
//! HTML page) and PNG (pixels, drawn with the embedded DejaVu Sans, so no
//! system font is needed).
//!
//! Each figure has one panel per task; the x axis is the context budget on a
//! log-2 scale with a tick at every budget; one line per model × runtime
//! variant (solid: with runtime information, dashed: without), the same
//! colour for a variant in every figure. Metric figures shade the 95%
//! bootstrap interval of each point.

use super::inputs::ReportRun;
use super::ReportError;
use crate::data::samples::Task;
use crate::metrics::MetricValue;
use crate::records::GroupResult;
use plotters::chart::{ChartBuilder, SeriesLabelPosition};
use plotters::coord::combinators::BindKeyPoints;
use plotters::coord::Shift;
use plotters::drawing::{DrawingArea, DrawingAreaErrorKind, IntoDrawingArea};
use plotters::element::{Circle, DashedPathElement, IntoDynElement, PathElement, Polygon};
use plotters::prelude::{BitMapBackend, DrawingBackend, SVGBackend};
use plotters::series::{DashedLineSeries, LineSeries};
use plotters::style::{Color, FontStyle, Palette, Palette99, RGBColor, BLACK, WHITE};
use std::path::Path;
use std::sync::OnceLock;

/// Pixel size of every figure (SVG and PNG).
pub const SIZE: (u32, u32) = (1200, 460);

/// DejaVu Sans 2.37 (see `DejaVuSans.LICENSE` beside this file).
static FONT: &[u8] = include_bytes!("DejaVuSans.ttf");

/// Register the embedded font as plotters' `sans-serif`, once.
fn font() -> Result<(), ReportError> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(ReportError::Plot { plot: "font".into(), message: "the embedded font does not load".into() })
    }
}

/// One point of a line: a budget, a value and its interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub budget: usize,
    pub value: MetricValue,
}

/// One line.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text: `<label> · runtime on|off`.
    pub name: String,
    pub runtime: bool,
    /// Index into the palette (stable across figures).
    pub colour: usize,
    pub points: Vec<Point>,
}

/// One panel (a task).
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
}

/// One figure, written as `plots/<stem>.svg` and `plots/<stem>.png`.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub stem: String,
    pub title: String,
    pub y_desc: String,
    pub y_range: (f64, f64),
    /// Shade intervals.
    pub bands: bool,
    pub panels: Vec<Panel>,
}

type Pick = fn(&GroupResult) -> MetricValue;

/// A figure's stem, title, y axis name, y range, whether to shade
/// intervals, and the value it shows.
type Spec = (&'static str, &'static str, &'static str, (f64, f64), bool, Pick);

fn exact(g: &GroupResult) -> MetricValue {
    g.metrics.exact_match
}
fn rouge(g: &GroupResult) -> MetricValue {
    g.metrics.rouge_l
}
fn chrf(g: &GroupResult) -> MetricValue {
    g.metrics.chrf
}
fn steps(g: &GroupResult) -> MetricValue {
    MetricValue { value: g.mean_steps_kept, ci_low: g.mean_steps_kept, ci_high: g.mean_steps_kept }
}

/// The figures of a set of runs: exact match, ROUGE-L, chrF and mean steps
/// kept against the budget. Runs without a known budget, and groups without
/// a scored sample, are left out; no figure when no run has a budget.
pub fn figures(runs: &[ReportRun]) -> Vec<Figure> {
    let runs: Vec<&ReportRun> = runs.iter().filter(|r| r.context_tokens.is_some()).collect();
    if runs.is_empty() {
        return Vec::new();
    }
    let mut variants: Vec<(String, bool)> =
        runs.iter().flat_map(|r| r.results.groups.iter().map(move |g| (r.label.clone(), g.runtime))).collect();
    variants.sort();
    variants.dedup();
    let mut tasks: Vec<Task> = runs.iter().flat_map(|r| r.results.groups.iter().map(|g| g.task)).collect();
    tasks.sort();
    tasks.dedup();
    let max_steps = runs.iter().flat_map(|r| r.results.groups.iter().map(|g| g.mean_steps_kept)).fold(0.0f64, f64::max);
    let specs: [Spec; 4] = [
        ("exact_match", "Exact match against the context budget", "exact match", (0.0, 1.0), true, exact),
        ("rouge_l", "ROUGE-L against the context budget", "ROUGE-L (F)", (0.0, 1.0), true, rouge),
        ("chrf", "chrF against the context budget", "chrF", (0.0, 100.0), true, chrf),
        (
            "steps_kept",
            "Trajectory steps that fit the budget",
            "mean steps kept",
            (0.0, (max_steps * 1.15).max(1.0)),
            false,
            steps,
        ),
    ];
    specs
        .iter()
        .map(|&(stem, title, y_desc, y_range, bands, pick)| Figure {
            stem: stem.to_string(),
            title: title.to_string(),
            y_desc: y_desc.to_string(),
            y_range,
            bands,
            panels: tasks
                .iter()
                .map(|&task| Panel {
                    title: task.to_string(),
                    series: variants
                        .iter()
                        .enumerate()
                        .filter_map(|(colour, (label, runtime))| {
                            let mut points: Vec<Point> = runs
                                .iter()
                                .filter(|r| &r.label == label)
                                .filter_map(|r| {
                                    // A group with no scored sample has no value to plot.
                                    let g = r
                                        .results
                                        .groups
                                        .iter()
                                        .find(|g| g.task == task && g.runtime == *runtime && g.n > 0)?;
                                    Some(Point { budget: r.context_tokens?, value: pick(g) })
                                })
                                .collect();
                            points.sort_by_key(|p| p.budget);
                            (!points.is_empty()).then(|| Series {
                                name: format!("{label} · runtime {}", if *runtime { "on" } else { "off" }),
                                runtime: *runtime,
                                colour,
                                points,
                            })
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

/// The figure as an SVG document.
pub fn render_svg(fig: &Figure) -> Result<String, ReportError> {
    font()?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(root, fig).map_err(|e| plot_err(fig, e))?;
    }
    Ok(svg)
}

/// Draw the figure into a PNG file.
pub fn render_png(fig: &Figure, path: &Path) -> Result<(), ReportError> {
    font()?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw(root, fig).map_err(|e| plot_err(fig, e))
}

fn plot_err<E: std::error::Error + Send + Sync>(fig: &Figure, e: DrawingAreaErrorKind<E>) -> ReportError {
    ReportError::Plot { plot: fig.stem.clone(), message: e.to_string() }
}

fn colour(i: usize) -> RGBColor {
    let (r, g, b) = Palette99::COLORS[i % Palette99::COLORS.len()];
    RGBColor(r, g, b)
}

/// The x coordinate of a budget: log2 of it, in thousandths (an integer
/// axis, so that ticks can sit exactly at the budgets).
fn x_of(b: usize) -> i32 {
    ((b.max(1) as f64).log2() * 1000.0).round() as i32
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    fig: &Figure,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let root = root.titled(&fig.title, ("sans-serif", 22))?;
    let mut budgets: Vec<usize> =
        fig.panels.iter().flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|q| q.budget))).collect();
    budgets.sort_unstable();
    budgets.dedup();
    let keys: Vec<i32> = budgets.iter().map(|b| x_of(*b)).collect();
    let (lo, hi) = match (keys.first(), keys.last()) {
        (Some(a), Some(b)) => (a - 350, b + 350),
        _ => (7650, 12350),
    };
    let panels = root.split_evenly((1, fig.panels.len().max(1)));
    for (area, panel) in panels.iter().zip(&fig.panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(48)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).with_key_points(keys.clone()), fig.y_range.0..fig.y_range.1)?;
        chart
            .configure_mesh()
            .x_desc("context tokens")
            .y_desc(fig.y_desc.as_str())
            .x_label_formatter(&|v| format!("{}", 2f64.powf(f64::from(*v) / 1000.0).round() as u64))
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 15))
            .bold_line_style(BLACK.mix(0.12))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        for s in &panel.series {
            let c = colour(s.colour);
            let xy = |p: &Point, v: f64| (x_of(p.budget), v);
            if fig.bands && s.points.iter().any(|p| p.value.ci_low != p.value.ci_high) {
                let mut band: Vec<(i32, f64)> = s.points.iter().map(|p| xy(p, p.value.ci_high)).collect();
                band.extend(s.points.iter().rev().map(|p| xy(p, p.value.ci_low)));
                if s.points.len() == 1 {
                    // A single budget: a narrow box instead of a degenerate polygon.
                    let (x, p) = (x_of(s.points[0].budget), s.points[0].value);
                    band = vec![(x - 60, p.ci_high), (x + 60, p.ci_high), (x + 60, p.ci_low), (x - 60, p.ci_low)];
                }
                chart.draw_series(std::iter::once(Polygon::new(band, c.mix(0.14))))?;
            }
            let line: Vec<(i32, f64)> = s.points.iter().map(|p| xy(p, p.value.value)).collect();
            let style = c.stroke_width(2);
            let anno = if s.runtime {
                chart.draw_series(LineSeries::new(line.clone(), style))?
            } else {
                chart.draw_series(DashedLineSeries::new(line.clone(), 7, 5, style))?
            };
            let dashed = !s.runtime;
            anno.label(s.name.as_str()).legend(move |(x, y)| {
                let pts = vec![(x, y), (x + 22, y)];
                if dashed {
                    DashedPathElement::new(pts, 5, 3, style).into_dyn()
                } else {
                    PathElement::new(pts, style).into_dyn()
                }
            });
            chart.draw_series(line.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
        }
        if !panel.series.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .label_font(("sans-serif", 13))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.3))
                .draw()?;
        }
    }
    root.present()
}

#[cfg(test)]
mod tests {
    use super::{render_svg, x_of, Figure, Panel, Point, Series};
    use crate::metrics::MetricValue;

    #[test]
    fn svg_has_titles_ticks_and_legend() {
        let v = |x: f64| MetricValue { value: x, ci_low: x - 0.1, ci_high: x + 0.1 };
        let fig = Figure {
            stem: "t".into(),
            title: "A title".into(),
            y_desc: "exact match".into(),
            y_range: (0.0, 1.0),
            bands: true,
            panels: vec![Panel {
                title: "next_cell".into(),
                series: vec![Series {
                    name: "m · runtime on".into(),
                    runtime: true,
                    colour: 0,
                    points: vec![Point { budget: 256, value: v(0.2) }, Point { budget: 1024, value: v(0.5) }],
                }],
            }],
        };
        let svg = render_svg(&fig).unwrap();
        for text in ["A title", "next_cell", "context tokens", "exact match", "m · runtime on", "256", "1024"] {
            let element = format!(">\n{text}\n</text>");
            assert!(svg.contains(&element), "{element:?} missing");
        }
        // The interval band and a tick only at the budgets.
        assert!(svg.contains("<polygon"));
        assert!(!svg.contains(">\n512\n</text>"));
        assert_eq!((x_of(1024), x_of(1536)), (10000, 10585));
    }
}
