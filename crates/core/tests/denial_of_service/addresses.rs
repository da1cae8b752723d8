//! Connections per source address: one host cannot take every connection the node
//! serves. A host at its limit (`sessions_per_address`) has its next client refused with a
//! clear reason; a client from another host is admitted meanwhile, and the host's count is
//! given back as its sessions end. TCP only: in-process peers have no address.

use super::*;
use patronus_core::client::Client;
use patronus_core::cluster::Link;
use patronus_core::manager::{Isolation, NodeConfig, NodeLimits};
use patronus_core::testing::RawControl;
use rnic::VerbsError;
use rnic::soft::{SoftConfig, TcpNode, TcpOptions};
use std::net::{IpAddr, SocketAddr};
use support::bed::{bed, node_cfg, wait_for};

const LIMIT: u32 = 4;

fn one_host_cannot_take_every_connection(iso: Isolation) {
    // 127.0.0.2 plays another host.
    let node = NodeConfig {
        limits: NodeLimits {
            sessions_per_address: LIMIT,
            loopback_hosts: true,
            ..NodeLimits::default()
        },
        ..node_cfg()
    };
    // The honest client of the bed connects from 127.0.0.1: one of that host's sessions.
    let mut b = bed(Link::Tcp, iso, 1, node, Default::default());
    honest_round(&mut b);
    let start = footprint(&b);
    assert_eq!(start.held.addresses, 1, "{start:?}");
    let ctx = b.cluster.client_ctxs[0].clone();
    let addr = b.cluster.node.address().clone();
    // The hostile host takes the rest of its share, authenticated or not.
    let mut held: Vec<RawControl<SoftProvider>> = (1..LIMIT)
        .map(|i| {
            if i % 2 == 0 {
                RawControl::authenticated(&ctx, &addr, None, 4).unwrap()
            } else {
                RawControl::connect(&ctx, &addr, None, 4).unwrap()
            }
        })
        .collect();
    for _ in 0..3 {
        let refused = RawControl::<SoftProvider>::connect(&ctx, &addr, None, 4).unwrap_err();
        let VerbsError::ConnectionRefused(reason) = &refused else {
            panic!("a connection past the host's limit: {refused:?}");
        };
        assert!(
            reason.contains("too many clients connected from 127.0.0.1"),
            "{reason}"
        );
        honest_round(&mut b);
    }
    // A client from another host is served meanwhile.
    let sessions = footprint(&b).held.sessions;
    let other: IpAddr = [127, 0, 0, 2].into();
    let elsewhere = TcpNode::open_with(
        SoftConfig::default(),
        SocketAddr::new(other, 0),
        TcpOptions {
            source: Some(other),
            ..TcpOptions::default()
        },
    )
    .unwrap();
    let mut visitor = Client::<SoftProvider>::connect(&elsewhere, &addr, Default::default())
        .expect("a client from another host is admitted");
    let p = visitor
        .allocate(
            64,
            std::time::Duration::from_millis(100),
            patronus_core::proto::messages::Mode::Exclusive,
        )
        .unwrap();
    visitor.free(p).unwrap();
    wait_for(&b, "two hosts with sessions", |s| s.held.addresses == 2);
    drop(visitor);
    wait_for(&b, "the other host's session ended", |s| {
        s.held.addresses == 1 && s.held.sessions == sessions
    });
    // The host closes one connection: its session ends, and its next client is admitted.
    held.pop();
    wait_for(&b, "the closed session ended", |s| {
        s.held.sessions == sessions - 1
    });
    held.push(RawControl::connect(&ctx, &addr, None, 4).expect("room again"));
    honest_round(&mut b);
    drop(held);
    wait_back_to(&b, start, 0);
    honest_round(&mut b);
}

/// A host that connects from many of its addresses (127.0.0.2, .3, …) is still one host: by
/// default every loopback address is counted as this machine, so the limit holds.
fn many_addresses_of_one_host_are_one(iso: Isolation) {
    let node = NodeConfig {
        limits: NodeLimits {
            sessions_per_address: LIMIT,
            ..NodeLimits::default()
        },
        ..node_cfg()
    };
    // The bed's honest client (127.0.0.1) is one of the host's sessions.
    let mut b = bed(Link::Tcp, iso, 1, node, Default::default());
    honest_round(&mut b);
    let start = footprint(&b);
    let addr = b.cluster.node.address().clone();
    let device = |last: u8| {
        let ip: IpAddr = [127, 0, 0, last].into();
        TcpNode::open_with(
            SoftConfig::default(),
            SocketAddr::new(ip, 0),
            TcpOptions {
                source: Some(ip),
                ..TcpOptions::default()
            },
        )
        .unwrap()
    };
    let devices: Vec<_> = (2..12).map(device).collect();
    let mut held = Vec::new();
    let mut refused = 0;
    for ctx in &devices {
        match RawControl::<SoftProvider>::connect(ctx, &addr, None, 4) {
            Ok(c) => held.push(c),
            Err(VerbsError::ConnectionRefused(reason)) => {
                assert!(
                    reason.contains("too many clients connected from"),
                    "{reason}"
                );
                refused += 1;
            }
            Err(e) => panic!("{e:?}"),
        }
        honest_round(&mut b);
    }
    assert_eq!(
        held.len() as u32,
        LIMIT - 1,
        "ten addresses of one host got the host's share, no more"
    );
    assert_eq!(refused, 10 - (LIMIT - 1));
    drop(held);
    wait_back_to(&b, start, 0);
    honest_round(&mut b);
}

#[test]
fn loopback_addresses_are_one_host() {
    many_addresses_of_one_host_are_one(Isolation::SharedPd);
}

#[test]
fn shared_pd() {
    one_host_cannot_take_every_connection(Isolation::SharedPd);
}

#[test]
fn pd_per_client() {
    one_host_cannot_take_every_connection(Isolation::PdPerClient);
}

#[test]
fn type2() {
    one_host_cannot_take_every_connection(Isolation::Type2);
}
