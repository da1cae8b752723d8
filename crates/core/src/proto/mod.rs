//! What travels between clients and the memory node: the permission header layout in
//! memory-node memory, and the control-path messages.
mod codec;
pub mod connect;
pub mod header;
pub mod messages;
pub mod refusal;
pub mod shards;
