//! The manager thread's loop: receive a batch, run the core's three phases, execute its NIC
//! work as chains on the loopback QPs, write headers, reply.

use super::recent::Seen;
use super::*;

/// The control QP of each session, by QP number (where request slots go back to).
fn control_qps<'a, P: Provider>(
    sessions: &'a FastMap<ClientId, super::sessions::Session<P>>,
    by_qpn: &'a FastMap<QpNumber, ClientId>,
) -> impl Fn(QpNumber) -> Option<&'a P::Qp> {
    move |qpn| {
        by_qpn
            .get(&qpn)
            .and_then(|c| sessions.get(c))
            .map(|s| &s.control)
    }
}

/// Most polls of the receive queue per turn with fair shares on (each takes up to a batch).
const FAIR_POLLS: usize = 16;

/// How often, µs, sessions are checked for broken QPs and timeouts while the manager is busy
/// (and whenever it is about to sleep, and after a failed reply).
const SWEEP_EVERY_US: u64 = 10_000;

/// Longest an idle manager sleeps without a deadline of its own: requests wake it at once (a
/// completion), so this only bounds how soon it notices a flag another thread set (publish,
/// drain, stop) and runs its QPs' timers (the soft NIC's retransmissions on a lossy link).
/// An idle node wakes 100 times a second, not 2,000 (each wake-up costs tens of µs of CPU).
pub(super) const IDLE_LOOK_EVERY: Duration = Duration::from_millis(10);

impl<P: Provider> Runner<P> {
    pub(super) fn run(&mut self) {
        let clock = self.ctx.clock();
        let mut incoming = Vec::with_capacity(self.max_batch);
        let mut requests: Vec<(ClientId, u64, Request)> = Vec::with_capacity(self.max_batch);
        let mut published = u64::MAX;
        // The thread's CPU clock is a system call: read it when a busy streak starts and
        // when it ends, not around every batch.
        let mut streak_cpu: Option<Duration> = None;
        if let Some(clock) = self.shared.manager_clocks.get(self.shard) {
            let _ = clock.set(rnic::ThreadCpuClock::of_current_thread());
        }
        let shared = Arc::clone(&self.shared);
        while !shared.stop.load(Ordering::SeqCst) {
            // Held by a test (`gate.rs`): what it reads after a step is that step's.
            shared.gates[self.shard].pass(&shared.stop, || self.publish_stats());
            requests.clear();
            self.end_nic_sample();
            // NIC time counts only inside busy streaks, as busy CPU does: the poll is timed
            // when a streak is under way, and an idle poll never is.
            let timing = self.nic_sample.next_is_timed();
            let was_busy = streak_cpu.is_some();
            self.time_nic_calls(timing && was_busy);
            let received = {
                let qp_of = control_qps(&self.sessions, &self.by_qpn);
                let mut received = self.rpc.receive(&mut incoming, &qp_of);
                if self.limits.fair_shares {
                    // The fair queue chooses among everything that waits, not among the first
                    // batch's worth to arrive (a backlog of one client's would fill every poll):
                    // the receive queue is drained, up to `FAIR_POLLS` polls a turn.
                    let mut polls = 1;
                    let mut last = received;
                    while last == self.rpc.poll_capacity() && polls < FAIR_POLLS {
                        last = self.rpc.receive(&mut incoming, &qp_of);
                        received += last;
                        polls += 1;
                    }
                }
                received
            };
            if received > 0 && streak_cpu.is_none() {
                // Messages answered on arrival (`Hello`, `UseQp`, retries) are work too.
                streak_cpu = Some(thread_cpu());
            }
            if streak_cpu.is_some() {
                // A streak that starts here: the poll that found the work ran before its
                // clock, the rest of the iteration is timed.
                self.time_nic_calls(timing);
                self.nic_sample.begin();
            }
            let now = clock.now();
            self.take_broken_qps();
            self.take_ended_elsewhere();
            // After polling: a connection is registered before its client learns it is
            // connected, so every QP a polled request came from (or names) is adopted by now.
            self.adopt_incoming(now);
            // One-sided allocation's background work (none of it on an allocation's path).
            if self.shard == 0
                && let Some(os) = &shared.one_sided
            {
                os.tend();
            }
            if self.priority.as_ref().is_some_and(|p| p.is_due(now)) {
                self.run_priority_policy(now);
            }
            // Requests taken before their connection was get their slots back.
            self.rpc
                .repost_deferred(control_qps(&self.sessions, &self.by_qpn));
            // After adopting: a snapshot asked for after a connection was established counts
            // it.
            // Every turn, before the requests it received are handled: a request sent after
            // `MemoryNode::drain` returned is refused. (Looked at only with a publication
            // request, the drain's own request could be consumed by a publication already
            // under way, and the shard would go on granting.)
            if self.shared.draining.load(Ordering::SeqCst) && !self.core.is_draining() {
                tracing::info!(shard = self.shard, "draining: new permissions refused");
                self.core.stop_granting();
            }
            if self.shared.publish[self.shard].load(Ordering::SeqCst) {
                self.publish_stats();
            }
            if self.limits.fair_shares {
                // Queued by class, then drawn in fair shares: the batch (see `fair`).
                for message in incoming.drain(..) {
                    self.enqueue(message, now);
                }
                let mut drawn = std::mem::take(&mut self.drawn);
                self.fair.next_batch(self.max_batch, now, &mut drawn);
                for message in drawn.drain(..) {
                    self.on_receive(message, now, &mut requests);
                }
                self.drawn = drawn;
            } else {
                for message in incoming.drain(..) {
                    self.on_receive(message, now, &mut requests);
                }
            }
            // Replies are unsignaled: their CQ holds only failures, looked for every 64
            // batches and whenever the manager is about to sleep.
            if self.batches % 64 == 0 {
                self.sweep |= self.rpc.reap_replies();
            }
            if std::mem::take(&mut self.sweep) || now.0 >= self.last_sweep.0 + SWEEP_EVERY_US {
                self.sweep_sessions(now);
            }
            // Requests take every due expiry with them (`begin` collects all of them);
            // without requests, an expiry waits until it is `expiry_slack_us` late.
            let due = self
                .core
                .next_deadline()
                .is_some_and(|d| d.plus_us(self.expiry_slack_us) <= now)
                || self.core.has_pending_work();
            if requests.is_empty() && !due && self.fair.is_empty() {
                if let Some(start) = streak_cpu.take() {
                    self.busy_cpu += thread_cpu().saturating_sub(start);
                }
                self.end_nic_sample();
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
                self.rpc.note_idle_time(now);
                if self.rpc.is_parking() {
                    if published != self.batches {
                        published = self.batches;
                        // Idle: a good time to end sessions whose QPs broke without a failed
                        // reply (their departure runs as the next batch).
                        self.rpc.reap_replies();
                        self.sweep_sessions(now);
                        self.publish_stats();
                        continue;
                    }
                    let wait = self.core.next_deadline().map_or(IDLE_LOOK_EVERY, |d| {
                        d.plus_us(self.expiry_slack_us)
                            .since(now)
                            .min(IDLE_LOOK_EVERY)
                    });
                    self.rpc.idle(wait.max(Duration::from_micros(20)));
                } else {
                    self.rpc.idle(Duration::ZERO);
                }
                continue;
            }
            // Requests restart the idle spin (more may follow at once); a turn that only ends
            // expired permissions does not: an idle node woken by a lease's end goes back to
            // sleep instead of spinning again (each spin turn polls the transport).
            if !requests.is_empty() {
                self.rpc.busy();
            }
            if streak_cpu.is_none() {
                streak_cpu = Some(thread_cpu());
            }
            // Kept from turn to turn: its vectors allocate nothing once grown.
            let mut finished = std::mem::take(&mut self.finished);
            self.core
                .step_into(now, &requests, &mut self.nic, &mut finished);
            self.retire_domains();
            for &(addr, words) in &finished.header_writes {
                let off = (addr - self.pool.addr()) as usize;
                for (i, w) in words.iter().enumerate() {
                    let _ = self.pool.store_u64(off + 8 * i, *w);
                }
            }
            // After the chain (earlier owners' windows are unbound and drained), before the
            // replies (the new owners have no rkey yet).
            self.scrub(&finished.scrubs);
            for out in &finished.replies {
                let extra = self
                    .batch_copies
                    .remove(&(out.client, out.req_id))
                    .unwrap_or(0);
                for _ in 0..out.copies + extra {
                    self.send_reply(out.client, out.req_id, &out.reply);
                }
            }
            self.finished = finished;
            self.batches += 1;
            let turn_us = clock.now().0.saturating_sub(now.0);
            self.core.note_turn(turn_us);
            self.service.record(turn_us, requests.len() as u64);
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
        self.end_nic_sample();
        self.publish_stats();
        // The thread's clock goes with it: its final time stays in the snapshot.
        if let Some(s) = self.shared.stats.lock().get_mut(self.shard) {
            s.manager_cpu = thread_cpu();
        }
    }

    /// A period of the software priority policy ended (`priority.rs`): reads what the NIC
    /// served the high-priority tenants' data QPs, decides, and sets the service of the
    /// low-priority tenants' data QPs that are not set to the decision yet.
    fn run_priority_policy(&mut self, now: rnic::Timestamp) {
        let Some(mut policy) = self.priority.take() else {
            return;
        };
        let mut high = Vec::new();
        let mut low: HashMap<QpNumber, (TenantId, P::Qp)> = HashMap::new();
        for (client, qps) in &self.nic.data_qps {
            let tenant = self.sessions.get(client).and_then(|s| s.tenant);
            match (policy.priority(tenant), tenant) {
                (Priority::High, _) => high.extend(
                    qps.values()
                        .filter_map(|qp| qp.served().map(|s| (qp.qp_num(), s))),
                ),
                (Priority::Low, Some(t)) => {
                    low.extend(qps.values().map(|qp| (qp.qp_num(), (t, qp.clone()))));
                }
                _ => {}
            }
        }
        let throttled = policy.decide(now, high);
        let numbers: Vec<QpNumber> = low.keys().copied().collect();
        for qpn in policy.pending(&numbers) {
            let Some((tenant, qp)) = low.get(&qpn) else {
                continue;
            };
            let ok = match self.shared.services.low_priority_data(*tenant, throttled) {
                Some(service) => qp.set_service(service).is_ok(),
                None => false,
            };
            policy.applied(qpn, ok);
        }
        self.priority = Some(policy);
    }

    /// Ends the iteration being timed, if one is: its NIC calls' time joins the sample.
    fn end_nic_sample(&mut self) {
        if self.nic_sample.is_open() {
            self.time_nic_calls(false);
            let spent = self.rpc.take_nic_time() + self.nic.nic_calls.take();
            self.nic_sample.end(spent);
        }
    }

    /// Starts or stops timing the NIC calls of the control channel and of the chains.
    fn time_nic_calls(&mut self, on: bool) {
        self.rpc.time_nic_calls(on);
        self.nic.nic_calls.arm(on);
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

    /// This shard's status (see [`NodeStatus`]).
    fn status(&self) -> NodeStatus {
        let now = self.ctx.clock().now();
        let tenants = self.shared.tenants_of.lock().clone();
        let permissions = self
            .core
            .live_permissions(now, STATUS_PERMISSIONS)
            .into_iter()
            .map(|p| PermissionStatus {
                shard: self.shard,
                tenant: tenants.get(&p.client).copied(),
                permission: p,
            })
            .collect();
        let sessions = self
            .sessions
            .iter()
            .map(|(&client, s)| {
                let mut data_qps: Vec<(u8, QpState)> = self
                    .nic
                    .data_qps
                    .get(&client)
                    .map(|qps| qps.iter().map(|(&slot, qp)| (slot, qp.state())).collect())
                    .unwrap_or_default();
                data_qps.sort_by_key(|(slot, _)| *slot);
                SessionStatus {
                    shard: self.shard,
                    client,
                    tenant: s.tenant,
                    from: s.from,
                    connected: now.since(s.opened),
                    control_qp: s.control.state(),
                    data_qps,
                }
            })
            .collect();
        NodeStatus {
            permissions,
            permissions_total: self.core.active_permissions(),
            sessions,
        }
    }

    fn publish_stats(&self) {
        let mut all = self.shared.stats.lock();
        let s = &mut all[self.shard];
        s.shards = 1;
        s.counters = self.core.counters();
        s.occupancy = Some(self.core.occupancy());
        s.busy_cpu = self.busy_cpu;
        s.nic_calls = self.nic_sample.estimate();
        s.batches = self.batches;
        s.clients = self.sessions.len();
        s.sessions_ended = self.ended;
        if self.shard == 0 {
            // Node-wide counts: reported once.
            let faults = self.shared.faults.lock();
            (s.data_reconnects, s.reconnects_refused) = (faults.reconnects, faults.refused);
            let rate = self.shared.session_rate.lock();
            s.sessions_rate_refused = (rate.refused_node, rate.refused_tenant);
        }
        let (data_qps, client_domains, windows) = self.nic.held();
        s.held = Held {
            sessions: self.sessions.len(),
            data_qps,
            client_domains,
            windows,
            recent_requests: self.sessions.values().map(|c| c.recent.len()).sum(),
            control_blocks: self.rpc.connection_slots().map_or(0, |s| s.attached()),
            pending_connections: self.shared.incoming[self.shard].len(),
            client_records: [
                self.shared.secrets.lock().len(),
                self.shared.tenants_of.lock().len(),
                self.shared.heard.lock().len(),
                self.shared.faults.lock().clients(),
                self.shared.client_domains.lock().len(),
            ]
            .into_iter()
            .max()
            .unwrap_or(0),
            addresses: self.shared.addresses.lock().len(),
        };
        s.pool_bytes_in_use = self.core.pool_bytes_in_use();
        s.metadata_bytes = self.core.metadata_bytes();
        s.service = self.service;
        s.classes = self.fair.counters().collect();
        s.priority = self
            .priority
            .as_ref()
            .map(|p| p.stats())
            .unwrap_or_default();
        drop(all);
        if self.shared.want_status[self.shard].swap(false, Ordering::SeqCst) {
            let status = self.status();
            self.shared.status.lock()[self.shard] = status;
        }
        if self.shared.publish[self.shard].swap(false, Ordering::SeqCst) {
            self.shared.published.notify_all();
        }
    }

    fn adopt_incoming(&mut self, now: rnic::Timestamp) {
        let incoming = self.shared.incoming[self.shard].take();
        for Accepted {
            intent,
            qp,
            block,
            from,
            certified,
        } in incoming
        {
            match intent.role {
                Role::Control if intent.client_id == 0 => {
                    // A client's first connection (shard 0's). Its protection domain comes
                    // with a successful `Hello`: a connection that never authenticates costs
                    // no registration and no windows, and is closed after the hello timeout.
                    let id = self.shared.ids.lock().issue();
                    let heard = Arc::new(AtomicU64::new(now.0));
                    self.open_session(id, qp, block, None, heard, now);
                    if let Some(session) = self.sessions.get_mut(&id) {
                        session.from = from;
                        session.certified = certified;
                    }
                    self.end_if_broken(id);
                }
                Role::Control => {
                    self.join_client(intent.client_id, qp, block, now);
                    self.end_if_broken(intent.client_id);
                }
                Role::Data => {
                    // A client whose session ended since its connection was accepted is not
                    // served (its secret is forgotten first).
                    if !self.shared.secrets.lock().contains_key(&intent.client_id) {
                        qp.set_error();
                        continue;
                    }
                    // A reconnected slot replaces the broken QP (which type-2 windows bound
                    // to it may still name until they are unbound).
                    self.nic
                        .data_qps
                        .entry(intent.client_id)
                        .or_default()
                        .insert(intent.slot, qp);
                }
                // One that broke already (its bind QP is gone) is not kept.
                // Kept by the one-sided allocator, never handed to a shard.
                Role::Alloc => {}
                Role::Loopback if qp.state() == QpState::Error => {}
                Role::Loopback => self.others.push(qp),
            }
        }
    }

    /// An authenticated client (shard 0 accepted its `Hello`) connects to this shard: it is
    /// served here as the tenant it authenticated as, in its own domain if clients have one.
    fn join_client(
        &mut self,
        client: ClientId,
        qp: P::Qp,
        block: Option<u32>,
        now: rnic::Timestamp,
    ) {
        let tenant = self.shared.tenants_of.lock().get(&client).copied();
        let heard = self.shared.heard.lock().get(&client).cloned();
        let (Some(tenant), Some(heard)) = (tenant, heard) else {
            // Its session ended since the accept policy checked its secret.
            return self.refuse_connection(&qp, block);
        };
        let needs_domain =
            self.nic.isolation != Isolation::SharedPd && self.core.domain_of_client(client) == 0;
        if needs_domain && self.add_client_domain(client).is_err() {
            // No isolated domain, no service: never a silent fall-back to a weaker isolation.
            return self.refuse_connection(&qp, block);
        }
        self.core.set_tenant(client, tenant);
        self.open_session(client, qp, block, Some(tenant), heard, now);
    }

    /// Gives a client its own PD in this shard: the client's PD and registration of the pool
    /// (made by the first shard that needs them, shared by all), this shard's windows in it,
    /// and a bind QP. Registering the whole pool again is the honest cost of this isolation
    /// mode. The windows take the ids of a domain a departed client left, if any.
    fn add_client_domain(&mut self, client: ClientId) -> Result<(), VerbsError> {
        let (pd, mr) = {
            let mut domains = self.shared.client_domains.lock();
            match domains.get(&client) {
                Some((pd, mr)) => (pd.clone(), mr.clone()),
                None => {
                    let pd = self.ctx.alloc_pd()?;
                    let mr = Arc::new(pd.reg_mr(
                        &self.pool,
                        0,
                        self.pool.len(),
                        AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
                    )?);
                    domains.insert(client, (pd.clone(), mr.clone()));
                    (pd, mr)
                }
            }
        };
        let mut windows = Vec::with_capacity(self.windows_per_client as usize);
        let mw_type = if self.nic.isolation == Isolation::Type2 {
            MwType::Type2
        } else {
            MwType::Type1
        };
        for _ in 0..self.windows_per_client {
            windows.push(pd.alloc_mw(mw_type)?);
        }
        let bind_qp = loopback_qp::<P>(&pd, &self.nic.op_cq, self.nic.timing)?;
        let intent = Intent {
            role: Role::Loopback,
            client_id: 0,
            secret: self.shared.loop_secret,
            slot: self.shard as u8,
        }
        .encode();
        bind_qp.connect(&self.nic.address, &intent)?;
        let ids = self.core.add_client_domain(client, self.windows_per_client);
        self.nic
            .install_domain(Domain { pd, mr, bind_qp }, ids, windows);
        Ok(())
    }

    /// Queues a received message under its sender's class: its session's tenant, or the
    /// unauthenticated sessions' (a message from a QP that is no session's is dropped).
    fn enqueue(&mut self, message: Incoming<Request>, now: rnic::Timestamp) {
        let Some(&client) = self.by_qpn.get(&message.qp_num) else {
            return;
        };
        let Some(session) = self.sessions.get(&client) else {
            return;
        };
        let class = session.tenant.map_or(Class::Unauthenticated, Class::Tenant);
        let cost = fair::cost_of(&message.message);
        if !self.fair.push(class, client, message, cost, now) {
            tracing::debug!(
                client,
                "control message dropped: the session has its share queued"
            );
        }
    }

    fn on_receive(
        &mut self,
        message: Incoming<Request>,
        now: rnic::Timestamp,
        requests: &mut Vec<(ClientId, u64, Request)>,
    ) {
        // From a QP that is no session's (any more): dropped.
        let Some(&client) = self.by_qpn.get(&message.qp_num) else {
            return;
        };
        let Some(session) = self.sessions.get_mut(&client) else {
            return;
        };
        session.heard.store(now.0, Ordering::Relaxed);
        let authenticated = session.tenant.is_some();
        match message.message {
            Ok((req_id, Request::Hello { tenant, secret })) => {
                let tenant = match self.authenticate(client, tenant, secret, now) {
                    Ok(tenant) => tenant,
                    Err(status) => {
                        // The secret itself is never logged.
                        tracing::warn!(client, tenant, ?status, "hello refused");
                        self.transmit(client, req_id, &Reply::Failed(status));
                        return;
                    }
                };
                if !authenticated {
                    tracing::info!(client, tenant, shard = self.shard, "client authenticated");
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
                        type2: self.nic.isolation == Isolation::Type2,
                        shards: self.shared.map,
                        max_lifetime_us: self.core.max_lifetime_us(),
                    },
                );
            }
            Ok((req_id, _)) if !authenticated => {
                // Nothing is served before the client authenticated as a tenant.
                self.transmit(client, req_id, &Reply::Failed(Status::Unauthorized));
            }
            Ok((req_id, Request::UseQp { slot })) => {
                // Applied before the batch this arrived with, so its rebinds use the slot.
                self.nic.active_slot.insert(client, slot);
                let secret = self.shared.secrets.lock().get(&client).copied();
                self.send_reply(
                    client,
                    req_id,
                    &Reply::Welcome {
                        client_id: client,
                        secret: secret.unwrap_or(0),
                        type2: self.nic.isolation == Isolation::Type2,
                        shards: self.shared.map,
                        max_lifetime_us: self.core.max_lifetime_us(),
                    },
                );
            }
            Ok((req_id, req)) => {
                // Request ids make retries idempotent (`recent.rs`): an answered copy gets the
                // same reply, a copy in this batch one reply more, a copy of a waiting request
                // joins it in the core, another body is refused.
                let seen = session.recent.observe(req_id, &req);
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
            // Malformed: dropped (the sender's RPC times out).
            Err(_) => {}
        }
    }

    /// Accepts a client's `Hello` for `claimed` and returns the tenant it acts for: the one its
    /// certificate names (when the node maps it; `claimed` must be that tenant or the default
    /// one, and no secret is needed), else `claimed` if the secret is right (with no tenants
    /// configured, only the default tenant exists). A client stays with its first tenant. The
    /// first success gives the client its protection domain (a PD per client), before its
    /// data connections can be accepted (they need the secret the `Welcome` carries). A first
    /// success takes a token of its tenant's session rate (`Overloaded` without one).
    fn authenticate(
        &mut self,
        client: ClientId,
        claimed: TenantId,
        secret: u64,
        now: rnic::Timestamp,
    ) -> Result<TenantId, Status> {
        let Some(session) = self.sessions.get(&client) else {
            return Err(Status::Unauthorized);
        };
        let (tenant, known) = match session.certified {
            Some(t) => (t, claimed == t || claimed == DEFAULT_TENANT),
            None if self.tenants.is_empty() => (claimed, claimed == DEFAULT_TENANT),
            None => (claimed, self.tenants.get(&claimed) == Some(&secret)),
        };
        match session.tenant {
            Some(t) if t == tenant && known => return Ok(tenant),
            Some(_) => return Err(Status::Unauthorized),
            None if !known => return Err(Status::Unauthorized),
            None => {}
        }
        let sessions = self.tenant_sessions.get(&tenant).copied().unwrap_or(0);
        if sessions >= self.sessions_per_tenant {
            return Err(Status::QuotaExceeded);
        }
        // A tenant's new sessions spend its own rate (`session_rate.rs`).
        if !self.shared.session_rate.lock().admit_hello(tenant, now) {
            return Err(Status::Overloaded);
        }
        if self.nic.isolation != Isolation::SharedPd && self.add_client_domain(client).is_err() {
            // No isolated domain, no service: never a silent fall-back to a weaker isolation.
            return Err(Status::PoolExhausted);
        }
        *self.tenant_sessions.entry(tenant).or_default() += 1;
        self.core.set_tenant(client, tenant);
        let Some(session) = self.sessions.get_mut(&client) else {
            return Err(Status::Unauthorized);
        };
        session.tenant = Some(tenant);
        // Its control connection leaves the unauthenticated rate for its tenant's service.
        if let Some(service) = self.shared.services.control(tenant)
            && let Err(e) = session.control.set_service(service)
        {
            tracing::warn!(client, tenant, %e, "the control QP's service could not be set");
        }
        // Before the `Welcome`: the client's connections to the other shards find it.
        self.shared
            .heard
            .lock()
            .insert(client, session.heard.clone());
        self.shared.tenants_of.lock().insert(client, tenant);
        Ok(tenant)
    }

    /// Sends a reply and remembers it for retries of the same request.
    fn send_reply(&mut self, client: ClientId, req_id: u64, reply: &Reply) {
        if let Some(session) = self.sessions.get_mut(&client) {
            session.recent.answer(req_id, reply);
        }
        self.transmit(client, req_id, reply);
    }

    /// Sends a reply without remembering it (refusals that are not a request's outcome).
    fn transmit(&mut self, client: ClientId, req_id: u64, reply: &Reply) {
        let Some(session) = self.sessions.get(&client) else {
            return;
        };
        // A client whose control QP broke gets no reply: the next sweep ends its session.
        if self.rpc.reply(&session.control, req_id, reply).is_err() {
            self.sweep = true;
        }
    }
}
