//! What RDMA hardware this machine has: devices, ports, GID tables and memory-window
//! capabilities (what `patronus devices` prints), and which GID a connection uses.
//!
//! Invariants: [`probe`] never panics and never aborts the process, whatever libibverbs'
//! state — a missing library and a kernel without RDMA support are distinct, named errors.

use crate::ffi;
use crate::translate::{LINK_LAYER_ETHERNET, LINK_LAYER_INFINIBAND, mtu_bytes};
use rdma_mummy_sys as sys;
use std::fmt;
use std::io;
use std::net::Ipv6Addr;

/// Why no device list could be read.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// `libibverbs.so.1` is not installed (rdma-mummy-sys could not load it).
    #[error(
        "libibverbs is not installed ({}: not found by the dynamic linker); install rdma-core's libibverbs1 and ibverbs-providers",
        ffi::LIBIBVERBS
    )]
    LibraryMissing,
    /// libibverbs is loaded but the kernel offers no RDMA (no `ib_uverbs`, no devices).
    #[error("libibverbs found no RDMA support in the kernel ({0})")]
    NoKernelSupport(io::Error),
    /// A device was found but could not be opened or queried.
    #[error("device {device}: {err}")]
    Query {
        /// The device.
        device: String,
        /// What failed.
        err: io::Error,
    },
}

/// Classifies a failed `ibv_get_device_list`: without the library loaded, rdma-mummy-sys
/// answers every call with `EOPNOTSUPP`; with it, the error comes from libibverbs itself.
pub fn classify_list_error(library_loaded: bool, err: io::Error) -> ProbeError {
    if !library_loaded {
        ProbeError::LibraryMissing
    } else {
        ProbeError::NoKernelSupport(err)
    }
}

/// The kind of a GID table entry (`IBV_GID_TYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidKind {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet, not routable).
    RoceV1,
    /// RoCE v2 (UDP/IP, routable).
    RoceV2,
    /// The library could not say.
    Unknown,
}

impl GidKind {
    /// From `IBV_GID_TYPE_*`.
    pub fn from_ibv(t: Option<u32>) -> GidKind {
        match t {
            Some(sys::IBV_GID_TYPE_IB) => GidKind::Ib,
            Some(sys::IBV_GID_TYPE_ROCE_V1) => GidKind::RoceV1,
            Some(sys::IBV_GID_TYPE_ROCE_V2) => GidKind::RoceV2,
            _ => GidKind::Unknown,
        }
    }
}

/// One non-empty GID table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidInfo {
    /// Index in the port's table (`sgid_index`).
    pub index: u32,
    /// The GID.
    pub gid: [u8; 16],
    /// Its kind.
    pub kind: GidKind,
}

impl GidInfo {
    /// Whether the GID is an IPv4-mapped address (`::ffff:a.b.c.d`), as RoCE v2 GIDs of IPv4
    /// interfaces are.
    pub fn is_ipv4_mapped(&self) -> bool {
        Ipv6Addr::from(self.gid).to_ipv4_mapped().is_some()
    }
}

/// The link layer of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand: addressed by LID.
    InfiniBand,
    /// Ethernet (RoCE): addressed by GID.
    Ethernet,
    /// Unspecified.
    Unknown,
}

impl LinkLayer {
    /// From `ibv_port_attr.link_layer`.
    pub fn from_ibv(v: u8) -> LinkLayer {
        match v {
            LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            _ => LinkLayer::Unknown,
        }
    }

    /// Whether a path on this link carries a global route header: always on Ethernet (RoCE
    /// addresses by GID), never on InfiniBand (one subnet, addressed by LID).
    pub fn needs_grh(self) -> bool {
        self != LinkLayer::InfiniBand
    }
}

/// A port of a device.
#[derive(Clone, Debug)]
pub struct PortInfo {
    /// Port number (from 1).
    pub port: u8,
    /// Whether the port is ACTIVE.
    pub active: bool,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// Non-zero GIDs.
    pub gids: Vec<GidInfo>,
}

/// A device and its capabilities.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Name (e.g. `mlx5_0`, `rxe0`).
    pub name: String,
    /// Maximum memory windows.
    pub max_mw: u32,
    /// `IBV_DEVICE_MEM_WINDOW`.
    pub mw_type1: bool,
    /// `IBV_DEVICE_MEM_WINDOW_TYPE_2A`.
    pub mw_type2a: bool,
    /// `IBV_DEVICE_MEM_WINDOW_TYPE_2B`.
    pub mw_type2b: bool,
    /// `IBV_ATOMIC_GLOB`: CPU and NIC atomics are atomic with each other.
    pub global_atomics: bool,
    /// Maximum QPs.
    pub max_qp: u32,
    /// Ports.
    pub ports: Vec<PortInfo>,
}

/// Lists the devices libibverbs sees, with ports, GIDs and window capabilities.
pub fn probe() -> Result<Vec<DeviceInfo>, ProbeError> {
    let names =
        ffi::device_names().map_err(|e| classify_list_error(ffi::libibverbs_loaded(), e))?;
    names
        .iter()
        .map(|name| {
            describe(name).map_err(|err| ProbeError::Query {
                device: name.clone(),
                err,
            })
        })
        .collect()
}

fn describe(name: &str) -> io::Result<DeviceInfo> {
    let dev = ffi::Device::open(Some(name))?;
    let attr = dev.query_device()?;
    let cap = |flag: sys::ibv_device_cap_flags| attr.device_cap_flags & flag.0 != 0;
    let mut ports = Vec::new();
    for port in 1..=attr.phys_port_cnt {
        let p = dev.query_port(port)?;
        let gids = read_gids(&dev, port, p.gid_tbl_len);
        ports.push(PortInfo {
            port,
            active: p.state == sys::ibv_port_state::IBV_PORT_ACTIVE,
            link_layer: LinkLayer::from_ibv(p.link_layer),
            active_mtu: mtu_bytes(p.active_mtu),
            lid: p.lid,
            gids,
        });
    }
    Ok(DeviceInfo {
        name: name.to_string(),
        max_mw: attr.max_mw.max(0) as u32,
        mw_type1: cap(sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW),
        mw_type2a: cap(sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2A),
        mw_type2b: cap(sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2B),
        global_atomics: attr.atomic_cap == sys::ibv_atomic_cap::IBV_ATOMIC_GLOB,
        max_qp: attr.max_qp.max(0) as u32,
        ports,
    })
}

/// The non-zero GIDs of `port`, of its table of `table_len` entries.
pub(crate) fn read_gids(dev: &ffi::Device, port: u8, table_len: i32) -> Vec<GidInfo> {
    (0..table_len.max(0) as u32)
        .filter_map(|index| {
            let g = dev.query_gid(port, index).ok()?;
            (g.raw != [0; 16]).then_some(GidInfo {
                index,
                gid: g.raw,
                kind: GidKind::from_ibv(g.gid_type),
            })
        })
        .collect()
}

/// Picks the GID index a connection on a port uses (documented in `docs/rdma.md`):
/// an explicit `requested` index wins; on InfiniBand, index 0 (the path is addressed by LID);
/// on Ethernet, the first RoCE v2 GID that is an IPv4-mapped address, else the first RoCE v2
/// GID, else the first RoCE v1 or untyped GID.
pub fn select_gid(
    link_layer: LinkLayer,
    gids: &[GidInfo],
    requested: Option<u32>,
) -> Result<u32, String> {
    if let Some(i) = requested {
        return if gids.iter().any(|g| g.index == i) {
            Ok(i)
        } else {
            Err(format!("GID index {i} is empty on this port"))
        };
    }
    if link_layer == LinkLayer::InfiniBand {
        return Ok(0);
    }
    let v2 = |g: &&GidInfo| g.kind == GidKind::RoceV2;
    gids.iter()
        .filter(v2)
        .find(|g| g.is_ipv4_mapped())
        .or_else(|| gids.iter().find(v2))
        .or_else(|| gids.first())
        .map(|g| g.index)
        .ok_or_else(|| "the port has no GID: is the interface up and addressed?".to_string())
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yn = |b: bool| if b { "yes" } else { "no" };
        writeln!(f, "{}", self.name)?;
        writeln!(
            f,
            "  memory windows: max {}, type 1 {}, type 2A {}, type 2B {}",
            self.max_mw,
            yn(self.mw_type1),
            yn(self.mw_type2a),
            yn(self.mw_type2b)
        )?;
        writeln!(
            f,
            "  atomics: {}; max QPs {}",
            if self.global_atomics {
                "global (CPU and NIC)"
            } else {
                "NIC only"
            },
            self.max_qp
        )?;
        for p in &self.ports {
            writeln!(
                f,
                "  port {}: {}, {:?}, MTU {}, LID {}",
                p.port,
                if p.active { "ACTIVE" } else { "down" },
                p.link_layer,
                p.active_mtu,
                p.lid
            )?;
            let chosen = select_gid(p.link_layer, &p.gids, None).ok();
            for g in &p.gids {
                writeln!(
                    f,
                    "    GID[{}] {} {:?}{}",
                    g.index,
                    Ipv6Addr::from(g.gid),
                    g.kind,
                    if chosen == Some(g.index) {
                        "  (default)"
                    } else {
                        ""
                    }
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(index: u32, kind: GidKind, bytes: [u8; 16]) -> GidInfo {
        GidInfo {
            index,
            gid: bytes,
            kind,
        }
    }

    const LINK_LOCAL: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    const V4_MAPPED: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7];

    #[test]
    fn gid_kinds_follow_ibv_constants() {
        assert_eq!(GidKind::from_ibv(Some(sys::IBV_GID_TYPE_IB)), GidKind::Ib);
        assert_eq!(
            GidKind::from_ibv(Some(sys::IBV_GID_TYPE_ROCE_V1)),
            GidKind::RoceV1
        );
        assert_eq!(
            GidKind::from_ibv(Some(sys::IBV_GID_TYPE_ROCE_V2)),
            GidKind::RoceV2
        );
        assert_eq!(GidKind::from_ibv(None), GidKind::Unknown);
    }

    #[test]
    fn roce_prefers_ipv4_mapped_v2_gid() {
        let gids = [
            gid(0, GidKind::RoceV1, LINK_LOCAL),
            gid(1, GidKind::RoceV2, LINK_LOCAL),
            gid(2, GidKind::RoceV1, V4_MAPPED),
            gid(3, GidKind::RoceV2, V4_MAPPED),
        ];
        assert_eq!(select_gid(LinkLayer::Ethernet, &gids, None), Ok(3));
        assert_eq!(select_gid(LinkLayer::Ethernet, &gids[..3], None), Ok(1));
        assert_eq!(select_gid(LinkLayer::Ethernet, &gids[..1], None), Ok(0));
        assert_eq!(select_gid(LinkLayer::Ethernet, &gids, Some(2)), Ok(2));
        assert!(select_gid(LinkLayer::Ethernet, &gids, Some(9)).is_err());
        assert!(select_gid(LinkLayer::Ethernet, &[], None).is_err());
        assert_eq!(select_gid(LinkLayer::InfiniBand, &gids, None), Ok(0));
    }

    #[test]
    fn list_errors_name_the_missing_piece() {
        let e = classify_list_error(false, io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        assert!(matches!(e, ProbeError::LibraryMissing));
        assert!(e.to_string().contains("libibverbs.so.1"), "{e}");
        let e = classify_list_error(true, io::Error::from_raw_os_error(libc::ENOSYS));
        assert!(matches!(e, ProbeError::NoKernelSupport(_)));
    }
}
