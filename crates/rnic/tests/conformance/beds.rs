//! Test beds: the providers and transports the conformance suite runs on.
//!
//! - `inproc`: `SoftFabric::new()` — inline links, the requester's thread runs the responder.
//! - `queued`: `SoftFabric::queued(..)` without faults — every packet waits in a queue until
//!   the bed's `drive` steps the network; exercises the message-passing path of the QPs.
//! - `tcp`: two `TcpNode`s on loopback sockets, engines on their own threads.
//!
//! The in-process beds run on a [`VirtualClock`], so timers fire exactly when a test says.

#![allow(dead_code)]

use super::harness::{BedOptions, Keys, TestBed};
use rnic::soft::link::queued::QueuedNetwork;
use rnic::soft::{KeyPolicy, Pinning, SoftConfig, SoftContext, SoftFabric, SoftProvider, TcpNode};
use rnic::{Clock, DeviceAttr, RealClock, VirtualClock};
use std::sync::Arc;
use std::time::Duration;

/// The soft device configuration for a bed.
pub fn soft_config(opts: &BedOptions, clock: Arc<dyn Clock>, seed: u64) -> SoftConfig {
    SoftConfig {
        key_policy: match opts.keys {
            Keys::Increment => KeyPolicy::Increment,
            Keys::Random(seed) => KeyPolicy::Random { seed },
        },
        pinning: Pinning::Never,
        // Small tables: a test uses a handful of objects, and a device builds its tables up front.
        attr: DeviceAttr {
            max_mr: 4096,
            max_mw: 4096,
            ..DeviceAttr::default()
        },
        clock,
        seed: Some(seed),
        ..SoftConfig::default()
    }
}

/// In-process fabric with inline links and a virtual clock.
#[derive(Debug)]
pub struct InProcBed {
    /// The devices' clock.
    pub clock: Arc<VirtualClock>,
    /// The fabric.
    pub fabric: SoftFabric,
    mn: SoftContext,
    cn: SoftContext,
}

impl TestBed<SoftProvider> for InProcBed {
    fn open(opts: BedOptions) -> Self {
        let clock = VirtualClock::new();
        let fabric = SoftFabric::new();
        let mn = fabric.open_device(soft_config(&opts, clock.clone(), 1));
        let cn = fabric.open_device(soft_config(&opts, clock.clone(), 2));
        InProcBed {
            clock,
            fabric,
            mn,
            cn,
        }
    }
    fn mn(&self) -> &SoftContext {
        &self.mn
    }
    fn cn(&self) -> &SoftContext {
        &self.cn
    }
    fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
    fn virtual_time(&self) -> bool {
        true
    }
}

/// In-process fabric whose packets go through a (fault-free) queued network.
#[derive(Debug)]
pub struct QueuedBed {
    /// The devices' and network's clock.
    pub clock: Arc<VirtualClock>,
    /// The network; `drive` steps it.
    pub net: Arc<QueuedNetwork>,
    mn: SoftContext,
    cn: SoftContext,
}

impl TestBed<SoftProvider> for QueuedBed {
    fn open(opts: BedOptions) -> Self {
        let clock = VirtualClock::new();
        let net = QueuedNetwork::new(clock.clone(), 0x9e3779b9);
        let fabric = SoftFabric::queued(net.clone());
        let mn = fabric.open_device(soft_config(&opts, clock.clone(), 1));
        let cn = fabric.open_device(soft_config(&opts, clock.clone(), 2));
        QueuedBed { clock, net, mn, cn }
    }
    fn mn(&self) -> &SoftContext {
        &self.mn
    }
    fn cn(&self) -> &SoftContext {
        &self.cn
    }
    fn drive(&self) {
        self.net.step(self.clock.now());
    }
    fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
    fn virtual_time(&self) -> bool {
        true
    }
}

/// Two TCP devices on loopback, each with its own engine threads, on the real clock.
#[derive(Debug)]
pub struct TcpBed {
    mn: SoftContext,
    cn: SoftContext,
}

impl TestBed<SoftProvider> for TcpBed {
    fn open(opts: BedOptions) -> Self {
        let open = |seed| {
            let config = soft_config(&opts, RealClock::shared(), seed);
            TcpNode::open(config, "127.0.0.1:0".parse().expect("loopback address"))
                .expect("open a TCP device")
        };
        TcpBed {
            mn: open(1),
            cn: open(2),
        }
    }
    fn mn(&self) -> &SoftContext {
        &self.mn
    }
    fn cn(&self) -> &SoftContext {
        &self.cn
    }
    fn virtual_time(&self) -> bool {
        false
    }
    fn hangs_up_on_error(&self) -> bool {
        true
    }
}
