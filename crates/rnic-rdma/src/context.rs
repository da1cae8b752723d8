//! The opened device ([`RdmaContext`]): one device, one port, one GID, and the bookkeeping its
//! queues share.
//!
//! Invariants:
//! - The port, GID index and path MTU are fixed when the context opens; every QP of the
//!   context connects through them.
//! - The asynchronous-event descriptor is non-blocking, so `poll_async_event` never blocks.
//! - `records` maps each live QP number to that QP's record of posted send requests, which is
//!   how a completion's opcode is known when `ibv_wc.opcode` is undefined (every error).

use crate::devices::{self, LinkLayer, ProbeError};
use crate::ffi;
use crate::record::SendRecord;
use crate::translate::{async_event_from_ibv, verbs_error};
use parking_lot::Mutex;
use rdma_mummy_sys as sys;
use rnic::{AsyncEvent, Clock, DeviceAttr, RealClock, Resource, VerbsError, VerbsResult};
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How to open a device.
#[derive(Clone, Debug)]
pub struct RdmaConfig {
    /// Device name (`ibv_devices`); `None` takes the first device.
    pub device: Option<String>,
    /// Port number (from 1).
    pub port: u8,
    /// GID index; `None` applies the rule of [`devices::select_gid`].
    pub gid_index: Option<u32>,
    /// Where listeners accept the out-of-band TCP handshake (port 0: any free port).
    pub listen: SocketAddr,
    /// Bound on each step of a handshake (connect, read, write).
    pub handshake_timeout: Duration,
    /// Clock of the context (what `Context::clock` returns).
    pub clock: Arc<dyn Clock>,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            device: None,
            port: 1,
            gid_index: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            handshake_timeout: Duration::from_secs(5),
            clock: RealClock::shared(),
        }
    }
}

/// An opened RDMA device. Cloning shares it.
#[derive(Clone)]
pub struct RdmaContext {
    pub(crate) inner: Arc<CtxInner>,
}

pub(crate) struct CtxInner {
    pub(crate) dev: Arc<ffi::Device>,
    pub(crate) config: RdmaConfig,
    pub(crate) gid_index: u8,
    pub(crate) gid: [u8; 16],
    pub(crate) lid: u16,
    pub(crate) link_layer: LinkLayer,
    /// `IBV_MTU_*` of the port.
    pub(crate) active_mtu: u32,
    /// Responder resources (`max_qp_rd_atom`), capped at 16.
    pub(crate) max_rd_atom: u8,
    /// Initiator depth (`max_qp_init_rd_atom`), capped at 16.
    pub(crate) max_init_rd_atom: u8,
    pub(crate) attr: DeviceAttr,
    /// `ibv_device_attr.vendor_id`.
    pub(crate) vendor_id: u32,
    pub(crate) records: Mutex<HashMap<u32, Arc<SendRecord>>>,
}

impl fmt::Debug for RdmaContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaContext")
            .field("device", &self.inner.dev.name())
            .field("port", &self.inner.config.port)
            .field("gid_index", &self.inner.gid_index)
            .finish()
    }
}

fn io_err(what: &str, e: io::Error) -> VerbsError {
    VerbsError::Io(io::Error::new(e.kind(), format!("{what}: {e}")))
}

impl RdmaContext {
    /// Opens the configured device and port and picks the GID.
    pub fn open(config: RdmaConfig) -> VerbsResult<RdmaContext> {
        if let Err(e) = ffi::device_names() {
            let probe = devices::classify_list_error(ffi::libibverbs_loaded(), e);
            let kind = match probe {
                ProbeError::LibraryMissing => io::ErrorKind::Unsupported,
                _ => io::ErrorKind::NotFound,
            };
            return Err(VerbsError::Io(io::Error::new(kind, probe.to_string())));
        }
        let dev = Arc::new(
            ffi::Device::open(config.device.as_deref()).map_err(|e| io_err("opening", e))?,
        );
        let raw = dev
            .query_device()
            .map_err(|e| io_err("ibv_query_device", e))?;
        let port = dev
            .query_port(config.port)
            .map_err(|e| io_err("ibv_query_port", e))?;
        let link_layer = LinkLayer::from_ibv(port.link_layer);
        let gids = devices::read_gids(&dev, config.port, port.gid_tbl_len);
        let gid_index = devices::select_gid(link_layer, &gids, config.gid_index).map_err(|m| {
            VerbsError::Io(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} port {}: {m}", dev.name(), config.port),
            ))
        })?;
        let gid = gids
            .iter()
            .find(|g| g.index == gid_index)
            .map_or([0; 16], |g| g.gid);
        let cap = |flag: sys::ibv_device_cap_flags| raw.device_cap_flags & flag.0 != 0;
        let clamp = |v: i32| v.clamp(0, i32::MAX) as u32;
        let attr = DeviceAttr {
            max_mr: clamp(raw.max_mr),
            max_mw: clamp(raw.max_mw),
            max_qp: clamp(raw.max_qp),
            max_cq: clamp(raw.max_cq),
            max_cqe: clamp(raw.max_cqe),
            max_srq: clamp(raw.max_srq),
            max_qp_wr: clamp(raw.max_qp_wr),
            max_pd: clamp(raw.max_pd),
            max_msg_size: port.max_msg_sz,
            global_atomics: raw.atomic_cap == sys::ibv_atomic_cap::IBV_ATOMIC_GLOB,
            mw_type1: cap(sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW),
            mw_type2: cap(sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2A)
                || cap(sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2B),
            // Weights and operation rates have no rdma-core equivalent; byte rates map to
            // packet pacing where the device has it (`RdmaQp::set_service`).
            qp_rate_limit: false,
            // Work-request chains (CORE-Direct WAIT / ENABLE, managed queues, a WQE ring
            // exposed for patching) and binds for another QP's number exist on ConnectX only
            // through MLNX_OFED's experimental verbs or mlx5 direct WQE writing, which this
            // provider cannot detect or test here: reported absent.
            cross_channel: false,
            mw_bind_target_qp: false,
        };
        dev.set_async_nonblocking()
            .map_err(|e| io_err("async event descriptor", e))?;
        Ok(RdmaContext {
            inner: Arc::new(CtxInner {
                gid_index: u8::try_from(gid_index)
                    .map_err(|_| VerbsError::InvalidArgument("GID index above 255"))?,
                gid,
                lid: port.lid,
                link_layer,
                active_mtu: port.active_mtu,
                max_rd_atom: raw.max_qp_rd_atom.clamp(1, 16) as u8,
                max_init_rd_atom: raw.max_qp_init_rd_atom.clamp(1, 16) as u8,
                attr,
                vendor_id: raw.vendor_id,
                records: Mutex::new(HashMap::new()),
                dev,
                config,
            }),
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        self.inner.dev.name()
    }

    /// The GID index connections use.
    pub fn gid_index(&self) -> u8 {
        self.inner.gid_index
    }

    /// The device's IEEE vendor id (`ibv_device_attr.vendor_id`).
    pub fn vendor_id(&self) -> u32 {
        self.inner.vendor_id
    }

    /// Whether the device is the Linux kernel's Soft-RoCE (`rdma_rxe`), whatever it was named:
    /// rxe reports the vendor id [`RXE_VENDOR_ID`]. Its deviations from the IB specification
    /// are listed in `docs/rdma.md`.
    pub fn is_rxe(&self) -> bool {
        self.inner.vendor_id == RXE_VENDOR_ID
    }

    /// The next asynchronous event the contract names, without blocking.
    pub(crate) fn next_async_event(&self) -> Option<AsyncEvent> {
        loop {
            let raw = self.inner.dev.next_async_event()?;
            if let Some(e) = async_event_from_ibv(raw.event_type, raw.qp_num) {
                return Some(e);
            }
            // Port and device events have no name in the contract; they are skipped.
        }
    }
}

/// The vendor id the kernel's rxe driver reports (`RXE_VENDOR_ID` in
/// `drivers/infiniband/sw/rxe/rxe_param.h`).
pub const RXE_VENDOR_ID: u32 = 0x00ff_ffff;

/// Maps an allocation failure of `what` to the contract's error.
pub(crate) fn alloc_error(what: &'static str, resource: Resource, e: io::Error) -> VerbsError {
    verbs_error(what, resource, e)
}
