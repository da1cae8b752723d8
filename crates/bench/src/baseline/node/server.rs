//! The server thread's loop: poll a batch of receives, adopt new connections, handle each
//! request, reply from a send slot, reap broken connections.

use super::*;

impl<P: Provider> Server<P> {
    pub(super) fn recv_wr(&self, slot: u32) -> RecvWr {
        RecvWr {
            wr_id: slot as u64,
            sge: Some(Sge {
                addr: self.slots.addr() + slot as u64 * SLOT_SIZE as u64,
                length: SLOT_SIZE as u32,
                lkey: self.slots_mr.lkey(),
            }),
        }
    }

    pub(super) fn run(&mut self) {
        let mut wcs = vec![WorkCompletion::default(); self.max_batch];
        let mut idle_spins = 0u32;
        let mut batches = 0u64;
        let mut published = u64::MAX;
        while !self.shared.stop.load(Ordering::SeqCst) {
            if self.shared.publish.load(Ordering::SeqCst) {
                self.publish();
                self.shared.publish.store(false, Ordering::SeqCst);
            }
            let n = self.recv_cq.poll(&mut wcs);
            // After polling: a connection is adopted before its client learns it is
            // connected, so every QP a polled request came from is known by now.
            self.adopt_incoming();
            self.reap_send_completions();
            if n == 0 {
                idle_spins += 1;
                if idle_spins > 256 {
                    if published != batches {
                        published = batches;
                        self.publish();
                    }
                    self.recv_cq.wait(Duration::from_micros(500));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            idle_spins = 0;
            let cpu_start = thread_cpu();
            for wc in &wcs[..n] {
                self.on_receive(wc);
            }
            batches += 1;
            self.stats.busy_cpu += thread_cpu().saturating_sub(cpu_start);
            if batches % 64 == 0 {
                self.publish();
            }
        }
        self.publish();
    }

    fn publish(&self) {
        let mut s = self.shared.stats.lock();
        *s = self.stats;
        s.thread_cpu = thread_cpu();
    }

    fn adopt_incoming(&mut self) {
        let incoming = std::mem::take(&mut *self.shared.incoming.lock());
        for (scheme, qp) in incoming {
            let conn = Conn {
                scheme,
                qp: qp.clone(),
                mrs: HashMap::new(),
            };
            self.conns.insert(qp.qp_num(), conn);
        }
    }

    /// Drops connections whose QP broke, deregistering their regions.
    fn reap_send_completions(&mut self) {
        let mut wcs = [WorkCompletion::default(); 32];
        while self.send_cq.poll(&mut wcs) > 0 {}
        let stats = &mut self.stats;
        self.conns.retain(|_, c| {
            let alive = c.qp.state() != QpState::Error;
            if !alive {
                stats.mrs_deregistered += c.mrs.len() as u64;
                c.mrs.clear();
            }
            alive
        });
    }

    fn on_receive(&mut self, wc: &WorkCompletion) {
        let slot = wc.wr_id as u32;
        if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv && slot < self.depth {
            let mut buf = [0u8; SLOT_SIZE];
            let len = (wc.byte_len as usize).min(SLOT_SIZE);
            let read = self.slots.read(slot as usize * SLOT_SIZE, &mut buf[..len]);
            // Malformed, or from a QP we never adopted: dropped (the sender times out).
            if let (Ok(()), Ok((req_id, req))) = (read, decode_request(&buf[..len]))
                && self.conns.contains_key(&wc.qp_num)
            {
                self.stats.requests += 1;
                let reply = self.handle(wc.qp_num, req);
                self.send_reply(wc.qp_num, req_id, &reply);
            }
        }
        if slot < self.depth {
            let _ = self.srq.post_recv(&[self.recv_wr(slot)]);
        }
    }

    /// `[addr, addr + len)` as an offset into the pool, if it is non-empty and inside.
    fn pool_offset(&self, addr: u64, len: u64) -> Result<usize, FailCode> {
        let off = addr
            .checked_sub(self.pool.addr())
            .ok_or(FailCode::OutOfRange)?;
        let end = off.checked_add(len).ok_or(FailCode::OutOfRange)?;
        if len == 0 || end > self.pool.len() as u64 {
            return Err(FailCode::OutOfRange);
        }
        Ok(off as usize)
    }

    fn handle(&mut self, qpn: QpNumber, req: BaselineRequest) -> BaselineReply {
        match self.try_handle(qpn, req) {
            Ok(reply) => reply,
            Err(code) => BaselineReply::Failed(code),
        }
    }

    fn try_handle(
        &mut self,
        qpn: QpNumber,
        req: BaselineRequest,
    ) -> Result<BaselineReply, FailCode> {
        let conn = self.conns.get(&qpn).ok_or(FailCode::WrongScheme)?;
        let scheme = conn.scheme;
        match req {
            BaselineRequest::Hello => Ok(BaselineReply::Welcome(Welcome {
                pool_addr: self.pool.addr(),
                pool_len: self.pool.len() as u64,
                rkey: match scheme {
                    Scheme::Unprot | Scheme::Qp => self.pool_mr.as_ref().map(|m| m.rkey()),
                    Scheme::Mr | Scheme::Rpc => None,
                },
            })),
            BaselineRequest::RegisterMr { addr, len } => {
                if scheme != Scheme::Mr {
                    return Err(FailCode::WrongScheme);
                }
                if conn.mrs.len() >= MRS_PER_CLIENT {
                    return Err(FailCode::Exhausted);
                }
                let off = self.pool_offset(addr, len)?;
                let rights = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ALL;
                let mr = self
                    .pd
                    .reg_mr(&self.pool, off, len as usize, rights)
                    .map_err(|e| match e {
                        VerbsError::Exhausted(_) | VerbsError::Memory(_) => FailCode::Exhausted,
                        _ => FailCode::Verbs,
                    })?;
                let rkey = mr.rkey();
                self.stats.mrs_registered += 1;
                if let Some(conn) = self.conns.get_mut(&qpn) {
                    conn.mrs.insert(rkey, mr);
                }
                Ok(BaselineReply::Registered { rkey })
            }
            BaselineRequest::DeregisterMr { rkey } => {
                if scheme != Scheme::Mr {
                    return Err(FailCode::WrongScheme);
                }
                let conn = self.conns.get_mut(&qpn).ok_or(FailCode::WrongScheme)?;
                let mr = conn.mrs.remove(&rkey).ok_or(FailCode::UnknownRkey)?;
                // A plain region has no windows, so this cannot be refused; if it were, the
                // handle's drop would deregister it anyway.
                let _ = mr.deregister();
                self.stats.mrs_deregistered += 1;
                Ok(BaselineReply::Done)
            }
            BaselineRequest::OpenQp | BaselineRequest::CloseQp => {
                if scheme != Scheme::Qp {
                    return Err(FailCode::WrongScheme);
                }
                let access = if req == BaselineRequest::OpenQp {
                    AccessFlags::REMOTE_ALL
                } else {
                    AccessFlags::empty()
                };
                // A barrier: returns once requests under the old flags have finished.
                conn.qp.modify_access(access).map_err(|_| FailCode::Verbs)?;
                self.stats.qp_flag_changes += 1;
                Ok(BaselineReply::Done)
            }
            BaselineRequest::Read { addr, len } => {
                if len as usize > MAX_PAYLOAD {
                    return Err(FailCode::TooLong);
                }
                let off = self.pool_offset(addr, len as u64)?;
                let mut bytes = [0u8; MAX_PAYLOAD];
                self.pool
                    .read(off, &mut bytes[..len as usize])
                    .map_err(|_| FailCode::OutOfRange)?;
                self.stats.rpc_bytes_copied += len as u64;
                Ok(BaselineReply::Data { len, bytes })
            }
            BaselineRequest::Write { addr, len, bytes } => {
                if len as usize > MAX_PAYLOAD {
                    return Err(FailCode::TooLong);
                }
                let off = self.pool_offset(addr, len as u64)?;
                self.pool
                    .write(off, &bytes[..len as usize])
                    .map_err(|_| FailCode::OutOfRange)?;
                self.stats.rpc_bytes_copied += len as u64;
                Ok(BaselineReply::Done)
            }
        }
    }

    fn send_reply(&mut self, qpn: QpNumber, req_id: u64, reply: &BaselineReply) {
        let Some(conn) = self.conns.get(&qpn) else {
            return;
        };
        let slot = self.depth + self.next_send_slot;
        self.next_send_slot = (self.next_send_slot + 1) % self.depth;
        let off = slot as usize * SLOT_SIZE;
        if self.slots.write(off, &encode_reply(req_id, reply)).is_err() {
            return;
        }
        let wr = SendWr {
            wr_id: slot as u64,
            signaled: false,
            op: SendOp::Send {
                local: Some(Sge {
                    addr: self.slots.addr() + off as u64,
                    length: SLOT_SIZE as u32,
                    lkey: self.slots_mr.lkey(),
                }),
            },
        };
        // A client whose QP broke gets no reply; the connection is reaped.
        let _ = conn.qp.post_send(std::slice::from_ref(&wr));
    }
}
