//! RC queue pairs: the state machine and the glue between the sans-IO requester/responder
//! cores, the protection table, the completion queues and a link.
//!
//! Locks (never held across another QP's lock in a cycle):
//! - `tx`: orders transmissions of requests (PSN order = wire order); held while posting.
//! - `req`: the requester core; held briefly, never while transmitting, so an inline link can
//!   deliver the response on the posting thread.
//! - `rx`: the responder core and the receive queue; held while a request executes and its
//!   response is transmitted (responses therefore leave in PSN order).
//! - `link`: read-locked to transmit; written only by connect and reset.
//!
//! Entering ERR is an atomic state change plus a request to be progressed; the flush of
//! outstanding requests and posted receives happens at the next poll of the QP's CQs (or the
//! next post), on the owner's thread, so a responder never takes a requester lock.
//!
//! The link decides what silence from the peer means ([`RetryPolicy`], taken when the QP
//! connects): the verbs contract's `QpTiming` or a connection's adaptive timeouts (TCP). On
//! a link that closes on error, entering ERR also closes the link — after the response that
//! reports the error has been transmitted — so the peer learns at once; `Link::close` takes
//! no QP lock, so this is safe from any context.

pub mod ack_timer;
mod chain;
mod post;
mod receive;
pub mod requester;
pub mod responder;
mod ring;
pub mod rto;

use super::device::{Connecting, DeviceInner};
use super::link::{
    Admission, Corked, Link, LinkDown, LinkEnd, PacketSink, RetryPolicy, check_destination,
};
use super::mpt::BindRequest;
use super::objects::{SoftMr, SoftMw, SoftPd};
use super::provider::{SoftAddress, SoftProvider};
use super::queues::{CqInner, Progress, SoftCq, SoftSrq};
use super::wire::{NakCode, Packet, PayloadLen, Request, RequestOp, Response, ResponseKind};
use crate::verbs::{
    AccessFlags, AsyncEvent, CrossChannel, MemoryKey, MemoryWindow, PdId, Psn, QpInit, QpNumber,
    QpService, QpState, QpTiming, QueuePair, RecvWr, Resource, SendOp, SendWr, Sge, VerbsError,
    VerbsResult, WcOpcode, WcStatus, WorkCompletion,
};
use chain::ChainQueues;
use parking_lot::{Mutex, RwLock};
use receive::{QueueSource, Rx, SrqSource};
use requester::{Payload, PendingSpec, Requester, RequesterAction};
use responder::{RecvSource, ResponderCtx, ResponderState};
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// A queue pair handle. Cloning shares the QP; it is destroyed when the last handle drops.
#[derive(Clone)]
pub struct SoftQp {
    pub(crate) inner: Arc<QpInner>,
}

impl fmt::Debug for SoftQp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftQp")
            .field("qpn", &self.inner.qpn)
            .field("state", &self.inner.state())
            .finish()
    }
}

pub(crate) struct QpInner {
    pub(crate) dev: Arc<DeviceInner>,
    pd: SoftPd,
    pub(crate) qpn: QpNumber,
    send_cq: SoftCq,
    recv_cq: SoftCq,
    srq: Option<SoftSrq>,
    state: AtomicU8,
    access: RwLock<AccessFlags>,
    timing: QpTiming,
    max_send_wr: usize,
    max_recv_wr: usize,
    tx: Mutex<()>,
    req: Mutex<Option<Requester>>,
    rx: Mutex<Rx>,
    link: RwLock<Option<Arc<dyn Link>>>,
    /// How the device serves this QP's incoming requests; handed to each link it connects on.
    service: Mutex<QpService>,
    /// The connected peer QP (responses are addressed to it).
    peer: AtomicU32,
    /// On the watch list of the send CQ / of the receive CQ (when it is another CQ): one
    /// flag per list, so a QP is on each at most once however often one of them is polled.
    armed_on_send: AtomicBool,
    armed_on_recv: AtomicBool,
    /// The responder answered receiver-not-ready since the last `post_recv` (set under the
    /// `rx` lock, so a receive posted after the answer always sees it): the next `post_recv`
    /// tells the link ([`Link::receive_posted`]).
    rnr_answered: AtomicBool,
    /// The held send queue and WQE ring of a cross-channel QP; `None` for an ordinary one.
    chain: Option<Box<ChainQueues>>,
    /// Resets so far: a bind for this QP from another QP checks that none ran meanwhile.
    resets: AtomicU64,
    this: Weak<QpInner>,
}

impl fmt::Debug for QpInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QpInner")
            .field("qpn", &self.qpn)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        if let Some(link) = self.link.get_mut().take() {
            link.close();
        }
        // Windows first: once the number is released, a new QP may take it, and must find
        // none of them bound to it.
        self.dev.mpt.invalidate_type2_of_qp(self.qpn);
        self.dev.cross.unregister_qp(self.qpn);
        self.dev.release_qpn(self.qpn);
    }
}

const STATES: [QpState; 5] = [
    QpState::Reset,
    QpState::Init,
    QpState::ReadyToReceive,
    QpState::ReadyToSend,
    QpState::Error,
];

fn state_index(s: QpState) -> u8 {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::ReadyToReceive => 2,
        QpState::ReadyToSend => 3,
        QpState::Error => 4,
    }
}

impl QpInner {
    pub(crate) fn create(
        pd: &SoftPd,
        init: QpInit<'_, SoftProvider>,
        cross: Option<CrossChannel>,
    ) -> VerbsResult<SoftQp> {
        let dev = &pd.inner.dev;
        let attr = &dev.config.attr;
        if init.max_send_wr == 0 || init.max_send_wr > attr.max_qp_wr {
            return Err(VerbsError::InvalidArgument("max_send_wr out of range"));
        }
        if init.srq.is_none() && init.max_recv_wr > attr.max_qp_wr {
            return Err(VerbsError::InvalidArgument("max_recv_wr out of range"));
        }
        if let Some(srq) = init.srq
            && srq.inner.pd != pd.inner.id
        {
            return Err(VerbsError::PdMismatch);
        }
        if init.srq.is_some() && cross.is_some_and(|c| c.managed_recv) {
            return Err(VerbsError::InvalidArgument(
                "a managed receive queue cannot use an SRQ",
            ));
        }
        let chain = match cross {
            Some(c) => {
                dev.cross.start_engine()?;
                Some(Box::new(ChainQueues::new(pd, init.max_send_wr, c)?))
            }
            None => None,
        };
        let managed_recv = cross.is_some_and(|c| c.managed_recv);
        let qpn = dev.take_qpn()?;
        let inner = Arc::new_cyclic(|this: &Weak<QpInner>| {
            let named: Weak<dyn crate::soft::cross_channel::NamedQp> = this.clone();
            dev.cross.register_qp(qpn, named);
            QpInner {
                dev: dev.clone(),
                pd: pd.clone(),
                qpn,
                send_cq: init.send_cq.clone(),
                recv_cq: init.recv_cq.clone(),
                srq: init.srq.cloned(),
                state: AtomicU8::new(state_index(QpState::Reset)),
                access: RwLock::new(init.access & AccessFlags::REMOTE_ALL),
                timing: init.timing,
                max_send_wr: init.max_send_wr as usize,
                max_recv_wr: init.max_recv_wr as usize,
                tx: Mutex::new(()),
                req: Mutex::new(None),
                rx: Mutex::new(Rx::new(Psn::default(), managed_recv)),
                link: RwLock::new(None),
                service: Mutex::new(QpService::default()),
                peer: AtomicU32::new(0),
                armed_on_send: AtomicBool::new(false),
                armed_on_recv: AtomicBool::new(false),
                rnr_answered: AtomicBool::new(false),
                chain,
                resets: AtomicU64::new(0),
                this: this.clone(),
            }
        });
        Ok(SoftQp { inner })
    }

    pub(crate) fn state(&self) -> QpState {
        STATES[self.state.load(Ordering::SeqCst) as usize % STATES.len()]
    }

    /// The one place states change; returns the previous state.
    fn set_state(&self, new: QpState) -> QpState {
        STATES[self.state.swap(state_index(new), Ordering::SeqCst) as usize]
    }

    pub(crate) fn pd_id(&self) -> PdId {
        self.pd.inner.id
    }

    /// A receive became available (posted, or enabled on a managed queue; called without the
    /// `rx` lock): a link that stopped reading the peer's requests after a receiver-not-ready
    /// answer reads them again.
    fn receive_available(&self) {
        if self.rnr_answered.swap(false, Ordering::SeqCst)
            && let Some(link) = self.link.read().as_ref()
        {
            link.receive_posted();
        }
    }

    fn is_managed_recv(&self) -> bool {
        self.chain.as_deref().is_some_and(|c| c.cross.managed_recv)
    }

    /// Moves to ERR (if not already), raising `event`, and schedules the flush; closes a link
    /// that closes on error.
    fn enter_error(&self, event: Option<AsyncEvent>) {
        if self.mark_error(event) {
            self.hang_up();
        }
    }

    /// The state change of [`enter_error`](Self::enter_error): returns whether the QP was not
    /// in ERR before.
    fn mark_error(&self, event: Option<AsyncEvent>) -> bool {
        let old = self.set_state(QpState::Error);
        let first = old != QpState::Error;
        if first && let Some(e) = event {
            self.dev.push_event(e);
        }
        self.arm();
        first
    }

    /// Closes the link if its policy says that a QP in ERR does (a TCP connection: the peer
    /// reads EOF and fails its QP at once rather than after its budget).
    fn hang_up(&self) {
        let link = self.link.read().clone();
        if let Some(link) = link
            && link.retry_policy().closes_on_error()
        {
            link.close();
        }
    }

    /// Asks the QP's CQs to progress it at their next poll.
    fn arm(&self) {
        let me: Weak<dyn Progress> = self.this.clone();
        if !self.armed_on_send.swap(true, Ordering::SeqCst) {
            self.send_cq.inner.watch(me.clone());
        }
        if !Arc::ptr_eq(&self.send_cq.inner, &self.recv_cq.inner)
            && !self.armed_on_recv.swap(true, Ordering::SeqCst)
        {
            self.recv_cq.inner.watch(me);
        }
    }

    fn after_action(&self, action: RequesterAction) {
        match action {
            RequesterAction::None => {}
            RequesterAction::Fatal => self.enter_error(Some(AsyncEvent::QpFatal(self.qpn))),
            RequesterAction::Retransmit(reqs) => {
                for r in reqs {
                    if self.transmit_request(&r).is_err() {
                        self.link_lost();
                        break;
                    }
                }
            }
        }
    }

    /// Pushes finished completions and re-arms if timers are pending.
    fn release_and_rearm(&self) {
        let mut guard = self.req.lock();
        let Some(r) = guard.as_mut() else { return };
        let cq = &self.send_cq.inner;
        r.release(self.qpn, &mut |wc| cq.push(wc));
        let pending = r.deadline().is_some();
        drop(guard);
        if pending {
            self.arm();
        }
    }

    fn flush_all(&self) {
        if let Some(r) = self.req.lock().as_mut() {
            r.flush();
            self.flush_held(r);
            let cq = &self.send_cq.inner;
            r.release(self.qpn, &mut |wc| cq.push(wc));
        }
        let flushed: Vec<RecvWr> = self.rx.lock().recv_queue.drain(..).collect();
        for wr in flushed {
            self.recv_cq.inner.push(WorkCompletion {
                wr_id: wr.wr_id,
                status: WcStatus::WrFlushError,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                qp_num: self.qpn,
                invalidated_rkey: None,
            });
        }
    }

    fn link_lost(&self) {
        self.link_ended(LinkEnd::Failed);
    }

    /// The link is gone: outstanding work flushes and the QP enters the error state, with the
    /// event saying whether the peer closed in order or something failed.
    fn link_ended(&self, end: LinkEnd) {
        if let Some(r) = self.req.lock().as_mut() {
            r.link_lost();
        }
        self.enter_error(Some(match end {
            LinkEnd::Closed => AsyncEvent::QpDisconnected(self.qpn),
            LinkEnd::Failed => AsyncEvent::QpFatal(self.qpn),
        }));
    }

    fn transmit_request(&self, r: &Request<Payload>) -> Result<(), LinkDown> {
        let link = self.link.read();
        let link = link.as_ref().ok_or(LinkDown)?;
        link.transmit(&Packet::Request(Request {
            dst_qp: r.dst_qp,
            psn: r.psn,
            op: r.op.as_borrowed(),
            ack_req: r.ack_req,
        }))
    }

    fn handle_request(&self, req: &Request<&[u8]>) {
        self.respond(|responder, ctx, recvs| Some(responder.handle(ctx, req, recvs)));
    }

    /// Decides on a request from its header ([`ResponderState::admit`]); an outcome decided
    /// there is sent and applied as [`handle_request`](Self::handle_request) would.
    fn admit_request(&self, req: &Request<PayloadLen>) -> Admission {
        let mut decided = false;
        self.respond(|responder, ctx, recvs| {
            let out = responder.admit(ctx, req, recvs);
            decided = out.is_some();
            out
        });
        if decided {
            Admission::Discard
        } else {
            Admission::Deliver
        }
    }

    /// Runs the responder (`run`) under the QP's responder locks and applies its outcome, if
    /// any: the receive completion, the response, ERR and the hang-up. Requests reaching a QP
    /// that is not connected are dropped.
    fn respond(
        &self,
        run: impl FnOnce(
            &mut ResponderState,
            &ResponderCtx<'_>,
            &mut dyn RecvSource,
        ) -> Option<responder::Outcome>,
    ) {
        match self.state() {
            QpState::ReadyToReceive | QpState::ReadyToSend => {}
            _ => return, // a responder not (or no longer) connected drops requests
        }
        let access = self.access.read();
        let mut rx = self.rx.lock();
        let ctx = ResponderCtx {
            mpt: &self.dev.mpt,
            pd: self.pd_id(),
            qpn: self.qpn,
            qp_access: *access,
            max_msg: self.dev.config.attr.max_msg_size,
        };
        let Rx {
            responder,
            recv_queue,
            recv_taken,
            recv_enabled,
        } = &mut *rx;
        let outcome = match &self.srq {
            Some(srq) => run(responder, &ctx, &mut SrqSource(srq)),
            None => run(
                responder,
                &ctx,
                &mut QueueSource {
                    queue: recv_queue,
                    taken: recv_taken,
                    enabled: *recv_enabled,
                },
            ),
        };
        drop(access);
        let Some(outcome) = outcome else {
            return;
        };
        if let Some(wc) = outcome.recv_completion {
            self.recv_cq.inner.push(wc);
        }
        // The NAK that reports an error goes out before the link may close.
        let failed = outcome
            .error
            .is_some_and(|event| self.mark_error(Some(event)));
        if let Some((psn, kind)) = outcome.response {
            if matches!(kind, ResponseKind::Nak(NakCode::ReceiverNotReady)) && self.srq.is_none() {
                self.rnr_answered.store(true, Ordering::SeqCst);
            }
            let link = self.link.read();
            if let Some(link) = link.as_ref() {
                let _ = link.transmit(&Packet::Response(Response {
                    dst_qp: QpNumber(self.peer.load(Ordering::SeqCst)),
                    psn,
                    kind: kind.as_borrowed(),
                }));
            }
        }
        drop(rx);
        if failed {
            self.hang_up();
        }
    }

    fn handle_response(&self, resp: &Response<&[u8]>) {
        if self.state() != QpState::ReadyToSend {
            return;
        }
        let now = self.dev.config.clock.now();
        let mpt = &self.dev.mpt;
        let pd = self.pd_id();
        let action = {
            let mut guard = self.req.lock();
            let Some(r) = guard.as_mut() else { return };
            r.on_response(resp.psn, &resp.kind, now, &mut |pending, kind| {
                let Some(sge) = pending.local else {
                    return WcStatus::Success;
                };
                let bytes: [u8; 8];
                let data: &[u8] = match kind {
                    ResponseKind::ReadData(d) => d,
                    ResponseKind::AtomicAck(v) => {
                        bytes = v.to_ne_bytes();
                        &bytes
                    }
                    _ => return WcStatus::BadResponseError,
                };
                match mpt.check_local(sge.lkey, sge.addr, data.len() as u64, true, pd) {
                    Ok(grant) => {
                        grant.region().write(sge.addr, data);
                        WcStatus::Success
                    }
                    Err(_) => WcStatus::LocalProtectionError,
                }
            })
        };
        if action == RequesterAction::Fatal {
            self.enter_error(Some(AsyncEvent::QpFatal(self.qpn)));
        }
        self.release_and_rearm();
    }
}

impl Progress for QpInner {
    /// Timers and flushes; called from CQ polls.
    fn progress(&self, read_link: bool, from: &CqInner) {
        // Off the list of the CQ that took it (it is still on the other's, if armed there).
        if std::ptr::eq(from, &*self.send_cq.inner) {
            self.armed_on_send.store(false, Ordering::SeqCst);
        } else {
            self.armed_on_recv.store(false, Ordering::SeqCst);
        }
        let now = self.dev.config.clock.now();
        // A due timer reads the link even where the transport's engine reads it otherwise:
        // what has arrived must count before silence does (rare: at most once per timeout).
        let (due, signaled) = self.req.lock().as_ref().map_or((false, false), |r| {
            (r.deadline().is_some_and(|d| d <= now), r.awaits_signaled())
        });
        // Reading on the polling thread saves a hand-off from the engine only when the
        // poller may be waiting for a completion: a server's QPs that await nothing but the
        // acknowledgements of unsignaled replies leave those to the engine (a read here would
        // cost the poller a system call per QP per poll, mostly finding nothing).
        if (read_link && signaled) || due {
            let link = self.link.read().clone();
            if let Some(link) = link {
                link.poll_receive();
            }
        }
        if self.state() == QpState::Error {
            self.flush_all();
            return;
        }
        let Some(_tx) = self.tx.try_lock() else {
            self.arm(); // a poster holds it; try again next poll
            return;
        };
        let action = match self.req.lock().as_mut() {
            Some(r) => r.on_timeout(now),
            None => return,
        };
        self.after_action(action);
        self.release_and_rearm();
    }
}

impl Connecting for QpInner {
    fn qpn(&self) -> QpNumber {
        self.qpn
    }

    fn new_psn(&self) -> Psn {
        self.dev.new_psn()
    }

    fn sink(&self) -> Weak<dyn PacketSink> {
        self.this.clone()
    }

    /// Connection set-up: RESET → INIT → RTR → RTS with the peer's numbers and a link.
    fn establish(
        &self,
        peer_qp: QpNumber,
        send_psn: Psn,
        recv_psn: Psn,
        link: Arc<dyn Link>,
    ) -> VerbsResult<()> {
        let _tx = self.tx.lock();
        if self.state() != QpState::Reset {
            return Err(VerbsError::InvalidQpState {
                qpn: self.qpn,
                state: self.state().name(),
                action: "connect",
            });
        }
        self.set_state(QpState::Init);
        self.rx.lock().responder = ResponderState::new(recv_psn);
        let policy: RetryPolicy = link.retry_policy();
        {
            // Under the service lock, so a `set_service` meanwhile reaches this link too.
            let service = self.service.lock();
            link.set_service(&service);
            *self.link.write() = Some(link);
        }
        self.peer.store(peer_qp.0, Ordering::SeqCst);
        self.set_state(QpState::ReadyToReceive);
        let mut requester = Requester::with_policy(peer_qp, send_psn, self.timing, policy);
        if matches!(policy, RetryPolicy::Stream(_)) {
            // A connection delivers in order and says when it breaks, so an unsignaled WRITE
            // or SEND needs its acknowledgement only to free its send-queue slot: up to
            // `ACK_EVERY` of them share one (a peer's wake-up and a frame each, saved).
            requester.set_ack_every(ACK_EVERY.min(self.max_send_wr as u32 / 4).max(1));
        }
        *self.req.lock() = Some(requester);
        self.set_state(QpState::ReadyToSend);
        Ok(())
    }
}

/// On links that deliver by themselves (TCP), unsignaled WRITEs and SENDs ask for an
/// acknowledgement once in this many (and whenever the send queue is a quarter full).
const ACK_EVERY: u32 = 16;

impl PacketSink for QpInner {
    fn deliver(&self, packet: &Packet<&[u8]>) {
        if check_destination(packet, self.qpn).is_err() {
            if matches!(self.state(), QpState::ReadyToReceive | QpState::ReadyToSend) {
                self.enter_error(Some(AsyncEvent::QpFatal(self.qpn)));
            }
            return;
        }
        match packet {
            Packet::Request(r) => self.handle_request(r),
            Packet::Response(r) => self.handle_response(r),
        }
    }

    fn admit(&self, head: &Packet<PayloadLen>) -> Admission {
        if check_destination(head, self.qpn).is_err() {
            return Admission::Refuse("packet for another QP");
        }
        match head {
            Packet::Request(r) => match self.state() {
                QpState::ReadyToReceive | QpState::ReadyToSend => self.admit_request(r),
                _ => Admission::Discard, // dropped, as `handle_request` would
            },
            Packet::Response(r) => match (&r.kind, self.state()) {
                (ResponseKind::ReadData(PayloadLen(len)), QpState::ReadyToSend) => self
                    .req
                    .lock()
                    .as_ref()
                    .map_or(Admission::Discard, |q| q.admit_read_data(r.psn, *len)),
                (ResponseKind::ReadData(_), _) => Admission::Discard,
                _ => Admission::Deliver, // fixed-size: nothing to buffer beyond the header
            },
        }
    }

    fn link_down(&self, end: LinkEnd) {
        match self.state() {
            QpState::Reset | QpState::Error => {}
            _ => self.link_ended(end),
        }
    }
}

impl QueuePair<SoftProvider> for SoftQp {
    fn qp_num(&self) -> QpNumber {
        self.inner.qpn
    }

    fn state(&self) -> QpState {
        self.inner.state()
    }

    fn connect(&self, to: &SoftAddress, private_data: &[u8]) -> VerbsResult<()> {
        if self.inner.state() != QpState::Reset {
            return Err(VerbsError::InvalidQpState {
                qpn: self.inner.qpn,
                state: self.inner.state().name(),
                action: "connect",
            });
        }
        let transport = self.inner.dev.transport.clone();
        transport.connect(&*self.inner, to, private_data)
    }

    fn reset(&self) -> VerbsResult<()> {
        let q = &self.inner;
        let _tx = q.tx.lock();
        if let Some(link) = q.link.write().take() {
            link.close();
        }
        *q.req.lock() = None;
        *q.rx.lock() = Rx::new(Psn::default(), q.is_managed_recv());
        if let Some(chain) = q.chain.as_deref() {
            chain.reset();
        }
        q.resets.fetch_add(1, Ordering::SeqCst);
        q.set_state(QpState::Reset);
        // Type-2 windows bound to this QP die with its connection.
        q.dev.mpt.invalidate_type2_of_qp(q.qpn);
        Ok(())
    }

    fn set_error(&self) {
        self.inner.enter_error(None);
    }

    /// Kept by the QP and handed to its link (now and on every later connection), whose
    /// receiver enforces it: the TCP transport's engines do; a loopback connection to the
    /// device's own listener runs requests on the requester's thread and ignores it.
    fn set_service(&self, service: QpService) -> VerbsResult<()> {
        service.validate()?;
        let q = &self.inner;
        if !q.dev.transport.enforces_service() {
            return Err(VerbsError::Unsupported(
                "QP service weights and rate limits need the TCP transport",
            ));
        }
        let mut current = q.service.lock();
        *current = service;
        if let Some(link) = q.link.read().as_ref() {
            link.set_service(&service);
        }
        Ok(())
    }

    /// Asks the QP's current link: the TCP transport's engines count what they delivered to
    /// this QP's responder on its connection; in-process and loopback links do not count.
    fn served(&self) -> Option<crate::verbs::QpServed> {
        self.inner.link.read().as_ref().and_then(|l| l.served())
    }

    fn wqe_ring(&self) -> Option<crate::verbs::WqeRing> {
        self.inner.ring()
    }

    fn modify_access(&self, access: AccessFlags) -> VerbsResult<()> {
        // The write lock waits for requests executing under the old flags.
        *self.inner.access.write() = access & AccessFlags::REMOTE_ALL;
        Ok(())
    }

    fn post_send(&self, wrs: &[SendWr<'_, SoftMw, SoftMr>]) -> Result<(), (usize, VerbsError)> {
        let q = &self.inner;
        let posted = q.post_list(wrs);
        if q.chain.is_some() {
            // The doorbell: start what nothing holds (releases and flushes as below), also
            // when a later request of the list was refused.
            q.run_chain();
            return posted;
        }
        posted?;
        q.release_and_rearm();
        if q.state() == QpState::Error {
            q.flush_all();
        }
        Ok(())
    }

    fn post_recv(&self, wrs: &[RecvWr]) -> VerbsResult<()> {
        let q = &self.inner;
        if q.srq.is_some() {
            return Err(VerbsError::InvalidArgument(
                "QP uses a shared receive queue",
            ));
        }
        match q.state() {
            QpState::Reset => {
                return Err(VerbsError::InvalidQpState {
                    qpn: q.qpn,
                    state: "RESET",
                    action: "post_recv",
                });
            }
            QpState::Error => {
                for wr in wrs {
                    q.recv_cq
                        .inner
                        .push(q.flushed_completion(wr.wr_id, WcOpcode::Recv));
                }
                return Ok(());
            }
            _ => {}
        }
        let mut rx = q.rx.lock();
        if rx.recv_queue.len() + wrs.len() > q.max_recv_wr {
            return Err(VerbsError::Exhausted(Resource::QueueSlot));
        }
        rx.recv_queue.extend(wrs.iter().copied());
        drop(rx);
        q.receive_available();
        Ok(())
    }
}

fn opcode_of(op: &SendOp<'_, SoftMw, SoftMr>) -> WcOpcode {
    match op {
        SendOp::Read { .. } => WcOpcode::Read,
        SendOp::Write { .. } => WcOpcode::Write,
        SendOp::CompareSwap { .. } => WcOpcode::CompareSwap,
        SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        SendOp::Send { .. } | SendOp::SendWithInvalidate { .. } => WcOpcode::Send,
        SendOp::BindMw { .. } => WcOpcode::BindMw,
        SendOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
        SendOp::Wait { .. } => WcOpcode::Wait,
        SendOp::Enable { .. } => WcOpcode::Enable,
    }
}
