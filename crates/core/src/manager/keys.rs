//! Key bytes for window binds (ReDMArk's rkey randomization, M2).
//!
//! The NIC's default steps a window's key byte by one per bind (`ibv_inc_rkey`). With MW
//! handover the window a holder just released is rebound at once to the next grant, so its
//! previous holder would know the new rkey in one guess. The manager therefore chooses every
//! bind's key byte itself: uniformly at random among the bytes the window has not carried in
//! its last [`RECENT`] binds, so a stale rkey (a buggy client's, or a revoked holder's) cannot
//! match again for at least that many rebinds, and a guess of the next key succeeds with
//! probability at most 1 / (256 − [`RECENT`]).

use super::pool::MwId;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Binds of one window during which a key byte is not reused.
pub const RECENT: usize = 15;

#[derive(Clone, Copy, Debug, Default)]
struct Recent {
    bytes: [u8; RECENT],
    len: u8,
}

impl Recent {
    fn contains(&self, b: u8) -> bool {
        self.bytes[..self.len as usize].contains(&b)
    }
    fn push(&mut self, b: u8) {
        if (self.len as usize) < RECENT {
            self.bytes[self.len as usize] = b;
            self.len += 1;
        } else {
            self.bytes.copy_within(1.., 0);
            self.bytes[RECENT - 1] = b;
        }
    }
}

/// The key-byte generator (seeded: a simulation replays exactly).
#[derive(Debug)]
pub struct KeyBytes {
    rng: StdRng,
    recent: Vec<Recent>,
}

impl KeyBytes {
    /// A generator for windows `0..windows` (more are added as they appear).
    pub fn new(seed: u64, windows: u32) -> Self {
        KeyBytes {
            rng: StdRng::seed_from_u64(seed),
            recent: vec![Recent::default(); windows as usize],
        }
    }

    /// The key byte for the next bind of `mw`.
    pub fn next(&mut self, mw: MwId) -> u8 {
        let i = mw as usize;
        if i >= self.recent.len() {
            self.recent.resize(i + 1, Recent::default());
        }
        let recent = &mut self.recent[i];
        let b = loop {
            let b: u8 = self.rng.random();
            if !recent.contains(b) {
                break b;
            }
        };
        recent.push(b);
        b
    }

    /// Bytes of state.
    pub fn metadata_bytes(&self) -> u64 {
        (self.recent.capacity() * std::mem::size_of::<Recent>()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_recent_repeat_and_no_plus_one_pattern() {
        let mut k = KeyBytes::new(1, 2);
        let seq: Vec<u8> = (0..2000).map(|_| k.next(1)).collect();
        for (i, b) in seq.iter().enumerate() {
            assert!(
                !seq[i.saturating_sub(RECENT)..i].contains(b),
                "repeat at {i}"
            );
        }
        let plus_one = seq
            .windows(2)
            .filter(|w| w[1] == w[0].wrapping_add(1))
            .count();
        assert!(plus_one < 40, "{plus_one} of 1999 steps were +1");
        let distinct: std::collections::HashSet<u8> = seq.iter().copied().collect();
        assert_eq!(distinct.len(), 256, "every byte is possible");
        assert_eq!(
            KeyBytes::new(1, 2).next(1),
            seq[0],
            "seeded: replays exactly"
        );
        let _ = k.next(40); // windows added later grow the table
    }
}
