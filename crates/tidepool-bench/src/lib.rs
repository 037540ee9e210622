//! Benchmarks for tidepool live in `benches/`.
