//! A CAS whose outcome is unknown (`MemError::OutcomeUnknown`: the link failed under it) is
//! resolved by reading the slot, never by repeating it blindly: [`Faulty`] loses the answer
//! of one CAS — after running it, or without running it — and the operation must end with
//! the table as if the CAS had run exactly once (or never, and then ran once).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod race_support;
mod support;

use patronus_core::cluster::Link;
use patronus_ods::race::{self, Delete, Insert, LockMode, RaceConfig, Stage, TableClient, Update};
use race_support::faulty::{CasFault, Faulty};
use race_support::{Mem, bed, key, opts, run, small, value};

type F = Faulty<Mem>;

fn roomy() -> RaceConfig {
    RaceConfig {
        groups: 8,
        ..small(LockMode::Lease)
    }
}

/// The (address, compare, swap) CASes sent more than once.
fn repeated(mem: &F) -> Vec<(u64, u64, u64)> {
    let mut seen = std::collections::HashSet::new();
    mem.cas_log
        .iter()
        .filter(|c| !seen.insert(**c))
        .copied()
        .collect()
}

fn clean(t: &mut TableClient<F>, mem: &mut F, keys: u64) {
    let audit = t.audit(mem).unwrap();
    assert_eq!(
        (
            audit.duplicates,
            audit.unreadable,
            audit.unclaimed,
            audit.frozen
        ),
        (0, 0, 0, 0),
        "{audit:?}"
    );
    assert_eq!(audit.keys, keys, "{audit:?}");
}

fn each_operation_resolves_an_unknown_cas_by_reading(t: Link) {
    let (_bed, mems) = bed(t, 1);
    let mut mem = Faulty::new(mems.into_iter().next().unwrap());
    let root = race::create(&mut mem, roomy()).unwrap();
    let mut c = race::open(&mut mem, root, opts()).unwrap();
    for (i, fault) in [CasFault::RanThenLost, CasFault::Lost]
        .into_iter()
        .enumerate()
    {
        let i = i as u64;
        // Insert.
        mem.next_cas = Some(fault);
        mem.cas_log.clear();
        let before = c.stats();
        c.insert(&mut mem, &key(i), &value(i, 0)).unwrap();
        assert_eq!(c.stats().since(&before).unknown_outcomes, 1, "{fault:?}");
        assert_eq!(mem.next_cas, None, "the fault fired");
        if fault == CasFault::RanThenLost {
            assert!(
                repeated(&mem).is_empty(),
                "insert: a CAS that ran was repeated"
            );
        }
        assert_eq!(c.get(&mut mem, &key(i)).unwrap(), Some(value(i, 0)));
        // Update.
        mem.next_cas = Some(fault);
        mem.cas_log.clear();
        let before = c.stats();
        c.update(&mut mem, &key(i), &value(i, 1)).unwrap();
        let spent = c.stats().since(&before);
        assert_eq!(spent.unknown_outcomes, 1, "{fault:?}");
        if fault == CasFault::RanThenLost {
            assert!(
                repeated(&mem).is_empty(),
                "update: a CAS that ran was repeated"
            );
        }
        assert_eq!(c.get(&mut mem, &key(i)).unwrap(), Some(value(i, 1)));
        clean(&mut c, &mut mem, i + 1);
    }
    // Delete (of both keys).
    for (i, fault) in [CasFault::RanThenLost, CasFault::Lost]
        .into_iter()
        .enumerate()
    {
        let i = i as u64;
        mem.next_cas = Some(fault);
        mem.cas_log.clear();
        c.delete(&mut mem, &key(i)).unwrap();
        if fault == CasFault::RanThenLost {
            assert!(
                repeated(&mem).is_empty(),
                "delete: a CAS that ran was repeated"
            );
        }
        assert_eq!(c.get(&mut mem, &key(i)).unwrap(), None);
    }
    clean(&mut c, &mut mem, 0);
}

/// The update's CAS ran and its answer was lost; before the client reads the slot, another
/// client updates the key again (and frees this client's block). The update counts as done
/// just before the other one; nobody's live block is freed.
fn an_unknown_outcome_overtaken_by_another_client(t: Link) {
    let (_bed, mems) = bed(t, 2);
    let mut mems = mems.into_iter();
    let mut mem = Faulty::new(mems.next().unwrap());
    let mut other_mem = Faulty::new(mems.next().unwrap());
    let root = race::create(&mut mem, roomy()).unwrap();
    let mut c = race::open(&mut mem, root, opts()).unwrap();
    let mut other = race::open(&mut other_mem, root, opts()).unwrap();
    c.insert(&mut mem, &key(1), &value(1, 0)).unwrap();
    let mut op = Update::new(&c, &key(1), &value(1, 1)).unwrap();
    mem.next_cas = Some(CasFault::RanThenLost);
    for _ in 0..100 {
        if op.stage() == Stage::Resolving {
            break;
        }
        assert!(op.step(&mut c, &mut mem).is_pending());
    }
    assert_eq!(op.stage(), Stage::Resolving);
    other.update(&mut other_mem, &key(1), &value(1, 2)).unwrap();
    run(&mut c, &mut mem, |t, m| op.step(t, m)).unwrap();
    assert_eq!(c.get(&mut mem, &key(1)).unwrap(), Some(value(1, 2)));
    clean(&mut c, &mut mem, 1);
    // An insert whose CAS never ran, while another client takes the slot it aimed at: it
    // reads the slot, finds it taken, and inserts elsewhere.
    let mut ins = Insert::new(&c, &key(2), &value(2, 0)).unwrap();
    mem.next_cas = Some(CasFault::Lost);
    for _ in 0..100 {
        if ins.stage() == Stage::Resolving {
            break;
        }
        assert!(ins.step(&mut c, &mut mem).is_pending());
    }
    assert_eq!(ins.stage(), Stage::Resolving);
    for i in 10..20 {
        other.insert(&mut other_mem, &key(i), &value(i, 0)).unwrap();
    }
    run(&mut c, &mut mem, |t, m| ins.step(t, m)).unwrap();
    let mut d = Delete::new(&c, &key(10));
    run(&mut c, &mut mem, |t, m| d.step(t, m)).unwrap();
    assert_eq!(c.get(&mut mem, &key(2)).unwrap(), Some(value(2, 0)));
    clean(&mut c, &mut mem, 11);
}

patronus_core::both_transports!(
    each_operation_resolves_an_unknown_cas_by_reading,
    an_unknown_outcome_overtaken_by_another_client
);
