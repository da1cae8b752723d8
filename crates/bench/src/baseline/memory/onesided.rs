//! A batch of one-sided ops (Unprot, Mr) on the data connection: posted with one doorbell per
//! group of at most [`MAX_BATCH`] ops whose bytes fit the staging buffer (any batch a data
//! structure issues is one group), and the exactly-once rule Patronus's data path follows:
//!
//! - an op the NIC refused is [`MemError::Rejected`] (it neither read nor changed memory);
//! - ops flushed behind a refusal never ran (the responder stops at the violation), nor did
//!   ops the QP did not take: they run once more, on a new data connection;
//! - when the QP broke for a reason that does not say what ran (a lost link, a timeout), a
//!   WRITE, CAS or FAA may have run: [`MemError::OutcomeUnknown`], never run again. READs are
//!   idempotent and run once more.
//!
//! An op that fails its second run is reported as it failed; a second failure never leads to a
//! third run.

use super::{BaselineMemory, Kind, Planned, is_refusal};
use crate::baseline::BaselineError;
use crate::baseline::client::{MAX_BATCH, OneSided, OneSidedOut, STAGING_BYTES};
use patronus_ods::{MemError, MemOut};
use rnic::{Provider, WcStatus};

type Results = [Option<Result<MemOut, MemError>>];

impl<'a> Planned<'a> {
    fn one_sided(&self) -> Result<OneSided<'a>, MemError> {
        let rkey = self
            .rkey
            .ok_or(MemError::Invalid("a region without a key"))?;
        let addr = self.addr;
        Ok(match self.kind {
            Kind::Read(len) => OneSided::Read { rkey, addr, len },
            Kind::Write(data) => OneSided::Write { rkey, addr, data },
            Kind::Cas { compare, swap } => OneSided::Cas {
                rkey,
                addr,
                compare,
                swap,
            },
            Kind::Faa { add } => OneSided::Faa { rkey, addr, add },
        })
    }

    /// Staging bytes the op takes, from an 8-byte boundary.
    fn staging(&self) -> usize {
        let len = match self.kind {
            Kind::Read(len) => len as usize,
            Kind::Write(data) => data.len(),
            Kind::Cas { .. } | Kind::Faa { .. } => 8,
        };
        len.next_multiple_of(8)
    }
}

impl<P: Provider> BaselineMemory<P> {
    /// Runs `todo` (op index, checked op) one-sided, filling `results`.
    pub(super) fn execute_one_sided(
        &mut self,
        todo: &[(usize, Planned<'_>)],
        results: &mut Results,
    ) {
        let mut start = 0;
        while start < todo.len() {
            let mut end = start;
            let mut bytes = 0;
            while end < todo.len() && end - start < MAX_BATCH {
                let more = todo[end].1.staging();
                if bytes + more > STAGING_BYTES {
                    break;
                }
                bytes += more;
                end += 1;
            }
            if end == start {
                results[todo[start].0] = Some(Err(MemError::Invalid(
                    "an op larger than the staging buffer",
                )));
                end += 1;
            } else {
                self.doorbell(&todo[start..end], results);
            }
            start = end;
        }
    }

    /// One group: posted with one doorbell, run once more where the rule allows.
    fn doorbell(&mut self, group: &[(usize, Planned<'_>)], results: &mut Results) {
        let mut pending: Vec<&(usize, Planned<'_>)> = Vec::with_capacity(group.len());
        let mut ops = Vec::with_capacity(group.len());
        for entry in group {
            match entry.1.one_sided() {
                Ok(op) => {
                    pending.push(entry);
                    ops.push(op);
                }
                Err(e) => results[entry.0] = Some(Err(e)),
            }
        }
        for attempt in 0..2 {
            if pending.is_empty() {
                return;
            }
            let outcomes = match self.data().and_then(|d| Ok(d.execute(&ops)?)) {
                Ok(outcomes) => outcomes,
                Err(e) => {
                    for &&(i, _) in &pending {
                        results[i] = Some(Err(e.clone()));
                    }
                    return;
                }
            };
            let refused = outcomes
                .iter()
                .any(|o| matches!(o, Err(BaselineError::Remote(s)) if is_refusal(*s)));
            let mut again = Vec::new();
            let mut again_ops = Vec::new();
            for ((entry, op), outcome) in pending.iter().zip(&ops).zip(outcomes) {
                let runs_again = runs_again(&outcome, refused, entry.1.is_read());
                if runs_again && attempt == 0 {
                    again.push(*entry);
                    again_ops.push(*op);
                    continue;
                }
                results[entry.0] = Some(match outcome {
                    Ok(out) => Ok(mem_out(out)),
                    Err(BaselineError::Remote(s)) if is_refusal(s) => Err(MemError::Rejected),
                    // Did not run (or a READ) the second time either.
                    Err(e) if runs_again => Err(MemError::Failed(format!(
                        "not carried out on two data connections: {e}"
                    ))),
                    Err(_) => Err(MemError::OutcomeUnknown),
                });
            }
            pending = again;
            ops = again_ops;
        }
    }
}

/// Whether an op with `outcome` runs once more: it did not run (flushed behind a refusal in
/// its batch, or not posted), or it is a READ whose outcome is unknown.
fn runs_again(outcome: &Result<OneSidedOut, BaselineError>, refused: bool, is_read: bool) -> bool {
    match outcome {
        Ok(_) => false,
        Err(BaselineError::Remote(s)) if is_refusal(*s) => false,
        Err(BaselineError::Remote(WcStatus::WrFlushError)) if refused => true,
        Err(BaselineError::Verbs(_)) => true,
        Err(_) => is_read,
    }
}

fn mem_out(out: OneSidedOut) -> MemOut {
    match out {
        OneSidedOut::Read(bytes) => MemOut::Read(bytes),
        OneSidedOut::Written => MemOut::Written,
        OneSidedOut::Atomic(v) => MemOut::Atomic(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic::VerbsError;

    #[test]
    fn only_ops_that_did_not_run_and_reads_run_again() {
        let flushed = Err(BaselineError::Remote(WcStatus::WrFlushError));
        let refused = Err(BaselineError::Remote(WcStatus::RemoteAccessError));
        let lost = Err(BaselineError::Remote(WcStatus::RetryExceeded));
        let unposted = Err(BaselineError::Verbs(VerbsError::InvalidArgument("full")));
        for is_read in [false, true] {
            assert!(!runs_again(&Ok(OneSidedOut::Written), true, is_read));
            assert!(!runs_again(&refused, true, is_read), "a refusal is final");
            assert!(
                runs_again(&flushed, true, is_read),
                "behind a refusal: never ran"
            );
            assert!(runs_again(&unposted, false, is_read), "never posted");
        }
        // The QP broke for a reason that does not say what ran: only READs run again.
        for outcome in [&flushed, &lost, &Err(BaselineError::Timeout)] {
            assert!(!runs_again(outcome, false, false), "{outcome:?}");
            assert!(runs_again(outcome, false, true), "{outcome:?}");
        }
    }
}
