//! Lock rules for many processes (being written; see issue 12).
