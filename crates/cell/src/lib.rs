//! onionmix-cell
