//! onionmix-measure (in progress)
