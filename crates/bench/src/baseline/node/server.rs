//! The server thread's loop: poll a batch of receives, adopt new connections, handle each
//! request, reply from a send slot, reap broken connections.

use super::*;

impl<P: Provider> Server<P> {
    pub(super) fn run(&mut self) {
        let mut incoming = Vec::new();
        let mut batches = 0u64;
        let mut published = u64::MAX;
        while !self.shared.stop.load(Ordering::SeqCst) {
            if self.shared.publish.load(Ordering::SeqCst) {
                self.publish();
                self.shared.publish.store(false, Ordering::SeqCst);
            }
            let n = self.rpc.receive(&mut incoming, |_| None);
            // After polling: a connection is adopted before its client learns it is
            // connected, so every QP a polled request came from is known by now.
            self.adopt_incoming();
            self.reap_send_completions();
            if n == 0 {
                if self.rpc.is_parking() && published != batches {
                    published = batches;
                    self.publish();
                }
                self.rpc.idle(Duration::from_micros(500));
                continue;
            }
            let cpu_start = thread_cpu();
            for message in incoming.drain(..) {
                self.on_receive(message);
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
        self.rpc.reap_replies();
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

    fn on_receive(&mut self, message: Incoming<BaselineRequest>) {
        // Malformed, or from a QP we never adopted: dropped (the sender times out).
        if let Ok((req_id, req)) = message.message
            && self.conns.contains_key(&message.qp_num)
        {
            self.stats.requests += 1;
            let reply = self.handle(message.qp_num, req);
            self.send_reply(message.qp_num, req_id, &reply);
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
        // A client whose QP broke gets no reply; the connection is reaped.
        let qp = conn.qp.clone();
        let _ = self.rpc.reply(&qp, req_id, reply);
    }
}
