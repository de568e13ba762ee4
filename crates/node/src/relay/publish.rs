//! Descriptor publishing (in progress).
