//! The event lists of the search: doubly linked lists whose lifted nodes keep their links, so
//! they can be restored in LIFO order (dancing links), and the questions the search asks them.
//!
//! On the known list node 0 is the head, node `2 * op + 1` the call and `2 * op + 2` the
//! return of `op`; on the unknown list node `op + 1` is the call of `op`.

use super::Span;

/// The end of a list.
pub(super) const NIL: usize = usize::MAX;

/// A doubly linked list over nodes `1..`, with node 0 its head sentinel; lifted nodes keep
/// their links so they can be restored in LIFO order (dancing links).
pub(super) struct Links {
    pub(super) next: Vec<usize>,
    pub(super) prev: Vec<usize>,
}

impl Links {
    pub(super) fn new(nodes: usize, order: impl Iterator<Item = usize>) -> Self {
        let (mut next, mut prev) = (vec![NIL; nodes], vec![NIL; nodes]);
        let mut last = 0;
        for node in order {
            next[last] = node;
            prev[node] = last;
            last = node;
        }
        Links { next, prev }
    }

    pub(super) fn remove(&mut self, node: usize) {
        let (p, n) = (self.prev[node], self.next[node]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    pub(super) fn restore(&mut self, node: usize) {
        let (p, n) = (self.prev[node], self.next[node]);
        self.next[p] = node;
        if n != NIL {
            self.prev[n] = node;
        }
    }
}

/// Whether the known candidate `op` of class `c` completes first (ties: lowest index) among
/// the known candidates of its class.
pub(super) fn earliest_due(main: &Links, spans: &[Span], op: usize, c: u64) -> bool {
    let due = |o: usize| (spans[o].complete, o);
    let mut node = main.next[0];
    while node != NIL && node % 2 == 1 {
        let other = (node - 1) / 2;
        if other != op && spans[other].class == Some(c) && due(other) < due(op) {
            return false;
        }
        node = main.next[node];
    }
    true
}

/// Whether `op`'s return is the first return left on the known list.
pub(super) fn is_due(main: &Links, op: usize) -> bool {
    let mut node = main.next[0];
    while node != NIL && node % 2 == 1 {
        node = main.next[node];
    }
    node == 2 * op + 2
}
