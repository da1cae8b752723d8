//! Loom model of the revocation barrier (`rnic::soft::gate::KeyGate`).
//!
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p rnic --test loom_gate --release`
//!
//! Invariant: an access admitted with the old key never observes (or overlaps) the binding
//! installed by a rebind; after `close` + `drain`, every admitted access has finished.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use rnic::soft::gate::KeyGate;

/// One accessor with the old key races one rebind to a new key.
#[test]
fn rebind_waits_for_admitted_access() {
    loom::model(|| {
        let gate = Arc::new(KeyGate::new(1));
        gate.open(1);
        // 1 = old binding, 2 = new binding; `busy` counts accesses inside the gate.
        let binding = Arc::new(AtomicUsize::new(1));
        let busy = Arc::new(AtomicUsize::new(0));

        let accessor = {
            let (gate, binding, busy) = (gate.clone(), binding.clone(), busy.clone());
            thread::spawn(move || {
                if let Some(_guard) = gate.enter(1) {
                    busy.fetch_add(1, Ordering::Relaxed);
                    // Admitted with key 1: must still see the old binding.
                    assert_eq!(binding.load(Ordering::Relaxed), 1);
                    busy.fetch_sub(1, Ordering::Relaxed);
                }
            })
        };

        gate.close();
        gate.drain();
        // No admitted access may still be running.
        assert_eq!(busy.load(Ordering::Relaxed), 0);
        binding.store(2, Ordering::Relaxed);
        gate.open(2);

        accessor.join().unwrap();
        assert!(gate.enter(1).is_none(), "old key is dead after the rebind");
    });
}

/// Two accessors, one with the new key (admitted only after the rebind sees the new binding).
#[test]
fn new_key_sees_new_binding() {
    loom::model(|| {
        let gate = Arc::new(KeyGate::new(1));
        gate.open(1);
        let binding = Arc::new(AtomicUsize::new(1));

        let old_user = {
            let (gate, binding) = (gate.clone(), binding.clone());
            thread::spawn(move || {
                if let Some(_g) = gate.enter(1) {
                    assert_eq!(binding.load(Ordering::Relaxed), 1);
                }
            })
        };
        let new_user = {
            let (gate, binding) = (gate.clone(), binding.clone());
            thread::spawn(move || {
                if let Some(_g) = gate.enter(2) {
                    assert_eq!(binding.load(Ordering::Relaxed), 2);
                }
            })
        };

        gate.close();
        gate.drain();
        binding.store(2, Ordering::Relaxed);
        gate.open(2);

        old_user.join().unwrap();
        new_user.join().unwrap();
    });
}
