//! The crate's one `unsafe` module (with its submodules `memory`, `queues`, `qp`): owned
//! handles over libibverbs (through `rdma-mummy-sys`, which `dlopen`s `libibverbs.so.1` when
//! the process starts).
//!
//! Invariants the safe API upholds:
//! - Every handle owns exactly one verbs object and destroys it in `Drop`; a child holds an
//!   `Arc` of its parent's handle (MR → PD → device, QP → PD + CQs + SRQ, CQ → channel →
//!   device), so a parent is never destroyed before its children.
//! - A memory region holds a clone of the [`MemoryBlock`] it registers, so the pages the NIC
//!   may read or write stay mapped while the registration exists. If deregistration fails in
//!   `Drop` the block is leaked rather than unmapped under the NIC. The block is only ever
//!   accessed through atomics (see `rnic::memory`), so NIC DMA racing with the CPU is not
//!   a data race in Rust's sense.
//! - Work requests are built from plain Rust values ([`RawSendWr`], [`RawRecvWr`]) into C
//!   structs that live on the stack for the duration of the post call only; a bind request
//!   borrows the window and region handles, so they outlive the call.
//! - rdma-core objects are thread-safe (`ibv_post_send`, `ibv_poll_cq`, `ibv_modify_qp` may be
//!   called concurrently), which is why the handles are `Send + Sync`.
//! - No C enum is read into a Rust enum: the asynchronous event is read through a
//!   layout-compatible struct with a plain integer event type (an unknown value is not UB).
#![allow(unsafe_code)]

mod memory;
mod qp;
mod queues;

pub use memory::{Mr, Mw, Pd, alloc_mw, alloc_pd, reg_mr};
pub use qp::{Qp, QpCaps, QpModify, RawBind, RawSendWr, create_qp};
pub use queues::{Channel, Cq, RawRecvWr, RawWc, Srq, create_channel, create_cq, create_srq};

use rdma_mummy_sys as sys;
use std::ffi::{CStr, CString, c_int, c_void};
use std::io;
use std::ptr::{self, NonNull};

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

pub(super) fn last_error() -> io::Error {
    io::Error::last_os_error()
}

pub(super) fn check(ret: c_int) -> io::Result<()> {
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
    pub(super) ctx: NonNull<sys::ibv_context>,
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
        // Only QP events carry a QP in the element (SRQ events carry an SRQ, CQ events a CQ).
        use sys::ibv_event_type as E;
        let qp_event = [
            E::IBV_EVENT_QP_FATAL,
            E::IBV_EVENT_QP_REQ_ERR,
            E::IBV_EVENT_QP_ACCESS_ERR,
            E::IBV_EVENT_COMM_EST,
            E::IBV_EVENT_SQ_DRAINED,
            E::IBV_EVENT_PATH_MIG,
            E::IBV_EVENT_PATH_MIG_ERR,
            E::IBV_EVENT_QP_LAST_WQE_REACHED,
        ]
        .into_iter()
        .any(|e| e as u32 == ev.event_type);
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

pub(super) fn set_nonblocking(fd: c_int) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; F_GETFL/F_SETFL have no memory arguments.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(last_error());
        }
    }
    Ok(())
}
