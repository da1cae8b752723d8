//! What the loops ask for: put/get/del on a few hot keys, and fresh keys inserted and read
//! back. Every value written is unique (`v<loop>.<seq>`), so a read names the write it saw.

use crate::invoke::KvOp;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::{Mutex, PoisonError};

/// A loop's part in the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// put (45%), get (35%), del (15%) on the hot keys; get of a fresh key (5%).
    Hot,
    /// put of a key never used before (60%; continuous splits), get of a fresh key (40%).
    Inserter,
}

/// What the loops share: the hot keys and the fresh keys whose insertion was acknowledged.
#[derive(Debug)]
pub struct Workload {
    hot: Vec<String>,
    fresh: Mutex<Vec<String>>,
}

impl Workload {
    /// `keys` hot keys, `hot0` …
    pub fn new(keys: usize) -> Self {
        Workload {
            hot: (0..keys).map(|i| format!("hot{i}")).collect(),
            fresh: Mutex::new(Vec::new()),
        }
    }

    /// Notes that the fresh key `key` was acknowledged (inserted).
    pub fn acknowledged(&self, key: &str) {
        self.lock().push(key.to_string());
    }

    /// Forgets the fresh keys (the node restarted: its table is new and empty).
    pub fn forget(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.fresh.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn some_fresh(&self, rng: &mut StdRng) -> Option<String> {
        let fresh = self.lock();
        (!fresh.is_empty()).then(|| fresh[rng.random_range(0..fresh.len())].clone())
    }
}

/// One loop's sequence of operations, seeded.
#[derive(Debug)]
pub struct Loop {
    /// Which loop (its client id in the history).
    pub id: u64,
    /// Its part.
    pub role: Role,
    rng: StdRng,
    seq: u64,
}

impl Loop {
    /// Loop `id` of a run seeded `seed`.
    pub fn new(id: u64, role: Role, seed: u64) -> Self {
        Loop {
            id,
            role,
            rng: StdRng::seed_from_u64(seed ^ (id + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            seq: 0,
        }
    }

    /// The next operation and its number within the loop.
    pub fn next(&mut self, w: &Workload) -> (u64, KvOp) {
        let seq = self.seq;
        self.seq += 1;
        let value = format!("v{}.{seq}", self.id);
        let roll = self.rng.random_range(0..100u32);
        let op = match self.role {
            Role::Hot => {
                let key = w.hot[self.rng.random_range(0..w.hot.len())].clone();
                match roll {
                    0..45 => KvOp::Put { key, value },
                    45..80 => KvOp::Get { key },
                    80..95 => KvOp::Del { key },
                    _ => KvOp::Get {
                        key: w.some_fresh(&mut self.rng).unwrap_or(key),
                    },
                }
            }
            Role::Inserter => match w.some_fresh(&mut self.rng) {
                Some(key) if roll >= 60 => KvOp::Get { key },
                _ => KvOp::Put {
                    key: format!("f{}.{seq}", self.id),
                    value,
                },
            },
        };
        (seq, op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_are_seeded_and_values_unique() {
        let w = Workload::new(6);
        let ops = |seed| {
            let mut l = Loop::new(3, Role::Hot, seed);
            (0..200).map(|_| l.next(&w).1).collect::<Vec<_>>()
        };
        assert_eq!(ops(1), ops(1));
        assert_ne!(ops(1), ops(2));
        let all = ops(1);
        let values: std::collections::HashSet<_> = all
            .iter()
            .filter_map(|op| match op {
                KvOp::Put { value, .. } => Some(value.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            values.len(),
            all.iter()
                .filter(|op| matches!(op, KvOp::Put { .. }))
                .count()
        );
        assert!(all.iter().all(|op| op.key().starts_with("hot")));
        for name in ["put", "get", "del"] {
            assert!(all.iter().any(|op| op.name() == name), "{name}");
        }
    }

    #[test]
    fn inserters_put_fresh_keys_and_read_acknowledged_ones() {
        let w = Workload::new(6);
        let mut l = Loop::new(9, Role::Inserter, 5);
        assert_eq!(
            l.next(&w).1,
            KvOp::Put {
                key: "f9.0".into(),
                value: "v9.0".into()
            }
        );
        w.acknowledged("f9.0");
        let ops: Vec<_> = (0..50).map(|_| l.next(&w).1).collect();
        assert!(ops.contains(&KvOp::Get { key: "f9.0".into() }));
        w.forget();
        assert!(w.some_fresh(&mut StdRng::seed_from_u64(0)).is_none());
    }
}
