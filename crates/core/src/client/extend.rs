//! The client's side of CN-collaborated extensions posted without waiting (`Op::Extend`
//! tickets): posting the lifetime CAS on the data QP, filing its completion in the table of
//! `posted`, and taking its outcome when the ticket is polled (the invariants are stated in
//! `posted`).

use super::driver::Client;
use super::error::ClientError;
use super::perm::Perm;
use super::posted::{MAX_POSTED, POSTED, POSTED_STAGING, POSTED_TICKET, PostedExtend};
use super::qps::tagged;
use rnic::{MemoryBuffer, MemoryRegion, Provider, SendOp, SendWr, Sge, WcStatus};
use std::sync::atomic::Ordering;

impl<P: Provider> Client<P> {
    /// Posts a CN-collaborated extension of `perm` by `lease` (with the lease policy's slack,
    /// as [`Client::extend`]) and returns its ticket without waiting for it.
    pub(super) fn post_extend(
        &mut self,
        perm: &Perm,
        lease: std::time::Duration,
    ) -> Result<u64, ClientError> {
        let lease_us = self.extension_lease(perm, lease)?;
        let current = perm.lifetime_us();
        if current >= perm.max_lifetime_us() {
            self.node.lock().core.stats_mut().extension_refusals += 1;
            return Err(ClientError::ExtensionRefused);
        }
        let slot = (!self.posted.busy).trailing_zeros() as usize;
        if slot >= MAX_POSTED {
            return Err(ClientError::TooManyPosted);
        }
        if let Some(broken) = self.broken_lane() {
            self.switch_qp(broken)?;
        }
        let lane = self.bound_lane()?;
        let new = current.saturating_add(lease_us);
        let offset = self.staging.len() - POSTED_STAGING + 8 * slot;
        self.posted.next += 1;
        // The counter's 39 bits sit between the slot and the user's tag.
        let wr_id = POSTED | ((self.posted.next & ((1 << 39) - 1)) << 8) | slot as u64;
        let wr = SendWr {
            wr_id: tagged(self.user, wr_id),
            signaled: true,
            op: SendOp::CompareSwap {
                local: Sge {
                    addr: self.staging.addr() + offset as u64,
                    length: 8,
                    lkey: self.staging_mr.lkey(),
                },
                remote_addr: perm.grant.lifetime_addr(),
                rkey: perm.lifetime_rkey(),
                compare: current,
                swap: new,
            },
        };
        lane.post_send(&[wr])
            .map_err(|(_, e)| ClientError::Verbs(e))?;
        self.posted.busy |= 1 << slot;
        perm.mark_used();
        let ticket = POSTED_TICKET | self.posted.next;
        self.posted.by_ticket.insert(
            ticket,
            PostedExtend {
                wr_id,
                slot,
                current,
                new,
                session: self.data.number,
                lifetime_us: perm.lifetime_us.clone(),
            },
        );
        Ok(ticket)
    }

    /// Gives up on a posted extension: its outcome is never reported (it may still execute),
    /// and its result slot is free again once its completion arrives (the NIC may write the
    /// slot until then).
    pub(super) fn forget_extend(&mut self, ticket: u64) {
        self.sync_session();
        let Some(posted) = self.posted.by_ticket.remove(&ticket) else {
            return;
        };
        match self
            .posted
            .done
            .iter()
            .position(|wc| wc.wr_id == posted.wr_id)
        {
            Some(i) => {
                self.posted.done.swap_remove(i);
                self.posted.busy &= !(1 << posted.slot);
            }
            // Its session was retired: its QP is gone, nothing writes the slot.
            None if posted.session != self.data.number => {
                self.posted.busy &= !(1 << posted.slot);
            }
            None => self.posted.forgotten.push(posted.wr_id),
        }
    }

    /// Files the completions on the data CQ (posted extensions'; a batch's are dropped, as
    /// none is running). Returns how many the CQ returned.
    pub(super) fn poll_data_cq(&mut self) -> usize {
        let mut routed = Vec::new();
        let n = self.node.data_cq.poll(self.user, &mut routed);
        for r in &routed {
            // Anything else is from a batch already given up on, as `run` drops it.
            self.posted.file(&r.wc);
        }
        n
    }

    /// The outcome of the posted extension `ticket`, if it has completed: `Ok(true)` extended,
    /// `Ok(false)` the lifetime had moved meanwhile (an RPC extension; the permission adopts
    /// it, post again to extend further), `ExtensionRefused` once the manager ended it. The
    /// ticket ends with its outcome.
    pub(super) fn poll_extend(&mut self, ticket: u64) -> Option<Result<bool, ClientError>> {
        let Some(posted) = self.posted.by_ticket.remove(&ticket) else {
            return Some(Err(ClientError::InvalidArgument(
                "no such ticket in flight",
            )));
        };
        let outcome = self.posted_outcome(&posted);
        if outcome.is_none() {
            self.posted.by_ticket.insert(ticket, posted);
        }
        outcome
    }

    fn posted_outcome(&mut self, posted: &PostedExtend) -> Option<Result<bool, ClientError>> {
        self.sync_session();
        if !self.posted.done.iter().any(|wc| wc.wr_id == posted.wr_id) {
            self.poll_data_cq();
        }
        let Some(i) = self
            .posted
            .done
            .iter()
            .position(|wc| wc.wr_id == posted.wr_id)
        else {
            if posted.session != self.data.number {
                // Its session was retired before it completed: it may have executed.
                self.posted.busy &= !(1 << posted.slot);
                return Some(Err(ClientError::OutcomeUnknown(WcStatus::WrFlushError)));
            }
            return None;
        };
        let wc = self.posted.done.swap_remove(i);
        self.posted.busy &= !(1 << posted.slot);
        Some(match wc.status {
            WcStatus::Success => {
                let offset = self.staging.len() - POSTED_STAGING + 8 * posted.slot;
                let old = self.staging.load_u64(offset).unwrap_or(0);
                if old == posted.current {
                    posted.lifetime_us.fetch_max(posted.new, Ordering::SeqCst);
                    self.node.lock().core.stats_mut().cas_extensions += 1;
                    Ok(true)
                } else if old == 0 {
                    self.node.lock().core.stats_mut().extension_refusals += 1;
                    Err(ClientError::ExtensionRefused)
                } else {
                    posted.lifetime_us.fetch_max(old, Ordering::SeqCst);
                    Ok(false)
                }
            }
            s @ (WcStatus::RemoteAccessError | WcStatus::RemoteInvalidRequestError) => {
                Err(ClientError::Denied(s))
            }
            // It may have executed: never posted again.
            s => Err(ClientError::OutcomeUnknown(s)),
        })
    }
}
