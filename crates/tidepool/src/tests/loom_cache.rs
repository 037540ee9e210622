//! Loom models of the cache <-> depot hand-offs (filled in below).
