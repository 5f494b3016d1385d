//! Images: the CRI ImageService (`service`: pull, list, status, remove, filesystem
//! info) over the `images` crate's store and registry client, and `crustd images`,
//! the same operations from the command line (`cli`).

pub mod cli;
pub mod service;
