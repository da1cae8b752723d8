//! What a client is configured with ([`ClientConfig`]), and the receive slots each control
//! channel posts (the protocol's credit count).

use crate::proto::messages::MAX_OUTSTANDING_RPCS;
use rnic::QpTiming;
use std::time::Duration;

/// Client configuration.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Spare data QPs prepared (0 disables the technique).
    pub spare_qps: usize,
    /// Recover broken QPs on a background thread.
    pub background_recovery: bool,
    /// Safety margin subtracted from the local expiry (clock skew, one-way latency).
    pub lease_margin: Duration,
    /// How long a control RPC may take (wall time).
    pub rpc_timeout: Duration,
    /// How long `acquire` waits for conflicting holders to leave (then it fails with
    /// `ConflictTimeout`). Capped at three quarters of `rpc_timeout`, so the memory node
    /// answers before the client gives up; 0 fails a conflicting acquire at once.
    pub acquire_wait: Duration,
    /// The tenant this client acts for, and the tenant's secret (a memory node with no
    /// tenants configured serves everyone as tenant 0).
    pub tenant: crate::proto::messages::TenantId,
    /// The tenant's secret.
    pub tenant_secret: u64,
    /// Bytes of registered staging memory for the data path.
    pub staging_bytes: usize,
    /// QP timing.
    pub qp_timing: QpTiming,
    /// Refuse data ops on a locally expired lease without issuing them (default). Turning it
    /// off lets tests and demos show what the NIC does with a late access.
    pub check_local_expiry: bool,
    /// Round-trip bounds added to every lease asked for, so the lease asked for is what is
    /// left when the grant arrives ([`LeasePolicy`](super::LeasePolicy); 0 asks for leases as given).
    pub lease_slack_rtts: u32,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            spare_qps: 2,
            background_recovery: true,
            lease_margin: Duration::from_micros(5),
            rpc_timeout: Duration::from_secs(5),
            acquire_wait: Duration::from_secs(1),
            tenant: crate::proto::messages::DEFAULT_TENANT,
            tenant_secret: 0,
            staging_bytes: 1 << 20,
            qp_timing: QpTiming::default(),
            check_local_expiry: true,
            lease_slack_rtts: 2,
        }
    }
}

/// Receive slots per control channel: one per credit.
pub(super) const RECV_SLOTS: u32 = MAX_OUTSTANDING_RPCS;
