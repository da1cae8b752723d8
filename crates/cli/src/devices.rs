//! `patronus devices`: the RDMA devices of this machine, with ports, GIDs and memory-window
//! capabilities, and a documented exit code a script can test (see `docs/rdma.md`).

use patronus_core::nic_check::{self, Check};
use rnic_rdma::devices::{ProbeError, probe};
use rnic_rdma::{RdmaConfig, RdmaContext, RdmaProvider};

/// At least one device was listed.
pub const EXIT_DEVICES: i32 = 0;
/// A device could not be queried.
pub const EXIT_ERROR: i32 = 1;
/// libibverbs is installed but there is no RDMA device (or no kernel RDMA support).
pub const EXIT_NO_DEVICE: i32 = 2;
/// libibverbs itself is not installed.
pub const EXIT_NO_LIBIBVERBS: i32 = 3;
/// `--check`: a device does not enforce (or could not be checked for) what an isolation mode
/// rests on.
pub const EXIT_UNENFORCED: i32 = 4;

/// `devices --check`: the NIC protection self-check on each device (or on `device`), with
/// what a memory node would serve there. The GID index is `PATRONUS_RDMA_GID`'s if set.
pub fn check(device: Option<String>) -> i32 {
    let names = match (device, probe()) {
        (Some(name), _) => vec![name],
        (None, Ok(devices)) if !devices.is_empty() => devices.into_iter().map(|d| d.name).collect(),
        (None, _) => return run(), // says why there is none, with its exit code
    };
    let gid_index = std::env::var("PATRONUS_RDMA_GID")
        .ok()
        .and_then(|g| g.parse().ok());
    let mut code = EXIT_DEVICES;
    for name in names {
        let ctx = match RdmaContext::open(RdmaConfig {
            device: Some(name.clone()),
            gid_index,
            ..RdmaConfig::default()
        }) {
            Ok(ctx) => ctx,
            Err(e) => {
                eprintln!("error: opening {name}: {}", crate::errors::one_line(&e));
                return EXIT_ERROR;
            }
        };
        let report = nic_check::check::<RdmaProvider>(&ctx);
        println!("{name}: NIC protection self-check");
        print!("{report}");
        for (mode, type2) in [("shared-pd, pd-per-client", false), ("type2", true)] {
            match report.refusal(type2, false) {
                None => println!("  serves {mode}: yes"),
                Some(why) => {
                    code = EXIT_UNENFORCED;
                    let waived = report.refusal(type2, true).is_none();
                    println!(
                        "  serves {mode}: no{}: {why}",
                        if waived {
                            " (only with --allow-unenforced-window-bounds)"
                        } else {
                            ""
                        }
                    );
                }
            }
        }
        if !report.enforces(Check::WindowBounds) {
            println!(
                "  window bounds unenforced: a client's windows reach the whole pool region \
                 (docs/rdma.md, mw-bounds-not-enforced)"
            );
        }
    }
    code
}

/// Prints the devices (or why there are none) and returns the exit code.
pub fn run() -> i32 {
    match probe() {
        Ok(devices) if devices.is_empty() => {
            println!(
                "no RDMA device: libibverbs is installed but sees no device \
                 (for Soft-RoCE: `rdma link add rxe0 type rxe netdev IFACE`)"
            );
            EXIT_NO_DEVICE
        }
        Ok(devices) => {
            for d in &devices {
                print!("{d}");
            }
            EXIT_DEVICES
        }
        Err(e @ ProbeError::LibraryMissing) => {
            println!("no RDMA device: {e}");
            EXIT_NO_LIBIBVERBS
        }
        Err(e @ ProbeError::NoKernelSupport(_)) => {
            println!("no RDMA device: {e}");
            EXIT_NO_DEVICE
        }
        Err(e) => {
            eprintln!("error: {}", crate::errors::one_line(&e));
            EXIT_ERROR
        }
    }
}
