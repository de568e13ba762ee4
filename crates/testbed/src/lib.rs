//! onionmix-testbed
