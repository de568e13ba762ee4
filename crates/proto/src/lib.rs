//! onionmix-proto
