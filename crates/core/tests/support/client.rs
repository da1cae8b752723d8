//! Short forms of the client's ticket API for tests: a control request sent without waiting,
//! its reply, a non-waiting acquire, an RPC extension, a group of revokes, a posted
//! extension's outcome. Each is a few calls of the public API, nothing more.

use patronus_core::client::{Client, ClientError, Done, Op, Perm, Ticket};
use patronus_core::proto::messages::{Access, Mode, Reply, Request};
use rnic::Provider;
use std::time::Duration;

/// Sends `req` without waiting for its reply.
pub fn submit<P: Provider>(c: &mut Client<P>, req: Request) -> Result<Ticket, ClientError> {
    c.start(Op::Request(req))
}

/// The reply to `t`, once it is here (`Ok(None)` while in flight; never blocks).
pub fn poll_reply<P: Provider>(c: &mut Client<P>, t: Ticket) -> Result<Option<Reply>, ClientError> {
    Ok(c.poll(t)?.map(reply_of))
}

/// Waits for the reply to `t`.
pub fn wait_reply<P: Provider>(c: &mut Client<P>, t: Ticket) -> Result<Reply, ClientError> {
    c.wait(t).map(reply_of)
}

/// Sends `req` and waits for its reply.
pub fn call<P: Provider>(c: &mut Client<P>, req: Request) -> Result<Reply, ClientError> {
    let t = submit(c, req)?;
    wait_reply(c, t)
}

fn reply_of(d: Done) -> Reply {
    d.into_reply()
        .expect("a request's ticket ends with a reply")
}

fn perm_of(d: Done) -> Perm {
    d.into_perm()
        .expect("an acquire's ticket ends with a permission")
}

/// Starts a waiting acquire.
pub fn start_acquire<P: Provider>(
    c: &mut Client<P>,
    addr: u64,
    size: u64,
    lease: Duration,
    access: Access,
    mode: Mode,
) -> Result<Ticket, ClientError> {
    c.start(Op::Acquire {
        addr,
        size,
        lease,
        access,
        mode,
        wait: true,
    })
}

/// The permission `t` asked for, once here (`Ok(None)` while in flight).
pub fn poll_perm<P: Provider>(c: &mut Client<P>, t: Ticket) -> Result<Option<Perm>, ClientError> {
    Ok(c.poll(t)?.map(perm_of))
}

/// An acquire that does not wait for conflicting holders.
pub fn try_acquire<P: Provider>(
    c: &mut Client<P>,
    addr: u64,
    size: u64,
    lease: Duration,
    access: Access,
    mode: Mode,
) -> Result<Perm, ClientError> {
    let t = c.start(Op::Acquire {
        addr,
        size,
        lease,
        access,
        mode,
        wait: false,
    })?;
    c.wait(t).map(perm_of)
}

/// The RPC extension of `perm` by `lease`; the permission adopts the new lifetime.
pub fn extend_rpc<P: Provider>(
    c: &mut Client<P>,
    perm: &Perm,
    lease: Duration,
) -> Result<(), ClientError> {
    if perm.session() != c.status().session() {
        return Err(ClientError::SessionLost);
    }
    let req = Request::Extend {
        id: perm.id(),
        lease_us: lease.as_micros() as u64,
    };
    match call(c, req)? {
        Reply::Extended { lifetime_us } => {
            perm.note_extended(lifetime_us);
            Ok(())
        }
        Reply::Failed(s) => Err(ClientError::from_status(s)),
        other => panic!("unexpected {other:?}"),
    }
}

/// Revokes every permission of `perms`, all sent before any answer is awaited; the first
/// failure, once all were tried.
pub fn revoke_many<P: Provider>(c: &mut Client<P>, perms: Vec<Perm>) -> Result<(), ClientError> {
    let mut first = None;
    let mut tickets = Vec::new();
    for p in &perms {
        if p.session() != c.status().session() {
            first.get_or_insert(ClientError::SessionLost);
            continue;
        }
        let req = Request::Revoke {
            id: p.id(),
            free: false,
        };
        match submit(c, req) {
            Ok(t) => tickets.push(t),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    for t in tickets {
        match wait_reply(c, t) {
            Ok(Reply::Revoked) => {}
            Ok(Reply::Failed(s)) => {
                first.get_or_insert(ClientError::from_status(s));
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    first.map_or(Ok(()), Err)
}

/// A posted extension's outcome, once here: `Some(Ok(extended))` or its error.
pub fn poll_extended<P: Provider>(
    c: &mut Client<P>,
    t: Ticket,
) -> Option<Result<bool, ClientError>> {
    match c.poll(t) {
        Ok(None) => None,
        Ok(Some(Done::Extended(b))) => Some(Ok(b)),
        Ok(Some(other)) => panic!("unexpected {other:?}"),
        Err(e) => Some(Err(e)),
    }
}

/// Posts a CN extension of `perm` by `lease` without waiting.
pub fn post_extend<P: Provider>(
    c: &mut Client<P>,
    perm: &Perm,
    lease: Duration,
) -> Result<Ticket, ClientError> {
    c.start(Op::Extend { perm, lease })
}
