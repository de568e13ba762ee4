//! onionmix-mix
