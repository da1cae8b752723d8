//! One-line explanations of small non-linearizable key-value histories.
//!
//! Each kept operation's result implies a condition on the register just before it (its
//! *pre*: absent, present, or a given value) and the state just after it. An explanation is
//! only given when it is a proof: some operation X needs pre P, and either an operation W that
//! completed before X started left the register violating P while nothing that could restore
//! P (a kept operation, or a context operation taking effect at any time after its
//! invocation) fits between W and X; or nothing that could establish P (nor the initial
//! state) comes before X. Otherwise the explanation says only that no order works.

use super::{History, Kv, Op, Outcome};
use crate::Model;
use crate::history::{Entry, Status};

/// A result's name in records.
pub(super) fn result_name(o: &Outcome) -> &'static str {
    match o {
        Outcome::Inserted => "inserted",
        Outcome::Updated => "updated",
        Outcome::Exists => "exists",
        Outcome::Absent => "absent",
        Outcome::Deleted => "deleted",
        Outcome::Value { .. } => "value",
    }
}

/// What an operation needs of the register before it.
#[derive(Clone, Debug, PartialEq)]
enum Pre {
    Any,
    Absent,
    Present,
    Is(String),
}

/// What an operation leaves in the register (its effect), or what is there after it.
#[derive(Clone, Debug, PartialEq)]
enum Post {
    Unchanged,
    Absent,
    Present,
    Is(String),
    /// Either unchanged or this value (an unknown insert or update).
    Maybe(String),
}

/// The contract of a context operation: any time, any number of times, any result.
fn context_contract(op: &Op) -> (Pre, Post) {
    match op {
        Op::Put { value, .. } => (Pre::Any, Post::Is(value.clone())),
        Op::Insert { value, .. } | Op::Update { value, .. } => {
            (Pre::Any, Post::Maybe(value.clone()))
        }
        Op::Delete { .. } => (Pre::Any, Post::Absent),
        Op::Get { .. } => (Pre::Any, Post::Unchanged),
    }
}

/// The state just after an operation with a known result.
fn after(pre: &Pre, post: &Post) -> Post {
    match (post, pre) {
        (Post::Unchanged, Pre::Absent) => Post::Absent,
        (Post::Unchanged, Pre::Present) => Post::Present,
        (Post::Unchanged, Pre::Is(v)) => Post::Is(v.clone()),
        (post, _) => post.clone(),
    }
}

fn contract(op: &Op, status: &Status<Outcome>) -> (Pre, Post) {
    use Outcome as R;
    let written = || Post::Is(op.value().unwrap_or_default().to_string());
    match (op, status.done()) {
        (Op::Put { .. }, None) => (Pre::Any, written()),
        (Op::Insert { value, .. } | Op::Update { value, .. }, None) => {
            (Pre::Any, Post::Maybe(value.clone()))
        }
        (Op::Delete { .. }, None) => (Pre::Any, Post::Absent),
        (_, Some(R::Inserted)) => (Pre::Absent, written()),
        (_, Some(R::Updated)) => (Pre::Present, written()),
        (_, Some(R::Exists)) => (Pre::Present, Post::Unchanged),
        (_, Some(R::Absent)) => (Pre::Absent, Post::Unchanged),
        (_, Some(R::Deleted)) => (Pre::Present, Post::Absent),
        (_, Some(R::Value { value })) => (Pre::Is(value.clone()), Post::Unchanged),
        (Op::Get { .. }, None) => (Pre::Any, Post::Unchanged),
    }
}

fn satisfies(post: &Post, pre: &Pre) -> bool {
    match (post, pre) {
        (Post::Is(v) | Post::Maybe(v), Pre::Is(u)) => v == u,
        (Post::Is(_) | Post::Maybe(_), Pre::Present) | (Post::Absent, Pre::Absent) => true,
        _ => false,
    }
}

fn violates(post: &Post, pre: &Pre) -> bool {
    match (post, pre) {
        (Post::Is(v), Pre::Is(u)) => v != u,
        (Post::Is(_) | Post::Present, Pre::Absent) | (Post::Absent, Pre::Is(_) | Pre::Present) => {
            true
        }
        _ => false,
    }
}

fn initial_satisfies(initial: Option<&String>, pre: &Pre) -> bool {
    match (initial, pre) {
        (_, Pre::Any) | (None, Pre::Absent) | (Some(_), Pre::Present) => true,
        (Some(v), Pre::Is(u)) => v == u,
        _ => false,
    }
}

fn who(e: &Entry<Op, Outcome>) -> String {
    let end = e
        .known_complete()
        .map_or("inf)".to_string(), |c| format!("{c}]"));
    format!(
        "`{}` (client {}, [{}, {end})",
        Kv::describe(&e.op, &e.status),
        e.client,
        e.invoke
    )
}

fn needs(key: &str, pre: &Pre) -> String {
    match pre {
        Pre::Is(v) => format!("{key} = {v:?}"),
        Pre::Absent => format!("{key} absent"),
        _ => format!("{key} present"),
    }
}

fn left(e: &Entry<Op, Outcome>, state: &Post) -> String {
    let seen = matches!(e.op, Op::Get { .. })
        || e.status
            .done()
            .is_some_and(|o| matches!(o, Outcome::Exists | Outcome::Absent));
    let verb = if seen { "saw" } else { "left" };
    match state {
        Post::Is(v) => format!("{verb} it {v:?}"),
        Post::Present => format!("{verb} it present"),
        _ => format!("{verb} it absent"),
    }
}

/// Explains why the entries `kept` of `history` (one key), with `context` taking effect any
/// number of times, are not linearizable.
pub(super) fn explain(history: &History, kept: &[usize], context: &[usize]) -> String {
    let all = history.entries();
    let Some(key) = kept.first().map(|&i| all[i].op.key()) else {
        return "an empty history is always linearizable".into();
    };
    for &i in kept {
        let e = &all[i];
        if let Some(outcome) = e.status.done() {
            if !e.op.allows(outcome) {
                return format!("{} is not a possible result of `{}`", who(e), e.op.name());
            }
        }
    }
    // (entry, pre, effect, is context)
    let ops: Vec<(&Entry<Op, Outcome>, Pre, Post, bool)> = kept
        .iter()
        .map(|&i| (&all[i], contract(&all[i].op, &all[i].status), false))
        .chain(
            context
                .iter()
                .map(|&i| (&all[i], context_contract(&all[i].op), true)),
        )
        .map(|(e, (pre, post), ctx)| (e, pre, post, ctx))
        .collect();
    let before = |a: &Entry<Op, Outcome>, b: &Entry<Op, Outcome>| {
        a.known_complete().is_some_and(|c| c < b.invoke)
    };
    for (x, (ex, pre, _, ctx)) in ops.iter().enumerate() {
        if *pre == Pre::Any || *ctx {
            continue;
        }
        // W: the latest kept, known operation completed before X whose after-state breaks P.
        let w = (0..ops.len())
            .filter(|&w| w != x && !ops[w].3 && before(ops[w].0, ex))
            .filter(|&w| {
                ops[w].0.status.done().is_some() && violates(&after(&ops[w].1, &ops[w].2), pre)
            })
            .max_by_key(|&w| ops[w].0.known_complete());
        let restorable = |w: Option<usize>| {
            (0..ops.len()).any(|y| {
                y != x
                    && Some(y) != w
                    && satisfies(&ops[y].2, pre)
                    && !before(ex, ops[y].0)
                    && w.is_none_or(|w| !before(ops[y].0, ops[w].0))
            })
        };
        match w {
            Some(w) if !restorable(Some(w)) => {
                let (ew, state) = (ops[w].0, after(&ops[w].1, &ops[w].2));
                return format!(
                    "{} needs {} but {} {} before it started, and nothing that could change that fits in between",
                    who(ex),
                    needs(key, pre),
                    who(ew),
                    left(ew, &state)
                );
            }
            None if !initial_satisfies(history.initial().get(key), pre) && !restorable(None) => {
                return format!(
                    "{} needs {} but nothing that could make it so started before it completed",
                    who(ex),
                    needs(key, pre)
                );
            }
            _ => {}
        }
    }
    format!(
        "no order of these {} operations agrees with both their results and their real-time order",
        kept.len()
    )
}

/// Adds to `kept` (from `removed`), for each kept read of a value that no kept operation
/// writes, the write of that value that completed last before the read started (or else the
/// one invoked last before it completed), so a witness shows where its values came from.
pub(super) fn supplement(
    history: &History,
    mut kept: Vec<usize>,
    mut removed: Vec<usize>,
) -> (Vec<usize>, Vec<usize>) {
    let all = history.entries();
    let reads: Vec<usize> = kept
        .iter()
        .copied()
        .filter(|&i| matches!(all[i].status, Status::Done(Outcome::Value { .. })))
        .collect();
    for r in reads {
        let Status::Done(Outcome::Value { value }) = &all[r].status else {
            continue;
        };
        if kept
            .iter()
            .any(|&i| all[i].op.value() == Some(value.as_str()))
        {
            continue;
        }
        let writers = removed
            .iter()
            .copied()
            .filter(|&i| all[i].op.value() == Some(value.as_str()));
        let rank = |i: usize| {
            let e = &all[i];
            match e.known_complete() {
                Some(c) if c < all[r].invoke => (1, c),
                _ if all[r].known_complete().is_none_or(|c| e.invoke <= c) => (0, e.invoke),
                _ => (0, 0),
            }
        };
        if let Some(w) = writers.max_by_key(|&i| rank(i)) {
            removed.retain(|&i| i != w);
            kept.push(w);
            kept.sort_unstable();
        }
    }
    (kept, removed)
}
