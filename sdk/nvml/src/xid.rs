//! XID errors counted per GPU, from NVML's event API (`events`), read by the health
//! rules (`health`) and the XID families (`instruments`): a leaf module, so that the
//! sampler (which keeps one per GPU) and the health rules both depend on it.

/// Distinct XID codes kept apart per GPU; later new codes count under `other`.
pub(crate) const MAX_XID_CODES: usize = 32;

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
}
