//! The manager thread's loop: receive a batch, run the core's three phases, execute its NIC
//! work as chains on the loopback QPs, write headers, reply.

use super::recent::Seen;
use super::*;

impl<P: Provider> Runner<P> {
    pub(super) fn run(&mut self) {
        let clock = self.ctx.clock();
        let mut incoming = Vec::with_capacity(self.max_batch);
        let mut requests: Vec<(ClientId, u64, Request)> = Vec::with_capacity(self.max_batch);
        let mut published = u64::MAX;
        // The thread's CPU clock is a system call: read it when a busy streak starts and
        // when it ends, not around every batch.
        let mut streak_cpu: Option<Duration> = None;
        while !self.shared.stop.load(Ordering::SeqCst) {
            if self.shared.publish.load(Ordering::SeqCst) {
                self.publish_stats();
            }
            requests.clear();
            if self.rpc.receive(&mut incoming) > 0 && streak_cpu.is_none() {
                // Messages answered on arrival (`Hello`, `UseQp`, retries) are work too.
                streak_cpu = Some(thread_cpu());
            }
            // After polling: a connection is registered before its client learns it is
            // connected, so every QP a polled request came from (or names) is adopted by now.
            self.adopt_incoming();
            for message in incoming.drain(..) {
                self.on_receive(message, &mut requests);
            }
            self.reap_send_completions();
            let now = clock.now();
            // Requests take every due expiry with them (`begin` collects all of them);
            // without requests, an expiry waits until it is `expiry_slack_us` late.
            let due = self
                .core
                .next_deadline()
                .is_some_and(|d| d.plus_us(self.expiry_slack_us) <= now)
                || self.core.has_pending_work();
            if requests.is_empty() && !due {
                if let Some(start) = streak_cpu.take() {
                    self.busy_cpu += thread_cpu().saturating_sub(start);
                }
                // Idle: unbind the windows left over freed memory (the next turn's batch does
                // it), then zero memory no window covers any more — both off the grant path.
                if self.core.unbind_idle(IDLE_SCRUB_OBJECTS) {
                    continue;
                }
                let scrubs = self.core.scrub_idle(IDLE_SCRUB_OBJECTS);
                if !scrubs.is_empty() {
                    self.scrub(&scrubs);
                    continue;
                }
                if self.rpc.is_parking() {
                    if published != self.batches {
                        published = self.batches;
                        self.publish_stats();
                        // Idle: a good time to forget QPs that broke without a failed reply.
                        self.sweep = true;
                        self.reap_send_completions();
                    }
                    let wait = self
                        .core
                        .next_deadline()
                        .map_or(Duration::from_micros(500), |d| {
                            d.plus_us(self.expiry_slack_us)
                                .since(now)
                                .min(Duration::from_micros(500))
                        });
                    self.rpc.idle(wait.max(Duration::from_micros(20)));
                } else {
                    self.rpc.idle(Duration::ZERO);
                }
                continue;
            }
            self.rpc.busy();
            if streak_cpu.is_none() {
                streak_cpu = Some(thread_cpu());
            }
            let checks = self.core.begin(now);
            let cas_results = self.execute(&checks);
            let ops = self.core.plan(now, &cas_results, &requests);
            let results = self.execute(&ops);
            let finished = self.core.finish(now, &results);
            for (addr, words) in finished.header_writes {
                let off = (addr - self.pool.addr()) as usize;
                for (i, w) in words.iter().enumerate() {
                    let _ = self.pool.store_u64(off + 8 * i, *w);
                }
            }
            // After the chain (earlier owners' windows are unbound and drained), before the
            // replies (the new owners have no rkey yet).
            self.scrub(&finished.scrubs);
            for out in finished.replies {
                let extra = self
                    .batch_copies
                    .remove(&(out.client, out.req_id))
                    .unwrap_or(0);
                for _ in 0..out.copies + extra {
                    self.send_reply(out.client, out.req_id, &out.reply);
                }
            }
            self.batches += 1;
            if self.batches % 64 == 0 {
                if let Some(start) = streak_cpu.replace(thread_cpu()) {
                    self.busy_cpu += thread_cpu().saturating_sub(start);
                }
                self.publish_stats();
            }
        }
        if let Some(start) = streak_cpu.take() {
            self.busy_cpu += thread_cpu().saturating_sub(start);
        }
        self.publish_stats();
    }

    /// Zeroes buffers given as (address, length) in the pool.
    fn scrub(&self, ranges: &[(u64, u64)]) {
        for &(addr, len) in ranges {
            let off = (addr - self.pool.addr()) as usize;
            // Cannot fail: the ranges are the pool's own objects, so they are in range. The
            // core already counts them clean, so a failure would be a bug worth catching.
            let zeroed = self.pool.fill_zero(off, len as usize);
            debug_assert!(zeroed.is_ok(), "scrub of {addr:#x}+{len}: {zeroed:?}");
        }
    }

    fn publish_stats(&self) {
        let mut s = self.shared.stats.lock();
        s.counters = self.core.counters();
        s.occupancy = Some(self.core.occupancy());
        s.manager_cpu = thread_cpu();
        s.busy_cpu = self.busy_cpu;
        s.batches = self.batches;
        s.clients = self.control.len();
        s.pool_bytes_in_use = self.core.pool_bytes_in_use();
        s.metadata_bytes = self.core.metadata_bytes();
        drop(s);
        if self.shared.publish.swap(false, Ordering::SeqCst) {
            self.shared.published.notify_all();
        }
    }

    fn adopt_incoming(&mut self) {
        let incoming = {
            let mut pending = self.shared.incoming.lock();
            if pending.is_empty() {
                return;
            }
            std::mem::take(&mut *pending)
        };
        for (intent, qp) in incoming {
            match intent.role {
                Role::Control => {
                    // Its protection domain comes with a successful `Hello`: a connection that
                    // never authenticates costs no registration and no windows.
                    let id = self.next_client;
                    self.next_client += 1;
                    self.reply_qp.insert(id, qp.clone());
                    self.control.insert(qp.qp_num(), (id, qp));
                }
                Role::Data => {
                    self.data_qps
                        .insert((intent.client_id, intent.slot), qp.clone());
                    self.others.push(qp);
                }
                Role::Loopback => self.others.push(qp),
            }
        }
        // Forget server-side QPs that broke; their clients reconnect with new ones.
        self.others.retain(|qp| qp.state() != QpState::Error);
    }

    /// Gives a new client its own PD: a registration of the pool in it, windows, a bind QP.
    /// Registering the whole pool again is the honest cost of this isolation mode.
    fn add_client_domain(&mut self, client: ClientId) -> Result<(), VerbsError> {
        let pd = self.ctx.alloc_pd()?;
        let mr = pd.reg_mr(
            &self.pool,
            0,
            self.pool.len(),
            AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
        )?;
        let mut windows = Vec::with_capacity(self.windows_per_client as usize);
        let mw_type = if self.isolation == Isolation::Type2 {
            MwType::Type2
        } else {
            MwType::Type1
        };
        for _ in 0..self.windows_per_client {
            windows.push(pd.alloc_mw(mw_type)?);
        }
        let bind_qp = loopback_qp::<P>(&pd, &self.op_cq, self.timing)?;
        let intent = Intent {
            role: Role::Loopback,
            client_id: 0,
            secret: self.shared.loop_secret,
            slot: 0,
        }
        .encode();
        bind_qp.connect(&self.address, &intent)?;
        let ids = self.core.add_client_domain(client, self.windows_per_client);
        let domain = self.domains.len() as u32;
        debug_assert_eq!(ids.start as usize, self.mws.len());
        self.mws.extend(windows);
        self.mw_domain
            .extend(std::iter::repeat_n(domain, ids.len()));
        self.shared.client_pds.lock().insert(client, pd.clone());
        self.domains.push(Domain { pd, mr, bind_qp });
        Ok(())
    }

    fn on_receive(
        &mut self,
        message: Incoming<Request>,
        requests: &mut Vec<(ClientId, u64, Request)>,
    ) {
        {
            let client = self.control.get(&message.qp_num).map(|(id, _)| *id);
            match (client, message.message) {
                (Some(client), Ok((req_id, Request::Hello { tenant, secret }))) => {
                    if let Err(status) = self.authenticate(client, tenant, secret) {
                        self.transmit(client, req_id, &Reply::Failed(status));
                        return;
                    }
                    let secret = self
                        .shared
                        .secrets
                        .lock()
                        .entry(client)
                        .or_insert_with(|| rand::rng().random::<u64>() | 1)
                        .to_owned();
                    self.send_reply(
                        client,
                        req_id,
                        &Reply::Welcome {
                            client_id: client,
                            secret,
                            type2: self.isolation == Isolation::Type2,
                        },
                    );
                }
                (Some(client), Ok((req_id, _))) if !self.authenticated.contains_key(&client) => {
                    // Nothing is served before the client authenticated as a tenant.
                    self.transmit(client, req_id, &Reply::Failed(Status::Unauthorized));
                }
                (Some(client), Ok((req_id, Request::UseQp { slot }))) => {
                    // Applied before the batch this arrived with, so its rebinds use the slot.
                    self.active_slot.insert(client, slot);
                    let secret = self.shared.secrets.lock().get(&client).copied();
                    self.send_reply(
                        client,
                        req_id,
                        &Reply::Welcome {
                            client_id: client,
                            secret: secret.unwrap_or(0),
                            type2: self.isolation == Isolation::Type2,
                        },
                    );
                }
                (Some(client), Ok((req_id, req))) => {
                    // Request ids make retries idempotent (`recent.rs`): an answered copy
                    // gets the same reply, a copy in this batch one reply more, a copy of a
                    // waiting request joins it in the core, another body is refused.
                    let seen = self.recent.entry(client).or_default().observe(req_id, &req);
                    if let Seen::Answered(reply) = seen {
                        self.transmit(client, req_id, &reply);
                    } else if seen == Seen::Conflicting {
                        self.transmit(client, req_id, &Reply::Failed(Status::InvalidArgument));
                    } else if requests
                        .iter()
                        .any(|(c, id, _)| *c == client && *id == req_id)
                    {
                        // The same request twice in one batch: handled once, answered twice.
                        *self.batch_copies.entry((client, req_id)).or_default() += 1;
                    } else {
                        requests.push((client, req_id, req));
                    }
                }
                // Malformed or from an unknown QP: dropped (the sender's RPC times out).
                _ => {}
            }
        }
    }

    /// Accepts a client's `Hello` as `tenant` if the secret is right (with no tenants
    /// configured, only the default tenant exists). A client stays with its first tenant. The
    /// first success gives the client its protection domain (a PD per client), before its
    /// data connections can be accepted (they need the secret the `Welcome` carries).
    fn authenticate(
        &mut self,
        client: ClientId,
        tenant: TenantId,
        secret: u64,
    ) -> Result<(), Status> {
        let known = if self.tenants.is_empty() {
            tenant == DEFAULT_TENANT
        } else {
            self.tenants.get(&tenant) == Some(&secret)
        };
        match self.authenticated.get(&client) {
            Some(&t) if t == tenant && known => return Ok(()),
            Some(_) => return Err(Status::Unauthorized),
            None if !known => return Err(Status::Unauthorized),
            None => {}
        }
        if self.isolation != Isolation::SharedPd && self.add_client_domain(client).is_err() {
            // No isolated domain, no service: never a silent fall-back to a weaker isolation.
            return Err(Status::PoolExhausted);
        }
        self.authenticated.insert(client, tenant);
        self.core.set_tenant(client, tenant);
        Ok(())
    }

    /// Sends a reply and remembers it for retries of the same request.
    fn send_reply(&mut self, client: ClientId, req_id: u64, reply: &Reply) {
        if let Some(recent) = self.recent.get_mut(&client) {
            recent.answer(req_id, reply);
        }
        self.transmit(client, req_id, reply);
    }

    /// Sends a reply without remembering it (refusals that are not a request's outcome).
    fn transmit(&mut self, client: ClientId, req_id: u64, reply: &Reply) {
        let Some(qp) = self.reply_qp.get(&client).cloned() else {
            return;
        };
        // A client whose control QP broke gets no reply; its permissions end by lease.
        if self.rpc.reply(&qp, req_id, reply).is_err() {
            self.sweep = true;
        }
    }

    fn reap_send_completions(&mut self) {
        self.sweep |= self.rpc.reap_replies();
        if std::mem::take(&mut self.sweep) {
            // A reply failed: its client's control QP broke. Forget broken QPs.
            self.control
                .retain(|_, (_, qp)| qp.state() != QpState::Error);
            let live: std::collections::HashSet<ClientId> =
                self.control.values().map(|(id, _)| *id).collect();
            self.reply_qp.retain(|id, _| live.contains(id));
            self.batch_copies.retain(|(id, _), _| live.contains(id));
            self.others.retain(|qp| qp.state() != QpState::Error);
        }
    }

    /// Posts `ops` as chains (binds on the bind QP, CASes on the loopback QP) and collects
    /// their results in order. Binds are local to the NIC and CASes loop back, so this waits
    /// only for the NIC, never for a client.
    fn execute(&mut self, ops: &[NicOp]) -> Vec<NicResult> {
        let mut results = vec![NicResult::Failed; ops.len()];
        for chunk_start in (0..ops.len()).step_by(CAS_SLOTS) {
            let end = (chunk_start + CAS_SLOTS).min(ops.len());
            self.execute_chunk(
                &ops[chunk_start..end],
                &mut results[chunk_start..end],
                chunk_start,
            );
        }
        results
    }

    fn execute_chunk(&mut self, ops: &[NicOp], results: &mut [NicResult], base: usize) {
        self.ensure_connected();
        let mut binds: Vec<Vec<SendWr<'_, P::Mw, P::Mr>>> =
            (0..self.domains.len()).map(|_| Vec::new()).collect();
        let mut cases = Vec::new();
        let mut expected = 0;
        let mut mw_qp_updates = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let wr_id = (base + i) as u64;
            match *op {
                NicOp::Bind {
                    mw,
                    target,
                    client,
                    key,
                } if self.isolation == Isolation::Type2
                    && self.mw_domain.get(mw as usize).is_some_and(|&d| d > 0) =>
                {
                    let (outcome, update) = self.post_type2(wr_id, mw, target, client, key);
                    mw_qp_updates.push((mw, update));
                    match outcome {
                        Type2Post::Posted => expected += 1,
                        Type2Post::Done => results[i] = self.bound(mw),
                        Type2Post::Failed => {}
                    }
                }
                NicOp::Bind {
                    mw, target, key, ..
                } => {
                    let Some(window) = self.mws.get(mw as usize) else {
                        continue;
                    };
                    let d = self.mw_domain.get(mw as usize).copied().unwrap_or(0) as usize;
                    let Some(domain) = self.domains.get(d) else {
                        continue;
                    };
                    binds[d].push(SendWr {
                        wr_id,
                        signaled: true,
                        op: SendOp::BindMw {
                            mw: window,
                            bind: match target {
                                Some(t) => BindInfo {
                                    mr: Some(&domain.mr),
                                    addr: t.addr,
                                    length: t.len,
                                    access: t.access,
                                    key,
                                },
                                None => BindInfo {
                                    mr: None,
                                    addr: 0,
                                    length: 0,
                                    access: AccessFlags::empty(),
                                    key: None,
                                },
                            },
                        },
                    });
                }
                NicOp::LifetimeCas {
                    addr,
                    compare,
                    swap,
                } => cases.push(SendWr {
                    wr_id,
                    signaled: true,
                    op: SendOp::CompareSwap {
                        local: Sge {
                            addr: self.scratch.addr() + 8 * i as u64,
                            length: 8,
                            lkey: self.scratch_mr.lkey(),
                        },
                        remote_addr: addr,
                        rkey: self.manager_mr.rkey(),
                        compare,
                        swap,
                    },
                }),
            }
        }
        for (d, chain) in binds.iter().enumerate() {
            if !chain.is_empty() && self.domains[d].bind_qp.post_send(chain).is_ok() {
                expected += chain.len();
            }
        }
        if !cases.is_empty() && self.cas_qp.post_send(&cases).is_ok() {
            expected += cases.len();
        }
        self.apply_mw_qp(mw_qp_updates);
        let mut wcs = [WorkCompletion::default(); 64];
        let mut got = 0;
        let mut idle = 0u64;
        while got < expected && idle < 2_000_000 {
            let mut n = self.op_cq.poll(&mut wcs);
            if n == 0 {
                n = self.data_cq.poll(&mut wcs);
            }
            if n == 0 {
                idle += 1;
                if idle % 64 == 0 {
                    // Over TCP the loopback work needs the device's engine thread, which may
                    // be waiting for this core.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            idle = 0;
            for wc in &wcs[..n] {
                got += 1;
                let Some(i) = (wc.wr_id as usize).checked_sub(base) else {
                    continue;
                };
                if i >= ops.len() || wc.status != WcStatus::Success {
                    continue;
                }
                results[i] = match ops[i] {
                    NicOp::Bind { mw, .. } => self.bound(mw),
                    NicOp::LifetimeCas { .. } => match self.scratch.load_u64(8 * i) {
                        Ok(v) => NicResult::CasOld(v),
                        Err(_) => NicResult::Failed,
                    },
                };
            }
        }
    }

    fn apply_mw_qp(&mut self, updates: Vec<(super::super::pool::MwId, Option<P::Qp>)>) {
        for (mw, qp) in updates {
            match qp {
                Some(qp) => self.mw_qp.insert(mw, qp),
                None => self.mw_qp.remove(&mw),
            };
        }
    }

    fn bound(&self, mw: super::super::pool::MwId) -> NicResult {
        match self.mws.get(mw as usize) {
            Some(w) => NicResult::Bound(w.rkey()),
            None => NicResult::Failed,
        }
    }

    /// Type 2: a bind goes on the client's current data QP; an unbind is a LOCAL_INV on the QP
    /// the window is bound to — or, if that QP broke, a reset of it, which frees its windows.
    /// Returns what happened and the window's QP afterwards (`None`: not bound to any).
    fn post_type2(
        &self,
        wr_id: u64,
        mw: super::super::pool::MwId,
        target: Option<super::super::core::BindTarget>,
        client: ClientId,
        key: Option<u8>,
    ) -> (Type2Post, Option<P::Qp>) {
        let current = self.mw_qp.get(&mw).cloned();
        let Some(window) = self.mws.get(mw as usize) else {
            return (Type2Post::Failed, current);
        };
        let d = self.mw_domain.get(mw as usize).copied().unwrap_or(0) as usize;
        let Some(domain) = self.domains.get(d) else {
            return (Type2Post::Failed, current);
        };
        match target {
            None => {
                let Some(qp) = current else {
                    return (Type2Post::Done, None); // never bound, or freed with its QP
                };
                if qp.state() != QpState::ReadyToSend {
                    return match qp.reset() {
                        Ok(()) => (Type2Post::Done, None),
                        Err(_) => (Type2Post::Failed, Some(qp)),
                    };
                }
                let wr = SendWr {
                    wr_id,
                    signaled: true,
                    op: SendOp::LocalInvalidate {
                        rkey: window.rkey(),
                    },
                };
                match qp.post_send(std::slice::from_ref(&wr)) {
                    Ok(()) => (Type2Post::Posted, None),
                    Err(_) => (Type2Post::Failed, Some(qp)),
                }
            }
            Some(t) => {
                let slot = self.active_slot.get(&client).copied().unwrap_or(0);
                let Some(qp) = self.data_qps.get(&(client, slot)).cloned() else {
                    return (Type2Post::Failed, current);
                };
                let wr = SendWr {
                    wr_id,
                    signaled: true,
                    op: SendOp::BindMw {
                        mw: window,
                        bind: BindInfo {
                            mr: Some(&domain.mr),
                            addr: t.addr,
                            length: t.len,
                            access: t.access,
                            key,
                        },
                    },
                };
                match qp.post_send(std::slice::from_ref(&wr)) {
                    Ok(()) => (Type2Post::Posted, Some(qp)),
                    Err(_) => (Type2Post::Failed, current),
                }
            }
        }
    }

    /// Reconnects loopback QPs that broke (a new handshake), so later chains can run.
    fn ensure_connected(&mut self) {
        let intent = Intent {
            role: Role::Loopback,
            client_id: 0,
            secret: self.shared.loop_secret,
            slot: 0,
        }
        .encode();
        for d in 0..self.domains.len() {
            if self.domains[d].bind_qp.state() == QpState::ReadyToSend {
                continue;
            }
            let Ok(fresh) = loopback_qp::<P>(&self.domains[d].pd, &self.op_cq, self.timing) else {
                continue;
            };
            if fresh.connect(&self.address, &intent).is_ok() {
                self.domains[d].bind_qp = fresh;
            }
        }
        if self.cas_qp.state() != QpState::ReadyToSend
            && let Ok(fresh) = loopback_qp::<P>(&self.manager_pd, &self.op_cq, self.timing)
            && fresh.connect(&self.address, &intent).is_ok()
        {
            self.cas_qp = fresh;
        }
    }
}

/// What posting a type-2 bind or unbind did.
enum Type2Post {
    /// A work request was posted; its completion carries the result.
    Posted,
    /// Done without a work request (the window was already free).
    Done,
    /// Could not be done now.
    Failed,
}
