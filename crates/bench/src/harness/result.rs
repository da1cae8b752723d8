//! What an experiment produces: rows of measurements, a figure description, the paper's
//! published numbers beside ours, ratios and checked claims. Serialized as `<name>.json`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One measured configuration (a mechanism at a client count, an operation at a size, ...).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// Mechanism or configuration name ("Patronus", "MR", "+ HO", "MW bind", ...).
    pub mechanism: String,
    /// Logical clients (0 where the notion does not apply).
    pub clients: u32,
    /// Operations per second: a fixed op count over wall time.
    pub throughput_ops: f64,
    /// Median latency, µs (from an HDR histogram).
    pub p50_us: f64,
    /// 99th-percentile latency, µs.
    pub p99_us: f64,
    /// Memory-node CPU per operation, µs (manager/server threads plus NIC engine threads).
    pub mn_cpu_us_per_op: f64,
    /// Experiment-specific columns (size, manager vs engine CPU, counts per permission, ...).
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl Row {
    /// A row with every number zero.
    pub fn new(mechanism: impl Into<String>, clients: u32) -> Self {
        Row {
            mechanism: mechanism.into(),
            clients,
            throughput_ops: 0.0,
            p50_us: 0.0,
            p99_us: 0.0,
            mn_cpu_us_per_op: 0.0,
            extra: BTreeMap::new(),
        }
    }

    /// Adds an experiment-specific column.
    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.extra.insert(key.to_string(), value.into());
        self
    }

    /// An experiment-specific numeric column, if present.
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.extra.get(key).and_then(|v| v.as_f64())
    }
}

/// One of the paper's published numbers beside ours.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PaperRef {
    /// What is compared ("MW bind median latency").
    pub metric: String,
    /// Our number (`None`: not measured in this run).
    pub ours: Option<f64>,
    /// The paper's number (`None`: the paper has only a figure; printed as n/a).
    pub paper: Option<f64>,
    /// Unit of both numbers ("µs", "Kops/s", "×").
    pub unit: String,
    /// Where in the paper ("§7.2.5, Table 5").
    pub source: String,
}

/// A ratio that matters, computed from numbers taken in the same run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Ratio {
    /// "Patronus / MR throughput at 64 clients".
    pub name: String,
    /// Numerator over denominator, both taken in this run (dimensionless).
    pub value: f64,
}

/// A claim this project's targets (or the paper) make, checked against this run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Check {
    /// The claim ("MW bind is flat in the region size").
    pub claim: String,
    /// Whether this run supports it.
    pub holds: bool,
    /// The numbers behind the verdict, and, where it fails or differs from the paper, why.
    pub detail: String,
}

/// How a panel draws its series.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum PanelKind {
    /// A line with markers per series; `Point::x` is the abscissa.
    Lines,
    /// Grouped bars; `Point::label` names the category (x is ignored).
    Bars,
}

/// One point of a series.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Point {
    /// Abscissa (Lines).
    pub x: f64,
    /// Category (Bars).
    pub label: Option<String>,
    /// Ordinate.
    pub y: f64,
}

impl Point {
    /// A point of a line panel.
    pub fn xy(x: f64, y: f64) -> Self {
        Point { x, label: None, y }
    }

    /// A bar of a bar panel.
    pub fn bar(label: impl Into<String>, y: f64) -> Self {
        Point {
            x: 0.0,
            label: Some(label.into()),
            y,
        }
    }
}

/// One named series (usually a mechanism).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Its points, in drawing order (lines join them in this order).
    pub points: Vec<Point>,
}

/// One plot of a figure (the paper's "(a)", "(b)").
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Panel {
    /// Panel title ("(a) throughput").
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis.
    pub x_log: bool,
    /// Logarithmic y axis.
    pub y_log: bool,
    /// Lines or bars.
    pub kind: PanelKind,
    /// One series per mechanism or configuration, in legend order.
    pub series: Vec<Series>,
}

/// A figure: panels side by side, rendered to `<experiment>.svg`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    /// Figure title ("Figure 5 analogue: random 64 B accesses").
    pub title: String,
    /// Panels, left to right.
    pub panels: Vec<Panel>,
}

impl Figure {
    /// Two bar panels over `rows`, one bar per row: "(a) throughput" in Kops/s (series
    /// `what`) and "(b) latency" (p50 and p99, µs). Figures 6 and 7 draw this.
    pub fn throughput_and_latency(
        title: impl Into<String>,
        x_label: &str,
        what: &str,
        rows: &[&Row],
    ) -> Self {
        let bars = |f: &dyn Fn(&Row) -> f64| -> Vec<Point> {
            rows.iter()
                .map(|r| Point::bar(r.mechanism.clone(), f(r)))
                .collect()
        };
        let panel = |title: &str, y_label: &str, series: Vec<Series>| Panel {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_log: false,
            y_log: false,
            kind: PanelKind::Bars,
            series,
        };
        Figure {
            title: title.into(),
            panels: vec![
                panel(
                    "(a) throughput",
                    "Kops/s",
                    vec![Series {
                        name: what.into(),
                        points: bars(&|r| r.throughput_ops / 1e3),
                    }],
                ),
                panel(
                    "(b) latency",
                    "µs",
                    vec![
                        Series {
                            name: "p50".into(),
                            points: bars(&|r| r.p50_us),
                        },
                        Series {
                            name: "p99".into(),
                            points: bars(&|r| r.p99_us),
                        },
                    ],
                ),
            ],
        }
    }
}

/// Everything one experiment produced in one run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Experiment {
    /// "fig1", "fig5", "fig6", "fig7", "fig8b", "table5".
    pub experiment: String,
    /// "inproc" or "tcp".
    pub transport: String,
    /// Whether this was a `--quick` run.
    pub quick: bool,
    /// How the Patronus memory node isolated clients ("shared-pd", "pd-per-client", "type2",
    /// or a sentence where an experiment uses several or none); empty until
    /// [`crate::experiments::run`] fills it in.
    #[serde(default)]
    pub isolation: String,
    /// Wall time of the experiment, seconds.
    pub wall_s: f64,
    /// One row per measured configuration, in the order they ran.
    pub rows: Vec<Row>,
    /// The headline ratios, most important first (the summary shows the first three).
    pub ratios: Vec<Ratio>,
    /// The paper's numbers beside ours.
    pub paper: Vec<PaperRef>,
    /// Claims checked against this run.
    pub checks: Vec<Check>,
    /// Free-text notes for the report (method, caveats, where the soft NIC differs).
    pub notes: Vec<String>,
    /// The figure drawn to `<experiment>.svg` (no panels: no SVG is written).
    pub figure: Figure,
}

impl Experiment {
    /// An empty result for `experiment`.
    pub fn new(experiment: &str, transport: &str, quick: bool) -> Self {
        Experiment {
            experiment: experiment.to_string(),
            transport: transport.to_string(),
            quick,
            isolation: String::new(),
            wall_s: 0.0,
            rows: Vec::new(),
            ratios: Vec::new(),
            paper: Vec::new(),
            checks: Vec::new(),
            notes: Vec::new(),
            figure: Figure::default(),
        }
    }

    /// The check that no row counted a failure in its column `failed` ("every `what`
    /// completed"), with the total.
    pub fn all_completed(&self, failed: &str, what: &str) -> Check {
        let n: f64 = self.rows.iter().filter_map(|r| r.get_f64(failed)).sum();
        Check {
            claim: format!("every {what} completed"),
            holds: n == 0.0,
            detail: format!("{n} failed"),
        }
    }

    /// The first row of `mechanism` at `clients`.
    pub fn row(&self, mechanism: &str, clients: u32) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.mechanism == mechanism && r.clients == clients)
    }
}
