//! How tidepool works (a documentation-only module).
//!
//! TODO-DOC
