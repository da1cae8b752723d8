//! The `kv` commands: arguments checked locally first, then one session each.

use super::error::KvError;
use super::output::{self, emit, shown};
use super::session::{Mem, Session, table_options};
use super::{KvArgs, KvCommand, LockArg, ShapeArgs};
use patronus_ods::race::{self, LockMode, RaceConfig, RaceError, TableClient};
use std::io::Read;
use std::path::Path;

/// Bytes of a KV block's header.
const BLOCK_HEADER: u64 = 32;
/// The largest KV block of any table.
const MAX_BLOCK: u64 = 127 * 64;
/// Rounds of insert-or-update a `put` makes while other clients delete and insert the key.
const PUT_ROUNDS: u32 = 8;

/// Runs the command of `args`.
pub fn run(args: &KvArgs) -> Result<(), KvError> {
    match &args.command {
        KvCommand::Create(shape) => create(args, shape),
        KvCommand::Put {
            key,
            value,
            value_file,
        } => {
            let key = key_bytes(args, key)?;
            let value = match (value, value_file) {
                (_, Some(path)) => read_value(path, key.len())?,
                (Some(v), None) => v.clone().into_bytes(),
                (None, None) => return Err(KvError::Usage("put: no value given".into())),
            };
            let outcome = Session::connect(args)?
                .with_table(args, |t, mem| put(t, mem, &key, &value).map_err(race(args)))?;
            emit(outcome.as_bytes())
        }
        KvCommand::Get { key, format } => {
            let key = key_bytes(args, key)?;
            let value = Session::connect(args)?
                .with_table(args, |t, mem| t.get(mem, &key).map_err(race(args)))?;
            match value {
                Some(v) => emit(&output::value_bytes(&v, *format)),
                None => Err(KvError::NoKey(shown(&key))),
            }
        }
        KvCommand::Del { key } => {
            let key = key_bytes(args, key)?;
            Session::connect(args)?.with_table(args, |t, mem| match t.delete(mem, &key) {
                Ok(()) => Ok(()),
                Err(RaceError::NotFound) => Err(KvError::NoKey(shown(&key))),
                Err(e) => Err(KvError::from_race(&args.table, e)),
            })?;
            emit(b"deleted\n")
        }
        KvCommand::Scan { format } => {
            let mut all = Session::connect(args)?
                .with_table(args, |t, mem| t.scan(mem).map_err(race(args)))?;
            all.sort();
            let text: String = all
                .iter()
                .map(|(k, v)| output::line(k, v, *format))
                .collect();
            emit(text.as_bytes())
        }
        KvCommand::Info => {
            let text = Session::connect(args)?.with_table(args, |t, mem| info(args, t, mem))?;
            emit(text.as_bytes())
        }
        KvCommand::Drop => {
            let mut s = Session::connect(args)?;
            let d = race::destroy_named(&mut s.mem, &args.table, table_options(args))
                .map_err(race(args))?;
            let mut text = format!(
                "dropped table \"{}\": freed {} subtables and {} KV blocks\n",
                args.table, d.subtables, d.blocks
            );
            if d.skipped > 0 {
                text.push_str(&format!(
                    "note: {} slots named no block of the table (left allocated)\n",
                    d.skipped
                ));
            }
            emit(text.as_bytes())
        }
    }
}

/// Turns a table error into the user's error.
fn race(args: &KvArgs) -> impl Fn(RaceError) -> KvError + '_ {
    move |e| KvError::from_race(&args.table, e)
}

fn create(args: &KvArgs, shape: &ShapeArgs) -> Result<(), KvError> {
    let config = RaceConfig {
        initial_depth: shape.initial_depth,
        max_depth: shape.max_depth,
        groups: shape.groups,
        slots: shape.slots,
        block_size: shape.block_size,
        lock: match shape.lock {
            LockArg::Lease => LockMode::Lease,
            LockArg::Word => LockMode::Word,
        },
        seed: shape.seed.unwrap_or(RaceConfig::default().seed),
    };
    // Checked before connecting.
    config.validate().map_err(race(args))?;
    let mut s = Session::connect(args)?;
    race::create_named(&mut s.mem, &args.table, config).map_err(race(args))?;
    emit(
        format!(
            "created table \"{}\": KV blocks of {} bytes (key + value up to {}), up to {} \
             subtables\n",
            args.table,
            config.block_size,
            u64::from(config.block_size) - BLOCK_HEADER,
            1u64 << config.max_depth
        )
        .as_bytes(),
    )
}

/// Inserts, or updates if the key is present; what it did.
fn put(
    t: &mut TableClient<Mem>,
    mem: &mut Mem,
    key: &[u8],
    value: &[u8],
) -> Result<&'static str, RaceError> {
    for _ in 0..PUT_ROUNDS {
        match t.insert(mem, key, value) {
            Ok(()) => return Ok("inserted\n"),
            Err(RaceError::KeyExists) => {}
            Err(e) => return Err(e),
        }
        match t.update(mem, key, value) {
            Ok(()) => return Ok("updated\n"),
            // Deleted meanwhile: insert again.
            Err(RaceError::NotFound) => {}
            Err(e) => return Err(e),
        }
    }
    Err(RaceError::Contended {
        attempts: PUT_ROUNDS,
    })
}

fn info(args: &KvArgs, t: &mut TableClient<Mem>, mem: &mut Mem) -> Result<String, KvError> {
    let c = t.config();
    let audit = t.audit(mem).map_err(race(args))?;
    let lock = match c.lock {
        LockMode::Lease => "lease",
        _ => "word",
    };
    Ok(format!(
        "table \"{}\" (root {:#x})\n\
         shape: KV blocks of {} bytes (key + value up to {}), max depth {}, {} groups x 3 \
         buckets x {} slots per subtable, lock {lock}, seed {:#x}\n\
         holds: {} keys in {} subtables\n",
        args.table,
        t.root(),
        c.block_size,
        u64::from(c.block_size) - BLOCK_HEADER,
        c.max_depth,
        c.groups,
        c.slots,
        c.seed,
        audit.keys,
        audit.subtables,
    ))
}

/// A KEY argument's bytes (hex with --key-hex).
fn key_bytes(args: &KvArgs, key: &str) -> Result<Vec<u8>, KvError> {
    if !args.key_hex {
        return Ok(key.as_bytes().to_vec());
    }
    output::unhex(key).ok_or_else(|| KvError::Usage(format!("`{key}` is not hex (--key-hex)")))
}

/// The value in `path` (`-`: stdin), refused without reading further once it cannot fit in
/// any table's KV block.
fn read_value(path: &Path, key_len: usize) -> Result<Vec<u8>, KvError> {
    let room = (MAX_BLOCK - BLOCK_HEADER).saturating_sub(key_len as u64);
    let mut value = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin()
            .lock()
            .take(room + 1)
            .read_to_end(&mut value)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(room + 1).read_to_end(&mut value))
    };
    read.map_err(|e| KvError::Other(format!("reading {}: {e}", path.display())))?;
    if value.len() as u64 > room {
        return Err(KvError::TooLarge {
            need: BLOCK_HEADER + key_len as u64 + value.len() as u64,
            max: MAX_BLOCK,
            table: None,
        });
    }
    Ok(value)
}
