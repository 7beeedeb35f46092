//! The higgsmeter collector (work in progress).
