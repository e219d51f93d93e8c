//! Record files: how records are laid out in loose files and shards, and
//! how they are counted.

pub mod reader;
pub mod scan;
pub mod timestamp;

pub use reader::{RecordFormat, RecordStats, count_file, count_open};
