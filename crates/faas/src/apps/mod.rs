//! ServerlessBench TC4's applications on the runtime.

pub mod analysis;
pub mod image;
