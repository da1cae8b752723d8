//! Writing results: `<experiment>.json` (the numbers, machine-readable), `<experiment>.svg`
//! (the figure) and a section of `report.md` (the numbers beside the paper's, the ratios, the
//! checked claims and the notes).
//!
//! The numbers come first: a figure that cannot be drawn (no font, say) is reported on stderr
//! and the report section is written without it.

use super::plot::render_svg;
use super::{Experiment, PaperRef, Row};
use anyhow::{Context, Result};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// File name of the report inside the output folder.
pub const REPORT_FILE: &str = "report.md";

/// Writes `exp` as pretty JSON to `dir/<experiment>.json` (creating `dir`); returns the path.
pub fn write_json(dir: &Path, exp: &Experiment) -> Result<PathBuf> {
    create_dir(dir)?;
    let path = dir.join(format!("{}.json", exp.experiment));
    let mut text = serde_json::to_string_pretty(exp)
        .with_context(|| format!("serializing {}", exp.experiment))?;
    text.push('\n');
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Creates (or truncates) `dir/report.md` with `# title` and the preamble paragraphs;
/// returns its path.
pub fn start_report(dir: &Path, title: &str, preamble: &[String]) -> Result<PathBuf> {
    create_dir(dir)?;
    let path = dir.join(REPORT_FILE);
    let mut text = format!("# {title}\n\n");
    for p in preamble {
        text.push_str(p.trim_end());
        text.push_str("\n\n");
    }
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Appends the section for `exp` to `dir/report.md` (created if missing), with an image link
/// to `svg_name` (relative to `dir`) if given.
pub fn append_report(dir: &Path, exp: &Experiment, svg_name: Option<&str>) -> Result<()> {
    create_dir(dir)?;
    let path = dir.join(REPORT_FILE);
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.write_all(section(exp, svg_name).as_bytes())
        .with_context(|| format!("appending to {}", path.display()))
}

/// What [`write_all`] put on disk for one experiment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The experiment's name.
    pub experiment: String,
    /// `<experiment>.json`.
    pub json: PathBuf,
    /// `<experiment>.svg`, if a figure was drawn.
    pub svg: Option<PathBuf>,
    /// Whether the experiment has a figure to draw (false for table-only experiments).
    pub has_figure: bool,
}

/// JSON, then the SVG (skipped when the figure has no panels; a rendering failure is printed
/// to stderr and the section goes without image), then the report section. Returns what was
/// written.
pub fn write_all(dir: &Path, exp: &Experiment) -> Result<Written> {
    let json = write_json(dir, exp)?;
    let svg_name = format!("{}.svg", exp.experiment);
    let has_figure = !exp.figure.panels.is_empty();
    let svg = if has_figure {
        let path = dir.join(&svg_name);
        match render_svg(&exp.figure, &path) {
            Ok(()) => Some(path),
            Err(e) => {
                eprintln!(
                    "warning: {}: figure not drawn ({e:#}); report written without it",
                    exp.experiment
                );
                None
            }
        }
    } else {
        None
    };
    append_report(dir, exp, svg.is_some().then_some(svg_name.as_str()))?;
    Ok(Written {
        experiment: exp.experiment.clone(),
        json,
        svg,
        has_figure,
    })
}

/// The suite's closing line, counted from what was really written: "Wrote 13 JSON files,
/// 12 SVG figures and DIR/report.md", then the figures that were due but not drawn, if any.
pub fn wrote_line(written: &[Written], report: &Path) -> String {
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let svgs = written.iter().filter(|w| w.svg.is_some()).count();
    let mut line = format!(
        "Wrote {}, {} and {}",
        plural(written.len(), "JSON file", "JSON files"),
        plural(svgs, "SVG figure", "SVG figures"),
        report.display()
    );
    let missing: Vec<&str> = written
        .iter()
        .filter(|w| w.has_figure && w.svg.is_none())
        .map(|w| w.experiment.as_str())
        .collect();
    if !missing.is_empty() {
        line.push_str(&format!(
            "; NOT drawn (see the warnings above): {}",
            missing.join(", ")
        ));
    }
    line
}

/// A GitHub-flavoured markdown table, columns padded to line up in a terminal. Short rows are
/// padded with empty cells; `|` and newlines inside cells are escaped.
pub fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).fold(header.len(), usize::max);
    if cols == 0 {
        return String::new();
    }
    let cell = |r: &[String], i: usize| r.get(i).map(|c| escape_cell(c)).unwrap_or_default();
    let header: Vec<String> = (0..cols)
        .map(|i| header.get(i).map(|h| escape_cell(h)).unwrap_or_default())
        .collect();
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| (0..cols).map(|i| cell(r, i)).collect())
        .collect();
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            body.iter()
                .map(|r| r[i].chars().count())
                .fold(header[i].chars().count().max(3), usize::max)
        })
        .collect();
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for (c, w) in cells.iter().zip(&widths) {
            let pad = w - c.chars().count();
            let _ = write!(s, " {c}{} |", " ".repeat(pad));
        }
        s.push('\n');
        s
    };
    let mut out = line(&header);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&line(&rule));
    for r in &body {
        out.push_str(&line(r));
    }
    out
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn escape_cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\r', '\n'], " ")
}

/// The markdown section of one experiment.
fn section(exp: &Experiment, svg_name: Option<&str>) -> String {
    let title = if exp.figure.title.is_empty() {
        exp.experiment.as_str()
    } else {
        exp.figure.title.as_str()
    };
    let mode = if exp.quick { "quick" } else { "full" };
    let mut s = format!("## {title} ({}, {mode})\n\n", exp.transport);
    let _ = write!(
        s,
        "Experiment `{}`, wall time {:.1} s.",
        exp.experiment, exp.wall_s
    );
    if !exp.isolation.is_empty() {
        let _ = write!(s, " Isolation: {}.", exp.isolation);
    }
    s.push_str("\n\n");
    if !exp.rows.is_empty() {
        s.push_str(&rows_table(&exp.rows));
        s.push('\n');
    }
    if let Some(svg) = svg_name {
        let _ = writeln!(s, "![{title}]({svg})\n");
    }
    if !exp.paper.is_empty() {
        s.push_str("### Paper vs ours\n\n");
        s.push_str(&paper_table(&exp.paper));
        s.push('\n');
    }
    if !exp.ratios.is_empty() {
        s.push_str("### Ratios\n\n");
        for r in &exp.ratios {
            let _ = writeln!(s, "- {}: {}", r.name, fmt_f64(r.value));
        }
        s.push('\n');
    }
    if !exp.checks.is_empty() {
        s.push_str("### Checks\n\n");
        for c in &exp.checks {
            let verdict = if c.holds {
                "✅ holds"
            } else {
                "❌ does not hold"
            };
            let _ = write!(s, "- {verdict}: {}", c.claim);
            if !c.detail.is_empty() {
                let _ = write!(s, " — {}", c.detail);
            }
            s.push('\n');
        }
        s.push('\n');
    }
    if !exp.notes.is_empty() {
        s.push_str("### Notes\n\n");
        for n in &exp.notes {
            let _ = writeln!(s, "- {n}");
        }
        s.push('\n');
    }
    s
}

/// The measured rows: fixed columns, then every `extra` key in sorted order.
fn rows_table(rows: &[Row]) -> String {
    let extras: BTreeSet<&str> = rows
        .iter()
        .flat_map(|r| r.extra.keys().map(String::as_str))
        .collect();
    let mut header = vec![
        "mechanism",
        "clients",
        "Kops/s",
        "p50 µs",
        "p99 µs",
        "MN CPU µs/op",
    ];
    header.extend(extras.iter().copied());
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut cells = vec![
                r.mechanism.clone(),
                r.clients.to_string(),
                fmt_kops(r.throughput_ops),
                fmt_f64(r.p50_us),
                fmt_f64(r.p99_us),
                fmt_f64(r.mn_cpu_us_per_op),
            ];
            cells.extend(
                extras
                    .iter()
                    .map(|k| r.extra.get(*k).map(fmt_value).unwrap_or_default()),
            );
            cells
        })
        .collect();
    markdown_table(&header, &body)
}

fn paper_table(refs: &[PaperRef]) -> String {
    let with_unit = |v: Option<f64>, unit: &str| match v {
        Some(v) if unit.is_empty() => fmt_f64(v),
        Some(v) => format!("{} {unit}", fmt_f64(v)),
        None => "n/a".to_string(),
    };
    let body: Vec<Vec<String>> = refs
        .iter()
        .map(|p| {
            let ratio = match (p.ours, p.paper) {
                (Some(o), Some(q)) if q != 0.0 => format!("{}×", fmt_f64(o / q)),
                _ => "n/a".to_string(),
            };
            vec![
                p.metric.clone(),
                with_unit(p.ours, &p.unit),
                with_unit(p.paper, &p.unit),
                ratio,
                p.source.clone(),
            ]
        })
        .collect();
    markdown_table(&["metric", "ours", "paper", "ours/paper", "source"], &body)
}

/// Operations per second as Kops/s with one decimal (three significant digits below 1).
fn fmt_kops(ops: f64) -> String {
    let k = ops / 1e3;
    if k != 0.0 && k.abs() < 1.0 {
        fmt_f64(k)
    } else {
        format!("{k:.1}")
    }
}

/// A measured float with sensible precision: one decimal from 100 up, about three significant
/// digits below, scientific notation for tiny values.
fn fmt_f64(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".to_string()
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.001 {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    }
}

fn fmt_value(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            // A float holding a whole number (a size, a count) prints as an integer.
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
            (_, _, Some(f)) => fmt_f64(f),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::{Check, Figure, Panel, PanelKind, Point, Ratio, Series};
    use super::*;

    fn sample() -> Experiment {
        let mut e = Experiment::new("fig_test", "inproc", true);
        e.wall_s = 1.25;
        e.rows.push(
            Row {
                throughput_ops: 123_456.0,
                p50_us: 2.345,
                p99_us: 10.0,
                mn_cpu_us_per_op: 0.0421,
                ..Row::new("Patronus", 8)
            }
            .with("size_b", 64)
            .with("engine_cpu_us", 0.5),
        );
        e.rows
            .push(Row::new("MR", 8).with("rereg", true).with("note", "a|b"));
        e.paper.push(PaperRef {
            metric: "MW bind median latency".into(),
            ours: Some(2.0),
            paper: None,
            unit: "µs".into(),
            source: "§7.2.5, Table 5".into(),
        });
        e.paper.push(PaperRef {
            metric: "throughput".into(),
            ours: Some(300.0),
            paper: Some(200.0),
            unit: "Kops/s".into(),
            source: "Figure 5".into(),
        });
        e.ratios.push(Ratio {
            name: "Patronus / MR".into(),
            value: 2.4567,
        });
        e.checks.push(Check {
            claim: "bind is flat".into(),
            holds: true,
            detail: "2.0 vs 2.1 µs".into(),
        });
        e.checks.push(Check {
            claim: "MR is slow".into(),
            holds: false,
            detail: "soft NIC has no MTT".into(),
        });
        e.notes.push("quick run".into());
        e.figure = Figure {
            title: "Test figure".into(),
            panels: vec![Panel {
                title: "(a)".into(),
                x_label: "clients".into(),
                y_label: "Kops/s".into(),
                x_log: false,
                y_log: false,
                kind: PanelKind::Lines,
                series: vec![Series {
                    name: "Patronus".into(),
                    points: vec![Point::xy(1.0, 2.0), Point::xy(8.0, 9.0)],
                }],
            }],
        };
        e
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("patronus-report-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn section_has_columns_paper_and_checks() {
        let s = section(&sample(), Some("fig_test.svg"));
        assert!(s.starts_with("## Test figure (inproc, quick)\n"), "{s}");
        let header = s.lines().find(|l| l.starts_with("| mechanism")).unwrap();
        for col in ["clients", "Kops/s", "p50 µs", "p99 µs", "MN CPU µs/op"] {
            assert!(header.contains(col), "{header}");
        }
        // Extra columns in sorted order after the fixed ones.
        let order: Vec<usize> = ["engine_cpu_us", "note", "rereg", "size_b"]
            .iter()
            .map(|k| header.find(k).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{header}");
        assert!(s.contains("123.5"), "Kops/s: {s}");
        assert!(s.contains("| 64 "), "integers stay integers: {s}");
        assert!(s.contains("a\\|b"), "pipes escaped: {s}");
        let mr = s.lines().find(|l| l.starts_with("| MR ")).unwrap();
        assert!(mr.contains("true"));
        let separators = mr.matches('|').count() - mr.matches("\\|").count();
        assert_eq!(separators, 11, "{mr}");
        assert!(s.contains("![Test figure](fig_test.svg)"));
        let bind = s.lines().find(|l| l.contains("MW bind")).unwrap();
        assert!(
            bind.contains("2.00 µs") && bind.matches("n/a").count() == 2,
            "{bind}"
        );
        assert!(s.contains("1.50×"), "ratio ours/paper: {s}");
        assert!(s.contains("- Patronus / MR: 2.46"));
        assert!(s.contains("✅ holds: bind is flat — 2.0 vs 2.1 µs"));
        assert!(s.contains("❌ does not hold: MR is slow"));
        assert!(s.contains("- quick run"));
    }

    #[test]
    fn section_without_figure_title_uses_experiment() {
        let mut e = Experiment::new("table5", "tcp", false);
        e.rows.push(Row::new("MW bind", 0));
        let s = section(&e, None);
        assert!(s.starts_with("## table5 (tcp, full)"));
        assert!(!s.contains("!["));
        assert!(!s.contains("### Paper"));
    }

    #[test]
    fn json_round_trips() {
        let dir = temp_dir("json");
        let e = sample();
        let path = write_json(&dir, &e).unwrap();
        assert_eq!(path, dir.join("fig_test.json"));
        let back: Experiment =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back, e);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn report_accumulates_sections() {
        let dir = temp_dir("md");
        start_report(
            &dir,
            "Patronus evaluation",
            &["First.".into(), "Second.".into()],
        )
        .unwrap();
        let e = sample();
        let first = write_all(&dir, &e).unwrap();
        let mut other = Experiment::new("table5", "inproc", true);
        other.rows.push(Row::new("MW bind", 0));
        let second = write_all(&dir, &other).unwrap();
        // The bundled font draws every figure, on any machine.
        assert_eq!(first.svg, Some(dir.join("fig_test.svg")));
        assert_eq!(first.json, dir.join("fig_test.json"));
        assert_eq!((second.svg.as_deref(), second.has_figure), (None, false));
        let report = dir.join(REPORT_FILE);
        assert_eq!(
            wrote_line(&[first, second], &report),
            format!("Wrote 2 JSON files, 1 SVG figure and {}", report.display())
        );
        let md = std::fs::read_to_string(dir.join(REPORT_FILE)).unwrap();
        assert!(md.starts_with("# Patronus evaluation\n\nFirst.\n\nSecond.\n\n## Test figure"));
        assert!(md.contains("## table5 (inproc, quick)"));
        assert!(dir.join("fig_test.json").exists() && dir.join("table5.json").exists());
        // The image link is present exactly when the figure was drawn.
        assert_eq!(
            md.contains("](fig_test.svg)"),
            dir.join("fig_test.svg").exists()
        );
        assert!(!dir.join("table5.svg").exists(), "no panels, no figure");
        // Starting again truncates.
        start_report(&dir, "Again", &[]).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join(REPORT_FILE)).unwrap(),
            "# Again\n\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn failed_figure_keeps_the_numbers() {
        let dir = temp_dir("nofig");
        // A directory where the SVG should go makes rendering fail like a missing font would.
        std::fs::create_dir_all(dir.join("fig_test.svg")).unwrap();
        let w = write_all(&dir, &sample()).unwrap();
        assert_eq!((w.svg.as_deref(), w.has_figure), (None, true));
        assert_eq!(
            wrote_line(&[w], &dir.join(REPORT_FILE)),
            format!(
                "Wrote 1 JSON file, 0 SVG figures and {}; NOT drawn (see the warnings above): fig_test",
                dir.join(REPORT_FILE).display()
            )
        );
        let md = std::fs::read_to_string(dir.join(REPORT_FILE)).unwrap();
        assert!(md.contains("| Patronus "), "{md}");
        assert!(!md.contains("]("), "no image link: {md}");
        assert!(dir.join("fig_test.json").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn markdown_table_pads_and_aligns() {
        let t = markdown_table(
            &["a", "bb"],
            &[
                vec!["µµµµ".into()],
                vec!["x".into(), "y".into(), "z".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        let widths: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{t}");
        assert!(lines[1].starts_with("| ----"));
        assert_eq!(markdown_table(&[], &[]), "");
    }

    #[test]
    fn number_formats() {
        assert_eq!(fmt_f64(0.0), "0");
        assert_eq!(fmt_f64(3.0), "3.00");
        assert_eq!(fmt_value(&serde_json::json!(64.0)), "64");
        assert_eq!(fmt_value(&serde_json::json!(0.5)), "0.500");
        assert_eq!(fmt_f64(1234.56), "1234.6");
        assert_eq!(fmt_f64(12.345), "12.35");
        assert_eq!(fmt_f64(0.04213), "0.042");
        assert_eq!(fmt_f64(0.00001234), "1.23e-5");
        assert_eq!(fmt_kops(0.0), "0.0");
        assert_eq!(fmt_kops(2_500_000.0), "2500.0");
        assert_eq!(fmt_kops(250.0), "0.250");
        assert_eq!(fmt_value(&serde_json::json!(7)), "7");
        assert_eq!(fmt_value(&serde_json::json!(-7)), "-7");
        assert_eq!(fmt_value(&serde_json::json!("s")), "s");
        assert_eq!(fmt_value(&serde_json::json!(null)), "");
    }
}
