//! The NIC protection self-check: before a memory node serves, it proves on memory and windows
//! of its own, through loopback connections of its own device, what the device enforces.
//!
//! Every isolation mode rests on the NIC refusing, with a remote access error:
//! - [`Check::WindowBounds`]: an access outside a window (inside its region) — each client's
//!   domain registers the whole pool, so a window is all that confines a grant;
//! - [`Check::OldRkeyAfterRebind`]: an access with a window's rkey from before an unbind and
//!   rebind — revocation and handover rest on it;
//! - [`Check::ReadOnlyWindow`]: a WRITE, CAS or FAA through a window granting READ only.
//!
//! Type-2 isolation also rests on [`Check::Type2QpAssociation`] (an access through a type-2
//! window arriving on a QP other than the one it is bound to) and [`Check::Invalidation`] (an
//! access after a LOCAL_INV of the window). [`NicReport::refusal`] says whether a mode may be
//! served; the software RNIC passes every check, Soft-RoCE fails the first (`docs/rdma.md`).
//!
//! Each refused access breaks the QP pair it used, so each negative step takes a pair of its
//! own. Windows are deallocated before their QPs are destroyed (Soft-RoCE stalls ~50 s
//! destroying a QP with a type-2 window bound).

use parking_lot::{Condvar, Mutex};
use rnic::{
    AcceptPolicy, AccessFlags, BindInfo, CompletionQueue, Context, DeviceAttr, MemoryBuffer,
    MemoryRegion, MemoryWindow, MwType, ProtectionDomain, Provider, QpInit, QpTiming, QueuePair,
    Rkey, SendOp, SendWr, Sge, WcStatus, WorkCompletion,
};
use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// One property of the NIC the check proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Check {
    /// An access outside a window but inside its region is refused.
    WindowBounds,
    /// A window's rkey from before an unbind and rebind is refused.
    OldRkeyAfterRebind,
    /// A window granting READ only refuses WRITE, CAS and FAA.
    ReadOnlyWindow,
    /// A type-2 window refuses an access arriving on another QP than its own.
    Type2QpAssociation,
    /// A type-2 window refuses access once invalidated (LOCAL_INV).
    Invalidation,
}

impl Check {
    /// Every check, in the order they run.
    pub const ALL: [Check; 5] = [
        Check::WindowBounds,
        Check::OldRkeyAfterRebind,
        Check::ReadOnlyWindow,
        Check::Type2QpAssociation,
        Check::Invalidation,
    ];

    /// Its name in reports, logs and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            Check::WindowBounds => "window-bounds",
            Check::OldRkeyAfterRebind => "old-rkey-after-rebind",
            Check::ReadOnlyWindow => "read-only-window",
            Check::Type2QpAssociation => "type2-qp-association",
            Check::Invalidation => "invalidation",
        }
    }
}

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The NIC refused every access it should have, and allowed the legal one.
    Enforced,
    /// An access that should have been refused completed; says which.
    NotEnforced(String),
    /// The device lacks what the check needs (type-2 windows).
    Unsupported(&'static str),
    /// The check could not run to its end (a verb failed, a legal access was refused).
    Failed(String),
}

/// The self-check's findings on one device.
#[derive(Clone, Debug)]
pub struct NicReport {
    /// Each check and its outcome, in [`Check::ALL`]'s order.
    pub checks: Vec<(Check, Outcome)>,
    /// Wall time the check took.
    pub took: Duration,
}

/// Which isolation needs what of the NIC.
fn required(type2: bool) -> &'static [Check] {
    if type2 { &Check::ALL } else { &Check::ALL[..3] }
}

impl NicReport {
    /// The outcome of `check`.
    pub fn outcome(&self, check: Check) -> Option<&Outcome> {
        self.checks
            .iter()
            .find(|(c, _)| *c == check)
            .map(|(_, o)| o)
    }

    /// Whether `check` passed.
    pub fn enforces(&self, check: Check) -> bool {
        self.outcome(check) == Some(&Outcome::Enforced)
    }

    /// Why a node must not serve clients isolated with type-2 windows (`type2`) or type-1
    /// ones on this NIC, in one line; `None` if it may. A window-bounds failure is waived by
    /// `allow_unenforced_window_bounds` (the node then serves, and says so everywhere).
    pub fn refusal(&self, type2: bool, allow_unenforced_window_bounds: bool) -> Option<String> {
        for &check in required(type2) {
            let why = match self.outcome(check) {
                Some(Outcome::Enforced) => continue,
                Some(Outcome::NotEnforced(_))
                    if check == Check::WindowBounds && allow_unenforced_window_bounds =>
                {
                    continue;
                }
                Some(Outcome::NotEnforced(what)) => format!("does not enforce it: {what}"),
                Some(Outcome::Unsupported(what)) => format!("cannot: {what}"),
                Some(Outcome::Failed(what)) => format!("could not be checked: {what}"),
                None => "was not checked".into(),
            };
            let waiver = if check == Check::WindowBounds {
                "; every isolation mode rests on window bounds (start with \
                 --allow-unenforced-window-bounds to serve anyway, unisolated within the pool)"
            } else {
                ""
            };
            return Some(format!(
                "NIC protection self-check {}: the NIC {why}{waiver}",
                check.name()
            ));
        }
        None
    }
}

impl fmt::Display for NicReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (check, outcome) in &self.checks {
            let (word, why) = match outcome {
                Outcome::Enforced => ("enforced", ""),
                Outcome::NotEnforced(w) => ("NOT ENFORCED", w.as_str()),
                Outcome::Unsupported(w) => ("unsupported", *w),
                Outcome::Failed(w) => ("check failed", w.as_str()),
            };
            write!(f, "  {:<22} {word}", check.name())?;
            if !why.is_empty() {
                write!(f, ": {why}")?;
            }
            writeln!(f)?;
        }
        writeln!(f, "  ({} µs)", self.took.as_micros())
    }
}

/// How long one completion may take (Soft-RoCE under qemu's emulation included).
const COMPLETION_BOUND: Duration = Duration::from_secs(10);
/// The region the windows lie in: a page of targets after a page of local buffers.
const PAGE: u64 = 4096;
/// The window: 64 bytes, 64 bytes into the target page.
const WINDOW_OFFSET: u64 = PAGE + 64;
const WINDOW_LEN: u64 = 64;
const REMOTE_RW: AccessFlags = AccessFlags::REMOTE_READ.union(AccessFlags::REMOTE_WRITE);

/// Reports of the devices checked in this process, by provider and device key (a cell per
/// device, so that a slow device holds up no other's check).
type Checked = HashMap<(TypeId, u64), Arc<OnceLock<Arc<NicReport>>>>;
static CHECKED: Mutex<Option<Checked>> = Mutex::new(None);

/// The report of `ctx`'s device: the first call for a device in this process runs the check
/// ([`check_uncached`]; concurrent first calls for one device run it once), later ones return
/// its report. What a NIC enforces does not change while it runs.
pub fn check<P: Provider>(ctx: &P::Context) -> Arc<NicReport> {
    let key = (TypeId::of::<P>(), ctx.device_key());
    let cell = CHECKED
        .lock()
        .get_or_insert_default()
        .entry(key)
        .or_default()
        .clone();
    cell.get_or_init(|| Arc::new(check_uncached::<P>(ctx)))
        .clone()
}

/// Runs every check on `ctx`'s device. Listens on the context for its loopback connections
/// (and stops before returning), so it runs before the node listens. Its waits are bounded in
/// real time, whatever clock the context keeps (a test's virtual clock never stands still for
/// the device).
#[allow(clippy::disallowed_methods)] // a driver of the device: real-time bounds and timing
pub fn check_uncached<P: Provider>(ctx: &P::Context) -> NicReport {
    let t0 = Instant::now();
    let attr = ctx.query_device();
    let checks = match Bench::<P>::new(ctx) {
        Ok(bench) => Check::ALL
            .iter()
            .map(|&c| (c, bench.run(c, &attr)))
            .collect(),
        Err(e) => Check::ALL
            .iter()
            .map(|&c| (c, Outcome::Failed(format!("setting up: {e}"))))
            .collect(),
    };
    NicReport {
        checks,
        took: t0.elapsed(),
    }
}

/// Loopback QPs accepted by the check's listener, by the number of the connection that made
/// each, handed to the connecting side.
struct Accepted<P: Provider> {
    qps: Mutex<HashMap<u64, P::Qp>>,
    arrived: Condvar,
}

/// The check's listener listens where the node will: a client connecting early (a node
/// restarted under its clients) reaches it. Only the check's own connections are accepted —
/// their private data carry the check's random token and their number; anyone else is
/// refused (and tries again once the node listens).
struct Acceptor<P: Provider> {
    pd: P::Pd,
    cq: P::Cq,
    accepted: Arc<Accepted<P>>,
    token: u64,
}

/// A check connection's private data: a tag, the check's token, the connection's number.
fn hello(token: u64, number: u64) -> [u8; 24] {
    let mut d = [0u8; 24];
    d[..8].copy_from_slice(b"nicCheck");
    d[8..16].copy_from_slice(&token.to_le_bytes());
    d[16..].copy_from_slice(&number.to_le_bytes());
    d
}

impl<P: Provider> Acceptor<P> {
    /// The number of one of the check's own connections, from its private data.
    fn number(&self, private_data: &[u8]) -> Option<u64> {
        let d: &[u8; 24] = private_data.get(..24)?.try_into().ok()?;
        let number = u64::from_le_bytes(d[16..].try_into().ok()?);
        (*d == hello(self.token, number)).then_some(number)
    }
}

impl<P: Provider> AcceptPolicy<P> for Acceptor<P> {
    fn create_qp(&self, private_data: &[u8]) -> Result<P::Qp, String> {
        if self.number(private_data).is_none() {
            return Err("the memory node is starting: try again".into());
        }
        self.pd
            .create_qp(qp_init::<P>(&self.cq))
            .map_err(|e| e.to_string())
    }
    fn established(&self, qp: P::Qp, private_data: &[u8]) {
        if let Some(number) = self.number(private_data) {
            self.accepted.qps.lock().insert(number, qp);
            self.accepted.arrived.notify_all();
        }
    }
}

fn qp_init<P: Provider>(cq: &P::Cq) -> QpInit<'_, P> {
    QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 16,
        max_recv_wr: 1,
        access: REMOTE_RW.union(AccessFlags::REMOTE_ATOMIC),
        timing: QpTiming::default(),
    }
}

/// A connected pair: `requester` issues accesses, `responder` (the accepted end) serves them
/// and carries type-2 binds.
struct Pair<P: Provider> {
    requester: P::Qp,
    responder: P::Qp,
}

/// The check's own verbs objects. Field order is drop order: the listener stops first.
struct Bench<P: Provider> {
    _listener: P::Listener,
    address: P::Address,
    accepted: Arc<Accepted<P>>,
    /// The token of this check's connections, and the number of the next.
    token: u64,
    next: std::sync::atomic::AtomicU64,
    /// Where type-1 binds are posted (any QP of the domain may carry them).
    binder: Option<Pair<P>>,
    pd: P::Pd,
    cq: P::Cq,
    mr: P::Mr,
    buf: P::Buffer,
}

/// What an access did.
#[derive(Debug, PartialEq, Eq)]
enum Access {
    Done,
    Refused,
}

impl<P: Provider> Bench<P> {
    fn new(ctx: &P::Context) -> Result<Self, String> {
        let e = |e: rnic::VerbsError| e.to_string();
        let pd = ctx.alloc_pd().map_err(e)?;
        let cq = ctx.create_cq(256).map_err(e)?;
        let buf = ctx.alloc_buffer(2 * PAGE as usize).map_err(e)?;
        let mr = pd
            .reg_mr(
                &buf,
                0,
                buf.len(),
                AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
            )
            .map_err(e)?;
        let accepted = Arc::new(Accepted {
            qps: Mutex::new(HashMap::new()),
            arrived: Condvar::new(),
        });
        let token = rand::random::<u64>();
        let policy = Arc::new(Acceptor::<P> {
            pd: pd.clone(),
            cq: cq.clone(),
            accepted: accepted.clone(),
            token,
        });
        let listener = ctx.listen(policy).map_err(e)?;
        let address = ctx.listener_address(&listener);
        let mut bench = Bench {
            _listener: listener,
            address,
            accepted,
            token,
            next: std::sync::atomic::AtomicU64::new(0),
            binder: None,
            pd,
            cq,
            mr,
            buf,
        };
        bench.binder = Some(bench.pair()?);
        Ok(bench)
    }

    fn run(&self, check: Check, attr: &DeviceAttr) -> Outcome {
        let type2 = matches!(check, Check::Type2QpAssociation | Check::Invalidation);
        if type2 && !attr.mw_type2 {
            return Outcome::Unsupported("the device has no type-2 memory windows");
        }
        if !type2 && !attr.mw_type1 {
            return Outcome::Unsupported("the device has no type-1 memory windows");
        }
        let result = match check {
            Check::WindowBounds => self.window_bounds(),
            Check::OldRkeyAfterRebind => self.old_rkey(),
            Check::ReadOnlyWindow => self.read_only(),
            Check::Type2QpAssociation => self.type2_association(),
            Check::Invalidation => self.invalidation(),
        };
        result.unwrap_or_else(Outcome::Failed)
    }

    fn window_bounds(&self) -> Result<Outcome, String> {
        let w = self.type1(REMOTE_RW)?;
        let rkey = w.rkey();
        self.expect_done(&self.pair()?, write(WINDOW_OFFSET, rkey), "a WRITE inside")?;
        for (at, what) in [
            (
                WINDOW_OFFSET - 8,
                "a WRITE of 8 bytes just below a window landed",
            ),
            (
                WINDOW_OFFSET + WINDOW_LEN,
                "a WRITE of 8 bytes just past a window landed",
            ),
        ] {
            if self.access(&self.pair()?, write(at, rkey))? == Access::Done {
                return Ok(Outcome::NotEnforced(what.into()));
            }
        }
        Ok(Outcome::Enforced)
    }

    fn old_rkey(&self) -> Result<Outcome, String> {
        let w = self.type1(REMOTE_RW)?;
        let old = w.rkey();
        self.bind(self.binder()?, &w, None)?; // unbind
        self.bind(self.binder()?, &w, Some(REMOTE_RW))?;
        if w.rkey() == old {
            return Ok(Outcome::NotEnforced(
                "a rebind kept the window's rkey".into(),
            ));
        }
        if self.access(&self.pair()?, write(WINDOW_OFFSET, old))? == Access::Done {
            return Ok(Outcome::NotEnforced(
                "a WRITE with the rkey of before an unbind and rebind landed".into(),
            ));
        }
        self.expect_done(
            &self.pair()?,
            write(WINDOW_OFFSET, w.rkey()),
            "a WRITE with the new rkey",
        )?;
        Ok(Outcome::Enforced)
    }

    fn read_only(&self) -> Result<Outcome, String> {
        let w = self.type1(AccessFlags::REMOTE_READ)?;
        let rkey = w.rkey();
        self.expect_done(&self.pair()?, read(WINDOW_OFFSET, rkey), "a READ")?;
        for (op, what) in [
            (
                write(WINDOW_OFFSET, rkey),
                "a WRITE through a read-only window landed",
            ),
            (
                Op::Cas(WINDOW_OFFSET, rkey),
                "a CAS through a read-only window ran",
            ),
            (
                Op::Faa(WINDOW_OFFSET, rkey),
                "a FAA through a read-only window ran",
            ),
        ] {
            if self.access(&self.pair()?, op)? == Access::Done {
                return Ok(Outcome::NotEnforced(what.into()));
            }
        }
        Ok(Outcome::Enforced)
    }

    fn type2_association(&self) -> Result<Outcome, String> {
        let own = self.pair()?;
        let w = self.type2(&own)?;
        self.expect_done(
            &own,
            write(WINDOW_OFFSET, w.rkey()),
            "a WRITE on the window's QP",
        )?;
        let other = self.pair()?;
        let landed = self.access(&other, write(WINDOW_OFFSET, w.rkey()))? == Access::Done;
        drop(w); // before its QP (see the module docs)
        Ok(if landed {
            Outcome::NotEnforced("a WRITE on another QP through a type-2 window landed".into())
        } else {
            Outcome::Enforced
        })
    }

    fn invalidation(&self) -> Result<Outcome, String> {
        let own = self.pair()?;
        let w = self.type2(&own)?;
        let rkey = w.rkey();
        self.expect_done(
            &own,
            write(WINDOW_OFFSET, rkey),
            "a WRITE before the invalidation",
        )?;
        self.post_and_wait(
            &own.responder,
            SendOp::LocalInvalidate { rkey },
            "LOCAL_INV of a type-2 window",
        )?;
        let landed = self.access(&own, write(WINDOW_OFFSET, rkey))? == Access::Done;
        drop(w);
        Ok(if landed {
            Outcome::NotEnforced("a WRITE through an invalidated type-2 window landed".into())
        } else {
            Outcome::Enforced
        })
    }

    /// A type-1 window bound over the window range with `access`.
    fn type1(&self, access: AccessFlags) -> Result<P::Mw, String> {
        let w = self.pd.alloc_mw(MwType::Type1).map_err(|e| e.to_string())?;
        self.bind(self.binder()?, &w, Some(access))?;
        Ok(w)
    }

    /// A type-2 window bound to `pair`'s responder (where the pair's accesses arrive).
    fn type2(&self, pair: &Pair<P>) -> Result<P::Mw, String> {
        let w = self.pd.alloc_mw(MwType::Type2).map_err(|e| e.to_string())?;
        self.bind(&pair.responder, &w, Some(REMOTE_RW))?;
        Ok(w)
    }

    /// Binds `w` over the window range with `access`, or unbinds it (type 1) with `None`.
    fn bind(&self, qp: &P::Qp, w: &P::Mw, access: Option<AccessFlags>) -> Result<(), String> {
        let base = self.buf.addr();
        let bind = BindInfo {
            mr: access.map(|_| &self.mr),
            addr: if access.is_some() {
                base + WINDOW_OFFSET
            } else {
                0
            },
            length: if access.is_some() { WINDOW_LEN } else { 0 },
            access: access.unwrap_or(AccessFlags::empty()),
            key: None,
            target_qp: None,
        };
        self.post_and_wait(qp, SendOp::BindMw { mw: w, bind }, "a window bind")
    }

    fn binder(&self) -> Result<&P::Qp, String> {
        self.binder
            .as_ref()
            .map(|p| &p.requester)
            .ok_or_else(|| "no QP to bind on".into())
    }

    /// A new connected pair.
    #[allow(clippy::disallowed_methods)] // a driver: a real-time bound on the handshake
    fn pair(&self) -> Result<Pair<P>, String> {
        let requester = self
            .pd
            .create_qp(qp_init::<P>(&self.cq))
            .map_err(|e| e.to_string())?;
        let number = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        requester
            .connect(&self.address, &hello(self.token, number))
            .map_err(|e| format!("a loopback connection: {e}"))?;
        let mut qps = self.accepted.qps.lock();
        let deadline = Instant::now() + COMPLETION_BOUND;
        let responder = loop {
            if let Some(qp) = qps.remove(&number) {
                break qp;
            }
            if self
                .accepted
                .arrived
                .wait_until(&mut qps, deadline)
                .timed_out()
            {
                return Err("a loopback connection was never accepted".into());
            }
        };
        Ok(Pair {
            requester,
            responder,
        })
    }

    /// Issues `op` from `pair`'s requester: done, or refused by the responder's NIC.
    fn access(&self, pair: &Pair<P>, op: Op) -> Result<Access, String> {
        let local = Sge {
            addr: self.buf.addr(),
            length: 8,
            lkey: self.mr.lkey(),
        };
        let base = self.buf.addr();
        let send = match op {
            Op::Read(at, rkey) => SendOp::Read {
                local,
                remote_addr: base + at,
                rkey,
            },
            Op::Write(at, rkey) => SendOp::Write {
                local,
                remote_addr: base + at,
                rkey,
            },
            Op::Cas(at, rkey) => SendOp::CompareSwap {
                local,
                remote_addr: base + at,
                rkey,
                compare: 0,
                swap: 1,
            },
            Op::Faa(at, rkey) => SendOp::FetchAdd {
                local,
                remote_addr: base + at,
                rkey,
                add: 1,
            },
        };
        let wc = self.post(&pair.requester, send)?;
        Ok(match wc.status {
            WcStatus::Success => Access::Done,
            WcStatus::WrFlushError => return Err("an access was flushed".into()),
            _ => Access::Refused,
        })
    }

    fn expect_done(&self, pair: &Pair<P>, op: Op, what: &str) -> Result<(), String> {
        match self.access(pair, op)? {
            Access::Done => Ok(()),
            Access::Refused => Err(format!("{what} a window was refused")),
        }
    }

    fn post_and_wait(
        &self,
        qp: &P::Qp,
        op: SendOp<'_, P::Mw, P::Mr>,
        what: &str,
    ) -> Result<(), String> {
        let wc = self.post(qp, op)?;
        if wc.status == WcStatus::Success {
            Ok(())
        } else {
            Err(format!("{what} failed: {:?}", wc.status))
        }
    }

    /// Posts one signaled request and waits (bounded) for its completion.
    #[allow(clippy::disallowed_methods)] // a driver: a real-time bound on the completion
    fn post(&self, qp: &P::Qp, op: SendOp<'_, P::Mw, P::Mr>) -> Result<WorkCompletion, String> {
        let wr = SendWr {
            wr_id: 1,
            signaled: true,
            op,
        };
        qp.post_send(std::slice::from_ref(&wr))
            .map_err(|(_, e)| format!("posting: {e}"))?;
        let deadline = Instant::now() + COMPLETION_BOUND;
        let mut wcs = [WorkCompletion::default(); 4];
        loop {
            let n = self.cq.poll(&mut wcs);
            // Only this request is outstanding: the responder's QP completes nothing of its own
            // but type-2 binds and invalidations posted on it, which are this request.
            if let Some(wc) = wcs[..n].iter().find(|w| w.qp_num == qp.qp_num()) {
                return Ok(*wc);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("a request never completed".into());
            }
            self.cq.wait(left);
        }
    }
}

/// An access the check issues: (offset in the buffer, rkey).
#[derive(Clone, Copy, Debug)]
enum Op {
    Read(u64, Rkey),
    Write(u64, Rkey),
    Cas(u64, Rkey),
    Faa(u64, Rkey),
}

fn write(at: u64, rkey: Rkey) -> Op {
    Op::Write(at, rkey)
}

fn read(at: u64, rkey: Rkey) -> Op {
    Op::Read(at, rkey)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic::soft::{SoftFabric, SoftProvider};

    /// The check's listener takes only its own connections: a client that reaches the port
    /// while the check runs (a node restarted under its clients) is refused and never handed
    /// to the check as one of its loopback QPs.
    #[test]
    fn only_the_checks_own_connections_are_accepted() {
        let fabric = SoftFabric::new();
        let ctx = fabric.open_device(rnic::soft::SoftConfig::default());
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let accepted = Arc::new(Accepted::<SoftProvider> {
            qps: Mutex::new(HashMap::new()),
            arrived: Condvar::new(),
        });
        let acceptor = Acceptor::<SoftProvider> {
            pd,
            cq,
            accepted: accepted.clone(),
            token: 0xfeed,
        };
        for foreign in [&b""[..], b"hello from a client", &hello(0xbeef, 0)[..]] {
            assert!(acceptor.create_qp(foreign).is_err(), "{foreign:?}");
        }
        let own = hello(0xfeed, 7);
        let qp = acceptor.create_qp(&own).unwrap();
        acceptor.established(qp, &own);
        let stray = acceptor.create_qp(&hello(0xfeed, 8)).unwrap();
        acceptor.established(stray, b"not the check's");
        let qps = accepted.qps.lock();
        assert_eq!(qps.keys().copied().collect::<Vec<_>>(), [7]);
    }
}
