//! XID counts and the health rules behind `hw.status` (see the catalog's `HW_STATUS`).

use crate::sampler::Readings;

/// Distinct XID codes kept apart per GPU; later new codes count under `other`.
pub(crate) const MAX_XID_CODES: usize = 32;

/// XIDs after which the GPU is `failed`: 79 fallen off the bus, 48 double-bit ECC, 95
/// uncontained ECC.
pub(crate) const FAILING_XIDS: [u64; 3] = [79, 48, 95];

/// XIDs after which the GPU is at least `degraded`: 63/64 row remap or page retirement
/// event, 74 NVLink error, 92 high single-bit ECC rate, 94 contained ECC, 119/120 GSP
/// errors.
pub(crate) const DEGRADING_XIDS: [u64; 7] = [63, 64, 74, 92, 94, 119, 120];

/// XID errors of one GPU since the meter started, from NVML's event API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct XidCounts {
    /// Whether the GPU's XID events are registered (otherwise the families are absent).
    pub(crate) supported: bool,
    /// (code, count), in order of first arrival; at most [`MAX_XID_CODES`].
    pub(crate) by_code: Vec<(u64, u64)>,
    /// Events of codes beyond the first [`MAX_XID_CODES`].
    pub(crate) other: u64,
    /// The last code.
    pub(crate) last: Option<u64>,
}

impl XidCounts {
    /// Counts one XID event.
    pub(crate) fn record(&mut self, code: u64) {
        self.last = Some(code);
        if let Some((_, count)) = self.by_code.iter_mut().find(|(c, _)| *c == code) {
            *count += 1;
        } else if self.by_code.len() < MAX_XID_CODES {
            self.by_code.push((code, 1));
        } else {
            self.other += 1;
        }
    }

    /// Whether an XID of `code` arrived.
    pub(crate) fn seen(&self, code: u64) -> bool {
        self.by_code.iter().any(|(c, n)| *c == code && *n > 0)
    }
}

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
    fn xid_counts_are_per_code_and_bounded() {
        let mut xid = XidCounts::default();
        xid.record(79);
        xid.record(13);
        xid.record(79);
        assert_eq!(xid.by_code, vec![(79, 2), (13, 1)]);
        assert_eq!(xid.last, Some(79));
        for code in 100..200 {
            xid.record(code);
        }
        assert_eq!(xid.by_code.len(), MAX_XID_CODES);
        assert_eq!(xid.other, 100 - (MAX_XID_CODES as u64 - 2));
        assert_eq!(xid.last, Some(199));
    }

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
