//! The collector's own families (its health and throughput).

use crate::Family;

/// Every family the collector exports about itself.
pub const COLLECTOR_FAMILIES: &[Family] = &[];
