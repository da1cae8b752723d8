//! The font every figure's text is measured with.
//!
//! plotters' `ab_glyph` renderer has no fonts of its own: each text style looks its family up
//! in a process-wide table filled by `plotters::style::register_font`, which wants
//! `&'static` bytes. We read one TrueType file at run time (`PATRONUS_FONT`, else well-known
//! system paths such as Debian's `fonts-dejavu-core`), leak its bytes exactly once (a
//! `OnceLock` guards the whole load) and register it for the generic families. A missing font
//! is an error message, never a panic; the outcome is cached for the process.

use anyhow::{Result, anyhow};
use plotters::style::FontStyle;
use std::ffi::OsString;
use std::sync::OnceLock;

/// Environment variable naming a TrueType font file to use instead of the system search.
pub const FONT_ENV: &str = "PATRONUS_FONT";

/// The family every text style in the figures asks for.
pub(crate) const FAMILY: &str = "sans-serif";

/// Families registered with the loaded font, so no style, default or ours, finds nothing.
const FAMILIES: &[&str] = &[FAMILY, "serif", "monospace"];

/// Where fonts usually live (Debian/Ubuntu, Fedora, Arch, Alpine, macOS), best first.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/ttf-dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/google-noto/NotoSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// Loads and registers the font on first call; every call returns that first outcome.
pub(crate) fn ensure_font() -> Result<()> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let (path, bytes) = read_font(std::env::var_os(FONT_ENV), FONT_PATHS)?;
        // Leaked once (the OnceLock runs this closure at most once): plotters keeps
        // registered fonts for the life of the process anyway.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        for family in FAMILIES {
            plotters::style::register_font(family, FontStyle::Normal, bytes)
                .map_err(|_| format!("{path} is not a usable TrueType/OpenType font"))?;
        }
        Ok(())
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// The font file to use: `chosen` (the env override; empty counts as unset) if given, else the
/// first readable entry of `paths`. Returns its path (for messages) and bytes.
fn read_font(chosen: Option<OsString>, paths: &[&str]) -> Result<(String, Vec<u8>), String> {
    match chosen.filter(|p| !p.is_empty()) {
        // An explicit choice is honoured or reported, never silently replaced.
        Some(p) => {
            let shown = p.to_string_lossy().into_owned();
            std::fs::read(&p)
                .map(|b| (shown.clone(), b))
                .map_err(|e| format!("{FONT_ENV}={shown}: {e}"))
        }
        None => paths
            .iter()
            .find_map(|p| std::fs::read(p).ok().map(|b| (p.to_string(), b)))
            .ok_or_else(|| {
                format!(
                    "no TrueType font found for SVG text (looked in {}); install \
                     fonts-dejavu-core or set {FONT_ENV} to a .ttf file",
                    paths.join(", ")
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_font_says_what_to_install() {
        let e = read_font(None, &["/nonexistent/a.ttf"]).unwrap_err();
        assert!(
            e.contains("fonts-dejavu-core") && e.contains(FONT_ENV),
            "{e}"
        );
        let e = read_font(Some("/nonexistent/b.ttf".into()), FONT_PATHS).unwrap_err();
        assert!(e.starts_with("PATRONUS_FONT=/nonexistent/b.ttf"), "{e}");
    }

    #[test]
    fn empty_override_means_search() {
        let e = read_font(Some(OsString::new()), &["/nonexistent/c.ttf"]).unwrap_err();
        assert!(e.contains("/nonexistent/c.ttf"), "{e}");
    }

    #[test]
    fn registers_a_system_font() {
        if let Err(e) = ensure_font() {
            panic!("install fonts-dejavu-core (apt-get install -y fonts-dejavu-core): {e}");
        }
    }
}
