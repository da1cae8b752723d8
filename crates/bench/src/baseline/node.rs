//! The baselines' memory node: a pool, one protection domain, and one server thread (the
//! memory node's weak "manager" core) that serves every client's requests from a shared
//! receive queue.
//!
//! - `server`: the thread's loop and the dispatch of requests.
//! - `objects`: `Alloc`/`Free` over the allocator (`heap`), and Mr's registrations.
//! - `data`: the Rpc scheme's data path (`Read`/`Write`/`Cas`/`Faa` copied by the CPU).
//! - `names`: the named roots.
//!
//! Invariants:
//! - The pool is registered once as a whole with every remote right (the Unprot region; Qp
//!   clients use its rkey too, gated by their QP's flags). Its rkey is only told to Unprot and
//!   Qp clients.
//! - A server-side QP's remote rights are fixed by the client's scheme at accept time:
//!   Unprot and Mr QPs get READ|WRITE|ATOMIC (the MRs gate), Qp QPs start with none and
//!   change only through `OpenQp` / `CloseQp`, and an Rpc QP never has any: every data op is
//!   copied by the server thread.
//! - An Mr client may deregister only regions it registered; its regions are deregistered when
//!   its QP breaks.
//! - Objects come from one allocator over the pool, zeroed before they are handed out; any
//!   client may free any object (the baselines have no tenants). Freeing an object
//!   deregisters every region an Mr client registered over it while it was live.
//! - Nothing a client sends panics or stalls the server thread: malformed messages are dropped,
//!   wrong requests (unknown objects, double frees, oversized payloads, ranges outside the
//!   pool) answered with a [`FailCode`].

use super::proto::{BaselineProtocol, BaselineReply, BaselineRequest, FailCode, Scheme, Welcome};
use super::{BaselineError, thread_cpu};
use parking_lot::Mutex;
use patronus_core::rpc::{Incoming, RpcServer};
use rnic::{
    AcceptPolicy, AccessFlags, Context, MemoryBuffer, MemoryKey, MemoryRegion, ProtectionDomain,
    Provider, QpInit, QpNumber, QpState, QpTiming, QueuePair, VerbsError,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Memory-node configuration.
#[derive(Clone, Debug)]
pub struct BaselineConfig {
    /// Bytes of pool.
    pub pool_bytes: u64,
    /// Receive slots in the shared receive queue.
    pub srq_depth: u32,
    /// Most requests handled in one batch.
    pub max_batch: usize,
    /// Timing of the node's QPs.
    pub qp_timing: QpTiming,
    /// Register the whole pool once with remote rights (what Unprot and QP clients use).
    /// A node serving the MR mechanism must not: that region's rkey would open everything,
    /// and its pinning would make every per-permission registration skip the page pinning
    /// that registration really costs.
    pub whole_pool_region: bool,
}

impl Default for BaselineConfig {
    fn default() -> Self {
        BaselineConfig {
            pool_bytes: 64 << 20,
            srq_depth: 1024,
            max_batch: 64,
            qp_timing: QpTiming::default(),
            whole_pool_region: true,
        }
    }
}

/// What the memory node reports about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BaselineStats {
    /// Well-formed requests handled.
    pub requests: u64,
    /// Regions registered for Mr clients.
    pub mrs_registered: u64,
    /// Regions deregistered (on request or with a broken connection).
    pub mrs_deregistered: u64,
    /// `modify_access` calls for Qp clients.
    pub qp_flag_changes: u64,
    /// Payload bytes copied by `Read` / `Write` RPCs.
    pub rpc_bytes_copied: u64,
    /// `Cas` / `Faa` RPCs carried out.
    pub rpc_atomics: u64,
    /// Objects allocated.
    pub objects_allocated: u64,
    /// Objects freed.
    pub objects_freed: u64,
    /// Server-thread CPU time spent handling non-empty batches.
    pub busy_cpu: Duration,
    /// Server-thread CPU time in total (idle polling included).
    pub thread_cpu: Duration,
}

/// Regions one Mr client may hold at once.
const MRS_PER_CLIENT: usize = 4096;
const THREAD_NAME: &str = "baseline-mn";

struct Shared<P: Provider> {
    stop: AtomicBool,
    /// Set by `stats`; the server thread publishes and clears it.
    publish: AtomicBool,
    stats: Mutex<BaselineStats>,
    incoming: Mutex<Vec<(Scheme, P::Qp)>>,
}

/// A running baseline memory node.
pub struct BaselineNode<P: Provider> {
    address: P::Address,
    shared: Arc<Shared<P>>,
    thread: Option<JoinHandle<()>>,
    _listener: P::Listener,
    pool_addr: u64,
    pool_len: u64,
}

impl<P: Provider> std::fmt::Debug for BaselineNode<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BaselineNode")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

struct Policy<P: Provider> {
    shared: Arc<Shared<P>>,
    pd: P::Pd,
    srq: P::Srq,
    send_cq: P::Cq,
    recv_cq: P::Cq,
    timing: QpTiming,
}

impl<P: Provider> AcceptPolicy<P> for Policy<P> {
    fn create_qp(&self, private_data: &[u8]) -> Result<P::Qp, String> {
        let scheme = Scheme::from_private_data(private_data).map_err(|e| e.to_string())?;
        let access = match scheme {
            Scheme::Unprot | Scheme::Mr => AccessFlags::REMOTE_ALL,
            Scheme::Qp | Scheme::Rpc => AccessFlags::empty(),
        };
        self.pd
            .create_qp(QpInit {
                send_cq: &self.send_cq,
                recv_cq: &self.recv_cq,
                srq: Some(&self.srq),
                max_send_wr: 1024,
                max_recv_wr: 1,
                access,
                timing: self.timing,
            })
            .map_err(|e| e.to_string())
    }

    fn established(&self, qp: P::Qp, private_data: &[u8]) {
        if let Ok(scheme) = Scheme::from_private_data(private_data) {
            self.shared.incoming.lock().push((scheme, qp));
        }
    }
}

/// One client's connection, as the server thread sees it.
struct Conn<P: Provider> {
    scheme: Scheme,
    qp: P::Qp,
    /// Mr clients' regions by rkey.
    mrs: HashMap<MemoryKey, P::Mr>,
}

struct Server<P: Provider> {
    shared: Arc<Shared<P>>,
    pd: P::Pd,
    pool: P::Buffer,
    pool_mr: Option<P::Mr>,
    /// The control channel's server end: request slots in an SRQ, reply slots.
    rpc: RpcServer<P, BaselineProtocol>,
    conns: HashMap<QpNumber, Conn<P>>,
    /// The objects in the pool.
    heap: Allocator,
    /// Which Mr clients' regions lie over which objects.
    overlaps: Overlaps,
    names: Names,
    stats: BaselineStats,
}

impl<P: Provider> BaselineNode<P> {
    /// Starts a memory node on `ctx`: allocates and registers the pool, listens, and runs the
    /// server thread.
    pub fn start(ctx: P::Context, cfg: BaselineConfig) -> Result<Self, BaselineError> {
        if cfg.pool_bytes == 0 {
            return Err(BaselineError::InvalidUse("the pool must not be empty"));
        }
        let pool = ctx.alloc_buffer(cfg.pool_bytes as usize)?;
        let pd = ctx.alloc_pd()?;
        let rights = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL;
        let pool_mr = if cfg.whole_pool_region {
            Some(pd.reg_mr(&pool, 0, pool.len(), rights)?)
        } else {
            None
        };
        let depth = cfg.srq_depth.max(16);
        let rpc = RpcServer::<P, BaselineProtocol>::new(&ctx, &pd, depth, cfg.max_batch)?;
        let srq = rpc
            .srq()
            .cloned()
            .ok_or(rnic::VerbsError::InvalidArgument("no shared receive queue"))?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            publish: AtomicBool::new(false),
            stats: Mutex::new(BaselineStats::default()),
            incoming: Mutex::new(Vec::new()),
        });
        let listener = ctx.listen(Arc::new(Policy::<P> {
            shared: shared.clone(),
            pd: pd.clone(),
            srq,
            send_cq: rpc.send_cq().clone(),
            recv_cq: rpc.recv_cq().clone(),
            timing: cfg.qp_timing,
        }))?;
        let address = ctx.listener_address(&listener);
        let (pool_addr, pool_len) = (pool.addr(), pool.len() as u64);
        let mut server = Server::<P> {
            shared: shared.clone(),
            pd,
            pool,
            pool_mr,
            rpc,
            conns: HashMap::new(),
            heap: Allocator::new(pool_len),
            overlaps: Overlaps::default(),
            names: Names::default(),
            stats: BaselineStats::default(),
        };
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || server.run())
            .map_err(|e| BaselineError::Verbs(VerbsError::Io(e)))?;
        Ok(BaselineNode {
            address,
            shared,
            thread: Some(thread),
            _listener: listener,
            pool_addr,
            pool_len,
        })
    }

    /// Where clients connect.
    pub fn address(&self) -> &P::Address {
        &self.address
    }

    /// Address of the pool's first byte.
    pub fn pool_addr(&self) -> u64 {
        self.pool_addr
    }

    /// Bytes of pool.
    pub fn pool_len(&self) -> u64 {
        self.pool_len
    }

    /// Counters and CPU time, published by the server thread after this call (waits for its
    /// next loop iteration, at most ~1 s; falls back to the last snapshot if it has stopped).
    pub fn stats(&self) -> BaselineStats {
        self.shared.publish.store(true, Ordering::SeqCst);
        let mut spins = 0u32;
        while self.shared.publish.load(Ordering::SeqCst)
            && self.thread.as_ref().is_some_and(|t| !t.is_finished())
            && spins < 200_000
        {
            spins += 1;
            std::thread::park_timeout(Duration::from_micros(5));
        }
        *self.shared.stats.lock()
    }

    /// Stops the server thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl<P: Provider> Drop for BaselineNode<P> {
    fn drop(&mut self) {
        self.stop();
    }
}

mod data;
mod heap;
mod names;
mod objects;
mod server;

pub use heap::MIN_BLOCK;
pub use names::NAMES;

use heap::Allocator;
use names::Names;
use objects::Overlaps;
