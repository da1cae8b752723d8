//! The server thread's loop: poll a batch of receives, adopt new connections, handle each
//! request (dispatched here to the handlers of `objects`, `data` and `names`), reply from a
//! send slot, reap broken connections.

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
        let (stats, overlaps) = (&mut self.stats, &mut self.overlaps);
        self.conns.retain(|&qpn, c| {
            let alive = c.qp.state() != QpState::Error;
            if !alive {
                stats.mrs_deregistered += c.mrs.len() as u64;
                for (rkey, _) in c.mrs.drain() {
                    overlaps.forget((qpn, rkey));
                }
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
    pub(super) fn pool_offset(&self, addr: u64, len: u64) -> Result<usize, FailCode> {
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

    /// Dispatches a request of an adopted connection to its handler.
    fn try_handle(
        &mut self,
        qpn: QpNumber,
        req: BaselineRequest,
    ) -> Result<BaselineReply, FailCode> {
        let conn = self.conns.get(&qpn).ok_or(FailCode::WrongScheme)?;
        let scheme = conn.scheme;
        let only = |s: Scheme| {
            if scheme == s {
                Ok(())
            } else {
                Err(FailCode::WrongScheme)
            }
        };
        match req {
            BaselineRequest::Hello => Ok(BaselineReply::Welcome(Welcome {
                pool_addr: self.pool.addr(),
                pool_len: self.pool.len() as u64,
                rkey: match scheme {
                    Scheme::Unprot | Scheme::Qp => self.pool_mr.as_ref().map(|m| m.rkey()),
                    Scheme::Mr | Scheme::Rpc => None,
                },
            })),
            BaselineRequest::RegisterMr {
                addr,
                len,
                read_only,
                object,
            } => {
                only(Scheme::Mr)?;
                let off = self.pool_offset(addr, len)?;
                if object && self.heap.containing(off as u64, len).is_none() {
                    return Err(FailCode::UnknownObject);
                }
                let rkey = self.register(qpn, off, len, read_only)?;
                Ok(BaselineReply::Registered { rkey })
            }
            BaselineRequest::DeregisterMr { rkey } => {
                only(Scheme::Mr)?;
                self.deregister(qpn, rkey)?;
                Ok(BaselineReply::Done)
            }
            BaselineRequest::OpenQp | BaselineRequest::CloseQp => {
                only(Scheme::Qp)?;
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
            BaselineRequest::Read { addr, len } => self.rpc_read(addr, len),
            BaselineRequest::Write { addr, bytes } => self.rpc_write(addr, &bytes),
            BaselineRequest::Cas {
                addr,
                compare,
                swap,
            } => {
                only(Scheme::Rpc)?;
                self.rpc_atomic(addr, |old| if old == compare { swap } else { old })
            }
            BaselineRequest::Faa { addr, add } => {
                only(Scheme::Rpc)?;
                self.rpc_atomic(addr, |old| old.wrapping_add(add))
            }
            BaselineRequest::Alloc { size } => self.alloc(qpn, scheme, size),
            BaselineRequest::Free { addr } => {
                self.free(addr)?;
                Ok(BaselineReply::Done)
            }
            BaselineRequest::Publish { name, addr, len } => {
                self.names.publish(name, addr, len)?;
                Ok(BaselineReply::Done)
            }
            BaselineRequest::Lookup { name } => {
                let (addr, len) = self.names.lookup(name)?;
                Ok(BaselineReply::Found { addr, len })
            }
            BaselineRequest::Unpublish { name } => {
                self.names.unpublish(name)?;
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
