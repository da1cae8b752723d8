//! A batch under Rpc: every op is an RPC the memory node's CPU carries out (a READ or WRITE
//! longer than a page is one per page), all submitted before any is awaited — at most the
//! control connection's [`MAX_OUTSTANDING`](crate::baseline::client::MAX_OUTSTANDING) in
//! flight, so a larger batch goes in waves of that many — and the results assembled in order.
//! Zero-length READs and WRITEs are answered here, without a request.
//!
//! Exactly once: a request is never sent again (the node does not answer retries
//! idempotently). An op fails as its first failed request does — a request that got no answer
//! (a timeout, a broken connection) makes it [`MemError::OutcomeUnknown`]; the other pages of
//! a WRITE split in several may have been written.

use super::{BaselineMemory, Kind, Planned, unexpected};
use crate::baseline::proto::{BaselineReply, BaselineRequest, MAX_PAYLOAD};
use patronus_ods::{MemError, MemOut};
use rnic::Provider;

type Results = [Option<Result<MemOut, MemError>>];

/// A request of the batch: the op it serves (its place in `todo`), the request, and the bytes
/// its reply carries (a READ's page).
type Part = (usize, BaselineRequest, usize);

fn parts(k: usize, p: &Planned<'_>, out: &mut Vec<Part>) {
    let addr = p.addr;
    match p.kind {
        Kind::Read(len) => {
            let len = len as usize;
            for start in (0..len).step_by(MAX_PAYLOAD) {
                let n = (len - start).min(MAX_PAYLOAD);
                let req = BaselineRequest::Read {
                    addr: addr + start as u64,
                    len: n as u32,
                };
                out.push((k, req, n));
            }
        }
        Kind::Write(data) => {
            for (c, chunk) in data.chunks(MAX_PAYLOAD).enumerate() {
                let req = BaselineRequest::Write {
                    addr: addr + (c * MAX_PAYLOAD) as u64,
                    bytes: chunk.to_vec(),
                };
                out.push((k, req, 0));
            }
        }
        Kind::Cas { compare, swap } => out.push((
            k,
            BaselineRequest::Cas {
                addr,
                compare,
                swap,
            },
            0,
        )),
        Kind::Faa { add } => out.push((k, BaselineRequest::Faa { addr, add }, 0)),
    }
}

impl<P: Provider> BaselineMemory<P> {
    /// Runs `todo` (op index, checked op) as RPCs, filling `results`.
    pub(super) fn execute_rpc(&mut self, todo: &[(usize, Planned<'_>)], results: &mut Results) {
        let mut all = Vec::with_capacity(todo.len());
        for (k, (i, p)) in todo.iter().enumerate() {
            match p.kind {
                Kind::Read(0) => results[*i] = Some(Ok(MemOut::Read(Vec::new()))),
                Kind::Write([]) => results[*i] = Some(Ok(MemOut::Written)),
                _ => parts(k, p, &mut all),
            }
        }
        let mut all = all.into_iter();
        loop {
            let wave: Vec<Part> = all.by_ref().take(self.control.capacity()).collect();
            if wave.is_empty() {
                return;
            }
            let sent: Vec<_> = wave
                .into_iter()
                .map(|(k, req, n)| (k, self.control.submit(req), n))
                .collect();
            for (k, id, n) in sent {
                let reply = id.and_then(|id| self.control.wait(id));
                let (i, p) = &todo[k];
                file(&mut results[*i], p, reply, n);
            }
        }
    }
}

/// Adds one request's reply to its op's result: the first failure sticks, a READ's pages are
/// appended in order.
fn file(
    slot: &mut Option<Result<MemOut, MemError>>,
    p: &Planned<'_>,
    reply: Result<BaselineReply, crate::baseline::BaselineError>,
    page: usize,
) {
    if matches!(slot, Some(Err(_))) {
        return;
    }
    let out = match (p.kind, reply) {
        (Kind::Read(_), Ok(BaselineReply::Data(bytes))) if bytes.len() == page => {
            if let Some(Ok(MemOut::Read(head))) = slot {
                head.extend_from_slice(&bytes);
                return;
            }
            Ok(MemOut::Read(bytes))
        }
        (Kind::Write(_), Ok(BaselineReply::Done)) => Ok(MemOut::Written),
        (Kind::Cas { .. } | Kind::Faa { .. }, Ok(BaselineReply::Atomic(v))) => {
            Ok(MemOut::Atomic(v))
        }
        (_, Ok(other)) => Err(unexpected(other).into()),
        (_, Err(e)) => Err(e.into()),
    };
    *slot = Some(out);
}
