//! What the multi-host tests share: the namespaces and links they build (`topology`), the
//! processes they run in them (`process`), and a log that always reaches the CI output.

#![allow(dead_code)] // each test uses its own part of the support

pub mod process;
pub mod topology;

use std::io::Write as _;
use std::time::{Duration, Instant};

/// Prints a line to the real stderr, past the test harness's capture, so CI logs show what
/// each test did even when it passes.
pub fn log(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// The real clock (test code: deadlines and elapsed times).
#[allow(clippy::disallowed_methods)]
pub fn now() -> Instant {
    Instant::now()
}

/// Waits between two looks at an external state that cannot be waited on otherwise (a
/// process's exit, an interface's state); every caller bounds its loop with a deadline.
#[allow(clippy::disallowed_methods)]
pub fn pause() {
    std::thread::sleep(Duration::from_millis(20));
}

/// Why the suite cannot run here, if it cannot: not root, no `ip`, or a kernel (container)
/// that refuses network namespaces, veth pairs or bridges. Checked by really making a
/// namespace with a bridge and a veth pair in it, removed at once; checked once per run.
pub fn unsupported() -> Option<String> {
    static REASON: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    REASON.get_or_init(check).clone()
}

fn check() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root (network namespaces need root)".into());
    }
    match std::process::Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => return Some(format!("`ip -V` failed: {}", o.status)),
        Err(e) => return Some(format!("no `ip` command (iproute2): {e}")),
    }
    topology::probe().err()
}

/// Runs a test body unless the suite cannot run here, in which case it says so loudly.
pub fn run_or_skip(test: &str, body: impl FnOnce()) {
    match unsupported() {
        Some(reason) => {
            log(&format!(
                "SKIPPED: {test}: {reason} — the multi-host test did not run"
            ));
        }
        None => body(),
    }
}
