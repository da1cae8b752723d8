//! Placeholder: replaced by the real codec.
use super::Frame;

/// Wire decoding failure.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// Frame too short.
    #[error("truncated frame")]
    Truncated,
}

/// Length of the frame at the start of `buf`, if its length prefix is complete.
pub fn frame_len(_buf: &[u8], _max_frame: usize) -> Result<Option<usize>, WireError> {
    Err(WireError::Truncated)
}

/// Appends the encoding of `frame` to `out`.
pub fn encode_frame<D: AsRef<[u8]>>(_frame: &Frame<D>, _out: &mut Vec<u8>) {}

/// Parses one whole frame.
pub fn decode_frame(_buf: &[u8]) -> Result<Frame<&[u8]>, WireError> {
    Err(WireError::Truncated)
}
