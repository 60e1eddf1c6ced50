//! The repository keeps its shape: the source tree's layout and the direction of its imports, and the documents'
//! paths and examples.

mod docs;
mod front_page;
mod imports;
mod layout;
