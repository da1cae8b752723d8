//! `patronus-bench fig1 --provider rdma` where it cannot run: without a device (or without
//! libibverbs) it exits with one clear line on stderr, never a panic; other experiments and a
//! stray `--device` are refused before anything runs. The measurement itself needs a device
//! (`scripts/rxe-vm`, docs/rdma.md "Figure 1 on rxe0").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

fn out_dir(case: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "patronus-bench-fig1-rdma-{case}-{}",
        std::process::id()
    ))
}

fn bench(case: &str, args: &[&str]) -> Output {
    let out = out_dir(case);
    let run = Command::new(env!("CARGO_BIN_EXE_patronus-bench"))
        .args(args)
        .arg("--out")
        .arg(&out)
        .env("PATRONUS_NO_PROGRESS", "1")
        .env_remove("PATRONUS_RDMA_DEVICE")
        .env_remove("PATRONUS_RDMA_GID")
        .output()
        .expect("run patronus-bench");
    let _ = std::fs::remove_dir_all(&out);
    run
}

/// The run failed with exit code `code` and exactly one stderr line, no panic; returns it.
fn one_line_error(run: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(code), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "a panic: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "not one line: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    lines[0].to_string()
}

#[test]
fn a_device_that_does_not_exist_is_one_clear_line() {
    let run = bench(
        "nosuch",
        &[
            "fig1",
            "--quick",
            "--provider",
            "rdma",
            "--device",
            "patronus-no-such-device",
        ],
    );
    let line = one_line_error(&run, 1);
    println!("fig1 --provider rdma --device patronus-no-such-device -> {line}");
    assert!(
        line.contains("opening RDMA device patronus-no-such-device"),
        "{line}"
    );
}

#[test]
fn no_device_at_all_is_one_clear_line() {
    if rnic_rdma::devices::probe().is_ok_and(|d| !d.is_empty()) {
        println!("SKIPPED: an RDMA device exists; this test covers machines without one");
        return;
    }
    let run = bench("none", &["fig1", "--quick", "--provider", "rdma"]);
    let line = one_line_error(&run, 1);
    println!("fig1 --provider rdma (no device) -> {line}");
    assert!(line.contains("opening RDMA device"), "{line}");
    assert!(
        line.contains("libibverbs") || line.contains("no RDMA") || line.contains("No such"),
        "the error names what is missing: {line}"
    );
}

#[test]
fn only_fig1_takes_the_rdma_provider() {
    let run = bench(
        "refused",
        &["fig1", "fig7", "--quick", "--provider", "rdma"],
    );
    let line = one_line_error(&run, 1);
    assert!(
        line.contains("--provider rdma") && line.contains("fig7") && !line.contains("fig1,"),
        "{line}"
    );
}

#[test]
fn device_without_the_rdma_provider_is_refused() {
    let run = bench("stray", &["fig1", "--quick", "--device", "rxe0"]);
    let line = one_line_error(&run, 2);
    assert!(line.contains("--provider rdma"), "{line}");
}
