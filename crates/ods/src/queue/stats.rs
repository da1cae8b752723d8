//! [`QueueStats`]: what a queue handle (or one operation) did, for the reports: permission
//! operations (control path) apart from one-sided ones (data path), and the structure's
//! events.

/// Counts of a handle ([`Queue::stats`](super::Queue::stats)) or of one operation
/// ([`PushOp::cost`](super::PushOp::cost), [`PopOp::cost`](super::PopOp::cost)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Steps taken (each at most one batch or one control request).
    pub steps: u64,
    /// Pushes that finished.
    pub pushes: u64,
    /// Pops that returned an item.
    pub pops: u64,
    /// Pops that found the queue empty.
    pub empty_pops: u64,

    // --- Permission operations (control path, except extensions) ---
    /// Objects allocated (segments, with their creator's permission).
    pub allocates: u64,
    /// Permissions acquired (the root at open, segments created by others).
    pub acquires: u64,
    /// Leases extended (one-sided: a CAS on the permission's lifetime word).
    pub extends: u64,
    /// Permissions released.
    pub releases: u64,
    /// Objects freed (drained segments, unused spares at close).
    pub frees: u64,

    // --- One-sided operations ---
    /// Batches posted (one doorbell each).
    pub batches: u64,
    /// READs, WRITEs, CASes and FAAs in them.
    pub ops: u64,

    // --- Structure events ---
    /// Segments this client created and linked.
    pub segments_linked: u64,
    /// Drained segments this client freed.
    pub segments_freed: u64,
    /// Claimed-but-unfilled slots this client skipped after the producer's deadline.
    pub slots_skipped: u64,
    /// Claims of this client that a consumer skipped before it published (it claimed again).
    pub claims_lost: u64,
    /// Steps a pop waited on a claimed-but-unfilled slot.
    pub waits: u64,
    /// Accesses refused by the NIC, or locally once the lease had ended (the permission had
    /// ended: mostly a freed segment).
    pub rejected: u64,
    /// Operations whose outcome was unknown (a link failure under them), settled by reading.
    pub unknown: u64,
    /// Segments found gone (freed, or their memory reused) when this client came to them.
    pub gone: u64,
}

impl QueueStats {
    /// What happened between `earlier` and `self` (field by field).
    pub fn since(&self, earlier: &QueueStats) -> QueueStats {
        let mut d = *self;
        for (a, b) in d.fields_mut().into_iter().zip(earlier.fields()) {
            *a = a.saturating_sub(b);
        }
        d
    }

    /// `self += other`, field by field.
    pub fn add(&mut self, other: &QueueStats) {
        for (a, b) in self.fields_mut().into_iter().zip(other.fields()) {
            *a += b;
        }
    }

    /// Permission operations on the control path (allocate, acquire, release, free).
    pub fn control_ops(&self) -> u64 {
        self.allocates + self.acquires + self.releases + self.frees
    }

    fn fields(&self) -> [u64; 19] {
        let mut c = *self;
        c.fields_mut().map(|f| *f)
    }

    fn fields_mut(&mut self) -> [&mut u64; 19] {
        let QueueStats {
            steps,
            pushes,
            pops,
            empty_pops,
            allocates,
            acquires,
            extends,
            releases,
            frees,
            batches,
            ops,
            segments_linked,
            segments_freed,
            slots_skipped,
            claims_lost,
            waits,
            rejected,
            unknown,
            gone,
        } = self;
        [
            steps,
            pushes,
            pops,
            empty_pops,
            allocates,
            acquires,
            extends,
            releases,
            frees,
            batches,
            ops,
            segments_linked,
            segments_freed,
            slots_skipped,
            claims_lost,
            waits,
            rejected,
            unknown,
            gone,
        ]
    }
}
