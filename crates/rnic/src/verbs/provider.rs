//! The provider contract: what every RNIC provider (the software NIC, a future rdma-core
//! binding) implements, with the semantics of the corresponding rdma-core verbs.
//!
//! Objects are RAII handles: a child keeps its parent alive (an MR holds its PD, a QP its CQs),
//! and dropping the last handle destroys the object. Everything above `rnic` is written against
//! these traits, so it runs unchanged on any provider.
//!
//! Connection set-up follows the rdma_cm model: a node [`listen`](Context::listen)s with an
//! [`AcceptPolicy`] that picks the protection domain and queues of every incoming connection
//! (nothing about PDs travels on the wire); a client [`connect`](QueuePair::connect)s a QP in
//! RESET to a listener address. A QP in ERR must be [`reset`](QueuePair::reset) and connected
//! again — a new handshake — before it can carry traffic.

use super::chain::{CrossChannel, WqeRing};
use super::clock::Clock;
use super::device::{AsyncEvent, DeviceAttr};
use super::error::VerbsResult;
use super::types::{AccessFlags, CqNumber, Lkey, MwType, PdId, QpNumber, Rkey, VirtAddr};
use super::work::{RecvWr, SendWr, WorkCompletion};
use std::fmt::Debug;
use std::net::IpAddr;
use std::sync::Arc;

/// A provider: the family of object types of one RNIC implementation.
pub trait Provider: Sized + Send + Sync + 'static {
    /// Opened device.
    type Context: Context<Self>;
    /// Protection domain.
    type Pd: ProtectionDomain<Self>;
    /// Memory that can be registered and that peers may touch concurrently.
    type Buffer: MemoryBuffer;
    /// Memory region.
    type Mr: MemoryRegion;
    /// Memory window.
    type Mw: MemoryWindow;
    /// Completion queue.
    type Cq: CompletionQueue;
    /// Completion channel: where the CQs created on it report completions to a waiter.
    type Channel: CompletionChannel;
    /// Shared receive queue.
    type Srq: SharedReceiveQueue;
    /// RC queue pair.
    type Qp: QueuePair<Self>;
    /// Where a listener can be reached.
    type Address: Clone + Debug + Send + Sync + 'static;
    /// A listening endpoint; dropping it stops accepting.
    type Listener: Send + Sync + Debug;
}

/// An opened device (`ibv_context`).
pub trait Context<P: Provider>: Clone + Send + Sync + Debug {
    /// Device capabilities (`ibv_query_device`).
    fn query_device(&self) -> DeviceAttr;
    /// The device's identity within this process: every context of one device returns the
    /// same key, contexts of different devices different ones (e.g. to do once per device
    /// what depends only on the device).
    fn device_key(&self) -> u64;
    /// The clock the device times retries and leases with.
    fn clock(&self) -> Arc<dyn Clock>;
    /// Allocates a protection domain.
    fn alloc_pd(&self) -> VerbsResult<P::Pd>;
    /// Creates a completion queue with room for `capacity` completions.
    fn create_cq(&self, capacity: u32) -> VerbsResult<P::Cq>;
    /// Creates a completion channel (`ibv_create_comp_channel`).
    fn create_channel(&self) -> VerbsResult<P::Channel>;
    /// Creates a completion queue that reports to `channel` when armed
    /// ([`CompletionQueue::req_notify`]): one thread can then sleep until any of several CQs
    /// has work ([`CompletionChannel::wait`]).
    fn create_cq_on(&self, capacity: u32, channel: &P::Channel) -> VerbsResult<P::Cq>;
    /// Allocates `len` bytes of page-aligned, zeroed memory that can be registered.
    fn alloc_buffer(&self, len: usize) -> VerbsResult<P::Buffer>;
    /// Takes the next asynchronous event, if any (non-blocking `ibv_get_async_event`).
    fn poll_async_event(&self) -> Option<AsyncEvent>;
    /// Starts accepting connections; each accepted QP is handed to `policy`.
    fn listen(&self, policy: Arc<dyn AcceptPolicy<P>>) -> VerbsResult<P::Listener>;
    /// The address peers connect to for `listener`.
    fn listener_address(&self, listener: &P::Listener) -> P::Address;
}

/// Who an incoming connection comes from, as far as its transport knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    /// The IP address it comes from (`None`: the peer is in this process).
    pub addr: Option<IpAddr>,
    /// The common name in the subject of the certificate the peer presented and the listener
    /// verified against its CA (mutual TLS); `None` without TLS, or when the certificate's
    /// subject has no common name.
    pub certificate_name: Option<String>,
}

impl Peer {
    /// A peer in this process (no address, no certificate).
    pub const LOCAL: Peer = Peer {
        addr: None,
        certificate_name: None,
    };
}

/// Decides, per incoming connection, which PD and queues serve it, and receives the QP.
///
/// Providers call [`create_qp_from`](Self::create_qp_from) and then, once the QP is
/// connected, [`established_from`](Self::established_from), on the same thread for one
/// connection; a connection whose set-up fails in between is never reported established.
/// Both default to the peer-blind methods; a policy that limits connections per source
/// address, or knows tenants by their certificates, overrides them.
pub trait AcceptPolicy<P: Provider>: Send + Sync {
    /// Called with the client's private data; returns the QP to connect (in RESET), or an
    /// error message that is sent back as the refusal reason.
    fn create_qp(&self, private_data: &[u8]) -> Result<P::Qp, String>;
    /// Called once the QP is connected (RTS). `private_data` is the client's.
    fn established(&self, qp: P::Qp, private_data: &[u8]);
    /// [`create_qp`](Self::create_qp), told who the connection comes from.
    fn create_qp_from(&self, peer: &Peer, private_data: &[u8]) -> Result<P::Qp, String> {
        let _ = peer;
        self.create_qp(private_data)
    }
    /// [`established`](Self::established), told who the connection comes from.
    fn established_from(&self, qp: P::Qp, peer: &Peer, private_data: &[u8]) {
        let _ = peer;
        self.established(qp, private_data)
    }
}

/// A protection domain (`ibv_pd`).
pub trait ProtectionDomain<P: Provider>: Clone + Send + Sync + Debug {
    /// This PD's identifier on its device.
    fn id(&self) -> PdId;
    /// Registers `[offset, offset + len)` of `buffer` (`ibv_reg_mr`): pins and translates it.
    fn reg_mr(
        &self,
        buffer: &P::Buffer,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> VerbsResult<P::Mr>;
    /// Allocates an unbound memory window (`ibv_alloc_mw`).
    fn alloc_mw(&self, mw_type: MwType) -> VerbsResult<P::Mw>;
    /// Creates a shared receive queue holding up to `capacity` receives.
    fn create_srq(&self, capacity: u32) -> VerbsResult<P::Srq>;
    /// Creates an RC queue pair in RESET.
    fn create_qp(&self, init: QpInit<'_, P>) -> VerbsResult<P::Qp>;
    /// Creates a cross-channel RC queue pair in RESET (`ibv_exp_create_qp` with
    /// `IBV_EXP_QP_CREATE_CROSS_CHANNEL`): it may post WAIT and ENABLE, its queues may be
    /// managed, and its send queue's entries are a registered [`WqeRing`]
    /// ([`QueuePair::wqe_ring`]), which takes a memory region of the PD. `Unsupported` where
    /// the device has no `DeviceAttr::cross_channel`; `InvalidArgument` for a managed receive
    /// queue with an SRQ.
    fn create_cross_channel_qp(
        &self,
        init: QpInit<'_, P>,
        cross: CrossChannel,
    ) -> VerbsResult<P::Qp>;
}

/// Creation attributes of a queue pair (`ibv_qp_init_attr`).
#[derive(Debug)]
pub struct QpInit<'a, P: Provider> {
    /// Completions of send-queue requests.
    pub send_cq: &'a P::Cq,
    /// Completions of receives.
    pub recv_cq: &'a P::Cq,
    /// Receives come from this SRQ instead of the QP's own receive queue.
    pub srq: Option<&'a P::Srq>,
    /// Outstanding send requests allowed.
    pub max_send_wr: u32,
    /// Outstanding receives allowed (ignored with an SRQ).
    pub max_recv_wr: u32,
    /// Remote rights this QP accepts as responder (`qp_access_flags`).
    pub access: AccessFlags,
    /// Transport timing and retry counts.
    pub timing: QpTiming,
}

/// Retry counts and timers of an RC QP (`timeout`, `retry_cnt`, `rnr_retry`, `min_rnr_timer`).
///
/// The software provider's TCP connections lose nothing while they are up, so there the
/// transport's adaptive timeouts (`rnic::soft::TcpOptions::timeouts`) replace `ack_timeout_us`
/// and `retry_count`; the RNR fields apply on every transport (`docs/verbs-contract.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpTiming {
    /// Time without a response before a request is retransmitted, in µs.
    pub ack_timeout_us: u64,
    /// Retransmissions before `RetryExceeded` (at most 7, as in IB).
    pub retry_count: u8,
    /// Delay after a receiver-not-ready NAK before retrying, in µs.
    pub rnr_timer_us: u64,
    /// RNR retries before `RnrRetryExceeded` (7 means infinite in IB; here it is finite).
    pub rnr_retry: u8,
}

impl Default for QpTiming {
    fn default() -> Self {
        QpTiming {
            ack_timeout_us: 16_000,
            retry_count: 7,
            rnr_timer_us: 100,
            rnr_retry: 7,
        }
    }
}

/// State of a queue pair (`ibv_qp_state`, RC subset).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum QpState {
    /// Just created or reset; cannot post sends or be reached.
    Reset,
    /// Initialized: receives may be posted.
    Init,
    /// Ready to receive: connected to a peer, responder active.
    ReadyToReceive,
    /// Ready to send: fully operational.
    ReadyToSend,
    /// Error: every posted and outstanding request completes flushed.
    Error,
}

impl QpState {
    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::ReadyToReceive => "RTR",
            QpState::ReadyToSend => "RTS",
            QpState::Error => "ERR",
        }
    }
}

/// Memory that peers may read and write while the owner does too. Every access is atomic
/// (byte-wise atomic copies, `AtomicU64` for 8-byte words), so concurrent use is never UB.
pub trait MemoryBuffer: Clone + Send + Sync + Debug {
    /// Virtual address of the first byte (what remote peers name).
    fn addr(&self) -> VirtAddr;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the buffer is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    fn read(&self, offset: usize, dst: &mut [u8]) -> VerbsResult<()>;
    /// Copies `src` into the buffer at `offset`.
    fn write(&self, offset: usize, src: &[u8]) -> VerbsResult<()>;
    /// Loads the aligned 8-byte word at `offset` (native endianness, as RDMA atomics use).
    fn load_u64(&self, offset: usize) -> VerbsResult<u64>;
    /// Stores the aligned 8-byte word at `offset`.
    fn store_u64(&self, offset: usize, value: u64) -> VerbsResult<()>;
    /// Zeroes `len` bytes at `offset` (a memory node scrubbing freed memory before reuse).
    fn fill_zero(&self, offset: usize, len: usize) -> VerbsResult<()> {
        const CHUNK: [u8; 4096] = [0; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK.len());
            self.write(offset + done, &CHUNK[..n])?;
            done += n;
        }
        Ok(())
    }
}

/// A memory region (`ibv_mr`).
pub trait MemoryRegion: Send + Sync + Debug {
    /// Local key.
    fn lkey(&self) -> Lkey;
    /// Remote key (reaches the whole region if it has remote rights).
    fn rkey(&self) -> Rkey;
    /// First registered address.
    fn addr(&self) -> VirtAddr;
    /// Registered length.
    fn len(&self) -> usize;
    /// Whether the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Access flags.
    fn access(&self) -> AccessFlags;
    /// Deregisters (`ibv_dereg_mr`); fails with `MrHasBoundWindows` while windows are bound.
    /// Dropping the handle deregisters too, if it can.
    fn deregister(self) -> Result<(), (Self, super::error::VerbsError)>
    where
        Self: Sized;
}

/// A memory window (`ibv_mw`).
pub trait MemoryWindow: Send + Sync + Debug {
    /// The rkey of the latest posted bind (or the initial one).
    fn rkey(&self) -> Rkey;
    /// Type 1 or 2.
    fn mw_type(&self) -> MwType;
}

/// A completion queue (`ibv_cq`).
pub trait CompletionQueue: Clone + Send + Sync + Debug {
    /// The CQ's number on its device, which a cross-channel WAIT names.
    fn cq_num(&self) -> CqNumber;
    /// Moves up to `out.len()` completions into `out`, returning how many (`ibv_poll_cq`).
    /// Polling also drives the provider's timers (retransmissions, RNR retries).
    fn poll(&self, out: &mut [WorkCompletion]) -> usize;
    /// Blocks until a completion is queued or `timeout` passes; returns whether one is queued
    /// (the analogue of `ibv_req_notify_cq` + `ibv_get_cq_event` on a completion channel of
    /// its own). Use it on CQs created with [`Context::create_cq`].
    fn wait(&self, timeout: std::time::Duration) -> bool;
    /// Arms the CQ (`ibv_req_notify_cq`): the next completion queued after this call raises
    /// one event on the channel the CQ was created on (none for a CQ without one). The usual
    /// pattern is arm, poll, and only if the poll found nothing, wait on the channel.
    fn req_notify(&self);
}

/// A completion channel (`ibv_comp_channel`): the CQs created on it raise an event when they
/// get a completion after being armed.
pub trait CompletionChannel: Clone + Send + Sync + Debug {
    /// Blocks until an armed CQ of this channel got a completion, or `timeout` passes; returns
    /// whether one did. Consumes (and acknowledges) every pending event; the CQs are disarmed
    /// by their events and must be armed again before the next wait.
    fn wait(&self, timeout: std::time::Duration) -> bool;
}

/// A shared receive queue (`ibv_srq`).
pub trait SharedReceiveQueue: Clone + Send + Sync + Debug {
    /// Posts receives (`ibv_post_srq_recv`).
    fn post_recv(&self, wrs: &[RecvWr]) -> VerbsResult<()>;
}

/// An RC queue pair (`ibv_qp`).
pub trait QueuePair<P: Provider>: Clone + Send + Sync + Debug {
    /// The QP number.
    fn qp_num(&self) -> QpNumber;
    /// Current state.
    fn state(&self) -> QpState;
    /// Connects a QP in RESET to a listener (INIT → RTR → RTS after a handshake).
    fn connect(&self, to: &P::Address, private_data: &[u8]) -> VerbsResult<()>;
    /// Moves the QP to RESET, dropping its connection and every queued request.
    fn reset(&self) -> VerbsResult<()>;
    /// Moves the QP to ERR (`ibv_modify_qp` to `IBV_QPS_ERR`): outstanding requests flush.
    fn set_error(&self);
    /// Changes the remote rights this QP accepts (`qp_access_flags`). Returns once requests
    /// already executing under the old flags have finished.
    fn modify_access(&self, access: AccessFlags) -> VerbsResult<()>;
    /// Posts a list of send requests with one doorbell (`ibv_post_send`). On an error, the
    /// index of the first rejected request is returned with it; earlier ones were posted.
    fn post_send(
        &self,
        wrs: &[SendWr<'_, P::Mw, P::Mr>],
    ) -> Result<(), (usize, super::error::VerbsError)>;
    /// Posts receives to this QP's own receive queue (`ibv_post_recv`).
    fn post_recv(&self, wrs: &[RecvWr]) -> VerbsResult<()>;
    /// Sets how the device serves this QP's incoming requests: its weight among the QPs it
    /// serves and an optional responder rate limit (modelled on `ibv_modify_qp_rate_limit`).
    /// Takes effect at once, also on a connected QP, and stays across reconnects.
    /// `InvalidArgument` for an invalid service ([`QpService::validate`](super::QpService)),
    /// `Unsupported` where the device does not enforce it (`DeviceAttr::qp_rate_limit`).
    fn set_service(&self, service: super::QpService) -> VerbsResult<()>;
    /// What the device served this QP's incoming requests since its current connection was
    /// established ([`QpServed`](super::QpServed)): how a node sees the load each QP puts on
    /// its NIC. `None` where the provider does not count per QP: the soft NIC counts on its
    /// TCP transport (in its engines) and answers `None` in-process and on a loopback
    /// connection to its own listener (whose requests run on the requester's thread).
    /// Real NICs keep per-QP or per-counter-set hardware counters, but the rdma-core provider
    /// does not read them (yet) and answers `None`.
    fn served(&self) -> Option<super::QpServed>;
    /// Where the send queue's entries of a cross-channel QP live, for chains that patch them
    /// (`verbs::chain`); `None` for an ordinary QP.
    fn wqe_ring(&self) -> Option<WqeRing>;
}
