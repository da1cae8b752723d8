//! Ready-made endpoints on any provider: an open responder (a PD and a listener whose accepted
//! QPs have full remote rights) and a connected requester (CQ, QP, registered staging buffer),
//! plus a bounded poll-mode wait for completions.
//!
//! This is the plumbing a microbenchmark or an example needs before its first work request;
//! the RNIC microbenchmark and the evaluation's Figure 1 share it. It grants rights by rkey
//! only (one shared PD, every accepted QP `REMOTE_ALL`), so it is for measurements, never for
//! a protected memory node.
//!
//! Invariant: a wait never hangs. [`wait_completions`] gives up after a timeout measured on
//! the context's own [`Clock`] (on a virtual clock, whoever drives the clock
//! decides), and a failed completion ends the wait with its status.

use crate::verbs::{
    AcceptPolicy, AccessFlags, Clock, CompletionQueue, Context, MemoryBuffer, MemoryRegion,
    ProtectionDomain, Provider, QpInit, QpState, QpTiming, QueuePair, Rkey, SendOp, SendWr, Sge,
    VerbsError, VirtAddr, WcStatus, WorkCompletion,
};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// Size of a requester's registered staging buffer.
pub const STAGING_BYTES: usize = 4096;

/// Why an endpoint could not be set up or a wait ended early.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// A verb failed.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// The connection handshake left the requester QP outside RTS.
    #[error("connected QP is in {0}")]
    NotConnected(&'static str),
    /// A work request completed with an error.
    #[error("work request {wr_id} completed with {status}")]
    Failed {
        /// Its id.
        wr_id: u64,
        /// Its status.
        status: WcStatus,
    },
    /// Fewer completions than awaited arrived within the timeout (a hang is a bug, not a
    /// measurement).
    #[error("no completion within {timeout:?} ({arrived}/{wanted} arrived)")]
    TimedOut {
        /// The timeout.
        timeout: Duration,
        /// Completions that arrived.
        arrived: usize,
        /// Completions awaited.
        wanted: usize,
    },
}

/// QP attributes shared by both sides: one CQ for sends and receives, 256 send slots.
pub fn qp_init<P: Provider>(cq: &P::Cq, access: AccessFlags) -> QpInit<'_, P> {
    QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 256,
        max_recv_wr: 16,
        access,
        timing: QpTiming::default(),
    }
}

/// Gives every connection a `REMOTE_ALL` QP on one PD and keeps the most recent ones alive.
struct AcceptAll<P: Provider> {
    pd: P::Pd,
    cq: P::Cq,
    keep: usize,
    accepted: Mutex<Vec<P::Qp>>,
}

impl<P: Provider> AcceptPolicy<P> for AcceptAll<P> {
    fn create_qp(&self, _private_data: &[u8]) -> Result<P::Qp, String> {
        self.pd
            .create_qp(qp_init::<P>(&self.cq, AccessFlags::REMOTE_ALL))
            .map_err(|e| e.to_string())
    }

    fn established(&self, qp: P::Qp, _private_data: &[u8]) {
        let mut kept = self.accepted.lock();
        if kept.len() >= self.keep {
            kept.remove(0);
        }
        kept.push(qp);
    }
}

/// A responder: a PD, a listener, and the last `keep` QPs it accepted (older ones are dropped,
/// so a reconnect loop does not accumulate them).
pub struct OpenResponder<P: Provider> {
    /// Its device.
    pub ctx: P::Context,
    /// The PD every accepted QP is on; register memory here.
    pub pd: P::Pd,
    policy: Arc<AcceptAll<P>>,
    _listener: P::Listener,
    address: P::Address,
}

impl<P: Provider> OpenResponder<P> {
    /// Listens on `ctx`; accepted QPs share one CQ of `cq_capacity` entries.
    pub fn new(ctx: P::Context, cq_capacity: u32, keep: usize) -> Result<Self, EndpointError> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(cq_capacity)?;
        let policy = Arc::new(AcceptAll::<P> {
            pd: pd.clone(),
            cq,
            keep: keep.max(1),
            accepted: Mutex::new(Vec::new()),
        });
        let listener = ctx.listen(policy.clone())?;
        let address = ctx.listener_address(&listener);
        Ok(OpenResponder {
            ctx,
            pd,
            policy,
            _listener: listener,
            address,
        })
    }

    /// Where requesters connect.
    pub fn address(&self) -> &P::Address {
        &self.address
    }

    /// The responder QP of the most recent connection.
    pub fn last_accepted(&self) -> Option<P::Qp> {
        self.policy.accepted.lock().last().cloned()
    }
}

impl<P: Provider> std::fmt::Debug for OpenResponder<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenResponder")
            .field("address", &self.address)
            .field("accepted", &self.policy.accepted.lock().len())
            .finish()
    }
}

/// A requester: its own CQ and QP, connected, and a registered [`STAGING_BYTES`] buffer
/// (local write) for READ destinations and WRITE sources.
pub struct Requester<P: Provider> {
    /// Its completion queue (sends and receives).
    pub cq: P::Cq,
    /// The connected QP (no remote rights of its own).
    pub qp: P::Qp,
    /// The staging buffer.
    pub buf: P::Buffer,
    /// Its registration on `pd`.
    pub mr: P::Mr,
}

impl<P: Provider> std::fmt::Debug for Requester<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Requester").field("qp", &self.qp).finish()
    }
}

impl<P: Provider> Requester<P> {
    /// A signaled READ of `len` bytes at `remote_addr` (through `rkey`) into the start of the
    /// staging buffer.
    pub fn read_wr(
        &self,
        wr_id: u64,
        len: u32,
        remote_addr: VirtAddr,
        rkey: Rkey,
    ) -> SendWr<'static, P::Mw, P::Mr> {
        SendWr {
            wr_id,
            signaled: true,
            op: SendOp::Read {
                local: Sge {
                    addr: self.buf.addr(),
                    length: len,
                    lkey: self.mr.lkey(),
                },
                remote_addr,
                rkey,
            },
        }
    }

    /// Creates a QP on `pd` and connects it to `to`, sending `private_data` in the handshake.
    pub fn connect(
        ctx: &P::Context,
        pd: &P::Pd,
        to: &P::Address,
        private_data: &[u8],
    ) -> Result<Self, EndpointError> {
        let cq = ctx.create_cq(1024)?;
        let qp = pd.create_qp(qp_init::<P>(&cq, AccessFlags::empty()))?;
        qp.connect(to, private_data)?;
        if qp.state() != QpState::ReadyToSend {
            return Err(EndpointError::NotConnected(qp.state().name()));
        }
        let buf = ctx.alloc_buffer(STAGING_BYTES)?;
        let mr = pd.reg_mr(&buf, 0, STAGING_BYTES, AccessFlags::LOCAL_WRITE)?;
        Ok(Requester { cq, qp, buf, mr })
    }
}

/// Polls `cq` until `n` completions arrived, each successful, or `timeout` passed on `clock`.
/// Spins (this is poll mode, the thing being measured) and yields every 256 empty polls so an
/// oversubscribed machine does not lose whole time slices to the spinner.
pub fn wait_completions<P: Provider>(
    cq: &P::Cq,
    n: usize,
    clock: &dyn Clock,
    timeout: Duration,
) -> Result<(), EndpointError> {
    let mut wc = [WorkCompletion::default(); 16];
    let mut got = 0;
    let mut spins = 0u32;
    let mut deadline = None;
    while got < n {
        let k = cq.poll(&mut wc[..(n - got).min(16)]);
        if let Some(c) = wc[..k].iter().find(|c| c.status != WcStatus::Success) {
            return Err(EndpointError::Failed {
                wr_id: c.wr_id,
                status: c.status,
            });
        }
        got += k;
        if k > 0 {
            continue;
        }
        spins = spins.wrapping_add(1);
        if spins % 256 == 0 {
            std::thread::yield_now();
            let d = *deadline.get_or_insert_with(|| clock.now().plus(timeout));
            if clock.now() > d {
                return Err(EndpointError::TimedOut {
                    timeout,
                    arrived: got,
                    wanted: n,
                });
            }
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Timestamp;
    use crate::soft::{SoftConfig, SoftFabric, SoftProvider};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A clock that moves 100 ms every time it is read.
    #[derive(Debug, Default)]
    struct SteppingClock(AtomicU64);

    impl Clock for SteppingClock {
        fn now(&self) -> Timestamp {
            Timestamp(self.0.fetch_add(100_000, Ordering::Relaxed))
        }
    }

    #[test]
    fn a_requester_reads_through_an_open_responder_and_an_idle_wait_times_out() {
        let fabric = SoftFabric::new();
        let node =
            OpenResponder::<SoftProvider>::new(fabric.open_device(SoftConfig::default()), 64, 2)
                .unwrap();
        let buf = node.ctx.alloc_buffer(64).unwrap();
        buf.write(0, b"endpoint").unwrap();
        let mr = node
            .pd
            .reg_mr(
                &buf,
                0,
                64,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL,
            )
            .unwrap();
        let cn = fabric.open_device(SoftConfig::default());
        let pd = cn.alloc_pd().unwrap();
        let req = Requester::<SoftProvider>::connect(&cn, &pd, node.address(), b"t").unwrap();
        assert!(node.last_accepted().is_some());
        let read = req.read_wr(7, 8, buf.addr(), mr.rkey());
        req.qp.post_send(&[read]).unwrap();
        let clock = SteppingClock::default();
        wait_completions::<SoftProvider>(&req.cq, 1, &clock, Duration::from_secs(1)).unwrap();
        let mut got = [0u8; 8];
        req.buf.read(0, &mut got).unwrap();
        assert_eq!(&got, b"endpoint");

        // Nothing posted: the wait ends once the clock passes the timeout.
        let err = wait_completions::<SoftProvider>(&req.cq, 1, &clock, Duration::from_secs(1));
        assert!(
            matches!(
                err,
                Err(EndpointError::TimedOut {
                    arrived: 0,
                    wanted: 1,
                    ..
                })
            ),
            "{err:?}"
        );
    }
}
