//! How every `patronus` command prints an error: one line, the outermost message first and
//! each cause after it, joined by ": ", each cause shown once.
//!
//! Error types often put their source's message into their own (`"...: {0}"`) and return the
//! same source from `Error::source` too, so a naive walk of the chain repeats it
//! (`Address already in use (os error 98): Address already in use (os error 98)`). A cause
//! whose text the line already holds is skipped.

use std::error::Error;

/// `error` and its causes as one line.
pub fn one_line(error: &(dyn Error + 'static)) -> String {
    join(std::iter::successors(Some(error), |&e| e.source()))
}

/// An `anyhow` error (its contexts included) as one line.
pub fn one_line_anyhow(error: &anyhow::Error) -> String {
    join(error.chain())
}

fn join<'a>(chain: impl Iterator<Item = &'a (dyn Error + 'static)>) -> String {
    let mut line = String::new();
    for cause in chain {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || line.contains(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Layer {
        /// Repeats its source in its own message, and returns it as the source too.
        #[error("listening on 127.0.0.1:7471: {0}")]
        Bind(#[source] std::io::Error),
    }

    #[test]
    fn a_cause_repeated_by_its_parent_is_shown_once() {
        let io = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let io_text = io.to_string();
        let e = anyhow::Error::new(Layer::Bind(io)).context("opening the TCP device");
        let line = one_line_anyhow(&e);
        assert_eq!(
            line,
            format!("opening the TCP device: listening on 127.0.0.1:7471: {io_text}")
        );
        assert_eq!(line.matches(&io_text).count(), 1, "{line}");
    }

    #[test]
    fn a_session_the_node_ended_is_said_so_in_one_line() {
        use patronus_core::ClientError;
        use patronus_core::proto::refusal::SessionEnd;
        let e = anyhow::Error::new(ClientError::SessionEnded(SessionEnd::NodeRestarted))
            .context("table \"kv\"");
        let line = one_line_anyhow(&e);
        assert_eq!(
            line,
            "table \"kv\": the memory node ended this client's session (the node restarted \
             since it opened the session); reconnect"
        );
        assert!(
            !line.contains("secret") && !line.contains("refused"),
            "{line}"
        );
    }

    #[test]
    fn distinct_causes_are_all_kept_in_order() {
        let e = anyhow::anyhow!("the root cause")
            .context("the middle")
            .context("the top");
        assert_eq!(one_line_anyhow(&e), "the top: the middle: the root cause");
        let io = std::io::Error::other("disk on fire");
        assert_eq!(one_line(&io), "disk on fire");
    }
}
