//! onionmix-measure: the measurement suite (workloads, statistics,
//! reports, side-by-side comparisons). See docs/measure.md.

pub mod plot;
pub mod record;
pub mod report;
pub mod stats;
