//! The RC QP handle: state changes and posting.

use super::memory::{Mr, Mw, Pd};
use super::queues::{Cq, RawRecvWr, Srq, post_error, post_recv_list, sge_list};
use super::{check, last_error};
use rdma_mummy_sys as sys;
use std::ffi::c_int;
use std::io;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// Memory-window bind arguments of a [`RawSendWr`].
#[derive(Clone, Copy, Debug)]
pub struct RawBind<'a> {
    /// The window.
    pub mw: &'a Mw,
    /// The rkey the window gets (`bind_mw.rkey`).
    pub new_rkey: u32,
    /// The region, or `None` to unbind (type 1).
    pub mr: Option<&'a Mr>,
    /// First address.
    pub addr: u64,
    /// Length.
    pub length: u64,
    /// `IBV_ACCESS_*` rights of the window.
    pub access: u32,
}

/// A send request as plain values (`ibv_send_wr`, one SGE at most).
#[derive(Clone, Copy, Debug, Default)]
pub struct RawSendWr<'a> {
    /// `wr_id`.
    pub wr_id: u64,
    /// `IBV_WR_*`.
    pub opcode: u32,
    /// `IBV_SEND_*`.
    pub send_flags: u32,
    /// `(addr, length, lkey)` of the one SGE, if any.
    pub sge: Option<(u64, u32, u32)>,
    /// `wr.rdma.remote_addr` / `wr.atomic.remote_addr`.
    pub remote_addr: u64,
    /// `wr.rdma.rkey` / `wr.atomic.rkey`.
    pub rkey: u32,
    /// `wr.atomic.compare_add`.
    pub compare_add: u64,
    /// `wr.atomic.swap`.
    pub swap: u64,
    /// `invalidate_rkey` for LOCAL_INV and SEND_WITH_INV.
    pub invalidate_rkey: u32,
    /// Bind arguments for BIND_MW.
    pub bind: Option<RawBind<'a>>,
}

/// What a bind without a region (a type-1 unbind, or a bind the device must reject) passes as
/// `bind_info.mr`, instead of NULL.
///
/// Several providers read the region of every bind request whatever its length: rxe
/// (`convert_send_wr` in rdma-core's `providers/rxe/rxe.c` loads `bind_info.mr->lkey`) and
/// mlx4 read `lkey`, irdma reads the `verbs_mr` around it (`access`) for a type-2 window. With
/// NULL the process dies with SIGSEGV inside `ibv_post_send`. The placeholder is all zeros:
/// lkey 0 names no region (rxe looks a region up only for a non-zero length, and finds none
/// for index 0, so the bind fails with `MW_BIND_ERR`), and the tail covers the fields a
/// provider's `verbs_mr` adds after the `ibv_mr`. The device, not this crate, rejects the bind.
#[repr(C)]
struct NoRegion {
    mr: sys::ibv_mr,
    _verbs_mr_tail: [u64; 4],
}

/// Creation attributes of an RC QP.
#[derive(Clone, Copy, Debug)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth (ignored with an SRQ).
    pub max_recv_wr: u32,
}

/// An RC queue pair (`ibv_qp`).
#[derive(Debug)]
pub struct Qp {
    pub(super) ptr: NonNull<sys::ibv_qp>,
    _pd: Arc<Pd>,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
    _srq: Option<Arc<Srq>>,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: the QP is valid and destroyed once; its CQs/SRQ/PD outlive it (held here).
        unsafe { sys::ibv_destroy_qp(self.ptr.as_ptr()) };
    }
}

/// `ibv_create_qp` of type RC with one SGE per request, completions signalled per request.
pub fn create_qp(
    pd: &Arc<Pd>,
    send_cq: &Arc<Cq>,
    recv_cq: &Arc<Cq>,
    srq: Option<&Arc<Srq>>,
    caps: QpCaps,
) -> io::Result<Qp> {
    // SAFETY: plain old data; all-zero is valid.
    let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    init.send_cq = send_cq.ptr.as_ptr();
    init.recv_cq = recv_cq.ptr.as_ptr();
    init.srq = srq.map_or(ptr::null_mut(), |s| s.ptr.as_ptr());
    init.cap.max_send_wr = caps.max_send_wr;
    init.cap.max_recv_wr = if srq.is_some() { 0 } else { caps.max_recv_wr };
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = if srq.is_some() { 0 } else { 1 };
    init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
    init.sq_sig_all = 0;
    // SAFETY: valid PD, CQs and SRQ of the same device; init is fully initialized.
    let ptr = unsafe { sys::ibv_create_qp(pd.ptr.as_ptr(), &mut init) };
    Ok(Qp {
        ptr: NonNull::new(ptr).ok_or_else(last_error)?,
        _pd: pd.clone(),
        _send_cq: send_cq.clone(),
        _recv_cq: recv_cq.clone(),
        _srq: srq.cloned(),
    })
}

/// What `ibv_modify_qp` changes: the attribute mask and the values it names.
#[derive(Clone, Copy, Debug, Default)]
pub struct QpModify {
    /// `IBV_QP_*` mask.
    pub mask: u32,
    /// `qp_state`.
    pub state: u32,
    /// `qp_access_flags`.
    pub access: u32,
    /// `port_num`.
    pub port: u8,
    /// `path_mtu` (`IBV_MTU_*`).
    pub path_mtu: u32,
    /// `dest_qp_num`.
    pub dest_qp_num: u32,
    /// `rq_psn`.
    pub rq_psn: u32,
    /// `sq_psn`.
    pub sq_psn: u32,
    /// `max_dest_rd_atomic`.
    pub max_dest_rd_atomic: u8,
    /// `max_rd_atomic`.
    pub max_rd_atomic: u8,
    /// `min_rnr_timer` (IB encoding).
    pub min_rnr_timer: u8,
    /// `timeout` (IB encoding).
    pub timeout: u8,
    /// `retry_cnt`.
    pub retry_cnt: u8,
    /// `rnr_retry`.
    pub rnr_retry: u8,
    /// `ah_attr.dlid`.
    pub dlid: u16,
    /// `ah_attr.grh.dgid` when the path is global (RoCE, or routed IB).
    pub dgid: Option<[u8; 16]>,
    /// `ah_attr.grh.sgid_index`.
    pub sgid_index: u8,
}

impl Qp {
    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: valid while `self` is.
        unsafe { self.ptr.as_ref().qp_num }
    }

    /// The current state (`ibv_query_qp` with `IBV_QP_STATE`).
    pub fn query_state(&self) -> io::Result<u32> {
        // SAFETY: plain old data; all-zero is valid.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain old data; all-zero is valid.
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid QP and out-pointers.
        check(unsafe {
            sys::ibv_query_qp(
                self.ptr.as_ptr(),
                &mut attr,
                sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int,
                &mut init,
            )
        })?;
        Ok(attr.qp_state)
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, m: &QpModify) -> io::Result<()> {
        // SAFETY: plain old data; all-zero is valid.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = m.state;
        attr.qp_access_flags = m.access;
        attr.port_num = m.port;
        attr.path_mtu = m.path_mtu;
        attr.dest_qp_num = m.dest_qp_num;
        attr.rq_psn = m.rq_psn;
        attr.sq_psn = m.sq_psn;
        attr.max_dest_rd_atomic = m.max_dest_rd_atomic;
        attr.max_rd_atomic = m.max_rd_atomic;
        attr.min_rnr_timer = m.min_rnr_timer;
        attr.timeout = m.timeout;
        attr.retry_cnt = m.retry_cnt;
        attr.rnr_retry = m.rnr_retry;
        attr.ah_attr.dlid = m.dlid;
        attr.ah_attr.port_num = m.port;
        if let Some(dgid) = m.dgid {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid.raw = dgid;
            attr.ah_attr.grh.sgid_index = m.sgid_index;
            attr.ah_attr.grh.hop_limit = 64;
        }
        // SAFETY: valid QP; attr is fully initialized and the mask names what is meaningful.
        check(unsafe { sys::ibv_modify_qp(self.ptr.as_ptr(), &mut attr, m.mask as c_int) })
    }

    /// `ibv_modify_qp_rate_limit`: paces the QP's outgoing packets at `kbps` kilobits per
    /// second (0: unlimited) with bursts of up to `max_burst` bytes (0: the device's default).
    pub fn set_rate_limit(&self, kbps: u32, max_burst: u32) -> io::Result<()> {
        let mut attr = sys::ibv_qp_rate_limit_attr {
            rate_limit: kbps,
            max_burst_sz: max_burst,
            typical_pkt_sz: 0,
            comp_mask: 0,
        };
        // SAFETY: valid QP; attr is fully initialized and outlives the call.
        check(unsafe { sys::ibv_modify_qp_rate_limit(self.ptr.as_ptr(), &mut attr) })
    }

    /// `ibv_post_send` of `wrs` as one list (one doorbell); returns the index of the first
    /// rejected request with the error.
    pub fn post_send(&self, wrs: &[RawSendWr<'_>]) -> Result<(), (usize, io::Error)> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut sges = sge_list(wrs.iter().map(|w| w.sge));
        // SAFETY: plain old data (an ibv_mr of null pointers and zero integers, and padding).
        let mut placeholder: NoRegion = unsafe { std::mem::zeroed() };
        let no_region: *mut sys::ibv_mr = &mut placeholder.mr;
        let mut list: Vec<sys::ibv_send_wr> = wrs
            .iter()
            .map(|w| {
                // SAFETY: ibv_send_wr is plain old data (pointers, integers, unions of them);
                // all-zero is valid.
                let mut c: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
                c.wr_id = w.wr_id;
                c.opcode = w.opcode;
                c.send_flags = w.send_flags;
                c.num_sge = i32::from(w.sge.is_some());
                c.imm_data_invalidated_rkey_union.invalidated_rkey = w.invalidate_rkey;
                if w.opcode == sys::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP
                    || w.opcode == sys::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD
                {
                    c.wr.atomic = sys::atomic_t {
                        remote_addr: w.remote_addr,
                        compare_add: w.compare_add,
                        swap: w.swap,
                        rkey: w.rkey,
                    };
                } else {
                    c.wr.rdma = sys::rdma_t {
                        remote_addr: w.remote_addr,
                        rkey: w.rkey,
                    };
                }
                if let Some(b) = w.bind {
                    c.bind_mw_tso_union.bind_mw = sys::bind_mw_t {
                        mw: b.mw.ptr.as_ptr(),
                        rkey: b.new_rkey,
                        bind_info: sys::ibv_mw_bind_info {
                            mr: b.mr.map_or(no_region, |m| m.ptr.as_ptr()),
                            addr: b.addr,
                            length: b.length,
                            mw_access_flags: b.access,
                        },
                    };
                }
                c
            })
            .collect();
        for i in 0..list.len() {
            list[i].sg_list = &mut sges[i];
            if i + 1 < list.len() {
                let next: *mut sys::ibv_send_wr = &mut list[i + 1];
                list[i].next = next;
            }
        }
        let head: *mut sys::ibv_send_wr = &mut list[0];
        let mut bad: *mut sys::ibv_send_wr = ptr::null_mut();
        // SAFETY: valid QP; the list, its SGEs, the placeholder region and the bound MW/MR
        // handles (borrowed by `wrs`) outlive the call; the provider copies the requests into
        // its queue.
        let ret = unsafe { sys::ibv_post_send(self.ptr.as_ptr(), head, &mut bad) };
        match ret {
            0 => Ok(()),
            ret => Err(post_error(ret, bad, head)),
        }
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&self, wrs: &[RawRecvWr]) -> Result<(), (usize, io::Error)> {
        post_recv_list(wrs, |head, bad| {
            // SAFETY: valid QP; the list and its SGEs live until the call returns.
            unsafe { sys::ibv_post_recv(self.ptr.as_ptr(), head, bad) }
        })
    }
}
