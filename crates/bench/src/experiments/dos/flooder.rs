//! The control-path flooder, on raw verbs: it ignores every rule the client library keeps.
//! Each of its control connections authenticates with a `Hello`, then posts the same
//! well-formed request (an `Extend` of a permission that does not exist) as fast as its send
//! queue takes it, and never posts a receive for the replies. A connection that breaks (its
//! receiver-not-ready retries ran out, or the node cut it off) is replaced by a new one.
//!
//! With per-connection credits the flood meets receiver-not-ready on the flooder's own QPs;
//! with the paper's one shared receive queue it takes the slots the honest client needs.

use super::abusers::Tally;
use anyhow::Result;
use patronus_core::testing::RawControl;
use rnic::soft::{SoftAddress, SoftContext, SoftProvider};
use rnic::{CompletionChannel, CompletionQueue, Context};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Control connections the flooder keeps open.
pub(super) const CONNECTIONS: usize = 3;
/// Requests each has in flight at most (its send queue).
pub(super) const DEPTH: u32 = 512;
/// How long the flooder blocks when no send queue takes more: until a completion, or until
/// its QPs' receiver-not-ready timers (100 µs by default) are due, which only a CQ poll runs.
const IDLE_WAIT: Duration = Duration::from_micros(100);

type Connection = RawControl<SoftProvider>;

/// How the flooder's connections introduce themselves.
#[derive(Clone, Copy, Debug)]
pub(super) enum Hello {
    /// As the default tenant (a node without tenants: the honest client's own).
    Default,
    /// As this tenant, with this secret.
    Tenant(u32, u64),
    /// Never: the connections stay unauthenticated (every request is refused, each costs the
    /// node its handling; the node closes them at its hello timeout and they come back).
    Never,
}

/// Floods the node's control path from `ctx` until `stop`.
pub(super) fn flood(
    ctx: &SoftContext,
    node: &SoftAddress,
    hello: Hello,
    stop: &AtomicBool,
) -> Result<Tally> {
    let mut t = Tally::new("requests");
    let channel = ctx.create_channel()?;
    let mut conns: Vec<Option<Connection>> = (0..CONNECTIONS).map(|_| None).collect();
    let (mut opened, mut broke) = (0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let mut posted = 0;
        for slot in conns.iter_mut() {
            if slot.as_ref().is_some_and(Connection::broken) {
                *slot = None;
                broke += 1;
            }
            if slot.is_none() {
                let ch = Some(&channel);
                let connected = match hello {
                    Hello::Default => Connection::authenticated(ctx, node, ch, DEPTH),
                    Hello::Tenant(t, secret) => {
                        Connection::authenticated_as(ctx, node, ch, DEPTH, t, secret)
                    }
                    Hello::Never => Connection::connect(ctx, node, ch, DEPTH),
                };
                match connected {
                    Ok(c) => {
                        *slot = Some(c);
                        opened += 1;
                    }
                    Err(_) => {
                        t.refused += 1; // the node refused the connection (or it failed)
                        continue;
                    }
                }
            }
            if let Some(c) = slot.as_mut() {
                posted += c.burst();
            }
        }
        t.done += u64::from(posted);
        if posted == 0 {
            // Nothing more fits: block until a send completes or the RNR timers are due.
            for c in conns.iter().flatten() {
                c.cq().req_notify();
            }
            channel.wait(IDLE_WAIT);
        }
    }
    t.extra = vec![("connections", opened), ("broken", broke)];
    Ok(t)
}

/// Floods the node's control path from `ctx` within the rules of credits, until `stop`: each
/// of [`CONNECTIONS`] connections authenticates as `tenant` and keeps all its credits full of
/// requests that bind windows for an object that does not exist (each refused, each charged
/// as a permission change), taking its replies and asking again at once. It never blocks
/// (polling is its own CPU's business); what it costs others is what the node gives it.
pub(super) fn flood_within_credits(
    ctx: &SoftContext,
    node: &SoftAddress,
    tenant: (u32, u64),
    stop: &AtomicBool,
) -> Result<Tally> {
    use patronus_core::client::MAX_OUTSTANDING_RPCS;
    let mut t = Tally::new("requests");
    let request = patronus_core::testing::refused_acquire();
    let mut conns = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        let mut c = Connection::listening_as(ctx, node, MAX_OUTSTANDING_RPCS, tenant.0, tenant.1)?;
        for _ in 0..MAX_OUTSTANDING_RPCS {
            c.send(&request)?;
        }
        conns.push((c, 0u64));
    }
    while !stop.load(Ordering::Relaxed) {
        for (c, answered) in conns.iter_mut() {
            let replies = c.replies()?;
            for _ in *answered..replies {
                c.send(&request)?;
            }
            t.done += replies - *answered;
            *answered = replies;
        }
    }
    t.extra = vec![("connections", CONNECTIONS as u64)];
    Ok(t)
}
