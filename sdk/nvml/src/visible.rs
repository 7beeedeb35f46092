//! `CUDA_VISIBLE_DEVICES`: which of NVML's devices this process can use.
//!
//! NVML ignores the variable and always lists every GPU of the host; CUDA applies it.
//! The meter applies CUDA's rules so that it meters the GPUs the worker uses:
//!
//! - unset: every device;
//! - a comma-separated list, read up to the first entry that names no device (as CUDA
//!   does), so `""` and `"-1"` hide every GPU;
//! - an entry is a device index or a `GPU-` UUID, or a unique prefix of one;
//!   a duplicate is ignored; `MIG-` instances are not resolved (the entry ends the list,
//!   with a warning).
//!
//! Indices are NVML's, which enumerates GPUs in PCI bus order: CUDA uses the same order
//! with `CUDA_DEVICE_ORDER=PCI_BUS_ID` (on a server of identical GPUs the two orders
//! agree in practice). UUIDs are unambiguous either way.

/// What NVML lists about one device, for matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    /// NVML index.
    pub(crate) index: u32,
    /// `GPU-…` UUID.
    pub(crate) uuid: String,
}

/// The NVML indices `selection` (the value of `CUDA_VISIBLE_DEVICES`) makes visible, in
/// the order it lists them (the CUDA ordinal order).
pub(crate) fn select(listed: &[Listed], selection: Option<&str>) -> Vec<u32> {
    let Some(selection) = selection else {
        return listed.iter().map(|d| d.index).collect();
    };
    let mut chosen: Vec<u32> = Vec::new();
    for entry in selection.split(',').map(str::trim) {
        let Some(index) = resolve(listed, entry) else {
            if entry.starts_with("MIG-") {
                tracing::warn!(
                    entry,
                    "CUDA_VISIBLE_DEVICES names a MIG instance; the NVML meter does not resolve \
                     MIG instances and meters only the GPUs listed before it"
                );
            }
            break;
        };
        if !chosen.contains(&index) {
            chosen.push(index);
        }
    }
    chosen
}

/// The device one entry names, if any.
fn resolve(listed: &[Listed], entry: &str) -> Option<u32> {
    if entry.starts_with("GPU-") {
        let mut matches = listed.iter().filter(|d| d.uuid.starts_with(entry));
        let first = matches.next()?;
        // An ambiguous prefix names no device.
        return matches.next().is_none().then_some(first.index);
    }
    let wanted: u32 = entry.parse().ok()?;
    listed.iter().find(|d| d.index == wanted).map(|d| d.index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Vec<Listed> {
        [
            "GPU-aaaa-0001",
            "GPU-bbbb-0002",
            "GPU-bbbc-0003",
            "GPU-cccc-0004",
        ]
        .iter()
        .enumerate()
        .map(|(i, uuid)| Listed {
            index: i as u32,
            uuid: (*uuid).to_owned(),
        })
        .collect()
    }

    #[test]
    fn unset_selects_every_device() {
        assert_eq!(select(&host(), None), vec![0, 1, 2, 3]);
    }

    #[test]
    fn empty_or_negative_hides_every_device() {
        assert_eq!(select(&host(), Some("")), Vec::<u32>::new());
        assert_eq!(select(&host(), Some("-1")), Vec::<u32>::new());
        assert_eq!(select(&host(), Some("-1,0")), Vec::<u32>::new());
    }

    #[test]
    fn indices_keep_the_listed_order_and_skip_duplicates() {
        assert_eq!(select(&host(), Some("2, 0,2")), vec![2, 0]);
    }

    #[test]
    fn the_list_ends_at_the_first_entry_naming_no_device() {
        assert_eq!(select(&host(), Some("1,7,0")), vec![1]);
        assert_eq!(select(&host(), Some("0,x,1")), vec![0]);
        assert_eq!(select(&host(), Some("0,MIG-123,1")), vec![0]);
    }

    #[test]
    fn uuids_and_unique_prefixes_select_and_ambiguous_prefixes_end_the_list() {
        assert_eq!(select(&host(), Some("GPU-cccc-0004,GPU-aaaa")), vec![3, 0]);
        assert_eq!(select(&host(), Some("GPU-bbbc,1")), vec![2, 1]);
        assert_eq!(select(&host(), Some("0,GPU-bbb,1")), vec![0]);
        assert_eq!(select(&host(), Some("GPU-dddd")), Vec::<u32>::new());
    }
}
