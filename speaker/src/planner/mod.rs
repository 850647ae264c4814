//! What to announce.
