//! The send queue's posting path: local checks of every work request, local operations
//! (bind, invalidate) executed at once, remote ones handed to the requester core and the link.
//! A cross-channel QP's requests come here when they start (`chain`), not when posted.

use super::*;

impl QpInner {
    pub(super) fn local_error(&self, spec: PendingSpec, status: WcStatus) {
        if let Some(r) = self.req.lock().as_mut() {
            r.push_local(spec, status);
            r.flush();
        }
        self.enter_error(None);
    }

    pub(super) fn read_local(&self, sge: &Sge) -> Result<Payload, WcStatus> {
        let grant = self
            .dev
            .mpt
            .check_local(sge.lkey, sge.addr, sge.length as u64, false, self.pd_id())
            .map_err(|_| WcStatus::LocalProtectionError)?;
        let mut buf = vec![0u8; sge.length as usize];
        grant.region().read(sge.addr, &mut buf);
        Ok(buf.into())
    }

    pub(super) fn check_local_write(&self, sge: &Sge) -> Result<(), WcStatus> {
        self.dev
            .mpt
            .check_local(sge.lkey, sge.addr, sge.length as u64, true, self.pd_id())
            .map(|_| ())
            .map_err(|_| WcStatus::LocalProtectionError)
    }

    /// Posts a list of send requests under `tx`: each is checked and started (an ordinary
    /// QP) or held (a cross-channel QP); in ERR each completes flushed. Stops at the first
    /// refused request, returning its index.
    pub(super) fn post_list(
        &self,
        wrs: &[SendWr<'_, SoftMw, SoftMr>],
    ) -> Result<(), (usize, VerbsError)> {
        let _tx = self.tx.lock();
        // A doorbell of several requests leaves in one write on a link that buffers.
        let link = (wrs.len() > 1).then(|| self.link.read().clone()).flatten();
        let _corked = link.as_deref().map(Corked::new);
        for (i, wr) in wrs.iter().enumerate() {
            match self.state() {
                QpState::ReadyToSend => {}
                QpState::Error => {
                    let opcode = opcode_of(&wr.op);
                    let mut req = self.req.lock();
                    match req.as_mut() {
                        // Behind earlier requests, so completions stay in order.
                        Some(r) => {
                            self.flush_held(r);
                            r.push_local(
                                PendingSpec {
                                    wr_id: wr.wr_id,
                                    signaled: wr.signaled,
                                    opcode,
                                    local: None,
                                    byte_len: 0,
                                },
                                WcStatus::WrFlushError,
                            )
                        }
                        None => self
                            .send_cq
                            .inner
                            .push(self.flushed_completion(wr.wr_id, opcode)),
                    }
                    continue;
                }
                s => {
                    return Err((
                        i,
                        VerbsError::InvalidQpState {
                            qpn: self.qpn,
                            state: s.name(),
                            action: "post_send",
                        },
                    ));
                }
            }
            let held = self.chain.as_deref().map_or(0, |c| c.held());
            let full = self
                .req
                .lock()
                .as_ref()
                .is_some_and(|r| r.in_flight() + held >= self.max_send_wr);
            if full {
                return Err((i, VerbsError::Exhausted(Resource::QueueSlot)));
            }
            match self.chain.as_deref() {
                Some(chain) => self.hold(chain, wr).map_err(|e| (i, e))?,
                None => self.post_one(wr).map_err(|e| (i, e))?,
            }
        }
        Ok(())
    }

    /// Executes one posted request: a local op now, or a remote one handed to the link.
    pub(super) fn post_one(&self, wr: &SendWr<'_, SoftMw, SoftMr>) -> VerbsResult<()> {
        let max_msg = self.dev.config.attr.max_msg_size;
        let spec = |opcode, local, byte_len| PendingSpec {
            wr_id: wr.wr_id,
            signaled: wr.signaled,
            opcode,
            local,
            byte_len,
        };
        let (spec, op): (PendingSpec, Result<RequestOp<Payload>, WcStatus>) = match &wr.op {
            SendOp::Read {
                local,
                remote_addr,
                rkey,
            } => (
                spec(WcOpcode::Read, Some(*local), local.length),
                self.check_local_write(local).and_then(|()| {
                    if local.length > max_msg {
                        return Err(WcStatus::LocalLengthError);
                    }
                    Ok(RequestOp::Read {
                        addr: *remote_addr,
                        rkey: *rkey,
                        len: local.length,
                    })
                }),
            ),
            SendOp::Write {
                local,
                remote_addr,
                rkey,
            } => (
                spec(WcOpcode::Write, None, local.length),
                if local.length > max_msg {
                    Err(WcStatus::LocalLengthError)
                } else {
                    self.read_local(local).map(|data| RequestOp::Write {
                        addr: *remote_addr,
                        rkey: *rkey,
                        data,
                    })
                },
            ),
            SendOp::CompareSwap {
                local,
                remote_addr,
                rkey,
                compare,
                swap,
            } => (
                spec(WcOpcode::CompareSwap, Some(*local), 8),
                self.check_atomic_local(local)
                    .map(|()| RequestOp::CompareSwap {
                        addr: *remote_addr,
                        rkey: *rkey,
                        compare: *compare,
                        swap: *swap,
                    }),
            ),
            SendOp::FetchAdd {
                local,
                remote_addr,
                rkey,
                add,
            } => (
                spec(WcOpcode::FetchAdd, Some(*local), 8),
                self.check_atomic_local(local)
                    .map(|()| RequestOp::FetchAdd {
                        addr: *remote_addr,
                        rkey: *rkey,
                        add: *add,
                    }),
            ),
            SendOp::Send { local } => self.send_op(spec, local, None),
            SendOp::SendWithInvalidate { local, invalidate } => {
                self.send_op(spec, local, Some(*invalidate))
            }
            SendOp::BindMw { mw, bind } => {
                let s = spec(WcOpcode::BindMw, None, 0);
                let status = self.bind(mw, bind);
                return self.finish_local(s, status);
            }
            SendOp::LocalInvalidate { rkey } => {
                let s = spec(WcOpcode::LocalInvalidate, None, 0);
                let status = match self.dev.mpt.invalidate_mw(*rkey, self.pd_id(), None) {
                    Ok(()) => WcStatus::Success,
                    Err(_) => WcStatus::LocalQpOperationError,
                };
                return self.finish_local(s, status);
            }
            SendOp::Wait { .. } | SendOp::Enable { .. } => {
                return Err(VerbsError::InvalidArgument(
                    "WAIT and ENABLE need a cross-channel QP",
                ));
            }
        };
        let op = match op {
            Ok(op) => op,
            Err(status) => {
                self.local_error(spec, status);
                return Ok(());
            }
        };
        let now = self.dev.config.clock.now();
        let request = match self.req.lock().as_mut() {
            Some(r) => r.push_remote(spec, op, now),
            None => return Ok(()),
        };
        if self.transmit_request(&request).is_err() {
            self.link_lost();
        }
        Ok(())
    }

    pub(super) fn send_op(
        &self,
        spec: impl Fn(WcOpcode, Option<Sge>, u32) -> PendingSpec,
        local: &Option<Sge>,
        invalidate: Option<MemoryKey>,
    ) -> (PendingSpec, Result<RequestOp<Payload>, WcStatus>) {
        let len = local.map_or(0, |s| s.length);
        let data = match local {
            Some(sge) if len > self.dev.config.attr.max_msg_size => Err(WcStatus::LocalLengthError),
            Some(sge) => self.read_local(sge),
            None => Ok(Payload::from(Vec::new())),
        };
        (
            spec(WcOpcode::Send, None, len),
            data.map(|data| RequestOp::Send { data, invalidate }),
        )
    }

    pub(super) fn check_atomic_local(&self, local: &Sge) -> Result<(), WcStatus> {
        if local.length != 8 {
            return Err(WcStatus::LocalLengthError);
        }
        self.check_local_write(local)
    }

    pub(super) fn bind(&self, mw: &SoftMw, bind: &crate::verbs::BindInfo<'_, SoftMr>) -> WcStatus {
        if !Arc::ptr_eq(&mw.pd().inner.dev, &self.dev) {
            return WcStatus::MwBindError;
        }
        let mr = match bind.mr {
            Some(mr) => match mr.entry() {
                Some(e) => Some(e),
                None => return WcStatus::MwBindError,
            },
            None => None,
        };
        match self.bind_resolved(
            mw.rkey(),
            mr,
            bind.addr,
            bind.length,
            bind.access,
            bind.key,
            bind.target_qp,
        ) {
            Ok(key) => {
                mw.set_rkey(key);
                WcStatus::Success
            }
            Err(status) => status,
        }
    }

    /// Binds the window `mw` names (its index) as a bind posted on this QP, for `target` if
    /// given (a type-2 window for another QP of the same device and PD, not in RESET or ERR).
    #[allow(clippy::too_many_arguments)] // `ibv_mw_bind_info`'s fields and the target QP
    pub(super) fn bind_resolved(
        &self,
        mw: MemoryKey,
        mr: Option<Arc<crate::soft::mpt::MrEntry>>,
        addr: crate::verbs::VirtAddr,
        len: u64,
        access: AccessFlags,
        key: Option<u8>,
        target: Option<QpNumber>,
    ) -> Result<MemoryKey, WcStatus> {
        let mut other = None;
        let (qp, qp_pd) = match target {
            None => (self.qpn, self.pd_id()),
            Some(_) if !self.dev.config.attr.mw_bind_target_qp => {
                return Err(WcStatus::MwBindError);
            }
            Some(t) if t == self.qpn => (t, self.pd_id()),
            Some(t) => {
                let named = self.dev.cross.qp(t).ok_or(WcStatus::MwBindError)?;
                // Read before the state: a reset after this read is seen below.
                let resets = named.resets();
                if named.pd() != self.pd_id()
                    || matches!(named.qp_state(), QpState::Reset | QpState::Error)
                {
                    return Err(WcStatus::MwBindError);
                }
                let pd = named.pd();
                other = Some((resets, named));
                (t, pd)
            }
        };
        let req = BindRequest {
            mw,
            qp,
            qp_pd,
            mr,
            addr,
            len,
            access,
            key,
            named_qp: target.is_some(),
        };
        let key = self
            .dev
            .mpt
            .bind_mw(req)
            .map_err(|_| WcStatus::MwBindError)?;
        // A reset of the named QP counts itself and then invalidates its windows: one that ran
        // between the check above and the bind missed this window, and its next connection
        // (another peer, maybe) must not find it. Seen here, the bind is undone and fails.
        if other.is_some_and(|(resets, q)| q.resets() != resets) {
            let _ = self.dev.mpt.invalidate_mw(key, qp_pd, None);
            return Err(WcStatus::MwBindError);
        }
        Ok(key)
    }

    pub(super) fn finish_local(&self, spec: PendingSpec, status: WcStatus) -> VerbsResult<()> {
        if status == WcStatus::Success {
            if let Some(r) = self.req.lock().as_mut() {
                r.push_local(spec, status);
            }
        } else {
            self.local_error(spec, status);
        }
        Ok(())
    }

    pub(super) fn flushed_completion(&self, wr_id: u64, opcode: WcOpcode) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status: WcStatus::WrFlushError,
            opcode,
            byte_len: 0,
            qp_num: self.qpn,
            invalidated_rkey: None,
        }
    }
}
