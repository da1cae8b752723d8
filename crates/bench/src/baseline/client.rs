//! A baseline client: one RC QP to the memory node that carries both the two-sided requests
//! (SENDs into the node's shared receive queue) and the one-sided READs and WRITEs.
//!
//! Invariants:
//! - At most [`MAX_OUTSTANDING`] requests are unanswered; each has a receive slot posted for
//!   its reply, and a send slot (`req_id % 16`) that is not reused before the reply arrives.
//! - Every wait is bounded by the configured timeout (wall time).
//! - Replies that arrive while a blocking call waits for something else are stashed, in order,
//!   for [`BaselineClient::poll`].
//! - A failed one-sided op leaves the QP in ERR (RC semantics): the client is then unusable and
//!   must be replaced by a new connection.

use super::BaselineError;
use super::proto::{
    BaselineProtocol, BaselineReply, BaselineRequest, MAX_PAYLOAD, Scheme, Welcome,
};
use patronus_core::rpc::{IdleWait, RpcClient, RpcError};
use rnic::{
    AccessFlags, CompletionQueue, Context, MemoryBuffer, MemoryKey, MemoryRegion, ProtectionDomain,
    Provider, QpInit, QpTiming, QueuePair, SendOp, SendWr, Sge, WcStatus, WorkCompletion,
};
use std::time::{Duration, Instant};

/// Requests a client may have unanswered at once.
pub const MAX_OUTSTANDING: usize = 16;
const RECV_SLOTS: u32 = MAX_OUTSTANDING as u32;
/// Bytes of registered staging memory for one-sided ops (larger ops go in chunks).
pub const STAGING_BYTES: usize = 4096;
/// Work-request ids of one-sided ops carry this tag; receives use their slot number.
const ONE_SIDED: u64 = 1 << 63;

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
            max_send_wr: 256,
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

    /// Sends a request without waiting; returns its id. At most [`MAX_OUTSTANDING`] at once.
    pub fn submit(&mut self, req: BaselineRequest) -> Result<u64, BaselineError> {
        Ok(self.rpc.submit(req)?)
    }

    /// Takes one arrived reply, if any, as (request id, reply). Never blocks.
    pub fn poll(&mut self) -> Result<Option<(u64, BaselineReply)>, BaselineError> {
        Ok(self.rpc.poll()?)
    }

    /// Sends a request and waits for its reply (no retry: the baselines' server does not
    /// answer retries idempotently). A late reply to an abandoned request is dropped.
    pub fn call(&mut self, req: BaselineRequest) -> Result<BaselineReply, BaselineError> {
        let reply = self.rpc.call(req, self.cfg.timeout, false);
        self.rpc.take_orphans();
        Ok(reply?)
    }

    /// One-sided RDMA READ of `dst.len()` bytes at `addr` under `rkey`.
    pub fn read(
        &mut self,
        rkey: MemoryKey,
        addr: u64,
        dst: &mut [u8],
    ) -> Result<(), BaselineError> {
        for (i, chunk) in dst.chunks_mut(STAGING_BYTES).enumerate() {
            let at = addr.wrapping_add((i * STAGING_BYTES) as u64);
            let local = self.staging_sge(chunk.len());
            self.one_sided(SendOp::Read {
                local,
                remote_addr: at,
                rkey,
            })?;
            self.staging.read(0, chunk)?;
        }
        Ok(())
    }

    /// One-sided RDMA WRITE of `src` to `addr` under `rkey`.
    pub fn write(&mut self, rkey: MemoryKey, addr: u64, src: &[u8]) -> Result<(), BaselineError> {
        for (i, chunk) in src.chunks(STAGING_BYTES).enumerate() {
            let at = addr.wrapping_add((i * STAGING_BYTES) as u64);
            self.staging.write(0, chunk)?;
            let local = self.staging_sge(chunk.len());
            self.one_sided(SendOp::Write {
                local,
                remote_addr: at,
                rkey,
            })?;
        }
        Ok(())
    }

    /// Reads through the memory node's CPU (`Read` RPCs of up to 64 bytes each).
    pub fn rpc_read(&mut self, addr: u64, dst: &mut [u8]) -> Result<(), BaselineError> {
        for (i, chunk) in dst.chunks_mut(MAX_PAYLOAD).enumerate() {
            let at = addr.wrapping_add((i * MAX_PAYLOAD) as u64);
            let len = chunk.len() as u32;
            match self.call(BaselineRequest::Read { addr: at, len })? {
                BaselineReply::Data { len: got, bytes } if got == len => {
                    chunk.copy_from_slice(&bytes[..chunk.len()]);
                }
                BaselineReply::Failed(code) => return Err(BaselineError::Failed(code)),
                other => return Err(BaselineError::Unexpected(other)),
            }
        }
        Ok(())
    }

    /// Writes through the memory node's CPU (`Write` RPCs of up to 64 bytes each).
    pub fn rpc_write(&mut self, addr: u64, src: &[u8]) -> Result<(), BaselineError> {
        for (i, chunk) in src.chunks(MAX_PAYLOAD).enumerate() {
            let mut bytes = [0u8; MAX_PAYLOAD];
            bytes[..chunk.len()].copy_from_slice(chunk);
            let req = BaselineRequest::Write {
                addr: addr.wrapping_add((i * MAX_PAYLOAD) as u64),
                len: chunk.len() as u32,
                bytes,
            };
            expect_done(self.call(req)?)?;
        }
        Ok(())
    }

    /// (Mr) Registers `[addr, addr + len)` as a region; returns its rkey.
    pub fn register_mr(&mut self, addr: u64, len: u64) -> Result<MemoryKey, BaselineError> {
        match self.call(BaselineRequest::RegisterMr { addr, len })? {
            BaselineReply::Registered { rkey } => Ok(rkey),
            BaselineReply::Failed(code) => Err(BaselineError::Failed(code)),
            other => Err(BaselineError::Unexpected(other)),
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

    fn staging_sge(&self, len: usize) -> Sge {
        Sge {
            addr: self.staging.addr(),
            length: len as u32,
            lkey: self.staging_mr.lkey(),
        }
    }

    /// Posts one signaled one-sided op and waits for its completion, stashing replies.
    fn one_sided(&mut self, op: SendOp<'_, P::Mw, P::Mr>) -> Result<(), BaselineError> {
        self.next_op += 1;
        let wr_id = ONE_SIDED | self.next_op;
        let wr = SendWr {
            wr_id,
            signaled: true,
            op,
        };
        self.rpc
            .qp()
            .post_send(std::slice::from_ref(&wr))
            .map_err(|(_, e)| BaselineError::Verbs(e))?;
        self.wait_op(wr_id)
    }

    /// Waits for the completion of one-sided op `wr_id`, filing replies that arrive meanwhile.
    /// Spins briefly, then sleeps on the CQ; bounded by the configured timeout (wall time).
    #[allow(clippy::disallowed_methods)] // a timeout is wall time
    fn wait_op(&mut self, wr_id: u64) -> Result<(), BaselineError> {
        let deadline = Instant::now() + self.cfg.timeout;
        let mut idle = IdleWait::default();
        let mut wcs = [WorkCompletion::default(); 8];
        loop {
            let n = self.cq.poll(&mut wcs);
            for wc in &wcs[..n] {
                if wc.wr_id == wr_id {
                    return match wc.status {
                        WcStatus::Success => Ok(()),
                        s => Err(BaselineError::Remote(s)),
                    };
                }
                // Flushed receives of the same broken QP are reported by the op's own status.
                let _ = self.rpc.on_completion(wc);
            }
            if n > 0 {
                idle.busy();
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(BaselineError::Timeout);
            }
            idle.idle(&self.cq, (deadline - now).min(Duration::from_millis(1)));
        }
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

fn expect_done(reply: BaselineReply) -> Result<(), BaselineError> {
    match reply {
        BaselineReply::Done => Ok(()),
        BaselineReply::Failed(code) => Err(BaselineError::Failed(code)),
        other => Err(BaselineError::Unexpected(other)),
    }
}
