//! The engines' weighted round robin, sans-IO: what one turn of a connection may serve.
//!
//! An engine visits each connection with work once per loop iteration (a turn). A turn
//! serves at most `weight × BASE_FRAMES` frames and reads at most `weight × BASE_BYTES`
//! bytes, whichever ends first; a connection with more left is visited again in the next
//! iteration without waiting for an event. So while several connections have work, each
//! gets a share of served frames (and of bytes read) proportional to its weight: a QP that
//! floods small requests gets its share of the engine and no more.
//!
//! Invariant: a turn always serves at least one frame and reads at least once (a budget is
//! never born exhausted), so every connection makes progress.

/// Frames a weight-1 connection is served per turn.
pub(super) const BASE_FRAMES: usize = 64;
/// Bytes an engine reads from a weight-1 connection per turn.
pub(super) const BASE_BYTES: usize = 256 * 1024;

/// What is left of one turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TurnBudget {
    frames: usize,
    bytes: usize,
}

impl TurnBudget {
    /// The turn of a connection of `weight` (at least 1).
    pub(super) fn for_weight(weight: u32) -> Self {
        let w = usize::try_from(weight.max(1)).unwrap_or(1);
        TurnBudget {
            frames: BASE_FRAMES.saturating_mul(w),
            bytes: BASE_BYTES.saturating_mul(w),
        }
    }

    /// A pass bounded in bytes only (an application thread's read of its own responses).
    pub(super) fn bytes_only(bytes: usize) -> Self {
        TurnBudget {
            frames: usize::MAX,
            bytes: bytes.max(1),
        }
    }

    /// Whether another frame may be served in this turn.
    pub(super) fn may_serve(&self) -> bool {
        self.frames > 0
    }

    /// Whether the socket may be read again in this turn.
    pub(super) fn may_read(&self) -> bool {
        self.bytes > 0 && self.frames > 0
    }

    /// One frame served.
    pub(super) fn served(&mut self) {
        self.frames = self.frames.saturating_sub(1);
    }

    /// `n` bytes read.
    pub(super) fn read(&mut self, n: usize) {
        self.bytes = self.bytes.saturating_sub(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves connections with unbounded backlogs of one-frame... requests for `turns` turns,
    /// the way the engine does; returns the frames each got.
    fn round_robin(weights: &[u32], frame_len: usize, turns: usize) -> Vec<usize> {
        let mut served = vec![0; weights.len()];
        for _ in 0..turns {
            for (i, w) in weights.iter().enumerate() {
                let mut b = TurnBudget::for_weight(*w);
                while b.may_serve() {
                    if b.may_read() {
                        b.read(frame_len);
                    } else if b.bytes == 0 {
                        break;
                    }
                    b.served();
                    served[i] += 1;
                }
            }
        }
        served
    }

    #[test]
    fn shares_follow_weights_for_small_frames() {
        let served = round_robin(&[1, 3], 32, 10);
        assert_eq!(served, vec![10 * BASE_FRAMES, 30 * BASE_FRAMES]);
    }

    #[test]
    fn large_frames_are_bounded_by_bytes() {
        let served = round_robin(&[1, 2], 64 * 1024, 1);
        assert_eq!(served, vec![4, 8]);
    }

    #[test]
    fn a_turn_is_never_born_exhausted() {
        for w in [0, 1, 64] {
            let b = TurnBudget::for_weight(w);
            assert!(b.may_serve() && b.may_read());
        }
        assert!(TurnBudget::bytes_only(0).may_read());
    }
}
