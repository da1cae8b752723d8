//! The logical clients' use of the client's ticket API: each has at most a few requests in
//! flight and takes their replies in the order they end.

use patronus_core::client::{Client, ClientError, Done, Op};
use patronus_core::proto::messages::{Reply, Request};
use rnic::Provider;
use std::time::Duration;

/// Sends `req` without waiting; its reply comes out of [`next_reply`] or [`wait_reply`].
pub(crate) fn send<P: Provider>(c: &mut Client<P>, req: Request) -> Result<(), ClientError> {
    c.start(Op::Request(req)).map(|_| ())
}

/// The reply of whichever request ended first, as (ticket id, reply), if any. Never blocks.
pub(crate) fn next_reply<P: Provider>(
    c: &mut Client<P>,
) -> Result<Option<(u64, Reply)>, ClientError> {
    match c.poll_any() {
        None => Ok(None),
        Some((t, Ok(Done::Reply(r)))) => Ok(Some((t.id(), r))),
        Some((_, Ok(_))) => Err(ClientError::InvalidArgument("not a request's ticket")),
        Some((_, Err(e))) => Err(e),
    }
}

/// [`next_reply`], waiting up to `max` (sleeping) for one.
pub(crate) fn wait_reply<P: Provider>(
    c: &mut Client<P>,
    max: Duration,
) -> Result<Option<(u64, Reply)>, ClientError> {
    if !c.wait_any(max)? {
        return Ok(None);
    }
    next_reply(c)
}
