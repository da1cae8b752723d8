//! The one-sided chunks' bookkeeping, by counting (no NIC).

use super::*;
use rand::{Rng, SeedableRng};

#[test]
fn a_queue_is_filled_up_to_its_budget_and_its_depth() {
    let mut c = OneSidedChunks::new(100, 8);
    c.open(1, 5);
    let r = c.refill(1, u32::MAX);
    assert_eq!(r.len(), 5, "the budget");
    assert_eq!(
        r.iter().map(|f| f.index).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    c.open(2, 50);
    assert_eq!(c.refill(2, u32::MAX).len(), 8, "the ring's depth");
    assert_eq!(c.refill(2, u32::MAX).len(), 0, "the ring is full");
    c.open(3, 50);
    assert_eq!(c.refill(3, 2).len(), 2, "what the tenant's quota allows");
    assert_eq!(c.free_chunks(), 100 - 15);
}

#[test]
fn the_head_says_what_was_allocated_and_what_overran() {
    let mut c = OneSidedChunks::new(10, 4);
    c.open(1, 10);
    let r = c.refill(1, u32::MAX);
    let seen = c.observe_head(1, 3);
    assert_eq!(
        seen.allocated,
        r[..3].iter().map(|f| f.chunk).collect::<Vec<_>>()
    );
    assert_eq!(seen.overrun, 0);
    assert_eq!(
        c.state(r[0].chunk),
        Some(ChunkState::Allocated { client: 1 })
    );
    assert_eq!(
        c.state(r[3].chunk),
        Some(ChunkState::Reserved { client: 1 })
    );
    // Two allocations past the tail (4): the last chunk, then two overruns.
    let seen = c.observe_head(1, 6);
    assert_eq!(seen.allocated, vec![r[3].chunk]);
    assert_eq!(seen.overrun, 2);
    c.repaired(1);
    // Room again (budget 10, 4 allocated): the ring refills from the tail.
    let again = c.refill(1, u32::MAX);
    assert_eq!(again.first().map(|f| f.index), Some(4));
}

#[test]
fn only_the_owner_frees_and_a_chunk_is_reused_only_once_zeroed() {
    let mut c = OneSidedChunks::new(2, 4);
    c.open(1, 2);
    c.open(2, 2);
    let r = c.refill(1, u32::MAX);
    c.observe_head(1, 1);
    let chunk = r[0].chunk;
    assert_eq!(c.freed(2, chunk), Err(FreeError::NotTheOwner(chunk)));
    assert_eq!(
        c.freed(1, r[1].chunk),
        Err(FreeError::NotTheOwner(r[1].chunk)),
        "not taken yet"
    );
    assert_eq!(c.freed(1, 99), Err(FreeError::NoSuchChunk(99)));
    c.scrubbed(chunk);
    c.scrubbed(r[1].chunk);
    assert_eq!(
        (c.state(chunk), c.state(r[1].chunk)),
        (
            Some(ChunkState::Allocated { client: 1 }),
            Some(ChunkState::Reserved { client: 1 })
        ),
        "only a dirty chunk is zeroed back to free"
    );
    c.freed(1, chunk).unwrap();
    assert_eq!(
        c.freed(1, chunk),
        Err(FreeError::NotTheOwner(chunk)),
        "twice"
    );
    assert!(c.refill(2, u32::MAX).is_empty(), "dirty: not reused");
    c.scrubbed(chunk);
    let r2 = c.refill(2, u32::MAX);
    assert_eq!(r2.len(), 1);
    assert_eq!(r2[0].chunk, chunk);
    assert_ne!(r2[0].key, r[0].key, "a new key byte for the new allocation");
}

#[test]
fn a_client_that_leaves_gives_back_what_it_had() {
    let mut c = OneSidedChunks::new(6, 4);
    c.open(1, 4);
    c.refill(1, u32::MAX);
    c.observe_head(1, 2);
    let back = c.close(1);
    assert_eq!(back.len(), 4, "two allocated, two queued");
    assert!(back.iter().all(|&k| c.state(k) == Some(ChunkState::Dirty)));
    for k in back {
        c.scrubbed(k);
    }
    assert_eq!(c.free_chunks(), 6);
    assert!(c.close(1).is_empty());
}

#[test]
fn a_reopened_queue_keeps_what_was_allocated_and_returns_what_was_queued() {
    let mut c = OneSidedChunks::new(4, 4);
    c.open(1, 4);
    let r = c.refill(1, u32::MAX);
    c.observe_head(1, 1);
    c.open(2, 4);
    let back = c.transfer(1, 2);
    assert_eq!(back, r[1..].iter().map(|f| f.chunk).collect::<Vec<_>>());
    assert_eq!(
        c.state(r[0].chunk),
        Some(ChunkState::Allocated { client: 2 })
    );
    // The kept chunk counts in the new queue's budget: three more, not four.
    assert_eq!(c.refill(2, u32::MAX).len(), 0, "nothing free until zeroed");
    for k in back {
        c.scrubbed(k);
    }
    assert_eq!(c.refill(2, u32::MAX).len(), 3);
    c.freed(2, r[0].chunk).unwrap();
}

/// A seeded run of many clients refilling, allocating, freeing, leaving and scrubbing: every
/// chunk is always in exactly one place, no client exceeds its budget, and no chunk is queued
/// for another client before it was zeroed.
#[test]
fn chunks_are_conserved_under_a_random_history() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(33);
    let (chunks, depth, budget) = (64u32, 8u32, 12u32);
    let mut c = OneSidedChunks::new(chunks, depth);
    let mut heads: HashMap<ClientId, u64> = HashMap::new();
    let mut held: HashMap<ClientId, Vec<ChunkId>> = HashMap::new();
    for step in 0..20_000 {
        let client = rng.random_range(1..6u32);
        heads.entry(client).or_insert_with(|| {
            c.open(client, budget);
            0
        });
        match rng.random_range(0..5) {
            0 => {
                c.refill(client, rng.random_range(0..4));
            }
            1 => {
                let head = heads[&client] + rng.random_range(0..3);
                let seen = c.observe_head(client, head);
                if seen.overrun > 0 {
                    c.repaired(client);
                }
                heads.insert(client, head - seen.overrun);
                held.entry(client).or_default().extend(seen.allocated);
            }
            2 => {
                if let Some(v) = held.get_mut(&client)
                    && !v.is_empty()
                {
                    let k = v.swap_remove(rng.random_range(0..v.len()));
                    c.freed(client, k).unwrap();
                }
            }
            3 if rng.random_bool(0.05) => {
                c.close(client);
                heads.remove(&client);
                held.remove(&client);
            }
            _ => {
                let dirty: Vec<ChunkId> = (0..chunks)
                    .filter(|&k| c.state(k) == Some(ChunkState::Dirty))
                    .collect();
                if let Some(&k) = dirty.first() {
                    c.scrubbed(k);
                }
            }
        }
        let mut per_client: HashMap<ClientId, u32> = HashMap::new();
        let mut free = 0;
        for k in 0..chunks {
            match c.state(k).unwrap() {
                ChunkState::Free => free += 1,
                ChunkState::Reserved { client } | ChunkState::Allocated { client } => {
                    *per_client.entry(client).or_default() += 1
                }
                ChunkState::Dirty => {}
            }
        }
        assert_eq!(free, c.free_chunks(), "step {step}");
        assert!(per_client.values().all(|&n| n <= budget), "step {step}");
    }
}
