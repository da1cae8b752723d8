//! The verbs conformance suite: every memory-window rule of `docs/conformance.md` as a test
//! written once, generic over the provider, and stamped out per test bed (provider +
//! transport).
//!
//! Test names are `conformance::<bed>::<rule>`; `docs/conformance.md` maps each rule (with its
//! InfiniBand spec number) to its test. To add a bed, implement `harness::TestBed` and add one
//! `stamp!` line; to add a rule, write a generic function in a rule module and list it in
//! `stamp!`.

// Test code: rule and helper functions outside `#[test]` fns may panic on setup failures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod conformance {
    pub mod access;
    pub mod beds;
    pub mod bind;
    pub mod chain_alloc;
    pub mod chains;
    pub mod errors;
    pub mod harness;
    pub mod invalidate;
    pub mod keys;
    pub mod two_sided;

    /// Every rule function, by name.
    pub mod rules {
        pub use super::access::*;
        pub use super::bind::*;
        pub use super::chain_alloc::*;
        pub use super::chains::*;
        pub use super::errors::*;
        pub use super::invalidate::*;
        pub use super::keys::*;
        pub use super::two_sided::*;
    }

    /// `stamp!(bed_name: Provider, Bed)` makes `mod bed_name` with one `#[test]` per rule.
    macro_rules! stamp {
        ($bed:ident : $provider:ty, $ty:ty) => {
            pub mod $bed {
                stamp!(@rules $provider, $ty;
                    // bind checks
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
                    // access checks
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
                    // errors, flushing, recovery
                    error_flushes_outstanding_in_order,
                    error_flushes_posted_receives,
                    post_after_error_flushes,
                    reset_reconnect_restores_service,
                    type1_window_survives_qp_error,
                    dereg_mr_with_bound_window_fails,
                    // invalidation
                    local_inv_frees_type2,
                    local_inv_wrong_key_rejected,
                    send_with_inv_invalidates_type2,
                    send_with_inv_bad_rkey_rejected,
                    send_with_inv_other_qps_window_rejected,
                    local_inv_type1_rejected,
                    send_with_inv_type1_rejected,
                    dealloc_mw_invalidates,
                    realloc_mw_new_key,
                    // two-sided
                    send_recv,
                    send_longer_than_receive_rejected,
                    send_recv_srq,
                    rnr_retry_exceeded,
                    rnr_recv_posted_in_time,
                    // batching and local checks
                    batch_unsignaled_successes_are_silent,
                    batch_errors_always_complete,
                    local_bad_lkey,
                    local_read_destination_needs_local_write,
                    // keys
                    rkey_increments_per_bind,
                    rkey_random_keys_reproducible,
                    rkey_random_not_predictable,
                    rkey_guessing_finds_only_current_key,
                    rkey_guessing_finds_only_current_key_random,
                    // work-request chains (cross-channel verbs)
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
                );
            }
        };
        (@rules $provider:ty, $ty:ty; $($rule:ident),* $(,)?) => {
            $(
                #[test]
                fn $rule() {
                    super::rules::$rule::<$provider, $ty>();
                }
            )*
        };
    }

    stamp!(inproc: rnic::soft::SoftProvider, super::beds::InProcBed);
    stamp!(queued: rnic::soft::SoftProvider, super::beds::QueuedBed);
    stamp!(tcp: rnic::soft::SoftProvider, super::beds::TcpBed);
}
