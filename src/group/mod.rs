//! A consumer group as its coordinator answers for it, asked alike by the
//! worker and by the operator's commands, so that neither imports the
//! other:
//!
//! - `members`: how many members the group has, under either group
//!   protocol;
//! - `read_back`: a transactional commit's offsets read back, and whether
//!   the brokers kept their metadata (docs/design.md §7).

mod members;
mod read_back;

pub(crate) use members::group_members;
pub use members::MembersError;
pub(crate) use read_back::{read_back, verdict, MetadataDropped, ReadBack};
