//! The Redis comparison (issue 12): the same key-value workload against `redis-server` and
//! against RACE hashing on Patronus with the memory node in its own process, over TCP, one
//! system at a time, each server pinned to its own core.

pub mod redis_server;
pub mod store;

pub use redis_server::{RedisConnection, RedisServer};
pub use store::{KvConnection, KvRequest};
