//! The picture: drawn by the bench from the run's own figures.

use std::path::Path;

use crate::scenarios::{faults, handoff, latency, throughput};

/// Everything one run measured.
#[derive(Default)]
pub struct Report {
    pub latency: Vec<latency::Row>,
    pub throughput: Vec<throughput::Row>,
    pub handoff: Vec<handoff::Row>,
    pub faults: Vec<faults::Row>,
}

pub fn draw(_report: &Report, _path: &Path) -> Result<(), String> {
    Err("not yet".into())
}
