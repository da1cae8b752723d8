//! The rnic conformance suite on a real RDMA device: the rule functions of
//! `crates/rnic/tests/conformance/` (written once, generic over the provider) run on
//! [`RdmaBed`], two contexts of the device named by `PATRONUS_RDMA_DEVICE`.
//!
//! A `harness = false` runner (libtest-mimic) so that, without a device, every rule shows as
//! ignored *with its reason* in the test output, and a loud `SKIPPED:` line says so: nothing
//! claims to pass when it did not run. With `PATRONUS_RDMA_DEVICE` set, a device that cannot be
//! opened is a failure, not a skip.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../../rnic/tests/conformance/access.rs"]
mod access;
#[path = "../../rnic/tests/conformance/bind.rs"]
mod bind;
#[path = "../../rnic/tests/conformance/chain_alloc.rs"]
mod chain_alloc;
#[path = "../../rnic/tests/conformance/chains.rs"]
mod chains;
#[path = "../../rnic/tests/conformance/errors.rs"]
mod errors;
#[path = "../../rnic/tests/conformance/harness.rs"]
mod harness;
#[path = "../../rnic/tests/conformance/invalidate.rs"]
mod invalidate;
#[path = "../../rnic/tests/conformance/keys.rs"]
mod keys;
#[path = "../../rnic/tests/conformance/two_sided.rs"]
mod two_sided;

mod rules {
    pub use super::access::*;
    pub use super::bind::*;
    pub use super::chain_alloc::*;
    pub use super::chains::*;
    pub use super::errors::*;
    pub use super::invalidate::*;
    pub use super::keys::*;
    pub use super::two_sided::*;
}

use harness::{BedOptions, Keys, TestBed};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use rnic_rdma::{RdmaConfig, RdmaContext, RdmaProvider};

/// The environment variable naming the device to test.
const DEVICE_VAR: &str = "PATRONUS_RDMA_DEVICE";
/// Why the rules are ignored without a device (shown per rule by the runner).
const SKIP_REASON: &str = "no RDMA device (set PATRONUS_RDMA_DEVICE)";

/// Two contexts (memory node, client node) of one device, on the real clock.
#[derive(Debug)]
pub struct RdmaBed {
    mn: RdmaContext,
    cn: RdmaContext,
}

impl TestBed<RdmaProvider> for RdmaBed {
    fn open(opts: BedOptions) -> Self {
        assert_eq!(
            opts.keys,
            Keys::Increment,
            "a real NIC has no seeded key policy; this rule is soft-NIC-only"
        );
        let device = std::env::var(DEVICE_VAR).expect("PATRONUS_RDMA_DEVICE is set");
        let open = || {
            RdmaContext::open(RdmaConfig {
                device: Some(device.clone()),
                gid_index: std::env::var("PATRONUS_RDMA_GID")
                    .ok()
                    .map(|g| g.parse().expect("PATRONUS_RDMA_GID is a GID index")),
                ..RdmaConfig::default()
            })
            .unwrap_or_else(|e| panic!("opening RDMA device {device}: {e}"))
        };
        RdmaBed {
            mn: open(),
            cn: open(),
        }
    }
    fn mn(&self) -> &RdmaContext {
        &self.mn
    }
    fn cn(&self) -> &RdmaContext {
        &self.cn
    }
    fn virtual_time(&self) -> bool {
        false
    }
}

/// `(name, rule)` for every generic rule; the soft-NIC-only rules are left out with a reason
/// in `docs/rdma.md` (seeded key policies).
macro_rules! rules {
    ($($rule:ident),* $(,)?) => {
        vec![$((stringify!($rule), rules::$rule::<RdmaProvider, RdmaBed> as fn())),*]
    };
}

fn generic_rules() -> Vec<(&'static str, fn())> {
    rules![
        bind_mr_of_other_pd_rejected,
        bind_type2_on_qp_of_other_pd_rejected,
        bind_mr_without_mw_bind_rejected,
        bind_write_or_atomic_needs_local_write,
        bind_range_outside_mr_rejected,
        bind_type2_not_free,
        bind_type2_zero_length_rejected,
        bind_type1_zero_length_unbinds,
        bind_type1_zero_based_rejected,
        bind_failure_leaves_window_unchanged,
        window_read_write_atomics,
        access_wrong_key_byte,
        bind_with_chosen_key_byte,
        access_stale_rkey_after_rebind,
        access_window_of_other_pd,
        access_type2_from_other_qp,
        access_out_of_bounds_low,
        access_out_of_bounds_high,
        access_write_through_read_only_window,
        access_atomic_without_remote_atomic,
        access_read_without_remote_read,
        access_mr_rkey_without_remote_rights,
        qp_flags_write_denied,
        qp_flags_read_denied,
        qp_flags_atomic_denied,
        qp_flags_checked_before_rkey,
        qp_flags_modify_access,
        atomic_misaligned,
        zero_byte_skips_rkey_check,
        error_flushes_outstanding_in_order,
        error_flushes_posted_receives,
        post_after_error_flushes,
        reset_reconnect_restores_service,
        type1_window_survives_qp_error,
        local_inv_frees_type2,
        local_inv_wrong_key_rejected,
        send_with_inv_invalidates_type2,
        send_with_inv_bad_rkey_rejected,
        send_with_inv_other_qps_window_rejected,
        local_inv_type1_rejected,
        send_with_inv_type1_rejected,
        dealloc_mw_invalidates,
        realloc_mw_new_key,
        dereg_mr_with_bound_window_fails,
        send_recv,
        send_longer_than_receive_rejected,
        send_recv_srq,
        rnr_retry_exceeded,
        rnr_recv_posted_in_time,
        batch_unsignaled_successes_are_silent,
        batch_errors_always_complete,
        local_bad_lkey,
        local_read_destination_needs_local_write,
        rkey_increments_per_bind,
        rkey_guessing_finds_only_current_key,
    ]
}

/// The work-request chain rules (`docs/conformance.md`, "Work-request chains"): this provider
/// reports `DeviceAttr::cross_channel` and `mw_bind_target_qp` absent, so each would only say
/// SKIPPED; they are listed ignored instead, with that reason, and run once it has them.
fn chain_rules() -> Vec<(&'static str, fn())> {
    rules![
        chain_wait_holds_until_count,
        chain_enable_releases_up_to_index,
        chain_enable_recv_up_to_index,
        chain_enable_recv_after_rnr,
        chain_recv_scatter_patches_held_write,
        chain_patched_bad_key_fails_qp,
        chain_post_time_errors,
        chain_error_flushes_held_requests,
        bind_type2_for_named_qp,
        bind_for_named_qp_errors,
        chain_read_patches_held_bind,
        chain_mini_allocation,
        chain_allocations_back_to_back,
    ]
}

/// Rules that only the software RNIC can run, each with the reason (also in `docs/rdma.md`).
fn soft_only_rules() -> Vec<(&'static str, fn(), &'static str)> {
    let seeded = "soft-NIC-only: needs a seeded key policy (a real NIC draws its own keys)";
    let chains = "soft-NIC-only: needs cross-channel verbs (WAIT, ENABLE, WQE patching), which \
                  this provider reports absent";
    let chain_rules = chain_rules()
        .into_iter()
        .map(move |(name, rule)| (name, rule, chains));
    vec![
        (
            "rkey_random_keys_reproducible",
            rules::rkey_random_keys_reproducible::<RdmaProvider, RdmaBed> as fn(),
            seeded,
        ),
        (
            "rkey_random_not_predictable",
            rules::rkey_random_not_predictable::<RdmaProvider, RdmaBed>,
            seeded,
        ),
        (
            "rkey_guessing_finds_only_current_key_random",
            rules::rkey_guessing_finds_only_current_key_random::<RdmaProvider, RdmaBed>,
            seeded,
        ),
    ]
    .into_iter()
    .chain(chain_rules)
    .collect()
}

/// A recorded deviation of the kernel's Soft-RoCE (rxe) from the IB specification: its name,
/// what rxe does, a substring the failure message of each of its rules must contain, and those
/// rules. `docs/rdma.md` ("rxe deviations") names the kernel or rdma-core code behind each and
/// its reproducer (`crates/rnic-rdma/rxe/repro/`). On rxe a listed rule must fail with that
/// message (it is then reported as passed, with a note); if it passes, or fails otherwise, it
/// fails. Every unlisted rule must pass. On other devices the table does nothing.
struct Deviation {
    name: &'static str,
    what: &'static str,
    expect: &'static str,
    rules: &'static [&'static str],
}

const RXE_DEVIATIONS: &[Deviation] = &[
    Deviation {
        name: "no-qp-error-event",
        what: "a responder QP that a remote error moves to ERR raises no QP_ACCESS_ERR/QP_REQ_ERR event",
        expect: "waiting for async event Qp",
        rules: &[
            "access_atomic_without_remote_atomic",
            "access_mr_rkey_without_remote_rights",
            "access_read_without_remote_read",
            "access_stale_rkey_after_rebind",
            "access_type2_from_other_qp",
            "access_window_of_other_pd",
            "access_write_through_read_only_window",
            "access_wrong_key_byte",
            "batch_errors_always_complete",
            "bind_failure_leaves_window_unchanged",
            "dealloc_mw_invalidates",
            "error_flushes_posted_receives",
            "local_inv_frees_type2",
            "qp_flags_atomic_denied",
            "qp_flags_checked_before_rkey",
            "qp_flags_modify_access",
            "qp_flags_read_denied",
            "qp_flags_write_denied",
            "realloc_mw_new_key",
            "reset_reconnect_restores_service",
            "rkey_guessing_finds_only_current_key",
            "type1_window_survives_qp_error",
            "zero_byte_skips_rkey_check",
        ],
    },
    Deviation {
        name: "dereg-bound-mr-einval",
        what: "ibv_dereg_mr of a region with a bound window fails with EINVAL, not EBUSY",
        expect: "dereg_mr failed with invalid argument",
        rules: &[
            "bind_range_outside_mr_rejected",
            "bind_type1_zero_length_unbinds",
            "bind_type2_not_free",
            "bind_write_or_atomic_needs_local_write",
            "dereg_mr_with_bound_window_fails",
            "local_inv_wrong_key_rejected",
        ],
    },
    Deviation {
        name: "mw-bounds-not-enforced",
        what: "an access through a window is checked against its region's range, not the window's",
        expect: "a rejected WRITE touched memory",
        rules: &["access_out_of_bounds_high", "access_out_of_bounds_low"],
    },
    Deviation {
        name: "send-inv-no-with-inv-flag",
        what: "a SEND_WITH_INV receive completion lacks IBV_WC_WITH_INV (the rkey is there)",
        expect: "the receive reports the invalidated rkey",
        rules: &["send_with_inv_invalidates_type2"],
    },
    Deviation {
        name: "send-inv-error-acked",
        what: "a SEND_WITH_INV whose invalidation fails completes successfully at the sender",
        expect: "status: Success, opcode: Send",
        rules: &[
            "send_with_inv_bad_rkey_rejected",
            "send_with_inv_type1_rejected",
        ],
    },
    Deviation {
        name: "send-inv-any-qp",
        what: "SEND_WITH_INV invalidates a type-2 window bound to another QP",
        expect: "status: Success, opcode: Send",
        rules: &["send_with_inv_other_qps_window_rejected"],
    },
    Deviation {
        name: "bind-mr-other-pd",
        what: "a window binds over a region of another PD (a bind posted as IBV_WR_BIND_MW)",
        expect: "type-1 over an MR of another PD",
        rules: &["bind_mr_of_other_pd_rejected"],
    },
    Deviation {
        name: "atomic-misaligned-post",
        what: "ibv_post_send refuses a misaligned atomic (EINVAL) instead of the responder NAKing it",
        expect: "post_send refused WR #0: invalid argument",
        rules: &["atomic_misaligned"],
    },
    Deviation {
        name: "recv-overflow-status",
        what: "a SEND longer than the receive completes the receive LOC_QP_OP_ERR, not LOC_LEN_ERR",
        expect: "left: (1, LocalQpOperationError)",
        rules: &["send_longer_than_receive_rejected"],
    },
    Deviation {
        name: "bad-lkey-status",
        what: "a request with an unknown lkey completes LOC_QP_OP_ERR, not LOC_PROT_ERR",
        expect: "WRITE from an unknown lkey\n  left: LocalQpOperationError",
        rules: &["local_bad_lkey"],
    },
    Deviation {
        name: "srq-pd-unchecked",
        what: "a QP of one PD can be created on an SRQ of another PD",
        expect: "a QP of another PD on the SRQ",
        rules: &["send_recv_srq"],
    },
];

/// The recorded rxe deviation that makes `rule` fail, if any.
fn rxe_deviation(rule: &str) -> Option<&'static Deviation> {
    RXE_DEVIATIONS.iter().find(|d| d.rules.contains(&rule))
}

/// Whether `device` is rxe (by its vendor id, whatever it is named).
fn device_is_rxe(device: &str) -> bool {
    RdmaContext::open(RdmaConfig {
        device: Some(device.to_string()),
        gid_index: std::env::var("PATRONUS_RDMA_GID")
            .ok()
            .and_then(|g| g.parse().ok()),
        ..RdmaConfig::default()
    })
    .is_ok_and(|ctx| ctx.is_rxe())
}

/// Judges a rule's outcome against the deviation recorded for it on this device (if any).
fn judge(
    name: &str,
    outcome: Result<(), String>,
    deviation: Option<&Deviation>,
) -> Result<Completion, Failed> {
    match (outcome, deviation) {
        (Ok(()), None) => Ok(Completion::Completed),
        (Err(msg), None) => Err(msg.into()),
        (Ok(()), Some(d)) => Err(format!(
            "rxe deviation {} disappeared: {name} passed; remove it from RXE_DEVIATIONS and \
             docs/rdma.md",
            d.name
        )
        .into()),
        (Err(msg), Some(d)) if msg.contains(d.expect) => {
            println!("note: {name}: rxe deviation {}: {}", d.name, d.what);
            Ok(Completion::Completed)
        }
        (Err(msg), Some(d)) => Err(format!(
            "rxe deviation {} expected a failure containing {:?}; {name} failed otherwise: {msg}",
            d.name, d.expect
        )
        .into()),
    }
}

fn run_rule(rule: fn()) -> Result<(), String> {
    std::panic::catch_unwind(rule).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "rule panicked".into())
    })
}

fn main() {
    let args = Arguments::from_args();
    let device = std::env::var(DEVICE_VAR).ok().filter(|d| !d.is_empty());
    let rules = generic_rules();
    if device.is_none() {
        let seen = match rnic_rdma::devices::probe() {
            Ok(list) if list.is_empty() => "libibverbs found no device".to_string(),
            Ok(list) => format!(
                "devices present but not selected: {}",
                list.iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => e.to_string(),
        };
        println!(
            "SKIPPED: no RDMA device ({seen}); {} conformance rules not run. \
             Set {DEVICE_VAR}=<name> (see `patronus devices`) to run them.",
            rules.len()
        );
    }
    for d in RXE_DEVIATIONS {
        for r in d.rules {
            assert!(
                rules.iter().any(|(name, _)| name == r),
                "RXE_DEVIATIONS names {r}, which is not a rule here"
            );
            assert_eq!(
                RXE_DEVIATIONS
                    .iter()
                    .filter(|d| d.rules.contains(r))
                    .count(),
                1,
                "RXE_DEVIATIONS lists {r} under more than one deviation"
            );
        }
    }
    let rxe = device.as_deref().is_some_and(device_is_rxe);
    if rxe {
        println!(
            "device is rxe: {} rules are expected to fail as recorded rxe deviations \
             (docs/rdma.md, \"rxe deviations\")",
            RXE_DEVIATIONS.iter().map(|d| d.rules.len()).sum::<usize>()
        );
    }
    let mut trials: Vec<Trial> = rules
        .into_iter()
        .map(|(name, rule)| {
            let run = device.is_some();
            let deviation = if rxe { rxe_deviation(name) } else { None };
            Trial::ignorable_test(format!("conformance::rdma::{name}"), move || {
                if run {
                    judge(name, run_rule(rule), deviation)
                } else {
                    Ok(Completion::ignored_with(SKIP_REASON))
                }
            })
        })
        .collect();
    trials.extend(soft_only_rules().into_iter().map(|(name, _rule, reason)| {
        Trial::ignorable_test(format!("conformance::rdma::{name}"), move || {
            Ok(Completion::ignored_with(reason))
        })
    }));
    libtest_mimic::run(&args, trials).exit();
}
