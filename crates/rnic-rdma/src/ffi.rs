//! The crate's one `unsafe` module: owned handles over libibverbs (through `rdma-mummy-sys`,
//! which `dlopen`s `libibverbs.so.1` when the process starts).
//!
//! Invariants the safe API upholds:
//! - Every handle owns exactly one verbs object and destroys it in `Drop`; a child holds an
//!   `Arc` of its parent's handle (MR → PD → device, QP → PD + CQs + SRQ, CQ → channel →
//!   device), so a parent is never destroyed before its children.
//! - A memory region holds a clone of the [`MemoryBlock`] it registers, so the pages the NIC
//!   may read or write stay mapped while the registration exists. If deregistration fails in
//!   `Drop` the block is leaked rather than unmapped under the NIC. The block is only ever
//!   accessed through atomics (see `rnic::soft::arena`), so NIC DMA racing with the CPU is not
//!   a data race in Rust's sense.
//! - Work requests are built from plain Rust values ([`RawSendWr`], [`RawRecvWr`]) into C
//!   structs that live on the stack for the duration of the post call only; a bind request
//!   borrows the window and region handles, so they outlive the call.
//! - rdma-core objects are thread-safe (`ibv_post_send`, `ibv_poll_cq`, `ibv_modify_qp` may be
//!   called concurrently), which is why the handles are `Send + Sync`.
//! - No C enum is read into a Rust enum: the asynchronous event is read through a
//!   layout-compatible struct with a plain integer event type (an unknown value is not UB).
#![allow(unsafe_code)]

use rdma_mummy_sys as sys;
use rnic::soft::arena::MemoryBlock;
use std::ffi::{CStr, CString, c_int, c_void};
use std::io;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// The shared object rdma-mummy-sys loads at process start.
pub const LIBIBVERBS: &str = "libibverbs.so.1";

/// Whether `libibverbs.so.1` is loaded in this process (rdma-mummy-sys loads it at start-up
/// if the dynamic linker finds it).
pub fn libibverbs_loaded() -> bool {
    let name = CString::new(LIBIBVERBS).unwrap_or_default();
    // SAFETY: `name` is a valid NUL-terminated string; RTLD_NOLOAD never loads anything, it
    // only returns a new reference to an already loaded object (or null), which is released
    // at once with dlclose.
    unsafe {
        let handle = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if handle.is_null() {
            false
        } else {
            libc::dlclose(handle);
            true
        }
    }
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

fn check(ret: c_int) -> io::Result<()> {
    match ret {
        0 => Ok(()),
        // Some verbs return -1 and set errno, others return the errno value.
        -1 => Err(last_error()),
        e if e > 0 => Err(io::Error::from_raw_os_error(e)),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}

/// Names of the RDMA devices libibverbs sees. `Err` carries the errno of
/// `ibv_get_device_list` (EOPNOTSUPP when the library is not loaded, ENOSYS without kernel
/// support).
pub fn device_names() -> io::Result<Vec<String>> {
    with_device_list(|list| Ok(list.iter().map(|(name, _)| name.clone()).collect()))
}

fn with_device_list<T>(
    f: impl FnOnce(&[(String, *mut sys::ibv_device)]) -> io::Result<T>,
) -> io::Result<T> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer; the returned array (or null) is freed below.
    let list = unsafe { sys::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(last_error());
    }
    let mut devices = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds `n` valid device pointers, valid until it is freed.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: `dev` is a valid device; the name is a NUL-terminated string it owns.
        let name = unsafe {
            let p = sys::ibv_get_device_name(dev);
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        devices.push((name, dev));
    }
    let out = f(&devices);
    // SAFETY: `list` came from ibv_get_device_list and is freed once; devices opened inside
    // `f` stay valid (ibv_open_device keeps its own reference).
    unsafe { sys::ibv_free_device_list(list) };
    out
}

/// An opened device (`ibv_context`).
#[derive(Debug)]
pub struct Device {
    ctx: NonNull<sys::ibv_context>,
    name: String,
}

// SAFETY: an ibv_context may be used from any thread (rdma-core verbs are thread-safe).
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: every child handle holds an Arc of this device, so none is alive here.
        unsafe { sys::ibv_close_device(self.ctx.as_ptr()) };
    }
}

/// One GID table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawGid {
    /// The 16 GID bytes.
    pub raw: [u8; 16],
    /// `IBV_GID_TYPE_*`, or `None` where `ibv_query_gid_ex` is not supported.
    pub gid_type: Option<u32>,
}

/// An asynchronous event: its `IBV_EVENT_*` number and, for QP events, the QP number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawAsyncEvent {
    /// `ibv_event_type` as an integer.
    pub event_type: u32,
    /// The QP number for QP events.
    pub qp_num: Option<u32>,
}

/// Layout of `struct ibv_async_event` with the event type as a plain integer.
#[repr(C)]
struct AsyncEventRepr {
    element: *mut c_void,
    event_type: u32,
}

impl Device {
    /// Opens the device called `name` (or the first one if `None`).
    pub fn open(name: Option<&str>) -> io::Result<Device> {
        with_device_list(|list| {
            let found = match name {
                Some(n) => list.iter().find(|(d, _)| d == n),
                None => list.first(),
            };
            let Some((name, dev)) = found else {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    match name {
                        Some(n) => format!("no RDMA device called {n}"),
                        None => "no RDMA device".to_string(),
                    },
                ));
            };
            // SAFETY: `dev` is a valid device pointer from the live list.
            let ctx = unsafe { sys::ibv_open_device(*dev) };
            let ctx = NonNull::new(ctx).ok_or_else(last_error)?;
            Ok(Device {
                ctx,
                name: name.clone(),
            })
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> io::Result<sys::ibv_device_attr> {
        // SAFETY: ibv_device_attr is plain old data; all-zero is a valid value.
        let mut attr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out-pointer.
        check(unsafe { sys::ibv_query_device(self.ctx.as_ptr(), &mut attr) })?;
        Ok(attr)
    }

    /// `ibv_query_port`.
    pub fn query_port(&self, port: u8) -> io::Result<sys::ibv_port_attr> {
        // SAFETY: plain old data; all-zero is valid.
        let mut attr: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out-pointer of the size the call is told.
        check(unsafe { sys::ibv_query_port(self.ctx.as_ptr(), port, &mut attr) })?;
        Ok(attr)
    }

    /// GID `index` of `port`, with its type where the library reports it.
    pub fn query_gid(&self, port: u8, index: u32) -> io::Result<RawGid> {
        // SAFETY: plain old data; all-zero is valid.
        let mut entry: sys::ibv_gid_entry = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out-pointer; the size is passed by the wrapper.
        let ret =
            unsafe { sys::ibv_query_gid_ex(self.ctx.as_ptr(), port.into(), index, &mut entry, 0) };
        if ret == 0 {
            // SAFETY: `raw` is the union's byte view, always initialized.
            let raw = unsafe { entry.gid.raw };
            return Ok(RawGid {
                raw,
                gid_type: Some(entry.gid_type),
            });
        }
        // SAFETY: plain old data; all-zero is valid.
        let mut gid: sys::ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out-pointer.
        check(unsafe { sys::ibv_query_gid(self.ctx.as_ptr(), port, index as c_int, &mut gid) })?;
        Ok(RawGid {
            // SAFETY: the byte view of the union.
            raw: unsafe { gid.raw },
            gid_type: None,
        })
    }

    /// Makes `ibv_get_async_event` non-blocking.
    pub fn set_async_nonblocking(&self) -> io::Result<()> {
        // SAFETY: the context is valid; async_fd is its open descriptor.
        let fd = unsafe { self.ctx.as_ref().async_fd };
        set_nonblocking(fd)
    }

    /// The next asynchronous event, acknowledged, or `None` if none is queued (the descriptor
    /// must be non-blocking).
    pub fn next_async_event(&self) -> Option<RawAsyncEvent> {
        let mut ev = AsyncEventRepr {
            element: ptr::null_mut(),
            event_type: 0,
        };
        // SAFETY: AsyncEventRepr has the layout of ibv_async_event (a pointer-sized union and
        // a C enum); the call fills it in.
        let ret = unsafe {
            sys::ibv_get_async_event(
                self.ctx.as_ptr(),
                (&mut ev as *mut AsyncEventRepr).cast::<sys::ibv_async_event>(),
            )
        };
        if ret != 0 {
            return None;
        }
        let qp_event = matches!(ev.event_type, 1..=3 | 14..=16);
        let qp_num = if qp_event && !ev.element.is_null() {
            // SAFETY: for QP events the element is the QP, valid until the event is acked.
            Some(unsafe { (*ev.element.cast::<sys::ibv_qp>()).qp_num })
        } else {
            None
        };
        // SAFETY: acknowledges the event just read, once.
        unsafe {
            sys::ibv_ack_async_event(
                (&mut ev as *mut AsyncEventRepr).cast::<sys::ibv_async_event>(),
            )
        };
        Some(RawAsyncEvent {
            event_type: ev.event_type,
            qp_num,
        })
    }
}

fn set_nonblocking(fd: c_int) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; F_GETFL/F_SETFL have no memory arguments.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(last_error());
        }
    }
    Ok(())
}

/// A protection domain (`ibv_pd`).
#[derive(Debug)]
pub struct Pd {
    ptr: NonNull<sys::ibv_pd>,
    _dev: Arc<Device>,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: children hold an Arc of this PD, so none is alive.
        unsafe { sys::ibv_dealloc_pd(self.ptr.as_ptr()) };
    }
}

/// `ibv_alloc_pd`.
pub fn alloc_pd(dev: &Arc<Device>) -> io::Result<Pd> {
    // SAFETY: valid context.
    let ptr = unsafe { sys::ibv_alloc_pd(dev.ctx.as_ptr()) };
    Ok(Pd {
        ptr: NonNull::new(ptr).ok_or_else(last_error)?,
        _dev: dev.clone(),
    })
}

/// A registered memory region (`ibv_mr`); keeps its memory mapped.
#[derive(Debug)]
pub struct Mr {
    ptr: NonNull<sys::ibv_mr>,
    _pd: Arc<Pd>,
    block: Option<MemoryBlock>,
}

// SAFETY: verbs objects are thread-safe; the block is Send + Sync.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

/// `ibv_reg_mr` over `[offset, offset + len)` of `block`.
pub fn reg_mr(
    pd: &Arc<Pd>,
    block: &MemoryBlock,
    offset: usize,
    len: usize,
    access: u32,
) -> io::Result<Mr> {
    if offset.checked_add(len).is_none_or(|end| end > block.len()) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let addr = (block.addr() + offset as u64) as *mut c_void;
    // SAFETY: `[addr, addr + len)` lies inside the mapping of `block`, which this MR keeps
    // alive (a clone is stored below) for as long as the registration exists.
    let ptr = unsafe { sys::ibv_reg_mr(pd.ptr.as_ptr(), addr, len, access as c_int) };
    Ok(Mr {
        ptr: NonNull::new(ptr).ok_or_else(last_error)?,
        _pd: pd.clone(),
        block: Some(block.clone()),
    })
}

impl Mr {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is valid while `self` is.
        unsafe { self.ptr.as_ref().lkey }
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { self.ptr.as_ref().rkey }
    }
    /// `ibv_dereg_mr`; on failure the handle is returned unchanged.
    pub fn deregister(mut self) -> Result<(), (Mr, io::Error)> {
        // SAFETY: the MR is valid; on success it is never used again (the block is dropped
        // after the NIC has released it).
        match check(unsafe { sys::ibv_dereg_mr(self.ptr.as_ptr()) }) {
            Ok(()) => {
                self.block = None;
                std::mem::forget(self);
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: the MR is valid and deregistered once.
        let ret = unsafe { sys::ibv_dereg_mr(self.ptr.as_ptr()) };
        if ret != 0 {
            // The NIC may still reach the pages: never unmap them.
            std::mem::forget(self.block.take());
        }
    }
}

/// A memory window (`ibv_mw`).
#[derive(Debug)]
pub struct Mw {
    ptr: NonNull<sys::ibv_mw>,
    _pd: Arc<Pd>,
}

// SAFETY: verbs objects are thread-safe.
unsafe impl Send for Mw {}
// SAFETY: as above.
unsafe impl Sync for Mw {}

/// `ibv_alloc_mw`; `mw_type` is `IBV_MW_TYPE_1` or `IBV_MW_TYPE_2`.
pub fn alloc_mw(pd: &Arc<Pd>, mw_type: u32) -> io::Result<Mw> {
    // SAFETY: valid PD; the inline wrapper checks that the provider implements alloc_mw.
    let ptr = unsafe { sys::ibv_alloc_mw(pd.ptr.as_ptr(), mw_type) };
    Ok(Mw {
        ptr: NonNull::new(ptr).ok_or_else(last_error)?,
        _pd: pd.clone(),
    })
}

impl Mw {
    /// The rkey the device assigned at allocation.
    pub fn initial_rkey(&self) -> u32 {
        // SAFETY: the MW is valid while `self` is.
        unsafe { self.ptr.as_ref().rkey }
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        // SAFETY: the MW is valid and deallocated once.
        unsafe { sys::ibv_dealloc_mw(self.ptr.as_ptr()) };
    }
}

/// A completion channel (`ibv_comp_channel`) with a non-blocking descriptor.
#[derive(Debug)]
pub struct Channel {
    ptr: NonNull<sys::ibv_comp_channel>,
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
    ptr: NonNull<sys::ibv_cq>,
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

    /// Consumes and acknowledges the pending completion events of the channel (non-blocking);
    /// returns how many were pending.
    pub fn drain_events(&self) -> u32 {
        let mut n = 0;
        loop {
            let mut cq: *mut sys::ibv_cq = ptr::null_mut();
            let mut cq_ctx: *mut c_void = ptr::null_mut();
            // SAFETY: valid channel (non-blocking) and out-pointers.
            let ret =
                unsafe { sys::ibv_get_cq_event(self.channel.ptr.as_ptr(), &mut cq, &mut cq_ctx) };
            if ret != 0 {
                break;
            }
            n += 1;
            // SAFETY: the channel serves only this CQ, so `cq` is ours; one ack per event.
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
        }
        n
    }

    /// The channel of this CQ.
    pub fn channel(&self) -> &Channel {
        &self.channel
    }
}

/// A shared receive queue (`ibv_srq`).
#[derive(Debug)]
pub struct Srq {
    ptr: NonNull<sys::ibv_srq>,
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

/// Builds a linked list of C receive requests and hands it to `post`; returns the index of
/// the first rejected request with the error.
fn post_recv_list(
    wrs: &[RawRecvWr],
    post: impl FnOnce(*mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> c_int,
) -> Result<(), (usize, io::Error)> {
    if wrs.is_empty() {
        return Ok(());
    }
    let mut sges: Vec<sys::ibv_sge> = wrs
        .iter()
        .map(|w| {
            let (addr, length, lkey) = w.sge.unwrap_or((0, 0, 0));
            sys::ibv_sge { addr, length, lkey }
        })
        .collect();
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
    let ret = post(head, &mut bad);
    if ret == 0 {
        return Ok(());
    }
    // SAFETY: `bad` is null or points into `list` (the provider names the failed request).
    let index = if bad.is_null() {
        0
    } else {
        (unsafe { bad.offset_from(head) }).max(0) as usize
    };
    Err((index, io::Error::from_raw_os_error(ret.abs())))
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
    ptr: NonNull<sys::ibv_qp>,
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

    /// `ibv_post_send` of `wrs` as one list (one doorbell); returns the index of the first
    /// rejected request with the error.
    pub fn post_send(&self, wrs: &[RawSendWr<'_>]) -> Result<(), (usize, io::Error)> {
        if wrs.is_empty() {
            return Ok(());
        }
        let mut sges: Vec<sys::ibv_sge> = wrs
            .iter()
            .map(|w| {
                let (addr, length, lkey) = w.sge.unwrap_or((0, 0, 0));
                sys::ibv_sge { addr, length, lkey }
            })
            .collect();
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
                            mr: b.mr.map_or(ptr::null_mut(), |m| m.ptr.as_ptr()),
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
        // SAFETY: valid QP; the list, its SGEs and the bound MW/MR handles (borrowed by `wrs`)
        // outlive the call; the provider copies the requests into its queue.
        let ret = unsafe { sys::ibv_post_send(self.ptr.as_ptr(), head, &mut bad) };
        if ret == 0 {
            return Ok(());
        }
        let index = if bad.is_null() {
            0
        } else {
            // SAFETY: `bad` points into `list`.
            (unsafe { bad.offset_from(head) }).max(0) as usize
        };
        Err((index, io::Error::from_raw_os_error(ret.abs())))
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&self, wrs: &[RawRecvWr]) -> Result<(), (usize, io::Error)> {
        post_recv_list(wrs, |head, bad| {
            // SAFETY: valid QP; the list and its SGEs live until the call returns.
            unsafe { sys::ibv_post_recv(self.ptr.as_ptr(), head, bad) }
        })
    }
}
