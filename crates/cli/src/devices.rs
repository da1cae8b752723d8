//! `patronus devices`: the RDMA devices of this machine, with ports, GIDs and memory-window
//! capabilities, and a documented exit code a script can test (see `docs/rdma.md`).

use rnic_rdma::devices::{ProbeError, probe};

/// At least one device was listed.
pub const EXIT_DEVICES: i32 = 0;
/// A device could not be queried.
pub const EXIT_ERROR: i32 = 1;
/// libibverbs is installed but there is no RDMA device (or no kernel RDMA support).
pub const EXIT_NO_DEVICE: i32 = 2;
/// libibverbs itself is not installed.
pub const EXIT_NO_LIBIBVERBS: i32 = 3;

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
