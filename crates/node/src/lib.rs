//! onionmix-node
