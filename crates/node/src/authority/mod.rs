//! Directory authority (in progress).
