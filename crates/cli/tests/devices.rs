//! `patronus devices` on whatever this machine has: the exit code and message match what the
//! provider's probe sees (no device here: 2 or 3 with a "no RDMA device" line).

use std::process::Command;

#[test]
fn devices_reports_with_documented_exit_code() {
    let out = Command::new(env!("CARGO_BIN_EXE_patronus"))
        .arg("devices")
        .output()
        .expect("run patronus devices");
    let code = out.status.code().expect("exit code");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("patronus devices -> exit {code}: {stdout}");
    let expected = match rnic_rdma::devices::probe() {
        Ok(d) if !d.is_empty() => 0,
        Ok(_) | Err(rnic_rdma::devices::ProbeError::NoKernelSupport(_)) => 2,
        Err(rnic_rdma::devices::ProbeError::LibraryMissing) => 3,
        Err(_) => 1,
    };
    assert_eq!(code, expected, "{stdout}");
    if code == 2 || code == 3 {
        assert!(stdout.starts_with("no RDMA device"), "{stdout}");
    }
}

#[test]
fn rdma_provider_without_a_device_fails_clearly() {
    if rnic_rdma::devices::probe().is_ok_and(|d| !d.is_empty()) {
        println!("SKIPPED: an RDMA device exists; this test covers machines without one");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_patronus"))
        .args([
            "serve",
            "--provider",
            "rdma",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "",
        ])
        .output()
        .expect("run patronus serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("opening RDMA device"), "{err}");
}
