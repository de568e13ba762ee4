//! onionmix-link
