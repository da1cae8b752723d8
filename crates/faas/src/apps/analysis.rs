//! The data-analysis chain (ServerlessBench TC4; IO-bound): check the new employee →
//! allocate a record in the employee table → write it → analyse the salaries (every record
//! of the table: per-department count, sum and average) → respond (the analysis left in remote
//! memory for its consumer).
//!
//! The employee table is one object in remote memory, the chain's one input (read-write):
//!
//! ```text
//! header (64 B):  records claimed (8 B, FAA) | capacity (8 B) | magic (8 B) | 0…
//! record (32 B):  used (8 B: 0, then 1 by CAS once the rest is written) | id | department | salary
//! ```
//!
//! A record is claimed by FAA on the header's count, written, then marked used by CAS, so
//! a concurrent analysis reads whole records or skips them (never a torn one).

use crate::chain::{Chain, ChainCtx, Datum, Input, Invocation, write_chunked};
use crate::error::FaasError;
use patronus_core::proto::messages::Mode;
use patronus_ods::{MemError, Region, RemoteMemory};
use std::time::Duration;

/// Departments of the table.
pub const DEPARTMENTS: usize = 8;
/// Records of the table as ServerlessBench loads it.
pub const DEFAULT_RECORDS: u32 = 512;
/// The highest salary accepted.
pub const MAX_SALARY: u64 = 10_000_000;

const HEADER: u64 = 64;
const RECORD: u64 = 32;
const COUNT: u64 = 0;
const CAPACITY: u64 = 8;
const MAGIC_AT: u64 = 16;
const MAGIC: u64 = 0x454d_504c_4f59_4545; // "EEYOLPME"
/// Bytes of an encoded [`Analysis`].
const ANALYSIS_BYTES: u64 = 16 * DEPARTMENTS as u64;

/// An employee record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Employee {
    /// Employee number.
    pub id: u64,
    /// Department, below [`DEPARTMENTS`].
    pub department: u64,
    /// Salary, 1 to [`MAX_SALARY`].
    pub salary: u64,
}

impl Employee {
    fn encode(&self) -> Vec<u8> {
        [self.id, self.department, self.salary]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    fn decode(b: &[u8]) -> Option<Employee> {
        Some(Employee {
            id: word(b, 0)?,
            department: word(b, 8)?,
            salary: word(b, 16)?,
        })
    }

    /// The invocation adding this employee to the table at `table`.
    pub fn invocation(&self, table: Datum) -> Invocation {
        Invocation {
            inputs: vec![Input::read_write(table)],
            payload: self.encode(),
        }
    }
}

/// Per-department headcount and salary sum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Records per department.
    pub count: [u64; DEPARTMENTS],
    /// Salaries per department.
    pub sum: [u64; DEPARTMENTS],
}

impl Analysis {
    /// The analysis of `employees`, computed directly.
    pub fn of<'a>(employees: impl IntoIterator<Item = &'a Employee>) -> Analysis {
        let mut a = Analysis::default();
        for e in employees {
            if let Ok(d) = usize::try_from(e.department)
                && d < DEPARTMENTS
            {
                a.count[d] += 1;
                a.sum[d] += e.salary;
            }
        }
        a
    }

    /// The average salary of department `d` (`None` if it has nobody).
    pub fn average(&self, d: usize) -> Option<f64> {
        let n = *self.count.get(d)?;
        (n > 0).then(|| self.sum[d] as f64 / n as f64)
    }

    /// Records counted.
    pub fn records(&self) -> u64 {
        self.count.iter().sum()
    }

    fn encode(&self) -> Vec<u8> {
        self.count
            .iter()
            .chain(self.sum.iter())
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    /// The analysis a chain responded with.
    pub fn decode(b: &[u8]) -> Option<Analysis> {
        let mut a = Analysis::default();
        for d in 0..DEPARTMENTS {
            a.count[d] = word(b, 8 * d)?;
            a.sum[d] = word(b, 8 * (DEPARTMENTS + d))?;
        }
        Some(a)
    }
}

fn word(b: &[u8], at: usize) -> Option<u64> {
    let bytes: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// The bytes of an employee table with room for `capacity` records (one object).
pub fn table_bytes(capacity: u32) -> u64 {
    HEADER + RECORD * u64::from(capacity)
}

/// Creates an employee table with room for `capacity` records holding `employees`; returns
/// it. The object is shared (every container of the tenant may acquire it); the creator's
/// right is given up.
pub fn create_table<M: RemoteMemory>(
    mem: &mut M,
    capacity: u32,
    employees: &[Employee],
) -> Result<Datum, FaasError> {
    if employees.len() > capacity as usize {
        return Err(FaasError::Full("the employee table"));
    }
    let len = table_bytes(capacity);
    let mut objects = mem.allocate(&[len], Duration::from_secs(1), Mode::Shared)?;
    let r = objects
        .pop()
        .ok_or(FaasError::Memory(MemError::Exhausted))?;
    let mut image = Vec::with_capacity((HEADER + RECORD * employees.len() as u64) as usize);
    image.extend_from_slice(&(employees.len() as u64).to_le_bytes());
    image.extend_from_slice(&u64::from(capacity).to_le_bytes());
    image.extend_from_slice(&MAGIC.to_le_bytes());
    image.resize(HEADER as usize, 0);
    for e in employees {
        image.extend_from_slice(&1u64.to_le_bytes());
        image.extend_from_slice(&e.encode());
    }
    let datum = Datum {
        addr: r.addr(),
        len: r.len(),
    };
    let written = write_chunked(mem, &r, 0, &image);
    if let Err(e) = written {
        let _ = mem.free(r);
        return Err(e);
    }
    let _ = mem.release(r);
    Ok(datum)
}

/// `count` employees drawn deterministically from `seed` (ids from `first_id`).
pub fn employees(count: u32, first_id: u64, seed: u64) -> Vec<Employee> {
    let mut x = seed | 1;
    (0..u64::from(count))
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Employee {
                id: first_id + i,
                department: x % DEPARTMENTS as u64,
                salary: 20_000 + (x >> 8) % 180_000,
            }
        })
        .collect()
}

/// The data-analysis chain (see the module docs): check the new employee, claim a record in
/// the table by FAA, write it and mark it used by CAS, analyse every record (a count and a
/// salary sum per department), and leave the analysis in remote memory for its consumer.
pub fn chain<M: RemoteMemory>() -> Chain<M> {
    Chain {
        name: "analysis",
        functions: vec![
            ("check", check::<M>),
            ("allocate", allocate::<M>),
            ("write", write::<M>),
            ("analyse", analyse::<M>),
            ("respond", respond::<M>),
        ],
        // The analysis: a count and a sum per department.
        output_reserve: Some(ANALYSIS_BYTES),
    }
}

/// Checks the new employee (and that input 0 is an employee table).
fn check<M: RemoteMemory>(ctx: &mut ChainCtx<'_, M>, p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    let e = Employee::decode(&p).ok_or_else(|| FaasError::BadInput("not an employee".into()))?;
    if e.department >= DEPARTMENTS as u64 {
        return Err(FaasError::BadInput(format!(
            "department {} (there are {DEPARTMENTS})",
            e.department
        )));
    }
    if e.salary == 0 || e.salary > MAX_SALARY {
        return Err(FaasError::BadInput(format!("salary {}", e.salary)));
    }
    let header = ctx.read(0, 0, HEADER as u32)?;
    if word(&header, MAGIC_AT as usize) != Some(MAGIC) {
        return Err(FaasError::BadInput("input 0 is no employee table".into()));
    }
    Ok(p)
}

/// Claims a record: FAA on the table's count. Appends the record's index to the payload.
fn allocate<M: RemoteMemory>(
    ctx: &mut ChainCtx<'_, M>,
    mut p: Vec<u8>,
) -> Result<Vec<u8>, FaasError> {
    let capacity = word(&ctx.read(0, CAPACITY, 8)?, 0).unwrap_or(0);
    let slot = ctx.faa(0, COUNT, 1)?;
    if slot >= capacity {
        return Err(FaasError::Full("the employee table"));
    }
    p.extend_from_slice(&slot.to_le_bytes());
    Ok(p)
}

/// Writes the record, then marks it used (CAS through the same right, after the WRITE: the
/// record is whole once marked).
fn write<M: RemoteMemory>(ctx: &mut ChainCtx<'_, M>, p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    let e = Employee::decode(&p).ok_or_else(|| FaasError::BadInput("not an employee".into()))?;
    let slot = word(&p, 24).ok_or_else(|| FaasError::BadInput("no record claimed".into()))?;
    let at = HEADER + RECORD * slot;
    ctx.write(0, at + 8, &e.encode())?;
    if ctx.cas(0, at, 0, 1)? != 0 {
        return Err(FaasError::BadInput(format!(
            "record {slot} was used already"
        )));
    }
    Ok(p)
}

/// Reads every record of the table; the per-department headcount and salary sum.
fn analyse<M: RemoteMemory>(ctx: &mut ChainCtx<'_, M>, _p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    let header = ctx.read(0, 0, HEADER as u32)?;
    let (count, capacity) = (word(&header, 0).unwrap_or(0), word(&header, 8).unwrap_or(0));
    let n = count.min(capacity);
    let bytes = ctx.read(0, HEADER, (RECORD * n) as u32)?;
    let records = bytes
        .chunks_exact(RECORD as usize)
        .filter(|r| word(r, 0) == Some(1))
        .filter_map(|r| Employee::decode(&r[8..]))
        .collect::<Vec<_>>();
    Ok(Analysis::of(&records).encode())
}

/// Leaves the analysis in remote memory for its consumer; returns it.
fn respond<M: RemoteMemory>(ctx: &mut ChainCtx<'_, M>, p: Vec<u8>) -> Result<Vec<u8>, FaasError> {
    ctx.output(&p)?;
    Ok(p)
}
