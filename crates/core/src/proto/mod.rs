//! What travels between clients and the memory node: the permission header layout in
//! memory-node memory, and the control-path messages.
pub mod connect;
pub mod header;
pub mod messages;
pub mod refusal;
mod route;
pub mod shards;
