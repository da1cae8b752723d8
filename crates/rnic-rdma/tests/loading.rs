//! The run-time loading path: whatever this machine has — no libibverbs, libibverbs without
//! devices, or a device — listing devices and opening a context answer with a value or a
//! clear error, never a crash. Each test prints which case it exercised.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use rnic_rdma::devices::{ProbeError, probe};
use rnic_rdma::{RdmaConfig, RdmaContext, libibverbs_loaded};

#[test]
fn probe_names_what_is_missing() {
    match probe() {
        Err(ProbeError::LibraryMissing) => {
            assert!(!libibverbs_loaded());
            let msg = ProbeError::LibraryMissing.to_string();
            assert!(msg.contains("libibverbs"), "{msg}");
            println!("loading path exercised: libibverbs NOT installed -> {msg}");
        }
        Err(ProbeError::NoKernelSupport(e)) => {
            assert!(libibverbs_loaded());
            println!("loading path exercised: libibverbs loaded, no kernel RDMA support -> {e}");
        }
        Err(e @ ProbeError::Query { .. }) => panic!("a device exists but cannot be queried: {e}"),
        Ok(devices) => {
            assert!(libibverbs_loaded());
            println!(
                "loading path exercised: libibverbs loaded, {} device(s): {:?}",
                devices.len(),
                devices.iter().map(|d| &d.name).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn opening_without_a_device_is_an_error() {
    let have_device = probe().is_ok_and(|d| !d.is_empty());
    let r = RdmaContext::open(RdmaConfig {
        device: Some("patronus-no-such-device".into()),
        ..RdmaConfig::default()
    });
    let err = r.expect_err("no device has that name");
    let msg = err.to_string();
    println!("open(no such device) -> {msg}");
    if !have_device {
        assert!(
            msg.contains("libibverbs") || msg.contains("no RDMA device"),
            "the error names the missing piece: {msg}"
        );
    }
}
