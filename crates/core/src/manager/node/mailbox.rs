//! A mailbox that one manager thread drains every turn and other threads post to: new
//! connections, sessions ended on another shard, broken QPs.
//!
//! The manager looks at each of its mailboxes on every turn of its loop, and they are almost
//! always empty; an empty one costs the reader one atomic load, not a lock and an unlock.
//!
//! Invariant: `posted` is true whenever `items` is not empty. Both writes that change it
//! happen under the lock (a post sets it after pushing; a take clears it as it empties the
//! list), so a post is never lost: a reader that saw `false` looks again next turn.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Items posted by any thread, taken by one.
#[derive(Debug)]
pub(super) struct Mailbox<T> {
    items: Mutex<Vec<T>>,
    posted: AtomicBool,
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Mailbox {
            items: Mutex::new(Vec::new()),
            posted: AtomicBool::new(false),
        }
    }
}

impl<T> Mailbox<T> {
    /// Posts one item.
    pub(super) fn post(&self, item: T) {
        let mut items = self.items.lock();
        items.push(item);
        self.posted.store(true, Ordering::Release);
    }

    /// Posts copies of `items`.
    pub(super) fn post_all(&self, items: &[T])
    where
        T: Clone,
    {
        if items.is_empty() {
            return;
        }
        let mut held = self.items.lock();
        held.extend_from_slice(items);
        self.posted.store(true, Ordering::Release);
    }

    /// Takes everything posted so far (empty, without locking, if nothing was).
    pub(super) fn take(&self) -> Vec<T> {
        if !self.posted.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut items = self.items.lock();
        self.posted.store(false, Ordering::Relaxed);
        std::mem::take(&mut *items)
    }

    /// Items waiting.
    pub(super) fn len(&self) -> usize {
        self.items.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn takes_what_was_posted_once() {
        let m = Mailbox::default();
        assert!(m.take().is_empty());
        m.post(1);
        m.post_all(&[2, 3]);
        m.post_all(&[]);
        assert_eq!(m.len(), 3);
        assert_eq!(m.take(), [1, 2, 3]);
        assert!(m.take().is_empty());
        assert_eq!(m.len(), 0);
    }

    /// Posts from other threads while the reader drains: every item arrives exactly once.
    #[test]
    fn no_post_is_lost_under_concurrency() {
        let m = Arc::new(Mailbox::default());
        let posters: Vec<_> = (0..2u64)
            .map(|t| {
                let m = m.clone();
                std::thread::Builder::new()
                    .name(format!("poster-{t}"))
                    .spawn(move || {
                        for i in 0..10_000 {
                            m.post(t * 100_000 + i);
                        }
                    })
                    .expect("spawn")
            })
            .collect();
        let mut got = Vec::new();
        while got.len() < 20_000 {
            got.extend(m.take());
            if posters.iter().all(std::thread::JoinHandle::is_finished) {
                got.extend(m.take());
                break;
            }
        }
        for p in posters {
            p.join().expect("poster");
        }
        got.extend(m.take());
        got.sort_unstable();
        let want: Vec<u64> = (0..2u64)
            .flat_map(|t| (0..10_000).map(move |i| t * 100_000 + i))
            .collect();
        assert_eq!(got, want);
    }
}
