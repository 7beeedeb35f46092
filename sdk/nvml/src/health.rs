//! The health rules behind `hw.status` (see the catalog's `HW_STATUS`), from one
//! sample's readings and the XIDs counted so far.

use crate::sampler::Readings;
use crate::xid::XidCounts;

/// XIDs after which the GPU is `failed`: 79 fallen off the bus, 48 double-bit ECC, 95
/// uncontained ECC.
pub(crate) const FAILING_XIDS: [u64; 3] = [79, 48, 95];

/// XIDs after which the GPU is at least `degraded`: 63/64 row remap or page retirement
/// event, 74 NVLink error, 92 high single-bit ECC rate, 94 contained ECC, 119/120 GSP
/// errors.
pub(crate) const DEGRADING_XIDS: [u64; 7] = [63, 64, 74, 92, 94, 119, 120];

/// A GPU's health, the index into the catalog's `GPU_HEALTH_STATES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Health {
    Ok = 0,
    Degraded = 1,
    Failed = 2,
}

/// The health rules of the catalog's `HW_STATUS`, from one sample's readings and the
/// XIDs so far. A reading that is absent never makes the health worse.
pub(crate) fn health(readings: &Readings, xid: &XidCounts) -> Health {
    let failed = readings.lost
        || FAILING_XIDS.iter().any(|code| xid.seen(*code))
        || readings.remap_failure == Some(true)
        || readings.ecc.is_some_and(|(_, uncorrected)| uncorrected > 0);
    if failed {
        return Health::Failed;
    }
    let degraded = readings.remap_pending == Some(true)
        || readings.retired_pages_pending == Some(true)
        || DEGRADING_XIDS.iter().any(|code| xid.seen(*code));
    if degraded {
        Health::Degraded
    } else {
        Health::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_follows_the_documented_rules() {
        let none = XidCounts::default();
        let mut r = Readings::default();
        // Nothing read: nothing says the GPU is unwell.
        assert_eq!(health(&r, &none), Health::Ok);
        r.ecc = Some((12, 0));
        r.remap_pending = Some(false);
        r.remap_failure = Some(false);
        assert_eq!(health(&r, &none), Health::Ok);
        r.retired_pages_pending = Some(true);
        assert_eq!(health(&r, &none), Health::Degraded);
        r.retired_pages_pending = Some(false);
        r.remap_pending = Some(true);
        assert_eq!(health(&r, &none), Health::Degraded);
        r.remap_failure = Some(true);
        assert_eq!(health(&r, &none), Health::Failed);
        r.remap_failure = Some(false);
        r.ecc = Some((12, 1));
        assert_eq!(health(&r, &none), Health::Failed);

        let ok = Readings::default();
        let mut xid = XidCounts::default();
        xid.record(13);
        assert_eq!(health(&ok, &xid), Health::Ok, "an application XID");
        xid.record(94);
        assert_eq!(health(&ok, &xid), Health::Degraded);
        xid.record(79);
        assert_eq!(health(&ok, &xid), Health::Failed);

        let lost = Readings {
            lost: true,
            ..Readings::default()
        };
        assert_eq!(health(&lost, &none), Health::Failed);
    }
}
