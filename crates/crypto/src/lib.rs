//! onionmix-crypto
