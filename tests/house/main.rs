//! The repository keeps its shape: the source tree's layout, and the documents' paths and examples.

mod docs;
mod layout;
