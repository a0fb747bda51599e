//! Permission rules for verified credentials (being written; see issue 12).
