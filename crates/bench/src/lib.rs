//! The evaluation suite (§7 of the paper): the compared mechanisms side by side on the same
//! software RNIC, one runner per experiment, and one harness (HDR histograms → JSON → SVG →
//! `report.md`) that serves them all.

#![warn(missing_docs)]

pub mod baseline;
pub mod experiments;
pub mod harness;
pub mod kv;
pub mod suite;
