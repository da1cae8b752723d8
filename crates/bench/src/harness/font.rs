//! The font every figure's text is measured with.
//!
//! plotters' `ab_glyph` renderer has no fonts of its own: each text style looks its family up
//! in a process-wide table filled by `plotters::style::register_font`, which wants
//! `&'static` bytes. The binary carries DejaVu Sans (the `dejavu` crate embeds the TTF with
//! `include_bytes!`), so figures render on any machine, with or without system fonts, and look
//! the same everywhere. `PATRONUS_FONT` names another TrueType file to use instead; an explicit
//! choice that cannot be read is an error message, never a silent fallback and never a panic.
//! A `OnceLock` guards the whole load; the outcome is cached for the process.

use anyhow::{Result, anyhow};
use plotters::style::FontStyle;
use std::ffi::OsString;
use std::sync::OnceLock;

/// Environment variable naming a TrueType font file to use instead of the bundled one.
pub const FONT_ENV: &str = "PATRONUS_FONT";

/// The family every text style in the figures asks for.
pub(crate) const FAMILY: &str = "sans-serif";

/// Families registered with the loaded font, so no style, default or ours, finds nothing.
const FAMILIES: &[&str] = &[FAMILY, "serif", "monospace"];

/// The font compiled into the binary: DejaVu Sans 2.37 (Bitstream Vera licence, which allows
/// bundling it with software).
const BUNDLED_NAME: &str = "bundled DejaVu Sans";

/// Loads and registers the font on first call; every call returns that first outcome.
pub(crate) fn ensure_font() -> Result<()> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let (name, bytes) = choose_font(std::env::var_os(FONT_ENV))?;
        for family in FAMILIES {
            plotters::style::register_font(family, FontStyle::Normal, bytes)
                .map_err(|_| format!("{name} is not a usable TrueType/OpenType font"))?;
        }
        Ok(())
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// The font to use: the file `chosen` (the env override; empty counts as unset) if given, else
/// the bundled one. Returns its name (for messages) and bytes.
fn choose_font(chosen: Option<OsString>) -> Result<(String, &'static [u8]), String> {
    match chosen.filter(|p| !p.is_empty()) {
        // An explicit choice is honoured or reported, never silently replaced.
        Some(p) => {
            let shown = p.to_string_lossy().into_owned();
            let bytes = std::fs::read(&p).map_err(|e| format!("{FONT_ENV}={shown}: {e}"))?;
            // Leaked at most once (the OnceLock runs the caller's closure at most once):
            // plotters keeps registered fonts for the life of the process anyway.
            Ok((shown, Box::leak(bytes.into_boxed_slice())))
        }
        None => Ok((BUNDLED_NAME.into(), dejavu::sans::regular())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_override_is_reported_not_replaced() {
        let e = choose_font(Some("/nonexistent/b.ttf".into())).unwrap_err();
        assert!(e.starts_with("PATRONUS_FONT=/nonexistent/b.ttf"), "{e}");
    }

    #[test]
    fn no_override_means_the_bundled_font() {
        for unset in [None, Some(OsString::new())] {
            let (name, bytes) = choose_font(unset).unwrap();
            assert_eq!(name, BUNDLED_NAME);
            // A TrueType file starts with the sfnt version 1.0.
            assert_eq!(bytes.get(..4), Some(&[0, 1, 0, 0][..]));
        }
    }

    #[test]
    fn registers_a_font_without_any_system_font() {
        // No test sets PATRONUS_FONT, so this is the bundled font: it works on a machine with
        // no fonts installed at all.
        ensure_font().unwrap();
    }
}
