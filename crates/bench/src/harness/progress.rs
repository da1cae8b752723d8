//! Progress bars for long runs, on stderr so stdout stays a clean summary.
//!
//! Hidden when stderr is not a terminal (CI logs, redirected output) or when
//! `PATRONUS_NO_PROGRESS` is set, so logs never fill with redraws.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// Environment variable that hides every progress bar when set (to any value).
pub const NO_PROGRESS_ENV: &str = "PATRONUS_NO_PROGRESS";

const TEMPLATE: &str =
    "{msg:>16} [{bar:32.cyan/blue}] {pos}/{len} elapsed {elapsed_precise} ETA {eta}";

/// A progress bar of `len` steps labelled `what`, drawn on stderr; hidden when stderr is not
/// a terminal or `PATRONUS_NO_PROGRESS` is set.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    if std::env::var_os(NO_PROGRESS_ENV).is_some() || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template(TEMPLATE)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
        .with_style(style)
        .with_message(what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_parses() {
        assert!(ProgressStyle::with_template(TEMPLATE).is_ok());
    }

    #[test]
    fn bar_counts_even_when_hidden() {
        let b = bar(10, "test");
        b.inc(3);
        assert_eq!(b.position(), 3);
        b.finish_and_clear();
    }
}
