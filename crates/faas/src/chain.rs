//! Chains and their invocations: bootstrap (one `acquire` per remote input, and the output's
//! `allocate` when the chain reserves it, all in one round trip), the functions in order on
//! the container's thread, exit (one `release` per input and per output, all sent at once:
//! one round trip), and the report of what each function took and what permission operations
//! the chain made.

use crate::error::FaasError;
use patronus_core::proto::messages::{Access, Mode};
use patronus_ods::{Acquiring, MemError, Region, RemoteMemory};
use std::time::Duration;

/// The most bytes one READ or WRITE carries: larger ones go in chunks (a client's staging
/// buffer bounds one operation).
pub const CHUNK: usize = 32 << 10;

/// READs `len` bytes at `offset` of `r`, a chunk at a time.
pub fn read_chunked<M: RemoteMemory>(
    mem: &mut M,
    r: &M::Region,
    offset: u64,
    len: u32,
) -> Result<Vec<u8>, FaasError> {
    let mut out = Vec::with_capacity(len as usize);
    while out.len() < len as usize {
        let n = (len as usize - out.len()).min(CHUNK);
        out.extend(mem.read(r, offset + out.len() as u64, n as u32)?);
    }
    Ok(out)
}

/// WRITEs `data` at `offset` of `r`, a chunk at a time.
pub fn write_chunked<M: RemoteMemory>(
    mem: &mut M,
    r: &M::Region,
    offset: u64,
    data: &[u8],
) -> Result<(), FaasError> {
    for (i, chunk) in data.chunks(CHUNK).enumerate() {
        mem.write(r, offset + (i * CHUNK) as u64, chunk)?;
    }
    Ok(())
}

/// Data in remote memory: an object's address and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datum {
    /// The object's first byte.
    pub addr: u64,
    /// Its length.
    pub len: u64,
}

/// A remote input of an invocation, and the access the chain needs to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Input {
    /// Where it is.
    pub datum: Datum,
    /// Read, or read-write (a table the chain adds a record to).
    pub access: Access,
}

impl Input {
    /// A datum the chain only reads.
    pub fn read(datum: Datum) -> Self {
        Input {
            datum,
            access: Access::Read,
        }
    }

    /// A datum the chain reads and changes.
    pub fn read_write(datum: Datum) -> Self {
        Input {
            datum,
            access: Access::ReadWrite,
        }
    }
}

/// One invocation of a chain: its remote inputs and the payload the first function gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// The chain's remote inputs, acquired on bootstrap in this order.
    pub inputs: Vec<Input>,
    /// The first function's argument.
    pub payload: Vec<u8>,
}

/// A function of a chain: it gets the previous function's result (the invocation's payload
/// for the first) and the chain's context, and returns its own result.
pub type Function<M> = fn(&mut ChainCtx<'_, M>, Vec<u8>) -> Result<Vec<u8>, FaasError>;

/// A sequence of functions run one after another in one container.
#[derive(Debug)]
pub struct Chain<M: RemoteMemory> {
    /// Its name (what invocations ask for).
    pub name: &'static str,
    /// The functions, in order, by name.
    pub functions: Vec<(&'static str, Function<M>)>,
    /// The most bytes of the chain's output, when known up front: that object is allocated
    /// on bootstrap, in the round trip of the inputs' acquires, and [`ChainCtx::output`]
    /// writes into it (a larger output gets an object of its own; an unused one is freed on
    /// exit).
    pub output_reserve: Option<u64>,
}

/// What one invocation did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChainReport {
    /// Each function's name and run time (on the memory's clock, µs resolution).
    pub functions: Vec<(&'static str, Duration)>,
    /// Rights acquired (one per input, on bootstrap; one more each time a right is acquired
    /// again because its extension was refused).
    pub acquires: u64,
    /// Objects allocated (outputs).
    pub allocates: u64,
    /// Rights released (on exit one per input and one per output; one per right replaced).
    pub releases: u64,
    /// One-sided lease extensions.
    pub extends: u64,
    /// The outputs the chain left in remote memory, in the order written.
    pub outputs: Vec<Datum>,
    /// The last function's result.
    pub result: Vec<u8>,
}

impl ChainReport {
    /// The functions' total run time.
    pub fn total(&self) -> Duration {
        self.functions.iter().map(|(_, d)| *d).sum()
    }
}

/// What a function of a running chain can reach: the chain's inputs (through the rights
/// taken on bootstrap) and outputs of its own.
pub struct ChainCtx<'a, M: RemoteMemory> {
    mem: &'a mut M,
    inputs: Vec<(Input, M::Region)>,
    /// The rights over the outputs written so far (released on exit with the inputs').
    outputs: Vec<M::Region>,
    /// The object reserved for the output on bootstrap, until used.
    reserved: Option<M::Region>,
    /// Intermediate data in the container's local memory, by name, for later functions.
    local: std::collections::HashMap<&'static str, Vec<u8>>,
    report: ChainReport,
    /// The lease of the chain's rights, and of its outputs' allocation.
    lease: Duration,
}

impl<M: RemoteMemory> std::fmt::Debug for ChainCtx<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainCtx")
            .field("inputs", &self.inputs.len())
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl<M: RemoteMemory> ChainCtx<'_, M> {
    /// Input `i` (as the invocation named it).
    pub fn input(&self, i: usize) -> Result<Datum, FaasError> {
        self.inputs
            .get(i)
            .map(|(input, _)| input.datum)
            .ok_or(FaasError::NoInput(i))
    }

    /// The right over input `i` for bytes `offset..offset + len` of it (refused outside the
    /// input), extended one-sidedly first if its lease runs low.
    fn right(&mut self, i: usize, offset: u64, len: u64) -> Result<&M::Region, FaasError> {
        let lease = self.lease;
        let Some((input, r)) = self.inputs.get(i) else {
            return Err(FaasError::NoInput(i));
        };
        let end = offset.saturating_add(len);
        if end > input.datum.len {
            return Err(FaasError::OutOfBounds {
                input: i,
                offset,
                end,
                len: input.datum.len,
            });
        }
        if self.mem.expires_within(r, lease / 4) {
            match self.mem.extend(r, lease) {
                Ok(()) => self.report.extends += 1,
                // Refused (the right reached the memory node's maximum lifetime, or another
                // client waits for the object) or already ended: a fresh right replaces it.
                Err(MemError::Rejected | MemError::Expired) => self.acquire_again(i)?,
                Err(e) => return Err(e.into()),
            }
        }
        self.inputs
            .get(i)
            .map(|(_, r)| r)
            .ok_or(FaasError::NoInput(i))
    }

    /// Replaces the right over input `i` by a new one (the old is released).
    fn acquire_again(&mut self, i: usize) -> Result<(), FaasError> {
        let Some(&(input, _)) = self.inputs.get(i) else {
            return Err(FaasError::NoInput(i));
        };
        let d = input.datum;
        let fresh = self
            .mem
            .acquire(d.addr, d.len, self.lease, input.access, Mode::Shared)?;
        self.report.acquires += 1;
        if let Some(slot) = self.inputs.get_mut(i) {
            let old = std::mem::replace(&mut slot.1, fresh);
            self.report.releases += 1;
            let _ = self.mem.release(old);
        }
        Ok(())
    }

    /// Reads `len` bytes at `offset` of input `i`.
    pub fn read(&mut self, i: usize, offset: u64, len: u32) -> Result<Vec<u8>, FaasError> {
        self.right(i, offset, u64::from(len))?;
        let r = &self.inputs[i].1;
        read_chunked(self.mem, r, offset, len)
    }

    /// Writes `data` at `offset` of input `i` (acquired read-write).
    pub fn write(&mut self, i: usize, offset: u64, data: &[u8]) -> Result<(), FaasError> {
        self.right(i, offset, data.len() as u64)?;
        let r = &self.inputs[i].1;
        write_chunked(self.mem, r, offset, data)
    }

    /// Fetch-and-add on the 8-byte word at `offset` of input `i`; the previous value.
    pub fn faa(&mut self, i: usize, offset: u64, add: u64) -> Result<u64, FaasError> {
        self.right(i, offset, 8)?;
        let r = &self.inputs[i].1;
        Ok(self.mem.faa(r, offset, add)?)
    }

    /// Keeps `bytes` in the container's local memory under `name` for the chain's later
    /// functions (intermediate data never goes to remote memory).
    pub fn keep(&mut self, name: &'static str, bytes: Vec<u8>) {
        self.local.insert(name, bytes);
    }

    /// What an earlier function kept under `name`.
    pub fn kept(&self, name: &'static str) -> Option<&[u8]> {
        self.local.get(name).map(Vec::as_slice)
    }

    /// Compare-and-swap on the 8-byte word at `offset` of input `i`; the previous value.
    pub fn cas(
        &mut self,
        i: usize,
        offset: u64,
        compare: u64,
        swap: u64,
    ) -> Result<u64, FaasError> {
        self.right(i, offset, 8)?;
        let r = &self.inputs[i].1;
        Ok(self.mem.cas(r, offset, compare, swap)?)
    }

    /// Leaves `bytes` in remote memory for whoever consumes them next: a new object (one
    /// `allocate`), written; its right is revoked on exit with the inputs' (the object
    /// stays; its consumer acquires it).
    pub fn output(&mut self, bytes: &[u8]) -> Result<Datum, FaasError> {
        let len = (bytes.len() as u64).max(1);
        let r = match self.reserved.take() {
            Some(r) if r.len() >= len => r,
            other => {
                if let Some(small) = other {
                    self.reserved = Some(small);
                }
                self.allocate(len)?
            }
        };
        let datum = Datum {
            addr: r.addr(),
            len,
        };
        let written = write_chunked(self.mem, &r, 0, bytes);
        if let Err(e) = written {
            let _ = self.mem.free(r);
            return Err(e);
        }
        self.outputs.push(r);
        self.report.outputs.push(datum);
        Ok(datum)
    }
}

impl<M: RemoteMemory> ChainCtx<'_, M> {
    /// A new object of `len` bytes for an output (shared, for the chain's lease).
    fn allocate(&mut self, len: u64) -> Result<M::Region, FaasError> {
        let mut objects = self.mem.allocate(&[len], self.lease, Mode::Shared)?;
        self.report.allocates += 1;
        objects
            .pop()
            .ok_or_else(|| FaasError::Stopped("an allocation returned no object".into()))
    }
}

/// Frees the object `datum` names (an uploaded input, an output once consumed) through a
/// right of the caller's own.
pub fn free<M: RemoteMemory>(mem: &mut M, datum: Datum) -> Result<(), FaasError> {
    let r = mem.acquire(
        datum.addr,
        datum.len,
        Duration::from_secs(1),
        Access::ReadWrite,
        Mode::Shared,
    )?;
    Ok(mem.free(r)?)
}

/// Runs `chain` once for `inv` on `mem`: acquires every input (shared, for `lease`, or the
/// memory's longest lease if that is shorter), runs the functions in order, releases every
/// input and output right — on success and on failure alike, revoked, not left to lapse: the
/// chain holds nothing once it ends. A right whose lease runs low is extended one-sidedly, or,
/// once that is refused, acquired again.
pub fn run_chain<M: RemoteMemory>(
    mem: &mut M,
    chain: &Chain<M>,
    inv: &Invocation,
    lease: Duration,
) -> Result<ChainReport, FaasError> {
    let lease = mem.max_lease().map_or(lease, |max| lease.min(max));
    let mut ctx = ChainCtx {
        mem,
        inputs: Vec::with_capacity(inv.inputs.len()),
        outputs: Vec::new(),
        reserved: None,
        local: Default::default(),
        report: ChainReport::default(),
        lease,
    };
    let result = bootstrap(&mut ctx, chain, inv).and_then(|()| run_functions(&mut ctx, chain, inv));
    // Exit: a reserved object no output took is freed (nobody will consume it); one revoke
    // per right, whatever happened, sent together.
    if let Some(unused) = ctx.reserved.take() {
        let _ = ctx.mem.free(unused);
        ctx.report.releases += 1;
    }
    let mut held: Vec<M::Region> = std::mem::take(&mut ctx.inputs)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    held.append(&mut ctx.outputs);
    ctx.report.releases += held.len() as u64;
    let _ = ctx.mem.release_many(held);
    result.map(|out| ChainReport {
        result: out,
        ..ctx.report
    })
}

/// The longest a bootstrap sleeps between looks at its acquires (each ends on its own, with
/// its answer or its timeout).
const ANSWER_WAIT: Duration = Duration::from_millis(50);

/// Every input's acquire sent before any answer is awaited, and the output reserved meanwhile:
/// one round trip where the memory pipelines acquires (Patronus).
fn bootstrap<M: RemoteMemory>(
    ctx: &mut ChainCtx<'_, M>,
    chain: &Chain<M>,
    inv: &Invocation,
) -> Result<(), FaasError> {
    let mut started: Vec<(usize, Acquiring<M::Region>)> = inv
        .inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let d = input.datum;
            let a = ctx
                .mem
                .start_acquire(d.addr, d.len, ctx.lease, input.access, Mode::Shared);
            (i, a)
        })
        .collect();
    let mut failed = match chain.output_reserve {
        Some(len) => ctx
            .allocate(len.max(1))
            .map(|r| ctx.reserved = Some(r))
            .err(),
        None => None,
    };
    // Each input's right in the invocation's order (functions name inputs by index).
    let mut rights: Vec<Option<M::Region>> = inv.inputs.iter().map(|_| None).collect();
    while !started.is_empty() {
        let mut waiting = Vec::with_capacity(started.len());
        for (i, a) in started {
            match ctx.mem.poll_acquire(a) {
                Acquiring::Answered(Ok(r)) => {
                    ctx.report.acquires += 1;
                    rights[i] = Some(r);
                }
                Acquiring::Answered(Err(e)) => {
                    failed.get_or_insert(e.into());
                }
                a @ Acquiring::InFlight(_) => waiting.push((i, a)),
            }
        }
        started = waiting;
        if !started.is_empty() {
            ctx.mem.wait(ANSWER_WAIT);
        }
    }
    ctx.inputs = inv
        .inputs
        .iter()
        .zip(rights)
        .filter_map(|(input, r)| Some((*input, r?)))
        .collect();
    failed.map_or(Ok(()), Err)
}

fn run_functions<M: RemoteMemory>(
    ctx: &mut ChainCtx<'_, M>,
    chain: &Chain<M>,
    inv: &Invocation,
) -> Result<Vec<u8>, FaasError> {
    let mut payload = inv.payload.clone();
    for (name, f) in &chain.functions {
        // Timed on the memory's clock (the client's: injected, virtual in tests), in µs.
        let t0 = ctx.mem.now();
        payload = f(ctx, payload)?;
        let took = ctx.mem.now().0.saturating_sub(t0.0);
        ctx.report
            .functions
            .push((name, Duration::from_micros(took)));
    }
    Ok(payload)
}
