//! A baseline client: one RC QP to the memory node that carries both the two-sided requests
//! (SENDs into the node's shared receive queue) and the one-sided READs, WRITEs and atomics
//! (posted in batches with one doorbell: [`onesided`]).
//!
//! Invariants:
//! - At most [`MAX_OUTSTANDING`] requests are unanswered; each has a receive slot posted for
//!   its reply, and a send slot (`req_id % 16`) that is not reused before the reply arrives.
//! - No request carries more than [`MAX_PAYLOAD`] bytes: a longer `Write` is refused here
//!   ([`BaselineError::InvalidUse`]), never sent.
//! - Every wait is bounded by the configured timeout (wall time).
//! - Replies that arrive while a blocking call waits for something else are stashed, in order,
//!   for [`BaselineClient::poll`] and [`BaselineClient::wait`].
//! - A failed one-sided op leaves the QP in ERR (RC semantics): the client is then unusable and
//!   must be replaced by a new connection.

pub mod onesided;

pub use onesided::{MAX_BATCH, OneSided, OneSidedOut, STAGING_BYTES};

use super::BaselineError;
use super::proto::{
    BaselineProtocol, BaselineReply, BaselineRequest, MAX_PAYLOAD, Scheme, Welcome,
};
use patronus_core::proto::messages::RootName;
use patronus_core::rpc::{RpcClient, RpcError};
use rnic::{
    AccessFlags, Context, MemoryBuffer, MemoryKey, ProtectionDomain, Provider, QpInit, QpState,
    QpTiming, QueuePair,
};
use std::time::Duration;

/// Requests a client may have unanswered at once.
pub const MAX_OUTSTANDING: usize = 16;
const RECV_SLOTS: u32 = MAX_OUTSTANDING as u32;

/// Client configuration.
#[derive(Clone, Copy, Debug)]
pub struct BaselineClientConfig {
    /// How long a blocking call may wait (wall time).
    pub timeout: Duration,
    /// Timing of the client's QP.
    pub qp_timing: QpTiming,
}

impl Default for BaselineClientConfig {
    fn default() -> Self {
        BaselineClientConfig {
            timeout: Duration::from_secs(5),
            qp_timing: QpTiming::default(),
        }
    }
}

/// A connected client of a [`BaselineNode`](super::BaselineNode).
pub struct BaselineClient<P: Provider> {
    scheme: Scheme,
    cfg: BaselineClientConfig,
    _pd: P::Pd,
    /// The QP's CQ: one-sided completions and, through `rpc`, replies.
    cq: P::Cq,
    /// The control channel over the same QP.
    rpc: RpcClient<P, BaselineProtocol>,
    staging: P::Buffer,
    staging_mr: P::Mr,
    welcome: Welcome,
    next_op: u64,
    /// Requests submitted and not yet answered (or given up on), and the most there were.
    in_flight: usize,
    peak_in_flight: usize,
}

impl<P: Provider> std::fmt::Debug for BaselineClient<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BaselineClient")
            .field("scheme", &self.scheme)
            .field("welcome", &self.welcome)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> BaselineClient<P> {
    /// Connects with the default configuration (5 s timeout).
    pub fn connect(
        ctx: &P::Context,
        address: &P::Address,
        scheme: Scheme,
    ) -> Result<Self, BaselineError> {
        Self::connect_with(ctx, address, scheme, BaselineClientConfig::default())
    }

    /// Connects one QP announcing `scheme`, then sends `Hello` and keeps the `Welcome`.
    pub fn connect_with(
        ctx: &P::Context,
        address: &P::Address,
        scheme: Scheme,
        cfg: BaselineClientConfig,
    ) -> Result<Self, BaselineError> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(1024)?;
        let qp = pd.create_qp(QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            max_send_wr: onesided::SEND_QUEUE,
            max_recv_wr: RECV_SLOTS,
            access: AccessFlags::empty(),
            timing: cfg.qp_timing,
        })?;
        let staging = ctx.alloc_buffer(STAGING_BYTES)?;
        let staging_mr = pd.reg_mr(&staging, 0, staging.len(), AccessFlags::LOCAL_WRITE)?;
        qp.connect(address, &scheme.private_data())?;
        let rpc = RpcClient::new(ctx, &pd, qp, cq.clone(), RECV_SLOTS)?;
        let mut client = BaselineClient {
            scheme,
            cfg,
            _pd: pd,
            cq,
            rpc,
            staging,
            staging_mr,
            welcome: Welcome {
                pool_addr: 0,
                pool_len: 0,
                rkey: None,
            },
            next_op: 0,
            in_flight: 0,
            peak_in_flight: 0,
        };
        client.welcome = match client.call(BaselineRequest::Hello)? {
            BaselineReply::Welcome(w) => w,
            other => return Err(BaselineError::Unexpected(other)),
        };
        Ok(client)
    }

    /// The scheme this client connected with.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// Whether the QP is in the error state (a one-sided op failed, or the connection was
    /// lost): nothing more goes through this client, which a new connection replaces.
    pub fn is_broken(&self) -> bool {
        self.rpc.qp().state() == QpState::Error
    }

    /// The memory node's answer to `Hello`.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Address of the pool's first byte.
    pub fn pool_addr(&self) -> u64 {
        self.welcome.pool_addr
    }

    /// Bytes of pool.
    pub fn pool_len(&self) -> u64 {
        self.welcome.pool_len
    }

    /// The whole-pool rkey (Unprot and Qp clients).
    pub fn rkey(&self) -> Option<MemoryKey> {
        self.welcome.rkey
    }

    /// Requests that may be unanswered at once.
    pub fn capacity(&self) -> usize {
        MAX_OUTSTANDING
    }

    /// The most requests this client had unanswered at once (how far it pipelined).
    pub fn peak_in_flight(&self) -> usize {
        self.peak_in_flight
    }

    /// Sends a request without waiting; returns its id. At most [`MAX_OUTSTANDING`] at once.
    pub fn submit(&mut self, req: BaselineRequest) -> Result<u64, BaselineError> {
        check_payload(&req)?;
        let id = self.rpc.submit(req)?;
        self.in_flight += 1;
        self.peak_in_flight = self.peak_in_flight.max(self.in_flight);
        Ok(id)
    }

    /// Takes one arrived reply, if any, as (request id, reply). Never blocks.
    pub fn poll(&mut self) -> Result<Option<(u64, BaselineReply)>, BaselineError> {
        let reply = self.rpc.poll()?;
        if reply.is_some() {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        Ok(reply)
    }

    /// Waits for the reply to submitted request `id` (bounded by the configured timeout; on a
    /// timeout the request is given up on and its late reply dropped).
    pub fn wait(&mut self, id: u64) -> Result<BaselineReply, BaselineError> {
        let reply = self.rpc.wait(id, self.cfg.timeout, false);
        self.rpc.take_orphans();
        self.in_flight = self.in_flight.saturating_sub(1);
        Ok(reply?)
    }

    /// Sends a request and waits for its reply (no retry: the baselines' server does not
    /// answer retries idempotently). A late reply to an abandoned request is dropped.
    pub fn call(&mut self, req: BaselineRequest) -> Result<BaselineReply, BaselineError> {
        let id = self.submit(req)?;
        self.wait(id)
    }

    /// Reads through the memory node's CPU (`Read` RPCs of up to [`MAX_PAYLOAD`] bytes each).
    pub fn rpc_read(&mut self, addr: u64, dst: &mut [u8]) -> Result<(), BaselineError> {
        for (i, chunk) in dst.chunks_mut(MAX_PAYLOAD).enumerate() {
            let at = addr.wrapping_add((i * MAX_PAYLOAD) as u64);
            let len = chunk.len() as u32;
            match self.call(BaselineRequest::Read { addr: at, len })? {
                BaselineReply::Data(bytes) if bytes.len() == chunk.len() => {
                    chunk.copy_from_slice(&bytes);
                }
                other => return Err(unexpected(other)),
            }
        }
        Ok(())
    }

    /// Writes through the memory node's CPU (`Write` RPCs of up to [`MAX_PAYLOAD`] bytes each).
    pub fn rpc_write(&mut self, addr: u64, src: &[u8]) -> Result<(), BaselineError> {
        for (i, chunk) in src.chunks(MAX_PAYLOAD).enumerate() {
            let req = BaselineRequest::Write {
                addr: addr.wrapping_add((i * MAX_PAYLOAD) as u64),
                bytes: chunk.to_vec(),
            };
            expect_done(self.call(req)?)?;
        }
        Ok(())
    }

    /// (Rpc) Compare-and-swap through the memory node's CPU; the previous value.
    pub fn rpc_cas(&mut self, addr: u64, compare: u64, swap: u64) -> Result<u64, BaselineError> {
        expect_atomic(self.call(BaselineRequest::Cas {
            addr,
            compare,
            swap,
        })?)
    }

    /// (Rpc) Fetch-and-add through the memory node's CPU; the previous value.
    pub fn rpc_faa(&mut self, addr: u64, add: u64) -> Result<u64, BaselineError> {
        expect_atomic(self.call(BaselineRequest::Faa { addr, add })?)
    }

    /// Allocates a zeroed object of `size` bytes: its address and the key to reach it (under
    /// Mr, a new region's).
    pub fn alloc(&mut self, size: u64) -> Result<(u64, Option<MemoryKey>), BaselineError> {
        match self.call(BaselineRequest::Alloc { size })? {
            BaselineReply::Allocated { addr, rkey } => Ok((addr, rkey)),
            other => Err(unexpected(other)),
        }
    }

    /// Frees the object at `addr` (under Mr, every region over it is deregistered).
    pub fn free(&mut self, addr: u64) -> Result<(), BaselineError> {
        expect_done(self.call(BaselineRequest::Free { addr })?)
    }

    /// (Mr) Registers `[addr, addr + len)` as a read-write region; returns its rkey.
    pub fn register_mr(&mut self, addr: u64, len: u64) -> Result<MemoryKey, BaselineError> {
        self.register(BaselineRequest::RegisterMr {
            addr,
            len,
            read_only: false,
            object: false,
        })
    }

    /// (Mr) Registers `[addr, addr + len)`, which must lie inside one allocated object, as a
    /// region (remote read only with `read_only`); returns its rkey.
    pub fn register_object(
        &mut self,
        addr: u64,
        len: u64,
        read_only: bool,
    ) -> Result<MemoryKey, BaselineError> {
        self.register(BaselineRequest::RegisterMr {
            addr,
            len,
            read_only,
            object: true,
        })
    }

    fn register(&mut self, req: BaselineRequest) -> Result<MemoryKey, BaselineError> {
        match self.call(req)? {
            BaselineReply::Registered { rkey } => Ok(rkey),
            other => Err(unexpected(other)),
        }
    }

    /// (Mr) Deregisters a region this client registered.
    pub fn deregister_mr(&mut self, rkey: MemoryKey) -> Result<(), BaselineError> {
        expect_done(self.call(BaselineRequest::DeregisterMr { rkey })?)
    }

    /// (Qp) Opens this client's QP for one-sided access.
    pub fn open_qp(&mut self) -> Result<(), BaselineError> {
        expect_done(self.call(BaselineRequest::OpenQp)?)
    }

    /// (Qp) Closes this client's QP to one-sided access.
    pub fn close_qp(&mut self) -> Result<(), BaselineError> {
        expect_done(self.call(BaselineRequest::CloseQp)?)
    }

    /// Publishes `[addr, addr + len)` under `name`.
    pub fn publish(&mut self, name: RootName, addr: u64, len: u64) -> Result<(), BaselineError> {
        expect_done(self.call(BaselineRequest::Publish { name, addr, len })?)
    }

    /// The object published under `name`: (address, length).
    pub fn lookup(&mut self, name: RootName) -> Result<(u64, u64), BaselineError> {
        match self.call(BaselineRequest::Lookup { name })? {
            BaselineReply::Found { addr, len } => Ok((addr, len)),
            other => Err(unexpected(other)),
        }
    }

    /// Withdraws `name`.
    pub fn unpublish(&mut self, name: RootName) -> Result<(), BaselineError> {
        expect_done(self.call(BaselineRequest::Unpublish { name })?)
    }
}

impl From<RpcError> for BaselineError {
    fn from(e: RpcError) -> Self {
        match e {
            RpcError::Busy => BaselineError::InvalidUse("too many outstanding requests"),
            RpcError::Timeout | RpcError::Wedged => BaselineError::Timeout,
            RpcError::QpFailed(s) => BaselineError::Remote(s),
            RpcError::Verbs(v) => BaselineError::Verbs(v),
            _ => BaselineError::InvalidUse("unknown control-channel failure"),
        }
    }
}

fn check_payload(req: &BaselineRequest) -> Result<(), BaselineError> {
    if req.payload_len() > MAX_PAYLOAD {
        return Err(BaselineError::InvalidUse(
            "a request carries at most MAX_PAYLOAD bytes",
        ));
    }
    Ok(())
}

/// A refusal as its error; anything else as an unexpected reply.
fn unexpected(reply: BaselineReply) -> BaselineError {
    match reply {
        BaselineReply::Failed(code) => BaselineError::Failed(code),
        other => BaselineError::Unexpected(other),
    }
}

fn expect_done(reply: BaselineReply) -> Result<(), BaselineError> {
    match reply {
        BaselineReply::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

fn expect_atomic(reply: BaselineReply) -> Result<u64, BaselineError> {
    match reply {
        BaselineReply::Atomic(old) => Ok(old),
        other => Err(unexpected(other)),
    }
}
