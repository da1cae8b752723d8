//! How keys and values are read from the command line and printed.

use super::error::KvError;
use std::io::{self, Write};

/// How `get` prints a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ValueFormat {
    /// UTF-8 (invalid bytes shown as U+FFFD), then a newline.
    Text,
    /// Lowercase hex, then a newline.
    Hex,
    /// The exact bytes, nothing added (binary-safe: the inverse of `put --value-file`).
    Raw,
}

/// How `scan` prints its `key<TAB>value` lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LineFormat {
    /// UTF-8 (invalid bytes shown as U+FFFD) with backslash, tab, newline and carriage
    /// return escaped as \\ \t \n \r and other control characters as \xNN or \u{NNNN},
    /// so each entry is one line.
    Text,
    /// Lowercase hex (exact).
    Hex,
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string (`None` if it is not one).
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|d| u8::from_str_radix(d, 16).ok()))
        .collect()
}

/// `bytes` as one line of text: lossy UTF-8, with `\`, tab, newline and CR escaped, and
/// other control characters as `\xNN` (ASCII) or `\u{NNNN}` (so nothing reaches a terminal
/// as a control sequence).
pub fn escaped(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A key as error messages show it: quoted and escaped.
pub fn shown(key: &[u8]) -> String {
    format!("\"{}\"", escaped(key))
}

/// A value as `get` prints it.
pub fn value_bytes(value: &[u8], format: ValueFormat) -> Vec<u8> {
    match format {
        ValueFormat::Text => {
            let mut v = String::from_utf8_lossy(value).into_owned().into_bytes();
            v.push(b'\n');
            v
        }
        ValueFormat::Hex => format!("{}\n", hex(value)).into_bytes(),
        ValueFormat::Raw => value.to_vec(),
    }
}

/// A `scan` line.
pub fn line(key: &[u8], value: &[u8], format: LineFormat) -> String {
    match format {
        LineFormat::Text => format!("{}\t{}\n", escaped(key), escaped(value)),
        LineFormat::Hex => format!("{}\t{}\n", hex(key), hex(value)),
    }
}

/// Writes `bytes` to stdout. A closed pipe (`scan | head`) is not an error: the reader has
/// what it wanted.
pub fn emit(bytes: &[u8]) -> Result<(), KvError> {
    let mut out = io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(KvError::Other(format!("writing to stdout: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_text_escapes() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(unhex("00ab10"), Some(vec![0, 0xab, 0x10]));
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
        assert_eq!(escaped(b"a\tb\nc\\d\r"), "a\\tb\\nc\\\\d\\r");
        assert_eq!(escaped(&[0x66, 0xff]), "f\u{fffd}");
        assert_eq!(escaped(b"\0\x1b[2J\x7f"), "\\x00\\x1b[2J\\x7f");
        assert_eq!(escaped("\u{85}é".as_bytes()), "\\u{0085}é");
        assert_eq!(line(b"k", b"v\n", LineFormat::Text), "k\tv\\n\n");
        assert_eq!(value_bytes(b"v", ValueFormat::Raw), b"v");
        assert_eq!(value_bytes(b"v", ValueFormat::Text), b"v\n");
    }
}
