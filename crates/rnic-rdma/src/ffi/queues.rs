//! Completion channel, CQ and SRQ handles; receive lists.

use super::memory::Pd;
use super::{Device, set_nonblocking};
use super::{check, last_error};
use rdma_mummy_sys as sys;
use std::ffi::{c_int, c_void};
use std::io;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// A completion channel (`ibv_comp_channel`) with a non-blocking descriptor.
#[derive(Debug)]
pub struct Channel {
    pub(super) ptr: NonNull<sys::ibv_comp_channel>,
    _dev: Arc<Device>,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: the CQ using this channel holds an Arc of it, so it is gone.
        unsafe { sys::ibv_destroy_comp_channel(self.ptr.as_ptr()) };
    }
}

/// `ibv_create_comp_channel`, with its descriptor made non-blocking.
pub fn create_channel(dev: &Arc<Device>) -> io::Result<Channel> {
    // SAFETY: valid context.
    let ptr = unsafe { sys::ibv_create_comp_channel(dev.ctx.as_ptr()) };
    let ch = Channel {
        ptr: NonNull::new(ptr).ok_or_else(last_error)?,
        _dev: dev.clone(),
    };
    // SAFETY: the channel is valid; fd is its descriptor.
    set_nonblocking(unsafe { ch.ptr.as_ref().fd })?;
    Ok(ch)
}

impl Channel {
    /// Consumes and acknowledges the pending completion events of the channel (non-blocking),
    /// each on the CQ it names; returns how many were pending.
    pub fn drain_events(&self) -> u32 {
        let mut n = 0;
        loop {
            let mut cq: *mut sys::ibv_cq = ptr::null_mut();
            let mut cq_ctx: *mut c_void = ptr::null_mut();
            // SAFETY: valid channel (non-blocking) and out-pointers.
            let ret = unsafe { sys::ibv_get_cq_event(self.ptr.as_ptr(), &mut cq, &mut cq_ctx) };
            if ret != 0 {
                break;
            }
            n += 1;
            // SAFETY: `cq` is the CQ the event names, alive (a CQ with unacknowledged events
            // cannot be destroyed); one ack per event.
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
        }
        n
    }

    /// Waits up to `timeout_ms` for the channel to become readable.
    pub fn wait_readable(&self, timeout_ms: i32) -> bool {
        let mut pfd = libc::pollfd {
            // SAFETY: the channel is valid while `self` is.
            fd: unsafe { self.ptr.as_ref().fd },
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, timeout_ms) > 0 }
    }
}

/// A plain copy of the fields of `ibv_wc` this crate uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RawWc {
    /// `wr_id`.
    pub wr_id: u64,
    /// `status` (`IBV_WC_*`).
    pub status: u32,
    /// `opcode` (valid only on success).
    pub opcode: u32,
    /// `byte_len`.
    pub byte_len: u32,
    /// `qp_num`.
    pub qp_num: u32,
    /// `wc_flags`.
    pub wc_flags: u32,
    /// `invalidated_rkey` (valid with `IBV_WC_WITH_INV`).
    pub invalidated_rkey: u32,
}

/// A completion queue (`ibv_cq`) attached to a completion channel.
#[derive(Debug)]
pub struct Cq {
    pub(super) ptr: NonNull<sys::ibv_cq>,
    channel: Arc<Channel>,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: QPs using this CQ hold an Arc of it, so none is alive.
        unsafe { sys::ibv_destroy_cq(self.ptr.as_ptr()) };
    }
}

/// `ibv_create_cq` with `cqe` entries on `channel`.
pub fn create_cq(dev: &Arc<Device>, cqe: u32, channel: &Arc<Channel>) -> io::Result<Cq> {
    // SAFETY: valid context and channel of the same device.
    let ptr = unsafe {
        sys::ibv_create_cq(
            dev.ctx.as_ptr(),
            cqe.min(i32::MAX as u32) as c_int,
            ptr::null_mut(),
            channel.ptr.as_ptr(),
            0,
        )
    };
    Ok(Cq {
        ptr: NonNull::new(ptr).ok_or_else(last_error)?,
        channel: channel.clone(),
    })
}

impl Cq {
    /// `ibv_poll_cq` into `out`; returns how many were written.
    pub fn poll(&self, out: &mut [RawWc]) -> io::Result<usize> {
        const BATCH: usize = 16;
        let mut done = 0;
        while done < out.len() {
            // SAFETY: ibv_wc is plain old data; all-zero is valid.
            let mut wcs: [sys::ibv_wc; BATCH] = unsafe { std::mem::zeroed() };
            let want = (out.len() - done).min(BATCH);
            // SAFETY: `wcs` has room for `want` entries.
            let n = unsafe { sys::ibv_poll_cq(self.ptr.as_ptr(), want as i32, wcs.as_mut_ptr()) };
            if n < 0 {
                return Err(io::Error::from_raw_os_error(-n));
            }
            for (slot, wc) in out[done..].iter_mut().zip(&wcs[..n as usize]) {
                *slot = RawWc {
                    wr_id: wc.wr_id,
                    status: wc.status,
                    opcode: wc.opcode,
                    byte_len: wc.byte_len,
                    qp_num: wc.qp_num,
                    wc_flags: wc.wc_flags,
                    // SAFETY: both union views are a u32; which one is meaningful is decided
                    // by wc_flags, checked by the caller.
                    invalidated_rkey: unsafe {
                        wc.imm_data_invalidated_rkey_union.invalidated_rkey
                    },
                };
            }
            done += n as usize;
            if (n as usize) < want {
                break;
            }
        }
        Ok(done)
    }

    /// Arms the CQ for one completion event (`ibv_req_notify_cq`).
    pub fn req_notify(&self) -> io::Result<()> {
        // SAFETY: valid CQ.
        check(unsafe { sys::ibv_req_notify_cq(self.ptr.as_ptr(), 0) })
    }

    /// Consumes and acknowledges the pending completion events of the CQ's channel.
    pub fn drain_events(&self) -> u32 {
        self.channel.drain_events()
    }

    /// The channel of this CQ.
    pub fn channel(&self) -> &Channel {
        &self.channel
    }
}

/// A shared receive queue (`ibv_srq`).
#[derive(Debug)]
pub struct Srq {
    pub(super) ptr: NonNull<sys::ibv_srq>,
    _pd: Arc<Pd>,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: QPs using the SRQ hold an Arc of it.
        unsafe { sys::ibv_destroy_srq(self.ptr.as_ptr()) };
    }
}

/// `ibv_create_srq` holding `max_wr` receives of one SGE.
pub fn create_srq(pd: &Arc<Pd>, max_wr: u32) -> io::Result<Srq> {
    // SAFETY: plain old data; all-zero is valid.
    let mut init: sys::ibv_srq_init_attr = unsafe { std::mem::zeroed() };
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 1;
    // SAFETY: valid PD and init attributes.
    let ptr = unsafe { sys::ibv_create_srq(pd.ptr.as_ptr(), &mut init) };
    Ok(Srq {
        ptr: NonNull::new(ptr).ok_or_else(last_error)?,
        _pd: pd.clone(),
    })
}

/// A receive request as plain values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawRecvWr {
    /// `wr_id`.
    pub wr_id: u64,
    /// `(addr, length, lkey)` of the one SGE, if any.
    pub sge: Option<(u64, u32, u32)>,
}

/// The scatter/gather entries of a list of requests, one (possibly empty) per request.
pub(super) fn sge_list(sges: impl Iterator<Item = Option<(u64, u32, u32)>>) -> Vec<sys::ibv_sge> {
    sges.map(|sge| {
        let (addr, length, lkey) = sge.unwrap_or((0, 0, 0));
        sys::ibv_sge { addr, length, lkey }
    })
    .collect()
}

/// What a failed `ibv_post_*` reports: the index of the request `bad` names in the list
/// starting at `head` (0 if it named none), and the error.
pub(super) fn post_error<T>(ret: c_int, bad: *mut T, head: *mut T) -> (usize, io::Error) {
    let index = if bad.is_null() {
        0
    } else {
        // SAFETY: a non-null `bad` points into the list starting at `head` (the provider
        // names the failed request of the list it was given).
        (unsafe { bad.offset_from(head) }).max(0) as usize
    };
    (index, io::Error::from_raw_os_error(ret.abs()))
}

/// Builds a linked list of C receive requests and hands it to `post`; returns the index of
/// the first rejected request with the error.
pub(super) fn post_recv_list(
    wrs: &[RawRecvWr],
    post: impl FnOnce(*mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> c_int,
) -> Result<(), (usize, io::Error)> {
    if wrs.is_empty() {
        return Ok(());
    }
    let mut sges = sge_list(wrs.iter().map(|w| w.sge));
    let mut list: Vec<sys::ibv_recv_wr> = wrs
        .iter()
        .map(|w| sys::ibv_recv_wr {
            wr_id: w.wr_id,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: i32::from(w.sge.is_some()),
        })
        .collect();
    for i in 0..list.len() {
        list[i].sg_list = &mut sges[i];
        if i + 1 < list.len() {
            let next: *mut sys::ibv_recv_wr = &mut list[i + 1];
            list[i].next = next;
        }
    }
    let mut bad: *mut sys::ibv_recv_wr = ptr::null_mut();
    let head: *mut sys::ibv_recv_wr = &mut list[0];
    match post(head, &mut bad) {
        0 => Ok(()),
        ret => Err(post_error(ret, bad, head)),
    }
}

impl Srq {
    /// `ibv_post_srq_recv`.
    pub fn post_recv(&self, wrs: &[RawRecvWr]) -> Result<(), (usize, io::Error)> {
        post_recv_list(wrs, |head, bad| {
            // SAFETY: valid SRQ; the list and its SGEs live until the call returns.
            unsafe { sys::ibv_post_srq_recv(self.ptr.as_ptr(), head, bad) }
        })
    }
}
