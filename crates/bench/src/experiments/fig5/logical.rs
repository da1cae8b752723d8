//! The Figure-5 workload as one logical client per mechanism: pick a random 64 B object, make
//! it accessible (or not, for Unprot and RPC), access it three times, end the permission.
//!
//! Latency samples are per access, as an application sees them: the first access of a
//! permission includes the time to obtain it (from issuing the request to the access's
//! completion), the two re-accesses only their own round trip.

use crate::baseline::{BaselineClient, BaselineReply, BaselineRequest};
use crate::experiments::driver::{Logical, StepCtx, now};
use crate::experiments::tickets::{next_reply, send};
use anyhow::{Result, bail};
use patronus_core::client::{Client, ClientError};
use patronus_core::proto::messages::{Access, Mode, Reply, Request};
use rand::Rng;
use rnic::MemoryKey;
use rnic::soft::SoftProvider;
use std::sync::Arc;
use std::time::Instant;

/// Bytes per access (§7.1).
pub const ACCESS: usize = 64;
/// Accesses per permission (§7.1: "re-access the same address three times").
pub const REUSE: usize = 3;

/// What a logical client waits for.
#[derive(Debug)]
enum Wait {
    /// Nothing: the next step starts a new permission.
    Idle,
    /// The permission (grant, registration, QP flags) requested at `t0`.
    Grant {
        t0: Instant,
        addr: u64,
        sent: rnic::Timestamp,
    },
    /// The end of the permission (revoke, deregistration, QP flags back).
    Release,
}

fn accesses(
    ctx: &mut StepCtx<'_>,
    t0: Instant,
    mut one: impl FnMut(&mut [u8; ACCESS]) -> Result<()>,
) -> Result<()> {
    let mut buf = [0u8; ACCESS];
    for i in 0..REUSE {
        let start = if i == 0 { t0 } else { now() };
        one(&mut buf)?;
        ctx.latency.record(now() - start);
    }
    ctx.done += REUSE as u64;
    Ok(())
}

/// Patronus with every technique: acquire (pipelined), three one-sided READs through the
/// window, no revoke (the lease ends the permission: the "+ Expr" technique).
pub struct PatronusLogical {
    client: Client<SoftProvider>,
    objects: Arc<Vec<u64>>,
    lease_us: u64,
    wait: Wait,
}

impl PatronusLogical {
    /// A logical client over `objects` with leases of `lease_us`.
    pub fn new(client: Client<SoftProvider>, objects: Arc<Vec<u64>>, lease_us: u64) -> Self {
        PatronusLogical {
            client,
            objects,
            lease_us,
            wait: Wait::Idle,
        }
    }
}

impl Logical for PatronusLogical {
    fn step(&mut self, ctx: &mut StepCtx<'_>) -> Result<()> {
        match self.wait {
            Wait::Idle => {
                let addr = self.objects[ctx.rng.random_range(0..self.objects.len())];
                let sent = self.client.status().clock().now();
                let t0 = now();
                send(
                    &mut self.client,
                    Request::Acquire {
                        addr,
                        size: ACCESS as u64,
                        lease_us: self.lease_us,
                        access: Access::Read,
                        mode: Mode::Shared,
                        wait_us: 0,
                    },
                )?;
                self.wait = Wait::Grant { t0, addr, sent };
            }
            Wait::Grant { t0, sent, .. } => match next_reply(&mut self.client)? {
                None => {}
                Some((_, Reply::Granted(g))) => {
                    let perm = self
                        .client
                        .control()
                        .adopt(g, Access::Read, Mode::Shared, sent);
                    let client = &mut self.client;
                    self.wait = Wait::Idle;
                    match accesses(ctx, t0, |buf| Ok(client.read(&perm, 0, buf)?)) {
                        Ok(()) => {}
                        // The lease ran out before an access was posted (a descheduled thread
                        // on an oversubscribed machine), or while it was in flight (the NIC
                        // rejects it, as it must): start over with a new permission.
                        Err(e)
                            if matches!(
                                e.downcast_ref(),
                                Some(ClientError::LeaseExpired | ClientError::Denied(_))
                            ) => {}
                        Err(e) => return Err(e),
                    }
                }
                Some((_, other)) => bail!("Patronus acquire: {other:?}"),
            },
            Wait::Release => self.wait = Wait::Idle,
        }
        Ok(())
    }

    fn patronus_client(&self) -> Option<&Client<SoftProvider>> {
        Some(&self.client)
    }

    fn patronus_client_mut(&mut self) -> Option<&mut Client<SoftProvider>> {
        Some(&mut self.client)
    }
}

/// Which baseline mechanism a [`BaselineLogical`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// One registered region for everything; no permission operations.
    Unprot,
    /// A memory region registered per permission, deregistered at its end.
    Mr,
    /// The client's QP access flags opened per permission and closed at its end.
    Qp,
    /// Every access is a request the memory node's thread serves by copying.
    Rpc,
}

/// A baseline mechanism's logical client (one connection each).
pub struct BaselineLogical {
    client: BaselineClient<SoftProvider>,
    flavor: Flavor,
    pool_addr: u64,
    slots: u64,
    wait: Wait,
}

impl BaselineLogical {
    /// A logical client of `flavor` over the node's whole pool.
    pub fn new(client: BaselineClient<SoftProvider>, flavor: Flavor) -> Self {
        let (pool_addr, pool_len) = (client.pool_addr(), client.pool_len());
        BaselineLogical {
            client,
            flavor,
            pool_addr,
            slots: (pool_len / ACCESS as u64).max(1),
            wait: Wait::Idle,
        }
    }

    fn pool_rkey(&self) -> Result<MemoryKey> {
        match self.client.rkey() {
            Some(k) => Ok(k),
            None => bail!("the baseline node gave no pool rkey"),
        }
    }
}

impl Logical for BaselineLogical {
    fn step(&mut self, ctx: &mut StepCtx<'_>) -> Result<()> {
        match self.wait {
            Wait::Idle => {
                let addr = self.pool_addr + ctx.rng.random_range(0..self.slots) * ACCESS as u64;
                let t0 = now();
                match self.flavor {
                    Flavor::Unprot => {
                        let rkey = self.pool_rkey()?;
                        let client = &mut self.client;
                        accesses(ctx, t0, |buf| Ok(client.read(rkey, addr, buf)?))?;
                    }
                    Flavor::Rpc => {
                        let client = &mut self.client;
                        accesses(ctx, t0, |buf| Ok(client.rpc_read(addr, buf)?))?;
                    }
                    Flavor::Mr => {
                        self.client.submit(BaselineRequest::RegisterMr {
                            addr,
                            len: ACCESS as u64,
                            read_only: false,
                            object: false,
                        })?;
                        self.wait = Wait::Grant {
                            t0,
                            addr,
                            sent: rnic::Timestamp::default(),
                        };
                    }
                    Flavor::Qp => {
                        self.client.submit(BaselineRequest::OpenQp)?;
                        self.wait = Wait::Grant {
                            t0,
                            addr,
                            sent: rnic::Timestamp::default(),
                        };
                    }
                }
            }
            Wait::Grant { t0, addr, .. } => {
                let Some((_, reply)) = self.client.poll()? else {
                    return Ok(());
                };
                let (rkey, release) = match (self.flavor, reply) {
                    (Flavor::Mr, BaselineReply::Registered { rkey }) => {
                        (rkey, BaselineRequest::DeregisterMr { rkey })
                    }
                    (Flavor::Qp, BaselineReply::Done) => {
                        (self.pool_rkey()?, BaselineRequest::CloseQp)
                    }
                    (_, other) => bail!("{:?} permission: {other:?}", self.flavor),
                };
                let client = &mut self.client;
                accesses(ctx, t0, |buf| Ok(client.read(rkey, addr, buf)?))?;
                self.client.submit(release)?;
                self.wait = Wait::Release;
            }
            Wait::Release => match self.client.poll()? {
                None => {}
                Some((_, BaselineReply::Done)) => self.wait = Wait::Idle,
                Some((_, other)) => bail!("{:?} release: {other:?}", self.flavor),
            },
        }
        Ok(())
    }
}
