//! Figures as SVG: the panels of a [`Figure`] side by side under its title.
//!
//! Text needs a font (see the `font` module: one is bundled, `PATRONUS_FONT` may name another);
//! if it cannot be loaded rendering fails with an error, never a panic, and the caller still
//! writes the JSON and the report.
//!
//! Data is never trusted to be plottable: non-finite values are dropped, and so are
//! non-positive values on a logarithmic axis; a panel left with nothing to draw gets an empty
//! frame reading "no data".

use super::font::{FAMILY, ensure_font};
use super::{Figure, Panel, PanelKind};
use anyhow::{Context, Result, anyhow};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;
use std::path::Path;

const PANEL_W: u32 = 480;
const PANEL_H: u32 = 360;
const TITLE_H: u32 = 40;

/// Ten distinguishable colors (matplotlib's tab10); more series continue with `Palette99`.
const TAB10: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Draws `fig` as an SVG at `path`: panels side by side (480×360 px each) under the title.
///
/// Fails if the font cannot be loaded (only when `PATRONUS_FONT` names an unusable file) or
/// the file cannot be written; nothing is written on failure.
pub fn render_svg(fig: &Figure, path: &Path) -> Result<()> {
    let svg = svg_string(fig)?;
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

/// Renders `fig` to SVG text.
pub(crate) fn svg_string(fig: &Figure) -> Result<String> {
    ensure_font()?;
    let n = fig.panels.len().max(1);
    let width = PANEL_W.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX));
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (width, PANEL_H + TITLE_H)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let (title_area, body) = root.split_vertically(TITLE_H);
        title_area
            .draw(&Text::new(
                fig.title.clone(),
                (i32::try_from(width / 2).unwrap_or(0), 12),
                text_style(22).pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(draw_err)?;
        let areas = body.split_evenly((1, n));
        if fig.panels.is_empty() {
            if let Some(area) = areas.first() {
                draw_empty(area, "", "", "")?;
            }
        }
        for (panel, area) in fig.panels.iter().zip(&areas) {
            draw_panel(area, panel)
                .with_context(|| format!("drawing panel {:?} of {:?}", panel.title, fig.title))?;
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

fn draw_err<E: std::error::Error + Send + Sync + 'static>(e: E) -> anyhow::Error {
    anyhow!("plotting failed: {e}")
}

fn text_style(size: u32) -> TextStyle<'static> {
    (FAMILY, f64::from(size)).into_font().into()
}

fn color(i: usize) -> RGBColor {
    let (r, g, b) = match TAB10.get(i) {
        Some(&c) => c,
        None => {
            let p = Palette99::COLORS;
            p[(i - TAB10.len()) % p.len()]
        }
    };
    RGBColor(r, g, b)
}

fn draw_panel(area: &Area, panel: &Panel) -> Result<()> {
    match panel.kind {
        PanelKind::Lines => draw_lines_panel(area, panel),
        PanelKind::Bars => draw_bars_panel(area, panel),
    }
}

/// The points of each series that can be drawn on the panel's axes.
fn plottable_lines(panel: &Panel) -> Vec<(&str, Vec<(f64, f64)>)> {
    panel
        .series
        .iter()
        .map(|s| {
            let pts = s
                .points
                .iter()
                .map(|p| (p.x, p.y))
                .filter(|&(x, y)| on_axis(x, panel.x_log) && on_axis(y, panel.y_log))
                .collect();
            (s.name.as_str(), pts)
        })
        .collect()
}

fn on_axis(v: f64, log: bool) -> bool {
    v.is_finite() && (!log || v > 0.0)
}

fn min_max(vals: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    vals.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// The drawn range of an axis holding `lo..=hi` (finite; positive when `log`).
fn axis_range(lo: f64, hi: f64, log: bool, from_zero: bool) -> Range<f64> {
    if log {
        if lo == hi {
            return lo / 2.0..hi * 2.0;
        }
        return lo / 1.25..hi * 1.25;
    }
    let (lo, hi) = if from_zero {
        (lo.min(0.0), hi.max(0.0))
    } else {
        (lo, hi)
    };
    if lo == hi {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return lo - pad..hi + pad;
    }
    let pad = (hi - lo) * 0.05;
    let lo = if from_zero && lo >= 0.0 { lo } else { lo - pad };
    lo..hi + pad
}

fn draw_lines_panel(area: &Area, panel: &Panel) -> Result<()> {
    let series = plottable_lines(panel);
    let all = || series.iter().flat_map(|(_, pts)| pts.iter().copied());
    let (Some((x0, x1)), Some((y0, y1))) =
        (min_max(all().map(|p| p.0)), min_max(all().map(|p| p.1)))
    else {
        return draw_empty(area, &panel.title, &panel.x_label, &panel.y_label);
    };
    let xr = axis_range(x0, x1, panel.x_log, false);
    let yr = axis_range(y0, y1, panel.y_log, true);
    match (panel.x_log, panel.y_log) {
        (false, false) => draw_lines(area, panel, &series, xr, yr),
        (true, false) => draw_lines(area, panel, &series, xr.log_scale(), yr),
        (false, true) => draw_lines(area, panel, &series, xr, yr.log_scale()),
        (true, true) => draw_lines(area, panel, &series, xr.log_scale(), yr.log_scale()),
    }
}

fn chart_builder<'a, 'b>(area: &'a Area<'b>, title: &str) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(area);
    b.margin(10).x_label_area_size(45).y_label_area_size(64);
    if !title.is_empty() {
        b.caption(title, text_style(16));
    }
    b
}

fn draw_lines<X, Y>(
    area: &Area,
    panel: &Panel,
    series: &[(&str, Vec<(f64, f64)>)],
    x: X,
    y: Y,
) -> Result<()>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = chart_builder(area, &panel.title)
        .build_cartesian_2d(x, y)
        .map_err(draw_err)?;
    let fmt = |v: &f64| tick_label(*v);
    chart
        .configure_mesh()
        .x_desc(panel.x_label.as_str())
        .y_desc(panel.y_label.as_str())
        .x_label_formatter(&fmt)
        .y_label_formatter(&fmt)
        .label_style(text_style(12))
        .axis_desc_style(text_style(13))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(draw_err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)).point_size(3))
            .map_err(draw_err)?
            .label(*name)
            .legend(move |(lx, ly)| {
                EmptyElement::at((lx, ly))
                    + PathElement::new(vec![(0, 0), (20, 0)], c.stroke_width(2))
                    + Circle::new((10, 0), 3, c.filled())
            });
    }
    draw_legend(&mut chart)
}

fn draw_legend<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> Result<()>
where
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(text_style(12))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.5))
        .draw()
        .map_err(draw_err)
}

/// A frame with axis labels and "no data" in the middle.
fn draw_empty(area: &Area, title: &str, x_label: &str, y_label: &str) -> Result<()> {
    let mut chart = chart_builder(area, title)
        .build_cartesian_2d(0f64..1f64, 0f64..1f64)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(0)
        .y_labels(0)
        .x_desc(x_label)
        .y_desc(y_label)
        .axis_desc_style(text_style(13))
        .draw()
        .map_err(draw_err)?;
    chart
        .draw_series(std::iter::once(Text::new(
            "no data",
            (0.5, 0.5),
            text_style(16).pos(Pos::new(HPos::Center, VPos::Center)),
        )))
        .map_err(draw_err)?;
    Ok(())
}

/// The x axis of a bar panel: category `i` spans `i..i+1`, its tick sits at `i + 0.5`.
struct CategoryAxis {
    n: usize,
}

impl Ranged for CategoryAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let span = f64::from(limit.1 - limit.0);
        // `n` is at least 1 here: empty bar panels are drawn by `draw_empty`.
        let frac = v / self.n.max(1) as f64;
        limit.0 + (span * frac).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.max_num_points() == 0 {
            return Vec::new();
        }
        (0..self.n).map(|i| i as f64 + 0.5).collect()
    }

    fn range(&self) -> Range<f64> {
        0.0..self.n as f64
    }
}

/// One bar: series index, category index, height.
type Bar = (usize, usize, f64);

fn draw_bars_panel(area: &Area, panel: &Panel) -> Result<()> {
    let mut categories: Vec<String> = Vec::new();
    let mut bars: Vec<Bar> = Vec::new();
    for (si, s) in panel.series.iter().enumerate() {
        for p in &s.points {
            // Unlabelled points fall back to their x value as the category.
            let label = p.label.clone().unwrap_or_else(|| tick_label(p.x));
            let ci = match categories.iter().position(|c| *c == label) {
                Some(ci) => ci,
                None => {
                    categories.push(label);
                    categories.len() - 1
                }
            };
            if on_axis(p.y, panel.y_log) {
                bars.push((si, ci, p.y));
            }
        }
    }
    let Some((y0, y1)) = min_max(bars.iter().map(|b| b.2)) else {
        return draw_empty(area, &panel.title, &panel.x_label, &panel.y_label);
    };
    let x = CategoryAxis {
        n: categories.len(),
    };
    if panel.y_log {
        let yr = axis_range(y0, y1, true, false);
        let base = yr.start;
        draw_bars(area, panel, &categories, &bars, base, x, yr.log_scale())
    } else {
        draw_bars(
            area,
            panel,
            &categories,
            &bars,
            0.0,
            x,
            axis_range(y0, y1, false, true),
        )
    }
}

fn draw_bars<Y>(
    area: &Area,
    panel: &Panel,
    categories: &[String],
    bars: &[Bar],
    base: f64,
    x: CategoryAxis,
    y: Y,
) -> Result<()>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = chart_builder(area, &panel.title)
        .build_cartesian_2d(x, y)
        .map_err(draw_err)?;
    let x_fmt = |v: &f64| {
        let i = v.floor();
        if i >= 0.0 {
            categories.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let y_fmt = |v: &f64| tick_label(*v);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(categories.len())
        .x_desc(panel.x_label.as_str())
        .y_desc(panel.y_label.as_str())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style(text_style(12))
        .axis_desc_style(text_style(13))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(draw_err)?;
    let n_series = panel.series.len().max(1) as f64;
    let width = 0.8 / n_series;
    for (si, s) in panel.series.iter().enumerate() {
        let c = color(si);
        let rects = bars.iter().filter(|b| b.0 == si).map(|&(_, ci, v)| {
            let x0 = ci as f64 + 0.1 + si as f64 * width;
            Rectangle::new([(x0, base), (x0 + width, v)], c.filled())
        });
        chart
            .draw_series(rects)
            .map_err(draw_err)?
            .label(s.name.as_str())
            .legend(move |(lx, ly)| Rectangle::new([(lx, ly - 5), (lx + 14, ly + 5)], c.filled()));
    }
    draw_legend(&mut chart)
}

/// A compact tick label: 1500 → "1.5K", 2e6 → "2M", 0.25 → "0.25".
fn tick_label(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "K")
    } else {
        (v, "")
    };
    let s = format!("{scaled:.3}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    let s = if s == "-0" { "0" } else { s };
    if a != 0.0 && a < 1e-3 {
        return format!("{v:.0e}");
    }
    format!("{s}{suffix}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::{Point, Series};
    use super::*;

    fn require_font() {
        if let Err(e) = ensure_font() {
            panic!("SVG tests need the bundled font (is PATRONUS_FONT set to a bad file?): {e}");
        }
    }

    fn lines_figure() -> Figure {
        Figure {
            title: "Lines figure".into(),
            panels: vec![Panel {
                title: "(a) latency".into(),
                x_label: "size (B)".into(),
                y_label: "p50 (µs)".into(),
                x_log: true,
                y_log: true,
                kind: PanelKind::Lines,
                series: vec![
                    Series {
                        name: "Patronus".into(),
                        points: vec![
                            Point::xy(64.0, 2.0),
                            Point::xy(4096.0, 5.0),
                            Point::xy(0.0, 1.0),  // dropped: x on a log axis
                            Point::xy(1e6, -3.0), // dropped: y on a log axis
                            Point::xy(f64::NAN, 1.0),
                        ],
                    },
                    Series {
                        name: "MR rereg".into(),
                        points: vec![Point::xy(64.0, 40.0), Point::xy(1048576.0, 900.0)],
                    },
                ],
            }],
        }
    }

    fn bars_figure() -> Figure {
        Figure {
            title: "Bars figure".into(),
            panels: vec![
                Panel {
                    title: "(a) CPU".into(),
                    x_label: "mechanism".into(),
                    y_label: "µs/op".into(),
                    x_log: false,
                    y_log: false,
                    kind: PanelKind::Bars,
                    series: vec![
                        Series {
                            name: "manager".into(),
                            points: vec![Point::bar("Patronus", 1.5), Point::bar("RPC", 6.0)],
                        },
                        Series {
                            name: "engine".into(),
                            points: vec![Point::bar("RPC", 2.0), Point::bar("MR", 0.5)],
                        },
                    ],
                },
                Panel {
                    title: "(b) log bars".into(),
                    x_label: "".into(),
                    y_label: "".into(),
                    x_log: false,
                    y_log: true,
                    kind: PanelKind::Bars,
                    series: vec![Series {
                        name: "only".into(),
                        points: vec![Point::bar("a", 10.0), Point::bar("b", 0.0)],
                    }],
                },
            ],
        }
    }

    #[test]
    fn lines_with_log_axes() {
        require_font();
        let svg = svg_string(&lines_figure()).unwrap();
        assert!(svg.contains("<svg"));
        for s in [
            "Lines figure",
            "(a) latency",
            "Patronus",
            "MR rereg",
            "size (B)",
        ] {
            assert!(svg.contains(s), "missing {s:?}");
        }
        assert!(svg.contains("<circle"), "markers");
        assert!(svg.contains("<polyline"), "lines");
    }

    #[test]
    fn grouped_bars() {
        require_font();
        let svg = svg_string(&bars_figure()).unwrap();
        assert!(svg.contains("<svg"));
        for s in [
            "Bars figure",
            "manager",
            "engine",
            "Patronus",
            "RPC",
            "MR",
            "only",
        ] {
            assert!(svg.contains(s), "missing {s:?}");
        }
        assert!(svg.contains("<rect"));
    }

    #[test]
    fn render_writes_file() {
        require_font();
        let dir = std::env::temp_dir().join(format!("patronus-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lines.svg");
        render_svg(&lines_figure(), &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("<svg") && text.contains("Patronus"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn empty_data_draws_no_data_frames() {
        require_font();
        let svg = svg_string(&Figure::default()).unwrap();
        assert!(svg.contains("no data"));
        let mut fig = lines_figure();
        fig.panels[0].series[0].points.clear();
        fig.panels[0].series[1].points = vec![Point::xy(-1.0, 5.0)];
        let mut bars = bars_figure().panels.remove(0);
        bars.series.clear();
        fig.panels.push(bars);
        let mut no_series = lines_figure().panels.remove(0);
        no_series.series.clear();
        no_series.x_log = false;
        fig.panels.push(no_series);
        let svg = svg_string(&fig).unwrap();
        assert_eq!(svg.matches("no data").count(), 3, "{svg}");
    }

    #[test]
    fn single_point_and_many_series() {
        require_font();
        let mut fig = lines_figure();
        fig.panels[0].x_log = false;
        fig.panels[0].y_log = false;
        fig.panels[0].series = (0..14)
            .map(|i| Series {
                name: format!("s{i}"),
                points: vec![Point::xy(1.0, 1.0)],
            })
            .collect();
        let svg = svg_string(&fig).unwrap();
        assert!(svg.contains("s13"));
    }

    #[test]
    fn tick_labels_are_compact() {
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(1500.0), "1500");
        assert_eq!(tick_label(15000.0), "15K");
        assert_eq!(tick_label(2e6), "2M");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(-3.0), "-3");
    }
}
