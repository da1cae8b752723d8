//! The memory node's named roots, as Patronus's manager keeps them
//! (`patronus_core::manager` names): an object published under a name so independent clients
//! can find a shared structure's root.
//!
//! Invariants: the baselines have no tenants, so there is one namespace per node: every
//! client sees every name. A name is an address, not a right (the object is reached as the
//! scheme reaches any object). At most [`NAMES`] names are kept ([`FailCode::Exhausted`]
//! beyond). A name stays until withdrawn, whoever published it.

use super::super::proto::FailCode;
use patronus_core::proto::messages::RootName;
use std::collections::HashMap;

/// Names a node keeps at most.
pub const NAMES: usize = 4096;

/// The names published on a node.
#[derive(Debug, Default)]
pub(crate) struct Names {
    objects: HashMap<RootName, (u64, u64)>,
}

impl Names {
    /// Publishes `(addr, len)` under `name`.
    pub(crate) fn publish(&mut self, name: RootName, addr: u64, len: u64) -> Result<(), FailCode> {
        if len == 0 || addr.checked_add(len).is_none() {
            return Err(FailCode::Invalid);
        }
        if self.objects.contains_key(&name) {
            return Err(FailCode::NameTaken);
        }
        if self.objects.len() >= NAMES {
            return Err(FailCode::Exhausted);
        }
        self.objects.insert(name, (addr, len));
        Ok(())
    }

    /// The object published under `name`.
    pub(crate) fn lookup(&self, name: RootName) -> Result<(u64, u64), FailCode> {
        self.objects
            .get(&name)
            .copied()
            .ok_or(FailCode::UnknownName)
    }

    /// Withdraws `name`.
    pub(crate) fn unpublish(&mut self, name: RootName) -> Result<(), FailCode> {
        self.objects
            .remove(&name)
            .map(|_| ())
            .ok_or(FailCode::UnknownName)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> RootName {
        RootName::new(s).unwrap()
    }

    #[test]
    fn names_are_unique_and_bounded() {
        let mut n = Names::default();
        n.publish(name("table"), 4096, 64).unwrap();
        assert_eq!(n.publish(name("table"), 8192, 64), Err(FailCode::NameTaken));
        assert_eq!(n.lookup(name("table")), Ok((4096, 64)));
        assert_eq!(n.lookup(name("other")), Err(FailCode::UnknownName));
        assert_eq!(n.publish(name("x"), 1, 0), Err(FailCode::Invalid));
        assert_eq!(n.publish(name("x"), u64::MAX, 2), Err(FailCode::Invalid));
        n.unpublish(name("table")).unwrap();
        assert_eq!(n.unpublish(name("table")), Err(FailCode::UnknownName));
        for i in 0..NAMES {
            n.publish(name(&format!("n{i}")), 64, 64).unwrap();
        }
        assert_eq!(n.publish(name("full"), 64, 64), Err(FailCode::Exhausted));
        n.unpublish(name("n0")).unwrap();
        n.publish(name("room again"), 64, 64).unwrap();
    }
}
